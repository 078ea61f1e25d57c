#include "half_call.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "math/elements.h"

namespace gdn::halftest {

namespace {

int64_t size_of(gdn_type type) { return type == GDN_TYPE_F64 || type == GDN_TYPE_I64 ? 8 : type == GDN_TYPE_F32 || type == GDN_TYPE_I32 ? 4 : 2; }

template <class F>
void for_each(const Extents &ne, F &&f) {
    for (int64_t i3 = 0; i3 < ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < ne[0]; ++i0) f(i0, i1, i2, i3);
}

Extents extents(const Tensor &t) { return {t.t.ne[0], t.t.ne[1], t.t.ne[2], t.t.ne[3]}; }

double rounded(double x, gdn_type type) {
    switch (type) {
    case GDN_TYPE_BF16: return bf16_to_float(double_to_bf16(x));
    case GDN_TYPE_F16: return f16_to_float(double_to_f16(x));
    case GDN_TYPE_F32: return static_cast<float>(x);
    default: return x;
    }
}

// Fills t from the generator, each value rounded to `values` first (one draw per element, in
// index order, whatever the types: both calls of a pair draw the same numbers).
template <class Draw>
void fill(const Tensor &t, gdn_type values, Draw &&draw) {
    for_each(extents(t), [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) { t.set(i0, i1, i2, i3, rounded(draw(), values)); });
}

}  // namespace

double Tensor::get(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    const char *p = at(i0, i1, i2, i3);
    uint16_t h;
    switch (t.type) {
    case GDN_TYPE_BF16: std::memcpy(&h, p, 2); return bf16_to_float(h);
    case GDN_TYPE_F16: std::memcpy(&h, p, 2); return f16_to_float(h);
    case GDN_TYPE_F64: { double d; std::memcpy(&d, p, 8); return d; }
    default: { float f; std::memcpy(&f, p, 4); return f; }
    }
}

void Tensor::set(int64_t i0, int64_t i1, int64_t i2, int64_t i3, double x) const {
    char *p = at(i0, i1, i2, i3);
    switch (t.type) {
    case GDN_TYPE_BF16: { const uint16_t h = double_to_bf16(x); std::memcpy(p, &h, 2); return; }
    case GDN_TYPE_F16: { const uint16_t h = double_to_f16(x); std::memcpy(p, &h, 2); return; }
    case GDN_TYPE_F64: std::memcpy(p, &x, 8); return;
    default: { const float f = static_cast<float>(x); std::memcpy(p, &f, 4); return; }
    }
}

uint32_t Tensor::bits(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    uint32_t u = 0;
    std::memcpy(&u, at(i0, i1, i2, i3), size_of(t.type) >= 4 ? 4 : 2);
    return u;
}

Tensor make_tensor(gdn_type type, Extents ne, bool value_major) {
    Tensor r;
    const int64_t es = size_of(type), count = ne[0] * ne[1] * ne[2] * ne[3];
    r.memory = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(std::max<int64_t>(count, 1) * es), 0xFF);
    r.t.data = r.memory->data();
    r.t.type = type;
    for (int d = 0; d < 4; ++d) r.t.ne[d] = ne[d];
    r.t.nb[0] = es;
    r.t.nb[1] = es * ne[0];
    if (value_major) {
        r.t.nb[1] = es;
        r.t.nb[0] = es * ne[1];
    }
    r.t.nb[2] = es * ne[0] * ne[1];
    r.t.nb[3] = r.t.nb[2] * ne[2];
    return r;
}

gdn_problem Call::problem() const {
    gdn_problem p{};
    p.q = q.t;
    p.k = k.t;
    p.v = v.t;
    p.g = g.t;
    p.beta = beta.t;
    p.state = s0.t;
    p.cu_seqlens = cu.t;
    p.state_indices = indices.t;
    return p;
}

gdn_grads Call::grads() const { return {dq.t, dk.t, dv.t, dg.t, dbeta.t, ds0.t}; }

