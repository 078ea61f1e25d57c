// The cpu backend on value-major states (nb[1] = 4: PyTorch's [..., K, V]) against key-major
// ones (nb[0] = 4: ggml's): the same bits for every output, forward and backward, chunked and
// per-token, GDA and KDA, Sk != Sv and head sizes off the kernels' widths, in place (states ==
// s0), with the layouts mixed inside one call, and for 1, 2 and 3 threads; and a value-major
// pool (state_indices) updated in place, the same bits for every thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gdn/gdn.h"

namespace {

enum class Layout { KeyMajor, ValueMajor };

void fill(std::vector<float> &v, float lo, float hi, unsigned seed) {
    for (float &x : v) {
        seed = seed * 1664525u + 1013904223u;
        x = lo + (hi - lo) * static_cast<float>(seed >> 8) / static_cast<float>(1u << 24);
    }
}

gdn_tensor contiguous(std::vector<float> &v, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    v.resize(static_cast<size_t>(n0 * n1 * n2 * n3));
    const int64_t f = sizeof(float);
    return {v.data(), GDN_TYPE_F32, {n0, n1, n2, n3}, {f, n0 * f, n0 * n1 * f, n0 * n1 * n2 * f}};
}

// States [Sk, Sv, Hv, n] in one layout, element (i, j, h, s) read and written by its logical index.
struct StateBuffer {
    std::vector<float> data;
    gdn_tensor t{};

    StateBuffer(Layout layout, int64_t Sk, int64_t Sv, int64_t Hv, int64_t n) {
        t = contiguous(data, Sk, Sv, Hv, n);
        if (layout == Layout::ValueMajor) {
            t.nb[1] = sizeof(float);
            t.nb[0] = Sv * t.nb[1];
        }
    }
    float &at(int64_t i, int64_t j, int64_t h, int64_t s) {
        return *reinterpret_cast<float *>(static_cast<char *>(t.data) + i * t.nb[0] + j * t.nb[1] + h * t.nb[2] +
                                          s * t.nb[3]);
    }
    // The elements in logical (key-major) order.
    std::vector<float> logical() {
        std::vector<float> out;
        for (int64_t s = 0; s < t.ne[3]; ++s)
            for (int64_t h = 0; h < t.ne[2]; ++h)
                for (int64_t j = 0; j < t.ne[1]; ++j)
                    for (int64_t i = 0; i < t.ne[0]; ++i) out.push_back(at(i, j, h, s));
        return out;
    }
    void set_logical(const std::vector<float> &values) {
        size_t n = 0;
        for (int64_t s = 0; s < t.ne[3]; ++s)
            for (int64_t h = 0; h < t.ne[2]; ++h)
                for (int64_t j = 0; j < t.ne[1]; ++j)
                    for (int64_t i = 0; i < t.ne[0]; ++i) at(i, j, h, s) = values[n++];
    }
};

struct Shape {
    int64_t Sk, Sv, Hk, Hv, T, B, K;
    bool kda;
    std::string label() const {
        return "Sk=" + std::to_string(Sk) + " Sv=" + std::to_string(Sv) + " T=" + std::to_string(T) +
               " B=" + std::to_string(B) + " K=" + std::to_string(K) + (kda ? " KDA" : " GDA");
    }
};

// One call's inputs, filled once; every run below reads them.
struct Inputs {
    Shape s;
    std::vector<float> q, k, v, g, beta, s0, d_out, d_states;
    gdn_problem p{};

