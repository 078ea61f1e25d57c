// What the emulated kernel tests share: host tensors, problem shapes and random inputs, the
// ref context and the metric. Include after fake_cuda.h and the kernel headers.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cuda/device_views.h"
#include "cuda/plans.h"
#include "gdn/gdn.h"

namespace gdn_emulation {

using gdn::cuda::Sizes;
using gdn::cuda::View;

struct HostTensor {
    std::vector<float> data;
    gdn_tensor t{};

    HostTensor() = default;
    HostTensor(int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, float fill = 0.0f, int64_t pad = 0) {
        const int64_t row = ne0 + pad;
        data.assign(static_cast<size_t>(row * ne1 * ne2 * ne3), fill);
        t.data = data.data();
        t.type = GDN_TYPE_F32;
        const int64_t ne[4] = {ne0, ne1, ne2, ne3};
        const int64_t nb[4] = {4, 4 * row, 4 * row * ne1, 4 * row * ne1 * ne2};
        std::memcpy(t.ne, ne, sizeof ne);
        std::memcpy(t.nb, nb, sizeof nb);
    }
    HostTensor(const HostTensor &o) : data(o.data), t(o.t) { t.data = data.empty() ? nullptr : data.data(); }
    HostTensor &operator=(const HostTensor &o) {
        data = o.data;
        t = o.t;
        t.data = data.empty() ? nullptr : data.data();
        return *this;
    }
    View view() const {
        if (data.empty()) return View{};
        return View{const_cast<float *>(data.data()), t.nb[1] / 4, t.nb[2] / 4, t.nb[3] / 4, t.nb[0] / 4};
    }
};

// Element (i0, i1, i2, i3) of a host tensor, by its strides.
inline float &element(HostTensor &x, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return x.data[static_cast<size_t>((i0 * x.t.nb[0] + i1 * x.t.nb[1] + i2 * x.t.nb[2] + i3 * x.t.nb[3]) / 4)];
}

// Calls fn(i0, i1, i2, i3) for every element of a tensor of x's shape.
template <class Fn>
void for_each_index(const HostTensor &x, Fn fn) {
    for (int64_t i3 = 0; i3 < x.t.ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < x.t.ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < x.t.ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < x.t.ne[0]; ++i0) fn(i0, i1, i2, i3);
}

// A state tensor [Sk, Sv, Hv, N] laid out value-major (nb[1] = 4: PyTorch's [..., K, V]), each
// row of Sv values followed by `pad` floats of `fill`; holding the values of `x` (any layout).
inline HostTensor value_major(HostTensor x, int64_t pad = 1, float fill = -7.0f) {
    if (x.data.empty()) return x;
    const int64_t Sk = x.t.ne[0], Sv = x.t.ne[1], Hv = x.t.ne[2], N = x.t.ne[3], row = Sv + pad;
    HostTensor v(Sk * row, 1, Hv, N, fill);  // the bytes; shape and strides set below
    const int64_t ne[4] = {Sk, Sv, Hv, N};
    const int64_t nb[4] = {4 * row, 4, 4 * row * Sk, 4 * row * Sk * Hv};
    std::memcpy(v.t.ne, ne, sizeof ne);
    std::memcpy(v.t.nb, nb, sizeof nb);
    for_each_index(x, [&](int64_t i, int64_t j, int64_t h, int64_t n) { element(v, i, j, h, n) = element(x, i, j, h, n); });
    return v;
}

// x's values in a contiguous key-major tensor (to compare with one of that layout).
inline HostTensor key_major(HostTensor x) {
    if (x.data.empty()) return x;
    HostTensor k(x.t.ne[0], x.t.ne[1], x.t.ne[2], x.t.ne[3]);
    for_each_index(x, [&](int64_t i, int64_t j, int64_t h, int64_t n) { element(k, i, j, h, n) = element(x, i, j, h, n); });
    return k;
}

struct Shape {
    int Sk, Sv, Hk, Hv;
    int64_t T;
    int B, Bq, K;
    bool kda, grouped, s0;
    bool extremes = false;  // g = -120 every third token, mixed-sign KDA gates, beta in {0, 1}
};

inline void PrintTo(const Shape &s, std::ostream *os) {
    *os << "Sk=" << s.Sk << ",Sv=" << s.Sv << ",Hk=" << s.Hk << ",Hv=" << s.Hv << ",T=" << s.T << ",B=" << s.B << ",Bq=" << s.Bq
        << ",K=" << s.K << (s.kda ? ",kda" : ",gda") << (s.grouped ? ",grouped" : ",tiled") << (s.s0 ? ",s0" : "")
        << (s.extremes ? ",extremes" : "");
}

struct Inputs {
    Shape s;
    HostTensor q, k, v, g, beta, s0;
    gdn_problem problem() const {
        gdn_problem p{};
        p.q = q.t, p.k = k.t, p.v = v.t, p.g = g.t, p.beta = beta.t;
        if (s.s0) p.state = s0.t;
        p.head_map = s.grouped ? GDN_HEAD_MAP_GROUPED : GDN_HEAD_MAP_TILED;
        return p;
    }
    Sizes sizes() const {
        Sizes n;
        n.Sk = s.Sk, n.Sv = s.Sv, n.Hk = s.Hk, n.Hv = s.Hv, n.B = s.B, n.Bq = s.Bq, n.K = s.K;
        n.gate_width = s.kda ? s.Sk : 1;
        n.grouped = s.grouped;
        n.T = s.T;
        n.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.Sk)));
        return n;
    }
};

