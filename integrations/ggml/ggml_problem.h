// How a ggml gated delta net reads as a gdn call: the one mapping shared by the custom ops
// (gdn_ggml.cpp, a GGML_OP_CUSTOM whose sources are q, k, v, g, beta, state) and the ggml
// backend (integrations/ggml-backend, a GGML_OP_GATED_DELTA_NET node with the same sources).
//
// ggml_gated_delta_net's semantics, as gdn states them: value head h reads key head h % Hk
// (TILED), sequence b reads q/k sequence b / (B / Bq), scale 1/sqrt(Sv) computed in float,
// states key-major ([Sk, Sv, Hv, B], S[i][j] at i + j*Sk). Its result packs o as
// [Sv, Hv, T, B], then K state slots as [Sk, Sv, Hv, B*K], slot s of sequence b at index s*B + b.
//
// Header only, and it needs nothing of ggml but struct ggml_tensor's fields and
// ggml_type_name, so it compiles against every ggml the two users are built with.
#pragma once

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include <ggml.h>

#include "gdn/gdn.h"

namespace gdn_ggml {

inline std::string format(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

// A ggml_tensor as a gdn_tensor: data, type, ne, nb as they are (gdn's validation judges them).
inline gdn_status to_gdn_tensor(const ggml_tensor *t, const char *role, gdn_tensor &out, std::string &why) {
    if (t == nullptr) {
        why = format("%s is NULL", role);
        return GDN_ERROR_INVALID_ARGUMENT;
    }
    switch (t->type) {
        case GGML_TYPE_F32: out.type = GDN_TYPE_F32; break;
        case GGML_TYPE_F64: out.type = GDN_TYPE_F64; break;
        case GGML_TYPE_F16: out.type = GDN_TYPE_F16; break;
        case GGML_TYPE_BF16: out.type = GDN_TYPE_BF16; break;
        default:
            why = format("%s (\"%s\") has ggml type %s; gdn takes f32, f64, f16 and bf16 tensors", role, t->name,
                         ggml_type_name(t->type));
            return GDN_ERROR_TYPE;
    }
    out.data = t->data;
    for (int d = 0; d < 4; ++d) {
        out.ne[d] = t->ne[d];
        out.nb[d] = static_cast<int64_t>(t->nb[d]);
    }
    return GDN_OK;
}

// A contiguous F32 tensor of the given shape at `data`.
inline gdn_tensor contiguous_f32(void *data, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    gdn_tensor t{};
    t.data = data;
    t.type = GDN_TYPE_F32;
    const int64_t ne[4] = {n0, n1, n2, n3};
    int64_t stride = sizeof(float);
    for (int d = 0; d < 4; ++d) {
        t.ne[d] = ne[d];
        t.nb[d] = stride;
        stride *= ne[d];
    }
    return t;
}

// A made-up address for source i (graph-build time, when tensors may have no memory yet): gdn's
// validation is pointer arithmetic, so distinct placeholders let it judge shapes, strides and
// types without touching memory.
inline void *placeholder(int i) { return reinterpret_cast<void *>(static_cast<uintptr_t>(i + 1) << 40); }

inline const char *const kSourceRoles[6] = {"q", "k", "v", "g", "beta", "state"};

// The problem of a node whose src[0..5] are q, k, v, g, beta, state. With placeholders every
// tensor gets a placeholder address; without, a tensor with no data is an error.
inline gdn_status problem_of(const ggml_tensor *const src[6], bool placeholders, gdn_problem &p, std::string &why) {
    p = gdn_problem{};
    gdn_tensor *dst[6] = {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.state};
    for (int i = 0; i < 6; ++i) {
        const gdn_status s = to_gdn_tensor(src[i], kSourceRoles[i], *dst[i], why);
        if (s != GDN_OK) return s;
        if (placeholders) dst[i]->data = placeholder(i);
        else if (dst[i]->data == nullptr) {
            why = format("%s (\"%s\") has no data", kSourceRoles[i], src[i]->name);
            return GDN_ERROR_INVALID_ARGUMENT;
        }
    }
    p.head_map = GDN_HEAD_MAP_TILED;
    p.scale = 1.0f / std::sqrt(static_cast<float>(p.v.ne[0]));  // 1/sqrt(Sv) in float, as ggml computes it
    return GDN_OK;
}

// Rows of the packed result: T*B rows of o, then K*Sk*B rows of Sv*Hv state elements.
inline int64_t packed_rows(const gdn_problem &p, int64_t K) { return p.v.ne[2] * p.v.ne[3] + K * p.q.ne[0] * p.v.ne[3]; }

// K as the packed result's row count says (the custom ops store nothing else).
inline int64_t slots_of_rows(const gdn_problem &p, int64_t rows) {
    const int64_t per_slot = p.q.ne[0] * p.v.ne[3];
    return per_slot > 0 ? (rows - p.v.ne[2] * p.v.ne[3]) / per_slot : 0;
}

// The forward's outputs as views into the packed result at `result`.
struct ForwardOutputs {
    gdn_tensor out, states;
};

inline ForwardOutputs forward_outputs(const gdn_problem &p, int64_t K, float *result) {
    const int64_t Sk = p.q.ne[0], Sv = p.v.ne[0], Hv = p.v.ne[1], T = p.v.ne[2], B = p.v.ne[3];
    return {contiguous_f32(result, Sv, Hv, T, B), contiguous_f32(result + Sv * Hv * T * B, Sk, Sv, Hv, B * K)};
}

// gdn writes the slots of the last min(T, K) tokens; the rest (T < K) are zeroed, so the result
// never holds stale memory (upstream leaves them undefined).
inline void zero_unwritten_slots(const gdn_problem &p, int64_t K, const ForwardOutputs &o) {
    const int64_t T = p.v.ne[2], B = p.v.ne[3];
    if (T >= K) return;
    const int64_t slot = o.states.nb[3] / static_cast<int64_t>(sizeof(float)) * B;
    std::memset(static_cast<float *>(o.states.data) + T * slot, 0, sizeof(float) * (K - T) * slot);
}

// gdn's dry run `check(ctx)` (gdn_check_forward / gdn_check_backward: nothing runs) on a cpu
// context of one thread kept for checks alone, under a lock: graphs may be checked on several
// threads, and a check's message must be read before another call on the context replaces it.
template <class Check>
gdn_status dry_run(Check &&check, std::string &why) {
    static std::mutex mutex;
    static gdn_context *ctx = nullptr;
    std::lock_guard<std::mutex> lock(mutex);
    if (ctx == nullptr) {
        gdn_context_params params = gdn_context_default_params();
        params.n_threads = 1;
        if (const gdn_status s = gdn_context_create("cpu", &params, &ctx); s != GDN_OK) {
            why = gdn_last_create_error();
            return s;
        }
    }
    const gdn_status s = check(ctx);
    if (s != GDN_OK) why = gdn_last_error(ctx);
    return s;
}

}  // namespace gdn_ggml
