/* gdn: the gated delta rule (Gated DeltaNet), forward and backward, on CPU and NVIDIA GPUs.
 *
 * The contract (math, layouts, head maps, element types, errors, threads) is docs/SPEC.md in
 * the source tree. In short, per value head h and sequence b, with S a Sk x Sv state matrix:
 *
 *     S <- diag(exp(g_t)) S;   d = beta_t (v_t - S^T k_t);   S <- S + k_t d^T;   o_t = scale S^T q_t
 *
 * Tensors are described as in ggml: ne[4] element counts and nb[4] byte strides, innermost
 * first. Rows must be contiguous (nb[0] == element size; states may instead have nb[1] ==
 * element size, see below); the outer strides are free, so q, k and v may be row views into
 * one packed projection buffer.
 *
 * Coming from PyTorch (Hugging Face, FLA): set head_map = GDN_HEAD_MAP_GROUPED (a zeroed
 * gdn_problem is TILED, ggml's map, and gives silently different results when Hv > Hk).
 *
 * States ([Sk,Sv,Hv,*]: state, states, d_states, grads.state) are read and written in either
 * layout, chosen by each tensor's strides: key-major (nb[0] == element size, ggml's layout:
 * S[i][j] at i + j*Sk) or value-major (nb[1] == element size: PyTorch's [..., K, V] row-major
 * state of HF/FLA, S[i][j] at i*Sv + j; a contiguous torch [B, H, K, V] tensor is
 * ne = {K, V, H, B}, nb = {4V, 4, 4KV, 4HKV}). No flag, no copy; the results are the same.
 *
 * Every call validates all of its arguments before it writes anything: on error the outputs
 * are untouched and gdn_last_error(ctx) names the tensor, dimension and values at fault.
 *
 * Empty problems are valid: T = 0 tokens (ne[2] of q/k/v/g/beta/out) or B = 0 sequences (ne[3];
 * then Bq = 0 too) compute nothing and write each sequence's initial state (zero when state is
 * absent) to its final-state slot; the backward writes the final state's gradient to grads.state.
 * A tensor with no elements may have data == NULL. Head sizes and head counts are at least 1.
 *
 * Packed variable-length batches: set gdn_problem.cu_seqlens (N + 1 offsets, as FLA's
 * cu_seqlens). The rules (shapes, snapshots, pointer kinds, errors) are in docs/VARLEN.md.
 *
 * Thread safety: a gdn_context is used by one thread at a time; distinct contexts may be used
 * concurrently from distinct threads. */
#ifndef GDN_GDN_H
#define GDN_GDN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(GDN_SHARED)
#  ifdef GDN_BUILDING
#    define GDN_API __declspec(dllexport)
#  else
#    define GDN_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__)
#  define GDN_API __attribute__((visibility("default")))
#else
#  define GDN_API
#endif

#define GDN_VERSION_MAJOR 0
#define GDN_VERSION_MINOR 4
#define GDN_VERSION_PATCH 0
/* The version as one comparable number (0.1.0 -> 100, 1.2.3 -> 10203). These macros are the
 * project's one version: CMake and the Python package read theirs from here. */
#define GDN_VERSION_NUMBER (GDN_VERSION_MAJOR * 10000 + GDN_VERSION_MINOR * 100 + GDN_VERSION_PATCH)

/* Element types. One call is either all F64, or computes with F32 states from q/k/v of one type
 * among F32, BF16 and F16 (beta that type or F32, g F32 or BF16; outputs and gradients the
 * type of their input, states F32): docs/SPEC.md section 3.1 has the table. */
typedef enum {
    GDN_TYPE_F32 = 0, GDN_TYPE_F64 = 1, GDN_TYPE_F16 = 2, GDN_TYPE_BF16 = 3,
    GDN_TYPE_I32 = 4, GDN_TYPE_I64 = 5   /* integers: only for cu_seqlens and state_indices */
} gdn_type;

typedef struct gdn_tensor {
    void    *data;    /* host pointer (ref, cpu) or device pointer (cuda); NULL = absent */
    gdn_type type;
    int64_t  ne[4];   /* elements, innermost first */
    int64_t  nb[4];   /* strides in bytes */
} gdn_tensor;

/* Which key head value head h reads, for Hk key heads and Hv value heads.
 * The default (0, what a zero-initialised gdn_problem has) is TILED, ggml's map. Hugging Face
 * transformers and FLA repeat each key head over consecutive value heads: that is GROUPED.
 * Callers porting PyTorch code must set GROUPED: with Hv > Hk the wrong map is not an error,
 * it pairs other heads and gives silently wrong results. Identical when Hv == Hk. */
typedef enum {
    GDN_HEAD_MAP_TILED   = 0,   /* kh = h % Hk: the ggml convention (default) */
    GDN_HEAD_MAP_GROUPED = 1    /* kh = h / (Hv / Hk): the FLA / Hugging Face convention */
} gdn_head_map;