    explicit Inputs(const Shape &shape) : s(shape) {
        p.q = contiguous(q, s.Sk, s.Hk, s.T, s.B);
        p.k = contiguous(k, s.Sk, s.Hk, s.T, s.B);
        p.v = contiguous(v, s.Sv, s.Hv, s.T, s.B);
        p.g = contiguous(g, s.kda ? s.Sk : 1, s.Hv, s.T, s.B);
        p.beta = contiguous(beta, 1, s.Hv, s.T, s.B);
        p.state = contiguous(s0, s.Sk, s.Sv, s.Hv, s.B);
        contiguous(d_out, s.Sv, s.Hv, s.T, s.B);
        contiguous(d_states, s.Sk, s.Sv, s.Hv, s.B * s.K);
        fill(q, -0.3f, 0.3f, 1);
        fill(k, -0.3f, 0.3f, 2);
        fill(v, -1, 1, 3);
        fill(g, -0.4f, -0.01f, 4);
        fill(beta, 0, 1, 5);
        fill(s0, -1, 1, 6);
        fill(d_out, -1, 1, 7);
        fill(d_states, -1, 1, 8);
    }
};

struct CpuContext {
    gdn_context *ctx = nullptr;
    CpuContext(int threads, int chunk) {
        gdn_context_params params = gdn_context_default_params();
        params.n_threads = threads;
        params.chunk_size = chunk;
        EXPECT_EQ(gdn_context_create("cpu", &params, &ctx), GDN_OK);
    }
    ~CpuContext() { gdn_context_free(ctx); }
};

// How a run lays out its state tensors: s0 and the written states (forward), or s0, d_states and
// ds0 (backward); in_place: the forward writes its final states over s0.
struct Layouts {
    Layout s0, written, d_states = Layout::KeyMajor;
    bool in_place = false;
};

// The forward's out and states (logical order), one vector after the other.
std::vector<float> forward(const Inputs &in, Layouts layouts, int threads, int chunk) {
    const Shape &s = in.s;
    std::vector<float> out;
    const gdn_tensor out_t = contiguous(out, s.Sv, s.Hv, s.T, s.B);
    StateBuffer s0(layouts.s0, s.Sk, s.Sv, s.Hv, s.B), states(layouts.written, s.Sk, s.Sv, s.Hv, s.B * s.K);
    s0.set_logical(in.s0);
    std::fill(states.data.begin(), states.data.end(), -7.0f);
    gdn_problem p = in.p;
    p.state = s0.t;
    CpuContext cpu(threads, chunk);
    EXPECT_EQ(gdn_forward(cpu.ctx, &p, &out_t, layouts.in_place ? &p.state : &states.t), GDN_OK)
        << gdn_last_error(cpu.ctx);
    std::vector<float> all = out, final_states = layouts.in_place ? s0.logical() : states.logical();
    all.insert(all.end(), final_states.begin(), final_states.end());
    return all;
}

// Every gradient (logical order), one after the other.
std::vector<float> backward(const Inputs &in, Layouts layouts, int threads, int chunk) {
    const Shape &s = in.s;
    StateBuffer s0(layouts.s0, s.Sk, s.Sv, s.Hv, s.B), ds0(layouts.written, s.Sk, s.Sv, s.Hv, s.B);
    StateBuffer d_states(layouts.d_states, s.Sk, s.Sv, s.Hv, s.B * s.K);
    s0.set_logical(in.s0);
    d_states.set_logical(in.d_states);
    std::vector<float> dq, dk, dv, dg, dbeta, d_out = in.d_out;
    gdn_grads grads{};
    grads.q = contiguous(dq, s.Sk, s.Hk, s.T, s.B);
    grads.k = contiguous(dk, s.Sk, s.Hk, s.T, s.B);
    grads.v = contiguous(dv, s.Sv, s.Hv, s.T, s.B);
    grads.g = contiguous(dg, s.kda ? s.Sk : 1, s.Hv, s.T, s.B);
    grads.beta = contiguous(dbeta, 1, s.Hv, s.T, s.B);
    grads.state = ds0.t;
    const gdn_tensor d_out_t = contiguous(d_out, s.Sv, s.Hv, s.T, s.B);
    gdn_problem p = in.p;
    p.state = s0.t;
    CpuContext cpu(threads, chunk);
    EXPECT_EQ(gdn_backward(cpu.ctx, &p, &d_out_t, &d_states.t, &grads), GDN_OK) << gdn_last_error(cpu.ctx);
    std::vector<float> all;
    for (const std::vector<float> *g : {&dq, &dk, &dv, &dg, &dbeta}) all.insert(all.end(), g->begin(), g->end());
    const std::vector<float> d = ds0.logical();
    all.insert(all.end(), d.begin(), d.end());
    return all;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Head sizes: the model's 128; Sk != Sv both ways, with a partial value strip (Sv = 40, 20) and
// padded key rows (Sk = 20, 13); tiny heads.
std::vector<Shape> shapes(int64_t T) {
    std::vector<Shape> out;
    for (bool kda : {false, true}) {
        out.push_back({128, 128, 2, 4, T, 1, 1, kda});
        out.push_back({32, 40, 1, 2, T, 2, 1, kda});
        out.push_back({20, 64, 1, 2, T, 1, 2, kda});
        out.push_back({13, 20, 2, 2, T, 1, 1, kda});
        out.push_back({1, 3, 1, 1, T, 1, 1, kda});
    }
    return out;
}

const int64_t kTokenCounts[] = {1, 2, 4, 16, 17, 100};

TEST(CpuStateLayouts, ForwardSameBitsInEveryLayoutInPlaceAndMixed) {
    for (int64_t T : kTokenCounts)
        for (const Shape &s : shapes(T))
            for (int chunk : {0, 1, 16}) {
                SCOPED_TRACE(s.label() + " chunk_size=" + std::to_string(chunk));
                const Inputs in(s);
                const std::vector<float> key_major = forward(in, {Layout::KeyMajor, Layout::KeyMajor}, 1, chunk);
                EXPECT_TRUE(same_bits(key_major, forward(in, {Layout::ValueMajor, Layout::ValueMajor}, 1, chunk)));
                EXPECT_TRUE(same_bits(key_major, forward(in, {Layout::ValueMajor, Layout::KeyMajor}, 1, chunk)));
                EXPECT_TRUE(same_bits(key_major, forward(in, {Layout::KeyMajor, Layout::ValueMajor}, 1, chunk)));
                if (s.K == 1) {
                    for (Layout l : {Layout::KeyMajor, Layout::ValueMajor}) {
                        Layouts in_place{l, l};
                        in_place.in_place = true;
                        EXPECT_TRUE(same_bits(key_major, forward(in, in_place, 1, chunk)));
                    }
                }
                for (int threads : {2, 3})
                    EXPECT_TRUE(same_bits(key_major, forward(in, {Layout::ValueMajor, Layout::ValueMajor}, threads, chunk)))
                        << threads << " threads";
            }
}

TEST(CpuStateLayouts, BackwardSameBitsInEveryLayoutAndMixed) {
    for (int64_t T : kTokenCounts)
        for (const Shape &s : shapes(T))
            for (int chunk : {0, 1, 16}) {
                SCOPED_TRACE(s.label() + " chunk_size=" + std::to_string(chunk));
                const Inputs in(s);
                const auto key_major = backward(in, {Layout::KeyMajor, Layout::KeyMajor, Layout::KeyMajor}, 1, chunk);
                const auto V = Layout::ValueMajor, Km = Layout::KeyMajor;
                EXPECT_TRUE(same_bits(key_major, backward(in, {V, V, V}, 1, chunk)));
                EXPECT_TRUE(same_bits(key_major, backward(in, {V, Km, V}, 1, chunk)));
                EXPECT_TRUE(same_bits(key_major, backward(in, {Km, V, Km}, 1, chunk)));
                for (int threads : {2, 3})
                    EXPECT_TRUE(same_bits(key_major, backward(in, {V, V, V}, threads, chunk))) << threads << " threads";
            }
}

// Values that are not ordinary numbers take the same paths in both layouts: a -inf gate (a
// decay of zero), a zero beta, a zero key row, an infinite value and a NaN in q, at head sizes
// with padded key rows, per-token and chunked.
TEST(CpuStateLayouts, SpecialValuesSameBitsInEveryLayout) {
    for (int64_t T : {1, 3, 20})
        for (bool kda : {false, true})
            for (int chunk : {0, 1}) {
                const Shape s{13, 20, 1, 2, T, 1, 1, kda};
                SCOPED_TRACE(s.label() + " chunk_size=" + std::to_string(chunk));
                Inputs in(s);
                const int64_t t = T - 1;  // the planted token
                in.g[static_cast<size_t>(t * s.Hv * (kda ? s.Sk : 1))] = -INFINITY;
                in.beta[static_cast<size_t>(t * s.Hv + 1)] = 0.0f;
                std::fill_n(in.k.begin() + t * s.Hk * s.Sk, s.Sk, 0.0f);
                in.v[static_cast<size_t>(t * s.Hv * s.Sv + 3)] = INFINITY;
                in.q[static_cast<size_t>(t * s.Hk * s.Sk + 2)] = NAN;
                const auto key_major = forward(in, {Layout::KeyMajor, Layout::KeyMajor}, 1, chunk);
                EXPECT_TRUE(same_bits(key_major, forward(in, {Layout::ValueMajor, Layout::ValueMajor}, 1, chunk)));
            }
}

// A value-major pool updated in place (the serving case: one call per sequence inside), with a
// padding entry (-1): the same bits for 1, 2 and 3 threads, decoding and a short prefill, and
// slots no sequence names left as they were.
TEST(CpuStateLayouts, PoolInPlaceSameBitsForEveryThreadCount) {
    for (int64_t T : {1, 5}) {
        const Shape s{64, 32, 2, 4, T, 4, 1, false};
        SCOPED_TRACE(s.label());
        const Inputs in(s);
        const int64_t slots = 7;
        std::vector<int32_t> indices = {5, -1, 0, 3};
        std::vector<float> first_out;
        std::vector<float> first_pool;
        for (int threads : {1, 2, 3}) {
            StateBuffer pool(Layout::ValueMajor, s.Sk, s.Sv, s.Hv, slots);
            std::vector<float> values(pool.data.size());
            fill(values, -1, 1, 9);
            pool.set_logical(values);
            std::vector<float> out;
            const gdn_tensor out_t = contiguous(out, s.Sv, s.Hv, s.T, s.B);
            gdn_problem p = in.p;
            p.state = pool.t;
            p.state_indices = {indices.data(), GDN_TYPE_I32, {s.B, 1, 1, 1}, {4, 4 * s.B, 4 * s.B, 4 * s.B}};
            CpuContext cpu(threads, 0);
            // Shares do not split a pooled call (one call per sequence inside): refused, nothing written.
            EXPECT_EQ(gdn_forward_share(cpu.ctx, &p, &out_t, &p.state, 0, 2), GDN_ERROR_UNSUPPORTED);
            EXPECT_TRUE(same_bits(pool.logical(), values));
            ASSERT_EQ(gdn_forward(cpu.ctx, &p, &out_t, &p.state), GDN_OK) << gdn_last_error(cpu.ctx);
            const std::vector<float> after = pool.logical();
            const int64_t area = s.Sk * s.Sv * s.Hv;
            for (int64_t slot : {1, 2, 4, 6})  // named by no sequence
                EXPECT_TRUE(std::equal(after.begin() + slot * area, after.begin() + (slot + 1) * area,
                                       values.begin() + slot * area))
                    << "slot " << slot;
            EXPECT_FALSE(std::equal(after.begin() + 5 * area, after.begin() + 6 * area, values.begin() + 5 * area));
            if (threads == 1) {
                first_out = out;
                first_pool = after;
            } else {
                EXPECT_TRUE(same_bits(first_out, out)) << threads << " threads";
                EXPECT_TRUE(same_bits(first_pool, after)) << threads << " threads";
            }
        }
    }
}

}  // namespace
