// gdn as ggml custom ops (include/gdn/gdn_ggml.h).
//
// A graph node is a GGML_OP_CUSTOM whose sources are the op's inputs: q, k, v, g, beta, state
// (and d_result for the backward). Nothing else is stored: K is read back from the result's (or
// d_result's) shape, so no user data has to outlive the graph. Every ggml thread calls the node
// with (ith, nth) and runs its share of the call on one process-wide cpu context
// (gdn_forward_share: per-thread scratch, so graphs computed concurrently do not race).
#include "gdn/gdn_ggml.h"

#include "ggml_problem.h"

#include <cstdio>
#include <mutex>
#include <new>
#include <string>

namespace {

using namespace gdn_ggml;

void put(char *why, size_t size, const std::string &msg) {
    if (why != nullptr && size > 0) std::snprintf(why, size, "%s", msg.c_str());
}

// Runs check(message) for a function of the C API that reports through a why buffer: no
// exception leaves it (building a message can run out of memory).
template <class Check>
gdn_status reported(char *why, size_t why_size, Check &&check) noexcept {
    try {
        std::string msg;
        const gdn_status s = check(msg);
        put(why, why_size, msg);
        return s;
    } catch (const std::bad_alloc &) {
        if (why != nullptr && why_size > 0) std::snprintf(why, why_size, "out of host memory");
        return GDN_ERROR_OUT_OF_MEMORY;
    } catch (...) {
        if (why != nullptr && why_size > 0) std::snprintf(why, why_size, "internal error");
        return GDN_ERROR_BACKEND;
    }
}

// The call a node stands for.
struct Call {
    gdn_problem p{};
    int64_t K = 1;
    gdn_tensor out{}, states{};              // forward outputs, views into the result
    gdn_tensor d_out{}, d_states{};          // backward inputs, views into d_result
    gdn_grads grads{};                       // backward outputs, views into the packed result
};

void set_forward_outputs(Call &c, float *result) {
    const ForwardOutputs o = forward_outputs(c.p, c.K, result);
    c.out = o.out;
    c.states = o.states;
}

void set_backward_tensors(Call &c, float *d_result, float *packed) {
    const gdn_problem &p = c.p;
    const int64_t Sk = p.q.ne[0], Sv = p.v.ne[0], Hv = p.v.ne[1], T = p.v.ne[2], B = p.v.ne[3];
    c.d_out = contiguous_f32(d_result, Sv, Hv, T, B);
    c.d_states = contiguous_f32(d_result + Sv * Hv * T * B, Sk, Sv, Hv, B * c.K);
    const gdn_tensor *in[6] = {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.state};
    gdn_tensor *out[6] = {&c.grads.q, &c.grads.k, &c.grads.v, &c.grads.g, &c.grads.beta, &c.grads.state};
    for (int i = 0; i < 6; ++i) {
        *out[i] = contiguous_f32(packed, in[i]->ne[0], in[i]->ne[1], in[i]->ne[2], in[i]->ne[3]);
        packed += in[i]->ne[0] * in[i]->ne[1] * in[i]->ne[2] * in[i]->ne[3];
    }
}

int64_t grads_elements(const gdn_problem &p) {
    int64_t n = 0;
    for (const gdn_tensor *t : {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.state}) n += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    return n;
}

// The process-wide context the nodes run on: cpu backend, its own pool unused (shares run on
// ggml's threads), default chunking.
gdn_context *shared_context() {
    static gdn_context *ctx = nullptr;
    static std::once_flag once;
    std::call_once(once, [] {
        gdn_context_params params = gdn_context_default_params();
        params.n_threads = 1;
        if (gdn_context_create("cpu", &params, &ctx) != GDN_OK)
            GGML_ABORT("gdn_ggml: cannot start gdn's cpu backend: %s", gdn_last_create_error());
    });
    return ctx;
}

// gdn's own checks with placeholder addresses (ggml_problem.h's dry_run: a context of their own,
// apart from the compute context whose shares may be running meanwhile).
gdn_status dry_run(Call &c, bool backward, std::string &why) {
    return gdn_ggml::dry_run([&](gdn_context *ctx) {
        return backward ? gdn_check_backward(ctx, &c.p, &c.d_out, &c.d_states, &c.grads)
                        : gdn_check_forward(ctx, &c.p, &c.out, &c.states);
    }, why);
}

gdn_status check_forward(const ggml_tensor *const src[6], int64_t K, Call &c, std::string &why) {
    gdn_status s = problem_of(src, true, c.p, why);
    if (s != GDN_OK) return s;
    if (c.p.q.type != GDN_TYPE_F32 || c.p.k.type != GDN_TYPE_F32 || c.p.v.type != GDN_TYPE_F32 ||
        c.p.g.type != GDN_TYPE_F32 || c.p.beta.type != GDN_TYPE_F32 || c.p.state.type != GDN_TYPE_F32) {
        why = "gdn's ggml ops take F32 tensors (the cpu backend), as ggml_gated_delta_net does";
        return GDN_ERROR_TYPE;
    }
    if (K < 1) {
        why = format("K = %lld: need at least one state slot", static_cast<long long>(K));
        return GDN_ERROR_SHAPE;
    }
    c.K = K;
    set_forward_outputs(c, static_cast<float *>(placeholder(7)));
    return dry_run(c, false, why);
}

gdn_status check_backward(const ggml_tensor *const src[7], Call &c, std::string &why) {
    gdn_status s = check_forward(src, 1, c, why);
    if (s != GDN_OK) return s;
    const ggml_tensor *d = src[6];
    if (d == nullptr) {
        why = "d_result is NULL";
        return GDN_ERROR_INVALID_ARGUMENT;
    }
    const gdn_problem &p = c.p;
    const int64_t Sk = p.q.ne[0], width = p.v.ne[0] * p.v.ne[1], tokens = p.v.ne[2] * p.v.ne[3], B = p.v.ne[3];
    const int64_t state_rows = d->ne[1] - tokens;
    if (d->type != GGML_TYPE_F32 || !ggml_is_contiguous(d) || d->ne[0] != width || d->ne[2] != 1 || d->ne[3] != 1 ||
        state_rows < Sk * B || state_rows % (Sk * B) != 0) {
        why = format("d_result (\"%s\"): need a contiguous F32 tensor shaped like the forward's result, [Sv*Hv = %lld, "
                     "T*B + K*Sk*B = %lld + K*%lld], not %s [%lld, %lld, %lld, %lld]%s",
                     d->name, (long long)width, (long long)tokens, (long long)(Sk * B), ggml_type_name(d->type),
                     (long long)d->ne[0], (long long)d->ne[1], (long long)d->ne[2], (long long)d->ne[3],
                     ggml_is_contiguous(d) ? "" : ", not contiguous");
        return GDN_ERROR_SHAPE;
    }
    c.K = state_rows / (Sk * B);
    set_backward_tensors(c, static_cast<float *>(placeholder(8)), static_cast<float *>(placeholder(9)));
    return dry_run(c, true, why);
}

void forward_op(ggml_tensor *dst, int ith, int nth, void *) {
    Call c;
    std::string why;
    if (problem_of(dst->src, false, c.p, why) != GDN_OK) GGML_ABORT("gdn_ggml_gated_delta_net: %s", why.c_str());
    c.K = slots_of_rows(c.p, dst->ne[1]);
    set_forward_outputs(c, static_cast<float *>(dst->data));
    if (ith == 0) zero_unwritten_slots(c.p, c.K, ForwardOutputs{c.out, c.states});  // disjoint from what shares write
    gdn_context *ctx = shared_context();
    const gdn_status s = gdn_forward_share(ctx, &c.p, &c.out, &c.states, ith, nth);
    if (s != GDN_OK) GGML_ABORT("gdn_ggml_gated_delta_net: %s: %s", gdn_status_string(s), gdn_last_error(ctx));
}

void backward_op(ggml_tensor *dst, int ith, int nth, void *) {
    Call c;
    std::string why;
    if (problem_of(dst->src, false, c.p, why) != GDN_OK) GGML_ABORT("gdn_ggml_gated_delta_net_back: %s", why.c_str());
    const ggml_tensor *d = dst->src[6];
    c.K = slots_of_rows(c.p, d->ne[1]);
    set_backward_tensors(c, static_cast<float *>(d->data), static_cast<float *>(dst->data));
    gdn_context *ctx = shared_context();
    const gdn_status s = gdn_backward_share(ctx, &c.p, &c.d_out, &c.d_states, &c.grads, ith, nth);
    if (s != GDN_OK) GGML_ABORT("gdn_ggml_gated_delta_net_back: %s: %s", gdn_status_string(s), gdn_last_error(ctx));
}

}  // namespace