/* How exact the products may be (docs/SPEC.md section 3.1). EXACT (0, the default): every
 * product in F32 or better from the inputs as given. BF16: a backend may round the operands of
 * its chunk products to bfloat16 and accumulate in F32 (states, gate sums and the triangular
 * solve stay F32), where the hardware has native bf16 products; elsewhere it computes as EXACT.
 * The ref backend always computes exactly. */
typedef enum {
    GDN_PRECISION_EXACT = 0,
    GDN_PRECISION_BF16  = 1
} gdn_precision;

typedef struct gdn_problem {              /* the forward's inputs, shared by both ops */
    gdn_tensor   q, k, v, g, beta;        /* [Sk,Hk,T,Bq] [Sk,Hk,T,Bq] [Sv,Hv,T,B] [1|Sk,Hv,T,B] [1,Hv,T,B] */
    gdn_tensor   state;                   /* s0, [Sk,Sv,Hv,B]; data == NULL: zero initial state */
    double       scale;                   /* multiplies o; 0 = 1/sqrt(Sk) unless scale_is_explicit */
    int          scale_is_explicit;       /* nonzero: scale is used as given, 0.0 included (finite;
                                             |scale| <= FLT_MAX with F32 states) */
    gdn_head_map head_map;
    /* Packed variable-length sequences (docs/VARLEN.md); data == NULL: absent, every tensor as
     * above. Present: I32 or I64, ne = {N+1, 1, 1, 1}, contiguous, offsets non-decreasing
     * from 0 to T (an empty sequence's final state is its initial state). q/k/v/g/beta/out and
     * their gradients are one packed stream (ne[3] = 1, ne[2] = T = total tokens), sequence n being tokens
     * [cu_seqlens[n], cu_seqlens[n+1]); state and grads.state are [Sk, Sv, Hv, N], states and
     * d_states [Sk, Sv, Hv, N*K] (slot s of sequence n at index s*N + n).
     * Memory: host memory on ref and cpu. On cuda: host memory (read at the call, no
     * synchronisation; the usual case) or device memory (copied back at the call: the call
     * synchronises with the context's stream once, and cannot be captured in a CUDA graph). */
    gdn_tensor   cu_seqlens;
    /* State pools (serving); data == NULL: absent. Present: I32 or I64, ne = {B, 1, 1, 1}
     * ({N, 1, 1, 1} with cu_seqlens), contiguous, in the memory cu_seqlens may use. Then state
     * is a pool [Sk, Sv, Hv, slots]: sequence n starts from slot state_indices[n] and its final
     * state goes to slot state_indices[n] of states (K = 1; a pool of as many slots, normally
     * exactly state: updated in place). A negative index: start from zero, write no state (the
     * padding entry of a serving batch). Indices that are not negative are distinct and less
     * than slots. The backward reads state and d_states and writes grads.state the same way,
     * leaving the slots no sequence names untouched. SPEC section 3.2. */
    gdn_tensor   state_indices;
    gdn_precision precision;              /* 0 = GDN_PRECISION_EXACT */
} gdn_problem;

typedef struct gdn_grads { gdn_tensor q, k, v, g, beta, state; } gdn_grads;  /* data == NULL: not wanted */

typedef enum {
    GDN_OK = 0,
    GDN_ERROR_INVALID_ARGUMENT,  /* NULL where something is required, unknown enum value */
    GDN_ERROR_SHAPE,             /* sizes that contradict each other or section 3 */
    GDN_ERROR_LAYOUT,            /* a stride the op cannot read or write (nb[0] wrong, non-positive, elements overlapping) */
    GDN_ERROR_TYPE,              /* an element type this backend does not take */
    GDN_ERROR_ALIAS,             /* an output overlaps an input or another output */
    GDN_ERROR_UNSUPPORTED,       /* valid, but not on this backend (say which limit in the message) */
    GDN_ERROR_OUT_OF_MEMORY,
    GDN_ERROR_BACKEND,           /* the backend failed (device error, no device) */
    GDN_ERROR_UNKNOWN_BACKEND
} gdn_status;

typedef struct gdn_context gdn_context;

#define GDN_MAX_THREADS 4096  /* the most threads a context runs: n_threads above is INVALID_ARGUMENT */

typedef struct gdn_context_params {
    int   n_threads;   /* cpu: 0 = all cores (at most GDN_MAX_THREADS) */
    int   device;      /* cuda: device ordinal */
    void *stream;      /* cuda: cudaStream_t of the context's device, NULL = the default
                          stream; it must outlive the context (its workspace is freed on it).
                          CUDA graphs: a call captured on the stream must follow an earlier
                          call at least as large (the workspace cannot grow in a capture), and
                          a captured graph is stale once a larger call grows the workspace */
    int   chunk_size;  /* 0 = backend default */
} gdn_context_params;

GDN_API gdn_context_params gdn_context_default_params(void);

/* backend: "ref", "cpu", "cuda" (case-insensitive); NULL = the fastest available.
 * On failure *out is NULL and the status says why (GDN_ERROR_UNKNOWN_BACKEND for a name this
 * library does not know, GDN_ERROR_BACKEND for a known backend that cannot start here). */