Call build(const Spec &s, Types types, Types values, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const bool packed = !s.cu_seqlens.empty(), pooled = !s.state_indices.empty();
    const int64_t B = packed ? 1 : s.B, Bq = packed ? 1 : s.Bq;
    const int64_t sequences = packed ? static_cast<int64_t>(s.cu_seqlens.size()) - 1 : s.B;
    const int64_t state_count = pooled ? s.slots : sequences;
    Call c;
    if (s.projection) {
        const int64_t conv = 2 * s.Hk * s.Sk + s.Hv * s.Sv, es = size_of(types.x);
        const Tensor buffer = make_tensor(types.x, {conv, s.T, B, 1});
        auto view = [&](int64_t offset, int64_t S, int64_t H) {
            Tensor t = buffer;
            t.t.data = static_cast<char *>(buffer.t.data) + offset * es;
            t.t.ne[0] = S, t.t.ne[1] = H, t.t.ne[2] = s.T, t.t.ne[3] = B;
            t.t.nb[0] = es, t.t.nb[1] = es * S, t.t.nb[2] = es * conv, t.t.nb[3] = es * conv * s.T;
            return t;
        };
        c.q = view(0, s.Sk, s.Hk);
        c.k = view(s.Hk * s.Sk, s.Sk, s.Hk);
        c.v = view(2 * s.Hk * s.Sk, s.Sv, s.Hv);
    } else {
        c.q = make_tensor(types.x, {s.Sk, s.Hk, s.T, Bq});
        c.k = make_tensor(types.x, {s.Sk, s.Hk, s.T, Bq});
        c.v = make_tensor(types.x, {s.Sv, s.Hv, s.T, B});
    }
    c.g = make_tensor(types.gate, {s.kda ? s.Sk : 1, s.Hv, s.T, B});
    c.beta = make_tensor(types.beta, {1, s.Hv, s.T, B});
    const double key_sigma = 1.0 / std::sqrt(static_cast<double>(s.Sk));
    fill(c.q, values.x, [&] { return key_sigma * normal(rng); });
    fill(c.k, values.x, [&] { return key_sigma * normal(rng); });
    fill(c.v, values.x, [&] { return normal(rng); });
    fill(c.g, values.gate, [&] { return s.kda ? -0.01 - 0.5 * uniform(rng) : -0.02 - 0.28 * uniform(rng); });
    fill(c.beta, values.beta, [&] { return uniform(rng); });
    const Extents state_ne{s.Sk, s.Sv, s.Hv, state_count};
    if (s.s0) {
        c.s0 = make_tensor(GDN_TYPE_F32, state_ne, s.value_major);
        fill(c.s0, GDN_TYPE_F32, [&] { return 0.5 * normal(rng); });
    }
    if (packed) {
        c.cu = make_tensor(GDN_TYPE_I64, {static_cast<int64_t>(s.cu_seqlens.size()), 1, 1, 1});
        std::memcpy(c.cu.t.data, s.cu_seqlens.data(), s.cu_seqlens.size() * sizeof(int64_t));
    }
    if (pooled) {
        c.indices = make_tensor(GDN_TYPE_I64, {static_cast<int64_t>(s.state_indices.size()), 1, 1, 1});
        std::memcpy(c.indices.t.data, s.state_indices.data(), s.state_indices.size() * sizeof(int64_t));
    }
    c.out = make_tensor(types.x, {s.Sv, s.Hv, s.T, B});
    // A pool is updated in place (states is s0); otherwise K snapshots per sequence.
    c.states = pooled && s.s0 ? c.s0 : make_tensor(GDN_TYPE_F32, {s.Sk, s.Sv, s.Hv, pooled ? s.slots : sequences * s.K}, s.value_major);
    c.d_out = make_tensor(types.x, {s.Sv, s.Hv, s.T, B});
    fill(c.d_out, values.x, [&] { return normal(rng); });
    c.d_states = make_tensor(GDN_TYPE_F32, {s.Sk, s.Sv, s.Hv, pooled ? s.slots : sequences * s.K}, s.value_major);
    fill(c.d_states, GDN_TYPE_F32, [&] { return normal(rng); });
    c.dq = make_tensor(types.x, {s.Sk, s.Hk, s.T, Bq});
    c.dk = make_tensor(types.x, {s.Sk, s.Hk, s.T, Bq});
    c.dv = make_tensor(types.x, {s.Sv, s.Hv, s.T, B});
    c.dg = make_tensor(types.gate, {s.kda ? s.Sk : 1, s.Hv, s.T, B});
    c.dbeta = make_tensor(types.beta, {1, s.Hv, s.T, B});
    c.ds0 = make_tensor(GDN_TYPE_F32, state_ne, s.value_major);
    return c;
}

int64_t mismatches_rounded_once(const Tensor &half, const Tensor &f32, const char *what) {
    int64_t bad = 0;
    for_each(extents(half), [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
        const float x = static_cast<float>(f32.get(i0, i1, i2, i3));
        uint32_t expected = float_bits(x);
        if (half.t.type == GDN_TYPE_BF16) expected = float_to_bf16(x);
        if (half.t.type == GDN_TYPE_F16) expected = float_to_f16(x);
        const uint32_t got = half.bits(i0, i1, i2, i3);
        if (got != expected && bad++ < 3)
            ADD_FAILURE() << what << "(" << i0 << ", " << i1 << ", " << i2 << ", " << i3 << "): 0x" << std::hex << got
                          << ", the F32 call's " << x << " rounded once is 0x" << expected;
    });
    return bad;
}

int64_t nan_count(const Tensor &t) {
    int64_t n = 0;
    for_each(extents(t), [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) { n += std::isnan(t.get(i0, i1, i2, i3)) ? 1 : 0; });
    return n;
}

bool same_bits(const Tensor &a, const Tensor &b) {
    bool same = true;
    for_each(extents(a), [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) { same &= a.bits(i0, i1, i2, i3) == b.bits(i0, i1, i2, i3); });
    return same;
}

}  // namespace gdn::halftest
