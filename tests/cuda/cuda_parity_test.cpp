// The cuda backend against ref on many shapes: every output of the forward and every gradient
// of the backward, compared by NMSE; and the same bits on a second run.
#include <algorithm>
#include <cstring>
#include <utility>

#include "cuda_fixture.h"

namespace gdn_cuda_test {
namespace {

// F32 per-token arithmetic against ref's double accumulation: relative RMS errors of about
// 1e-6 are expected (NMSE ~ 1e-12); any real fault gives NMSE near 1.
constexpr double kForwardNmse = 1e-10;  // the limits of tools/testkit/thresholds.cpp
constexpr double kBackwardNmse = 1e-9;

Case make_case(int Sk, int Sv, int Hk, int Hv, int64_t T, int B, int Bq, int K) {
    Case c;
    c.Sk = Sk, c.Sv = Sv, c.Hk = Hk, c.Hv = Hv, c.T = T, c.B = B, c.Bq = Bq, c.K = K;
    return c;
}

std::vector<Case> cases() {
    std::vector<Case> v;
    v.push_back(make_case(16, 16, 1, 2, 1, 1, 1, 1));  // decoding
    {
        Case c = make_case(32, 64, 2, 4, 37, 2, 1, 3);
        c.per_channel = true, c.grouped = true, c.seed = 2;
        v.push_back(c);
    }
    {
        Case c = make_case(64, 32, 1, 3, 20, 3, 3, 2);
        c.with_s0 = false, c.seed = 3;
        v.push_back(c);
    }
    {
        Case c = make_case(128, 128, 2, 6, 130, 2, 2, 1);
        c.packed_qkv = true, c.g_lo = -5.0f, c.g_hi = -1e-4f, c.seed = 4;
        v.push_back(c);
    }
    {
        Case c = make_case(256, 256, 1, 2, 20, 1, 1, 1);
        c.seed = 5;
        v.push_back(c);
    }
    {
        Case c = make_case(48, 80, 2, 2, 9, 2, 1, 2);  // head sizes that are not powers of two
        c.per_channel = true, c.g_lo = -0.5f, c.g_hi = 0.3f, c.seed = 6;
        v.push_back(c);
    }
    {
        Case c = make_case(128, 256, 1, 2, 5, 1, 1, 8);  // T < K: slots 5..7 neither written nor read
        c.per_channel = true, c.seed = 7;
        v.push_back(c);
    }
    {
        Case c = make_case(16, 200, 1, 1, 12, 1, 1, 1);  // several column slices per unit
        c.seed = 8;
        v.push_back(c);
    }
    {
        Case c = make_case(64, 64, 1, 2, 300, 1, 1, 1);  // no decay, partial last segment
        c.g_lo = 0.0f, c.g_hi = 0.0f, c.seed = 9;
        v.push_back(c);
    }
    {
        Case c = make_case(128, 128, 16, 48, 64, 1, 1, 1);  // Qwen3.5-27B heads, packed
        c.packed_qkv = true, c.seed = 10;
        v.push_back(c);
    }
    return v;
}

class CudaParity : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override { GDN_SKIP_WITHOUT_CUDA(); }
};

struct ForwardResult {
    Tensor out, states;
};

ForwardResult run_forward(gdn_context *ctx, const Problem &p, bool device) {
    const Case &c = p.c;
    ForwardResult r{make_padded_tensor(c.Sv, c.Hv, c.T, c.B, -7.0f), make_tensor(c.Sk, c.Sv, c.Hv, int64_t(c.B) * c.K, -7.0f)};
    const gdn_problem prob = device ? p.device() : p.host();
    const gdn_status s = gdn_forward(ctx, &prob, device ? &r.out.device : &r.out.host, device ? &r.states.device : &r.states.host);
    EXPECT_EQ(s, GDN_OK) << gdn_last_error(ctx);
    if (device) {
        r.out.buffer->download();
        r.states.buffer->download();
    }
    return r;
}

TEST_P(CudaParity, ForwardMatchesRef) {
    const Problem p = make_problem(GetParam());
    Context ref = make_context("ref");
    const ForwardResult want = run_forward(ref.get(), p, false);
    // The kernel the backend picks (chunked on tensor cores from T = 64 where it applies), then
    // the per-token kernel forced (chunk_size = 1).
    for (int chunk_size : {0, 1}) {
        SCOPED_TRACE(chunk_size == 1 ? "per-token kernel" : "default kernel");
        Context gpu = make_context("cuda", nullptr, chunk_size);
        const ForwardResult got = run_forward(gpu.get(), p, true);
        EXPECT_LT(nmse(got.out.host, want.out.host), kForwardNmse) << "out of " << GetParam().name();
        EXPECT_LT(nmse(got.states.host, want.states.host), kForwardNmse) << "states of " << GetParam().name();
        // Unwritten slots (T < K) and the padding of out keep their fill.
        for (size_t n = 0; n < got.out.buffer->host.size(); ++n)
            if ((n % (GetParam().Sv + 1)) == size_t(GetParam().Sv)) ASSERT_EQ(got.out.buffer->host[n], -7.0f) << "padding of out written at " << n;
        const int64_t written = std::min<int64_t>(GetParam().K, GetParam().T), area = int64_t(GetParam().Sk) * GetParam().Sv * GetParam().Hv;
        for (int64_t n = written * GetParam().B * area; n < int64_t(got.states.buffer->host.size()); ++n)
            ASSERT_EQ(got.states.buffer->host[n], -7.0f) << "unwritten snapshot slot changed at " << n;
    }
}

struct BackwardResult {
    Tensor dq, dk, dv, dg, dbeta, ds0;
};

// Gradients of L = sum(d_out * o) + sum over slots of sum(d_states * state), every one wanted.
BackwardResult run_backward(gdn_context *ctx, const Problem &p, const Tensor &d_out, const Tensor &d_states, bool device) {
    const Case &c = p.c;
    BackwardResult r{make_tensor(c.Sk, c.Hk, c.T, c.Bq, -7.0f), make_padded_tensor(c.Sk, c.Hk, c.T, c.Bq, -7.0f),
                     make_tensor(c.Sv, c.Hv, c.T, c.B, -7.0f),  make_tensor(c.per_channel ? c.Sk : 1, c.Hv, c.T, c.B, -7.0f),
                     make_tensor(1, c.Hv, c.T, c.B, -7.0f),     make_tensor(c.Sk, c.Sv, c.Hv, c.B, -7.0f)};
    auto pick = [&](const Tensor &t) { return device ? t.device : t.host; };
    gdn_grads grads{pick(r.dq), pick(r.dk), pick(r.dv), pick(r.dg), pick(r.dbeta), c.with_s0 ? pick(r.ds0) : gdn_tensor{}};
    const gdn_problem prob = device ? p.device() : p.host();
    const gdn_tensor dO = pick(d_out), dS = pick(d_states);
    const gdn_status s = gdn_backward(ctx, &prob, &dO, &dS, &grads);
    EXPECT_EQ(s, GDN_OK) << gdn_last_error(ctx);
    if (device)
        for (Tensor *t : {&r.dq, &r.dk, &r.dv, &r.dg, &r.dbeta, &r.ds0}) t->buffer->download();
    return r;
}

struct Seeds {
    Tensor d_out, d_states;
};

Seeds make_seeds(const Case &c) {
    Seeds s{make_tensor(c.Sv, c.Hv, c.T, c.B), make_tensor(c.Sk, c.Sv, c.Hv, int64_t(c.B) * c.K)};
    uint32_t x = c.seed * 2654435761u + 12345u;
    auto next = [&]() {
        x = x * 1664525u + 1013904223u;
        return static_cast<float>(x >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
    };
    for (float &f : s.d_out.buffer->host) f = next();
    for (float &f : s.d_states.buffer->host) f = next();
    s.d_out.buffer->upload();
    s.d_states.buffer->upload();
    return s;
}

TEST_P(CudaParity, BackwardMatchesRef) {
    const Case c = GetParam();
    const Problem p = make_problem(c);
    const Seeds seeds = make_seeds(c);
    Context ref = make_context("ref");
    const BackwardResult want = run_backward(ref.get(), p, seeds.d_out, seeds.d_states, false);
    // The kernels the backend picks (chunked from T = 64 where they apply), then per-token forced.
    for (int chunk_size : {0, 1}) {
        SCOPED_TRACE(chunk_size == 1 ? "per-token kernels" : "default kernels");
        Context gpu = make_context("cuda", nullptr, chunk_size);
        const BackwardResult got = run_backward(gpu.get(), p, seeds.d_out, seeds.d_states, true);
        EXPECT_LT(nmse(got.dq.host, want.dq.host), kBackwardNmse) << "dq of " << c.name();
        EXPECT_LT(nmse(got.dk.host, want.dk.host), kBackwardNmse) << "dk of " << c.name();
        EXPECT_LT(nmse(got.dv.host, want.dv.host), kBackwardNmse) << "dv of " << c.name();
        EXPECT_LT(nmse(got.dg.host, want.dg.host), kBackwardNmse) << "dg of " << c.name();
        EXPECT_LT(nmse(got.dbeta.host, want.dbeta.host), kBackwardNmse) << "dbeta of " << c.name();
        if (c.with_s0) EXPECT_LT(nmse(got.ds0.host, want.ds0.host), kBackwardNmse) << "ds0 of " << c.name();
    }
}

TEST_P(CudaParity, BackwardWithoutIncomingStateGradient) {
    const Case c = GetParam();
    const Problem p = make_problem(c);
    const Seeds seeds = make_seeds(c);
    Context ref = make_context("ref"), gpu = make_context("cuda");
    // d_states NULL (zero, K = 1): only the output's gradient flows.
    auto run = [&](gdn_context *ctx, bool device) {
        Tensor dv = make_tensor(c.Sv, c.Hv, c.T, c.B), dk = make_tensor(c.Sk, c.Hk, c.T, c.Bq);
        gdn_grads grads{};
        grads.v = device ? dv.device : dv.host;
        grads.k = device ? dk.device : dk.host;
        const gdn_problem prob = device ? p.device() : p.host();
        const gdn_tensor dO = device ? seeds.d_out.device : seeds.d_out.host;
        EXPECT_EQ(gdn_backward(ctx, &prob, &dO, nullptr, &grads), GDN_OK) << gdn_last_error(ctx);
        if (device) {
            dv.buffer->download();
            dk.buffer->download();
        }
        return std::make_pair(dv, dk);
    };
    const auto want = run(ref.get(), false);
    const auto got = run(gpu.get(), true);
    EXPECT_LT(nmse(got.first.host, want.first.host), kBackwardNmse) << "dv of " << c.name();
    EXPECT_LT(nmse(got.second.host, want.second.host), kBackwardNmse) << "dk of " << c.name();
}

TEST_P(CudaParity, SameBitsEveryRun) {
    const Case c = GetParam();
    const Problem p = make_problem(c);
    const Seeds seeds = make_seeds(c);
    Context gpu = make_context("cuda");
    const ForwardResult f1 = run_forward(gpu.get(), p, true), f2 = run_forward(gpu.get(), p, true);
    EXPECT_EQ(f1.out.buffer->host, f2.out.buffer->host);
    EXPECT_EQ(f1.states.buffer->host, f2.states.buffer->host);
    const BackwardResult b1 = run_backward(gpu.get(), p, seeds.d_out, seeds.d_states, true);
    const BackwardResult b2 = run_backward(gpu.get(), p, seeds.d_out, seeds.d_states, true);
    auto same_bits = [](const Tensor &a, const Tensor &b) {
        return a.buffer->host.size() == b.buffer->host.size() &&
               std::memcmp(a.buffer->host.data(), b.buffer->host.data(), a.buffer->host.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same_bits(b1.dq, b2.dq));
    EXPECT_TRUE(same_bits(b1.dk, b2.dk));
    EXPECT_TRUE(same_bits(b1.dv, b2.dv));
    EXPECT_TRUE(same_bits(b1.dg, b2.dg));
    EXPECT_TRUE(same_bits(b1.dbeta, b2.dbeta));
    EXPECT_TRUE(same_bits(b1.ds0, b2.ds0));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaParity, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace gdn_cuda_test