GDN_API gdn_status  gdn_context_create(const char *backend, const gdn_context_params *params, gdn_context **out);
GDN_API void        gdn_context_free(gdn_context *ctx);
GDN_API const char *gdn_context_backend(const gdn_context *ctx);
GDN_API const char *gdn_last_error(const gdn_context *ctx);   /* message of the last failed call on ctx; "" after success */
GDN_API const char *gdn_status_string(gdn_status status);

/* Message of the last gdn_context_create that failed on this thread ("" if none). */
GDN_API const char *gdn_last_create_error(void);

/* Forward. out: [Sv,Hv,T,B], may be NULL. states: [Sk,Sv,Hv,B*K], may be NULL; slot s of
 * sequence b (index s*B + b of dim 3) receives the state after token T-1-s (slot 0 = final).
 * states may be exactly p->state (same pointer, shape and strides): the in-place cache update. */
GDN_API gdn_status gdn_forward(gdn_context *ctx, const gdn_problem *p,
                               const gdn_tensor *out,
                               const gdn_tensor *states);

/* Backward: the gradients of L = sum(d_out * o) + sum_s sum(d_states_s * state_s) with respect to
 * q, k, v, g, beta and s0, overwritten (not accumulated) into the tensors of grads whose data is
 * not NULL. d_out NULL = zero; d_states NULL = zero with K = 1. */
GDN_API gdn_status gdn_backward(gdn_context *ctx, const gdn_problem *p,
                                const gdn_tensor *d_out,
                                const gdn_tensor *d_states,
                                const gdn_grads  *grads);

/* Dry runs: validate the arguments and ask the backend whether it takes the case, exactly as
 * gdn_forward / gdn_backward would, without computing or writing anything. */
GDN_API gdn_status gdn_check_forward(gdn_context *ctx, const gdn_problem *p,
                                     const gdn_tensor *out, const gdn_tensor *states);
GDN_API gdn_status gdn_check_backward(gdn_context *ctx, const gdn_problem *p,
                                      const gdn_tensor *d_out, const gdn_tensor *d_states,
                                      const gdn_grads *grads);

/* Caller-provided threads (a ggml custom op, an OpenMP team, a job system): share ith of nth
 * (0 <= ith < nth <= GDN_MAX_THREADS) of one gdn_forward / gdn_backward, computed on the calling thread. The call's
 * result is complete once every share ith = 0 .. nth-1 has returned GDN_OK, each run exactly
 * once, on any threads, concurrently or one after another; it is the same, bit for bit, as
 * gdn_forward / gdn_backward for every nth (the cpu backend's static partition by work unit,
 * with nth workers). The context's own threads are not used (create it with n_threads = 1).
 *   cpu: each share's scratch belongs to the calling thread (kept there for its next share), so
 *        the shares of one call and of different calls may run concurrently on one context.
 *        Packed sequences (cu_seqlens) and state pools (state_indices) are refused
 *        (GDN_ERROR_UNSUPPORTED): call gdn_forward / gdn_backward for them.
 *   ref, cuda: share 0 runs the whole call, the others return GDN_OK at once; one call at a time.
 * Every share validates the whole call before it writes anything, so bad arguments fail every
 * share alike and nothing is written; only GDN_ERROR_OUT_OF_MEMORY in one share can leave
 * other shares' outputs written. A share that succeeds leaves gdn_last_error as it was, so once
 * the shares have returned it holds the message of the last one that failed (read it then: a
 * share failing meanwhile replaces it); gdn_context_workspace_bytes does not count the threads'
 * share scratch. */
GDN_API gdn_status gdn_forward_share(gdn_context *ctx, const gdn_problem *p,
                                     const gdn_tensor *out, const gdn_tensor *states,
                                     int ith, int nth);
GDN_API gdn_status gdn_backward_share(gdn_context *ctx, const gdn_problem *p,
                                      const gdn_tensor *d_out, const gdn_tensor *d_states,
                                      const gdn_grads *grads, int ith, int nth);

/* Workspace bytes the context holds or would allocate for the last successful call. */
GDN_API uint64_t gdn_context_workspace_bytes(const gdn_context *ctx);

/* Frees the workspace the context keeps between calls; the next call allocates it again. On cuda
 * the free is ordered on the context's stream (after the work queued there), so it is safe while
 * that work runs. The workspace is grown, never shrunk, by calls: release it after the largest
 * call when memory matters (the 27B shape's backward at T = 4096 keeps about 540 MB on cuda). */
GDN_API void gdn_context_release_workspace(gdn_context *ctx);

/* Whether a backend is compiled in and can start here (a CUDA device exists, say). */
GDN_API int gdn_backend_available(const char *backend);

/* The version of the library linked at run time, "MAJOR.MINOR.PATCH", and as GDN_VERSION_NUMBER
 * computes it: compare with the header's macros to detect a mismatched libgdn. */
GDN_API const char *gdn_version(void);
GDN_API int         gdn_version_number(void);

#ifdef __cplusplus
}
#endif
#endif /* GDN_GDN_H */