inline Inputs make_inputs(const Shape &s, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f), gate(-0.4f, -0.01f), b01(0.0f, 1.0f);
    Inputs in{s,
              HostTensor(s.Sk, s.Hk, s.T, s.Bq),
              HostTensor(s.Sk, s.Hk, s.T, s.Bq, 0.0f, 3),  // padded rows: strides that are not sizes
              HostTensor(s.Sv, s.Hv, s.T, s.B),
              HostTensor(s.kda ? s.Sk : 1, s.Hv, s.T, s.B),
              HostTensor(1, s.Hv, s.T, s.B),
              s.s0 ? HostTensor(s.Sk, s.Sv, s.Hv, s.B) : HostTensor()};
    for (float &x : in.q.data) x = unit(rng);
    for (float &x : in.k.data) x = 0.3f * unit(rng);
    for (float &x : in.v.data) x = unit(rng);
    for (float &x : in.g.data) x = gate(rng);
    for (float &x : in.beta.data) x = b01(rng);
    if (s.extremes) {
        std::uniform_real_distribution<float> mixed(-0.5f, 0.3f);
        const int64_t gw = s.kda ? s.Sk : 1;
        for (size_t i = 0; i < in.g.data.size(); ++i) {
            const int64_t t = static_cast<int64_t>(i) / (gw * s.Hv) % s.T;  // g is [gw, Hv, T, B], contiguous
            in.g.data[i] = t % 3 == 1 ? -120.0f : s.kda ? mixed(rng) : in.g.data[i];
        }
        for (size_t i = 0; i < in.beta.data.size(); ++i) in.beta.data[i] = static_cast<float>(i % 2);
    }
    for (float &x : in.s0.data) x = 0.5f * unit(rng);
    return in;
}

inline double nmse(const std::vector<float> &a, const std::vector<float> &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return den > 0 ? num / den : num;
}

// Runs a launch sequence (run_* of the kernel headers) on CPU threads, kernel after kernel,
// block after block, with the test's shared-memory array; checks what the emulation would
// otherwise let pass (a block size the GPU refuses, shared memory used past what the launch
// asked for); counts the launches.
struct EmulatedLauncher {
    float *shared;            // the test's `shared` array
    size_t shared_capacity;   // its bytes
    int *launches = nullptr;  // incremented per launch when set

    template <class... Params, class... Args>
    cudaError_t operator()(void (*kernel)(Params...), const gdn::cuda::LaunchShape &shape, const Args &...args) const {
        if (shape.threads < 32 || shape.threads > 1024 || shape.threads % 32 != 0 || shape.x < 1 || shape.y < 1 || shape.z < 1 ||
            shape.y > 65535 || shape.z > 65535) {
            ADD_FAILURE() << "a launch of " << shape.x << "x" << shape.y << "x" << shape.z << " blocks of " << shape.threads
                          << " threads, which a GPU refuses";
            return cudaErrorInvalidValue;
        }
        if (shape.shared_bytes > shared_capacity) {
            ADD_FAILURE() << "a launch asks for " << shape.shared_bytes << " bytes of shared memory; the emulation has "
                          << shared_capacity;
            return cudaErrorInvalidValue;
        }
        if (launches != nullptr) ++*launches;
        // Poison the shared memory past the launch's size; any write there is a kernel using
        // more than it asked for.
        const size_t used = shape.shared_bytes / sizeof(float), total = shared_capacity / sizeof(float);
        std::fill(shared + used, shared + total, kSentinel);
        fake_cuda::launch({unsigned(shape.x), unsigned(shape.y), unsigned(shape.z)}, shape.threads, [&] { kernel(args...); });
        for (size_t i = used; i < total; ++i)
            if (std::memcmp(&shared[i], &kSentinel, sizeof(float)) != 0) {
                ADD_FAILURE() << "a kernel wrote shared float " << i << ", past the " << shape.shared_bytes << " bytes it launched with";
                return cudaErrorInvalidValue;
            }
        return cudaSuccess;
    }

