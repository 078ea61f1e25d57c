#include "dense_problem.h"

#include <gtest/gtest.h>

#include <cmath>

namespace gdn::reliability {

Buffer::Buffer(gdn_type t, int64_t e0, int64_t e1, int64_t e2, int64_t e3) : type(t) {
    ne[0] = e0;
    ne[1] = e1;
    ne[2] = e2;
    ne[3] = e3;
    storage.assign(static_cast<size_t>(type == GDN_TYPE_F64 ? count() : (count() + 1) / 2), 0.0);
}

double Buffer::get(int64_t i) const {
    if (type == GDN_TYPE_F64) return storage[i];
    float f;
    std::memcpy(&f, reinterpret_cast<const char *>(storage.data()) + 4 * i, 4);
    return f;
}

void Buffer::set(int64_t i, double value) {
    if (type == GDN_TYPE_F64) {
        storage[i] = value;
        return;
    }
    const auto f = static_cast<float>(value);
    std::memcpy(reinterpret_cast<char *>(storage.data()) + 4 * i, &f, 4);
}

gdn_tensor Buffer::tensor() {
    gdn_tensor t{};
    t.data = storage.empty() ? nullptr : storage.data();
    t.type = type;
    const int64_t elem = type == GDN_TYPE_F64 ? 8 : 4;
    for (int d = 0; d < 4; ++d) t.ne[d] = ne[d];
    t.nb[0] = elem;
    for (int d = 1; d < 4; ++d) t.nb[d] = t.nb[d - 1] * ne[d - 1];
    return t;
}

bool Buffer::same_bits(const Buffer &o) const {
    return type == o.type && count() == o.count() &&
           std::memcmp(storage.data(), o.storage.data(), static_cast<size_t>(count() * (type == GDN_TYPE_F64 ? 8 : 4))) == 0;
}

DenseProblem::DenseProblem(const Sizes &sz, gdn_type t, uint64_t seed) : s(sz), type(t) {
    const int64_t gw = s.kda ? s.Sk : 1;
    q = Buffer(t, s.Sk, s.Hk, s.T, s.Bq);
    k = Buffer(t, s.Sk, s.Hk, s.T, s.Bq);
    v = Buffer(t, s.Sv, s.Hv, s.T, s.B);
    g = Buffer(t, gw, s.Hv, s.T, s.B);
    beta = Buffer(t, 1, s.Hv, s.T, s.B);
    s0 = Buffer(t, s.Sk, s.Sv, s.Hv, s.B);
    out = Buffer(t, s.Sv, s.Hv, s.T, s.B);
    states = Buffer(t, s.Sk, s.Sv, s.Hv, s.B * s.K);
    d_out = Buffer(t, s.Sv, s.Hv, s.T, s.B);
    d_states = Buffer(t, s.Sk, s.Sv, s.Hv, s.B * s.K);
    dq = Buffer(t, s.Sk, s.Hk, s.T, s.Bq);
    dk = Buffer(t, s.Sk, s.Hk, s.T, s.Bq);
    dv = Buffer(t, s.Sv, s.Hv, s.T, s.B);
    dg = Buffer(t, gw, s.Hv, s.T, s.B);
    dbeta = Buffer(t, 1, s.Hv, s.T, s.B);
    ds0 = Buffer(t, s.Sk, s.Sv, s.Hv, s.B);

    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> unit(-1.0, 1.0), gate(-0.5, 0.0), rate(0.0, 1.0);
    // Keys normalised per row, as models feed them: keeps the recurrence contractive.
    for (int64_t row = 0; row < s.Hk * s.T * s.Bq; ++row) {
        double norm_q = 0, norm_k = 0;
        std::vector<double> qr(s.Sk), kr(s.Sk);
        for (int64_t i = 0; i < s.Sk; ++i) {
            qr[i] = unit(rng);
            kr[i] = unit(rng);
            norm_q += qr[i] * qr[i];
            norm_k += kr[i] * kr[i];
        }
        for (int64_t i = 0; i < s.Sk; ++i) {
            q.set(row * s.Sk + i, qr[i] / std::sqrt(norm_q + 1e-12));
            k.set(row * s.Sk + i, kr[i] / std::sqrt(norm_k + 1e-12));
        }
    }
    for (int64_t i = 0; i < v.count(); ++i) v.set(i, unit(rng));
    for (int64_t i = 0; i < g.count(); ++i) g.set(i, gate(rng));
    for (int64_t i = 0; i < beta.count(); ++i) beta.set(i, rate(rng));
    for (int64_t i = 0; i < s0.count(); ++i) s0.set(i, unit(rng));
    for (int64_t i = 0; i < d_out.count(); ++i) d_out.set(i, unit(rng));
    for (int64_t i = 0; i < d_states.count(); ++i) d_states.set(i, unit(rng));
}

gdn_problem DenseProblem::problem() {
    gdn_problem p{};
    p.q = q.tensor();
    p.k = k.tensor();
    p.v = v.tensor();
    p.g = g.tensor();
    p.beta = beta.tensor();
    if (with_s0) p.state = s0.tensor();
    else p.state.type = type;
    p.scale = 0.0f;
    p.head_map = GDN_HEAD_MAP_TILED;
    return p;
}

gdn_grads DenseProblem::grads() {
    gdn_grads g_{};
    g_.q = dq.tensor();
    g_.k = dk.tensor();
    g_.v = dv.tensor();
    g_.g = dg.tensor();
    g_.beta = dbeta.tensor();
    g_.state = ds0.tensor();
    return g_;
}

gdn_status DenseProblem::forward(gdn_context *ctx) {
    const gdn_problem p = problem();
    const gdn_tensor o = out.tensor(), st = states.tensor();
    return gdn_forward(ctx, &p, &o, &st);
}

gdn_status DenseProblem::backward(gdn_context *ctx) {
    const gdn_problem p = problem();
    const gdn_tensor d_o = d_out.tensor(), d_s = d_states.tensor();
    const gdn_grads gr = grads();
    return gdn_backward(ctx, &p, &d_o, &d_s, &gr);
}

gdn_context *make_context(const char *backend, int n_threads) {
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = n_threads;
    gdn_context *ctx = nullptr;
    const gdn_status s = gdn_context_create(backend, &params, &ctx);
    EXPECT_EQ(s, GDN_OK) << backend << ": " << gdn_last_create_error();
    return ctx;
}

const char *threaded_backend() { return gdn_backend_available("cpu") ? "cpu" : "ref"; }

}  // namespace gdn::reliability