extern "C" {

gdn_status gdn_ggml_tensor(const ggml_tensor *t, gdn_tensor *out, char *why, size_t why_size) {
    return reported(why, why_size, [&](std::string &msg) {
        if (out == nullptr) {
            msg = "out is NULL";
            return GDN_ERROR_INVALID_ARGUMENT;
        }
        gdn_tensor r{};
        const gdn_status s = to_gdn_tensor(t, "tensor", r, msg);
        if (s == GDN_OK) *out = r;
        return s;
    });
}

gdn_status gdn_ggml_check_forward(const ggml_tensor *q, const ggml_tensor *k, const ggml_tensor *v, const ggml_tensor *g,
                                  const ggml_tensor *beta, const ggml_tensor *state, int64_t K, char *why, size_t why_size) {
    const ggml_tensor *const src[6] = {q, k, v, g, beta, state};
    return reported(why, why_size, [&](std::string &msg) {
        Call c;
        return check_forward(src, K, c, msg);
    });
}

gdn_status gdn_ggml_check_backward(const ggml_tensor *q, const ggml_tensor *k, const ggml_tensor *v, const ggml_tensor *g,
                                   const ggml_tensor *beta, const ggml_tensor *state, const ggml_tensor *d_result,
                                   char *why, size_t why_size) {
    const ggml_tensor *const src[7] = {q, k, v, g, beta, state, d_result};
    return reported(why, why_size, [&](std::string &msg) {
        Call c;
        return check_backward(src, c, msg);
    });
}

ggml_tensor *gdn_ggml_gated_delta_net(ggml_context *ctx, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v, ggml_tensor *g,
                                      ggml_tensor *beta, ggml_tensor *state, int64_t K) {
    const ggml_tensor *const src[6] = {q, k, v, g, beta, state};
    Call c;
    std::string why;
    const gdn_status s = check_forward(src, K, c, why);
    if (s != GDN_OK) GGML_ABORT("gdn_ggml_gated_delta_net: %s: %s", gdn_status_string(s), why.c_str());
    ggml_tensor *args[6] = {q, k, v, g, beta, state};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, v->ne[0] * v->ne[1], packed_rows(c.p, K), 1, 1, args, 6, forward_op,
                          GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor *gdn_ggml_gated_delta_net_back(ggml_context *ctx, ggml_tensor *q, ggml_tensor *k, ggml_tensor *v,
                                           ggml_tensor *g, ggml_tensor *beta, ggml_tensor *state, ggml_tensor *d_result) {
    const ggml_tensor *const src[7] = {q, k, v, g, beta, state, d_result};
    Call c;
    std::string why;
    const gdn_status s = check_backward(src, c, why);
    if (s != GDN_OK) GGML_ABORT("gdn_ggml_gated_delta_net_back: %s: %s", gdn_status_string(s), why.c_str());
    ggml_tensor *args[7] = {q, k, v, g, beta, state, d_result};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, grads_elements(c.p), 1, 1, 1, args, 7, backward_op, GGML_N_TASKS_MAX,
                          nullptr);
}

int64_t gdn_ggml_grad_offset(const ggml_tensor *packed, gdn_ggml_grad which) {
    if (packed == nullptr || which < GDN_GGML_GRAD_Q || which > GDN_GGML_GRAD_STATE)
        GGML_ABORT("gdn_ggml_grad_offset: need a result of gdn_ggml_gated_delta_net_back and a gradient index 0..5");
    int64_t offset = 0;
    for (int i = 0; i < static_cast<int>(which); ++i) offset += ggml_nelements(packed->src[i]);
    return offset;
}

ggml_tensor *gdn_ggml_grad_view(ggml_context *ctx, ggml_tensor *packed, gdn_ggml_grad which) {
    const int64_t offset = gdn_ggml_grad_offset(packed, which);
    const ggml_tensor *in = packed->src[which];
    const size_t f = sizeof(float);
    return ggml_view_4d(ctx, packed, in->ne[0], in->ne[1], in->ne[2], in->ne[3], f * in->ne[0], f * in->ne[0] * in->ne[1],
                        f * in->ne[0] * in->ne[1] * in->ne[2], f * offset);
}

}  // extern "C"
