/* gdn inside ggml graphs: the gated delta rule forward and backward as ggml custom ops that
 * run libgdn's cpu backend on ggml's own threads, and the conversion of a ggml_tensor to a
 * gdn_tensor. Needs no patch to ggml (built on ggml_custom_4d; ggml 0.15.3 and later).
 * See docs/GGML.md for an example.
 *
 * gdn_ggml_gated_delta_net is a drop-in for ggml_gated_delta_net: same arguments, same packed
 * result, same semantics (tiled heads: value head h reads key head h % Hk; sequence b reads
 * q/k sequence b / (B / Bq); scale 1/sqrt(Sv); slot s = the state s tokens back). Unlike
 * upstream it also takes Sk != Sv, strided g, beta and state, and it zeroes the snapshot slots
 * that T < K leaves unwritten (upstream leaves them undefined).
 *
 * Threads: ggml calls a custom op on each of its n threads with (ith, nth); each runs its share
 * of the call (gdn_forward_share), so the op uses ggml's thread pool, no threads of its own, and
 * gives the same bits for every thread count. The tensors must be in host memory (the ggml CPU
 * backend): ggml runs custom ops only there.
 *
 * Bad arguments: the graph functions check everything gdn checks when the graph is built and
 * stop with a message naming the tensor, dimension and values (GGML_ABORT, as ggml's own ops
 * do); the gdn_ggml_check_* functions say the same without stopping. */
#ifndef GDN_GDN_GGML_H
#define GDN_GDN_GGML_H

#include <stddef.h>
#include <stdint.h>

#include <ggml.h>

#include "gdn/gdn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A ggml_tensor as a gdn_tensor (data, type, ne, nb). GDN_ERROR_TYPE for a ggml type gdn has
 * no name for (quantized types, integers), GDN_ERROR_INVALID_ARGUMENT when t is NULL; `why`
 * (may be NULL) receives a message naming the tensor. Strides are carried as they are: gdn's
 * validation judges them when the tensor is used. */
GDN_API gdn_status gdn_ggml_tensor(const struct ggml_tensor *t, gdn_tensor *out, char *why, size_t why_size);

/* The forward. q, k: [Sk, Hk, T, Bq]; v: [Sv, Hv, T, B]; g: [1 or Sk, Hv, T, B]; beta:
 * [1, Hv, T, B]; state (s0): [Sk, Sv, Hv, B]; K >= 1 snapshot slots. All F32. Result: F32
 * [Sv*Hv, T*B + K*Sk*B], contiguous: first o as [Sv, Hv, T, B], then the states as
 * [Sk, Sv, Hv, B*K] (slot s of sequence b at index s*B + b of dim 3; slot 0 = final state). */
GDN_API struct ggml_tensor *gdn_ggml_gated_delta_net(struct ggml_context *ctx,
                                                     struct ggml_tensor *q, struct ggml_tensor *k,
                                                     struct ggml_tensor *v, struct ggml_tensor *g,
                                                     struct ggml_tensor *beta, struct ggml_tensor *state,
                                                     int64_t K);

/* The backward of gdn_ggml_gated_delta_net: d_result is the gradient of its result (same
 * shape; K is read from it). Result: one F32 tensor of nelements(q) + nelements(k) + ... +
 * nelements(state) elements holding dq, dk, dv, dg, dbeta, ds0 in that order, each contiguous in
 * the shape of its input; gdn_ggml_grad_view gives each as a view. The gradients of the slots
 * that T < K leaves unwritten are ignored. */
GDN_API struct ggml_tensor *gdn_ggml_gated_delta_net_back(struct ggml_context *ctx,
                                                          struct ggml_tensor *q, struct ggml_tensor *k,
                                                          struct ggml_tensor *v, struct ggml_tensor *g,
                                                          struct ggml_tensor *beta, struct ggml_tensor *state,
                                                          struct ggml_tensor *d_result);

typedef enum {
    GDN_GGML_GRAD_Q = 0, GDN_GGML_GRAD_K, GDN_GGML_GRAD_V, GDN_GGML_GRAD_G, GDN_GGML_GRAD_BETA, GDN_GGML_GRAD_STATE
} gdn_ggml_grad;

/* Element offset of gradient `which` in the packed result of gdn_ggml_gated_delta_net_back
 * (the sum of the element counts of the inputs before it), and a view of it in its input's
 * shape (contiguous). `packed` must be a result of gdn_ggml_gated_delta_net_back. */
GDN_API int64_t gdn_ggml_grad_offset(const struct ggml_tensor *packed, gdn_ggml_grad which);
GDN_API struct ggml_tensor *gdn_ggml_grad_view(struct ggml_context *ctx, struct ggml_tensor *packed, gdn_ggml_grad which);

/* What the graph functions check, without stopping: GDN_OK, or the status and (in `why`, may
 * be NULL) the message they would stop with. */
GDN_API gdn_status gdn_ggml_check_forward(const struct ggml_tensor *q, const struct ggml_tensor *k,
                                          const struct ggml_tensor *v, const struct ggml_tensor *g,
                                          const struct ggml_tensor *beta, const struct ggml_tensor *state,
                                          int64_t K, char *why, size_t why_size);
GDN_API gdn_status gdn_ggml_check_backward(const struct ggml_tensor *q, const struct ggml_tensor *k,
                                           const struct ggml_tensor *v, const struct ggml_tensor *g,
                                           const struct ggml_tensor *beta, const struct ggml_tensor *state,
                                           const struct ggml_tensor *d_result, char *why, size_t why_size);

#ifdef __cplusplus
}
#endif
#endif /* GDN_GDN_GGML_H */