    static constexpr float kSentinel = -1.2345e-37f;
};

struct RefContext {
    gdn_context *ctx = nullptr;
    RefContext() { EXPECT_EQ(gdn_context_create("ref", nullptr, &ctx), GDN_OK); }
    ~RefContext() { gdn_context_free(ctx); }
};

// The gradients of one backward, filled with -7 (dk with padded rows).
struct Grads {
    HostTensor dq, dk, dv, dg, dbeta, ds0;
    explicit Grads(const Shape &s)
        : dq(s.Sk, s.Hk, s.T, s.Bq, -7.0f),
          dk(s.Sk, s.Hk, s.T, s.Bq, -7.0f, 2),
          dv(s.Sv, s.Hv, s.T, s.B, -7.0f),
          dg(s.kda ? s.Sk : 1, s.Hv, s.T, s.B, -7.0f),
          dbeta(1, s.Hv, s.T, s.B, -7.0f),
          ds0(s.Sk, s.Sv, s.Hv, s.B, -7.0f) {}
};

// A backward's inputs (random, `seed`), incoming gradients (`seed + 1`) and ref's gradients.
struct BackwardCase {
    Inputs in;
    HostTensor d_out, d_states;
    Grads want;

    BackwardCase(const Shape &s, uint32_t seed)
        : in(make_inputs(s, seed)), d_out(s.Sv, s.Hv, s.T, s.B), d_states(s.Sk, s.Sv, s.Hv, int64_t(s.B) * s.K), want(s) {
        std::mt19937 rng(seed + 1);
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        for (float &x : d_out.data) x = unit(rng);
        for (float &x : d_states.data) x = unit(rng);
        RefContext ref;
        const gdn_problem p = in.problem();
        gdn_grads grads{want.dq.t, want.dk.t, want.dv.t, want.dg.t, want.dbeta.t, want.ds0.t};
        EXPECT_EQ(gdn_backward(ref.ctx, &p, &d_out.t, &d_states.t, &grads), GDN_OK) << gdn_last_error(ref.ctx);
    }

    // What the cuda kernels receive, writing into `got`.
    gdn::cuda::BackwardViews views(Grads &got) const {
        return {in.q.view(),   in.k.view(),  in.v.view(),      in.g.view(),   in.beta.view(),
                in.s0.view(),  d_out.view(), d_states.view(),  got.dq.view(), got.dk.view(),
                got.dv.view(), got.dg.view(), got.dbeta.view(), got.ds0.view()};
    }
};

// Every gradient within the harness's backward limit of ref's (NMSE 1e-9).
inline void expect_near(const Grads &got, const Grads &want) {
    EXPECT_LT(nmse(got.dq.data, want.dq.data), 1e-9) << "dq";
    EXPECT_LT(nmse(got.dk.data, want.dk.data), 1e-9) << "dk";
    EXPECT_LT(nmse(got.dv.data, want.dv.data), 1e-9) << "dv";
    EXPECT_LT(nmse(got.dg.data, want.dg.data), 1e-9) << "dg";
    EXPECT_LT(nmse(got.dbeta.data, want.dbeta.data), 1e-9) << "dbeta";
    EXPECT_LT(nmse(got.ds0.data, want.ds0.data), 1e-9) << "ds0";
}

// Every gradient the same bits, padding included.
inline void expect_same_bits(const Grads &a, const Grads &b) {
    EXPECT_EQ(a.dq.data, b.dq.data);
    EXPECT_EQ(a.dk.data, b.dk.data);
    EXPECT_EQ(a.dv.data, b.dv.data);
    EXPECT_EQ(a.dg.data, b.dg.data);
    EXPECT_EQ(a.dbeta.data, b.dbeta.data);
    EXPECT_EQ(a.ds0.data, b.ds0.data);
}

}  // namespace gdn_emulation
