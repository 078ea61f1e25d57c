// The cuda kernels run on CPU threads (fake_cuda.h) against ref: their indexing, padding rows,
// column slices, warp and block reductions, checkpoints and snapshot slots are checked on
// every machine, GPU or not. Small shapes: each CUDA thread is an OS thread here.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "fake_cuda.h"
// The kernels, compiled by the host compiler.
#include "cuda/token_backward_kernel.cuh"
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/chunk_forward_kernel.cuh"
#include "cuda/token_forward_kernel.cuh"
#include "gdn/gdn.h"

namespace gdn::cuda {
namespace {  // the kernels' `extern __shared__ float shared[]`, in their (this file's) namespace
alignas(32) float shared[1 << 16];  // the block's dynamic shared memory (blocks run one at a time)
}  // namespace
}  // namespace gdn::cuda

namespace {

using namespace gdn::cuda;

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
        return View{const_cast<float *>(data.data()), t.nb[1] / 4, t.nb[2] / 4, t.nb[3] / 4};
    }
};

struct Shape {
    int Sk, Sv, Hk, Hv;
    int64_t T;
    int B, Bq, K;
    bool kda, grouped, s0;
    bool extremes = false;  // g = -120 every third token, mixed-sign KDA gates, beta in {0, 1}
};

void PrintTo(const Shape &s, std::ostream *os) {
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

Inputs make_inputs(const Shape &s, uint32_t seed) {
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

double nmse(const std::vector<float> &a, const std::vector<float> &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return den > 0 ? num / den : num;
}

struct RefContext {
    gdn_context *ctx = nullptr;
    RefContext() { EXPECT_EQ(gdn_context_create("ref", nullptr, &ctx), GDN_OK); }
    ~RefContext() { gdn_context_free(ctx); }
};

template <int V>
void emulate_forward(const ForwardViews &w, const Sizes &n) {
    const ForwardGrid g = token_forward_grid<V>(n);
    ASSERT_LE(g.shared_bytes, sizeof(gdn::cuda::shared));
    fake_cuda::launch({unsigned(g.x), unsigned(g.y), unsigned(g.z)}, g.threads, [&] { token_forward_kernel<V>(w, n); });
}

void emulate_forward_any(const ForwardViews &w, const Sizes &n) {
    switch (forward_groups(n.Sk)) {
        case 1: return emulate_forward<1>(w, n);
        case 2: return emulate_forward<2>(w, n);
        case 4: return emulate_forward<4>(w, n);
        case 8: return emulate_forward<8>(w, n);
        default: return emulate_forward<16>(w, n);
    }
}

template <int R>
void emulate_backward(const BackwardViews &w, const Sizes &n, const TokenBackwardPlan &plan, const BackwardWorkspace &ws) {
    ASSERT_LE(plan.shared_bytes, sizeof(gdn::cuda::shared));
    fake_cuda::launch({unsigned(plan.slices), unsigned(n.Hv), unsigned(n.B)}, BackwardShape<R>::warps * 32,
                      [&] { token_backward_kernel<R>(w, n, ws); });
}

void emulate_backward_any(const BackwardViews &w, const Sizes &n, std::vector<float> &workspace) {
    // Small shared-memory budgets so that segments split into sub-segments: one token each at
    // 16 KiB; at Sk > 128, 60 KiB gives two tokens each, the last sub-segment shorter.
    const TokenBackwardPlan plan = make_token_backward_plan(n, (n.Sk > 128 ? 60 : 16) * 1024);
    workspace.assign(plan.bytes / sizeof(float) + 1, std::nanf(""));  // poisoned: every read must follow a write
    const BackwardWorkspace ws = workspace_of(plan, workspace.data());
    emulate_forward_any(checkpoint_views(w, ws), n);
    switch (rows_per_lane(n.Sk)) {
        case 1: emulate_backward<1>(w, n, plan, ws); break;
        case 2: emulate_backward<2>(w, n, plan, ws); break;
        case 4: emulate_backward<4>(w, n, plan, ws); break;
        default: emulate_backward<8>(w, n, plan, ws); break;
    }
    if (w.dq.present() || w.dk.present())
        fake_cuda::launch({unsigned(reduce_blocks(key_grad_count(n))), 1, 1}, 256, [&] { reduce_key_grads_kernel(w, n, ws, plan.slices); });
    if (w.dg.present() || w.dbeta.present())
        fake_cuda::launch({unsigned(reduce_blocks(gate_grad_count(n))), 1, 1}, 256,
                          [&] { reduce_gate_grads_kernel(w, n, ws, plan.slices); });
}

class Emulated : public ::testing::TestWithParam<Shape> {};
class EmulatedBackward : public ::testing::TestWithParam<Shape> {};

TEST_P(Emulated, ForwardMatchesRef) {
    const Shape s = GetParam();
    const Inputs in = make_inputs(s, 11);
    HostTensor want_out(s.Sv, s.Hv, s.T, s.B, -7.0f, 1), want_states(s.Sk, s.Sv, s.Hv, int64_t(s.B) * s.K, -7.0f);
    RefContext ref;
    const gdn_problem p = in.problem();
    ASSERT_EQ(gdn_forward(ref.ctx, &p, &want_out.t, &want_states.t), GDN_OK) << gdn_last_error(ref.ctx);

    HostTensor out(s.Sv, s.Hv, s.T, s.B, -7.0f, 1), states(s.Sk, s.Sv, s.Hv, int64_t(s.B) * s.K, -7.0f);
    ForwardViews w{in.q.view(), in.k.view(), in.v.view(), in.g.view(), in.beta.view(), in.s0.view(), out.view(), states.view()};
    emulate_forward_any(w, in.sizes());
    EXPECT_LT(nmse(out.data, want_out.data), 1e-9);
    EXPECT_LT(nmse(states.data, want_states.data), 1e-9);
    // Padding of out and unwritten slots (T < K) keep their fill, as in ref.
    for (size_t i = 0; i < out.data.size(); ++i)
        if (want_out.data[i] == -7.0f) EXPECT_EQ(out.data[i], -7.0f) << i;
    for (size_t i = 0; i < states.data.size(); ++i)
        if (want_states.data[i] == -7.0f) EXPECT_EQ(states.data[i], -7.0f) << i;
}

TEST_P(EmulatedBackward, MatchesRef) {
    const Shape s = GetParam();
    const Inputs in = make_inputs(s, 12);
    HostTensor d_out(s.Sv, s.Hv, s.T, s.B), d_states(s.Sk, s.Sv, s.Hv, int64_t(s.B) * s.K);
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (float &x : d_out.data) x = unit(rng);
    for (float &x : d_states.data) x = unit(rng);
    struct Grads {
        HostTensor dq, dk, dv, dg, dbeta, ds0;
    };
    auto make = [&] {
        return Grads{HostTensor(s.Sk, s.Hk, s.T, s.Bq, -7.0f), HostTensor(s.Sk, s.Hk, s.T, s.Bq, -7.0f, 2),
                     HostTensor(s.Sv, s.Hv, s.T, s.B, -7.0f),   HostTensor(s.kda ? s.Sk : 1, s.Hv, s.T, s.B, -7.0f),
                     HostTensor(1, s.Hv, s.T, s.B, -7.0f),      HostTensor(s.Sk, s.Sv, s.Hv, s.B, -7.0f)};
    };
    Grads want = make(), got = make();
    RefContext ref;
    const gdn_problem p = in.problem();
    gdn_grads grads{want.dq.t, want.dk.t, want.dv.t, want.dg.t, want.dbeta.t, want.ds0.t};
    ASSERT_EQ(gdn_backward(ref.ctx, &p, &d_out.t, &d_states.t, &grads), GDN_OK) << gdn_last_error(ref.ctx);

    BackwardViews w{in.q.view(),     in.k.view(),      in.v.view(),      in.g.view(),  in.beta.view(),
                    in.s0.view(),    d_out.view(),     d_states.view(),  got.dq.view(), got.dk.view(),
                    got.dv.view(),   got.dg.view(),    got.dbeta.view(), got.ds0.view()};
    std::vector<float> workspace;
    emulate_backward_any(w, in.sizes(), workspace);
    EXPECT_LT(nmse(got.dq.data, want.dq.data), 1e-8) << "dq";
    EXPECT_LT(nmse(got.dk.data, want.dk.data), 1e-8) << "dk";
    EXPECT_LT(nmse(got.dv.data, want.dv.data), 1e-8) << "dv";
    EXPECT_LT(nmse(got.dg.data, want.dg.data), 1e-8) << "dg";
    EXPECT_LT(nmse(got.dbeta.data, want.dbeta.data), 1e-8) << "dbeta";
    EXPECT_LT(nmse(got.ds0.data, want.ds0.data), 1e-8) << "ds0";
}

// The chunked forward (tensor cores, emulated WMMA) against ref: out and the final state.
class EmulatedChunkForward : public ::testing::TestWithParam<Shape> {};

TEST_P(EmulatedChunkForward, MatchesRef) {
    const Shape s = GetParam();
    const Inputs in = make_inputs(s, 21);
    const Sizes n = in.sizes();
    ASSERT_TRUE(chunk_forward_eligible(n, 200 * 1024)) << "the shape must be one the chunked kernel takes";
    HostTensor want_out(s.Sv, s.Hv, s.T, s.B, -7.0f, 1), want_states(s.Sk, s.Sv, s.Hv, s.B, -7.0f);
    RefContext ref;
    const gdn_problem p = in.problem();
    ASSERT_EQ(gdn_forward(ref.ctx, &p, &want_out.t, &want_states.t), GDN_OK) << gdn_last_error(ref.ctx);

    HostTensor out(s.Sv, s.Hv, s.T, s.B, -7.0f, 1), states(s.Sk, s.Sv, s.Hv, s.B, -7.0f);
    ForwardViews w{in.q.view(), in.k.view(), in.v.view(), in.g.view(), in.beta.view(), in.s0.view(), out.view(), states.view()};
    const ChunkGrid g = chunk_forward_grid(n);
    ASSERT_LE(g.shared_bytes, sizeof(gdn::cuda::shared));
    fake_cuda::launch({unsigned(g.x), unsigned(g.y), unsigned(g.z)}, g.threads, [&] { chunk_forward_kernel(w, n); });
    EXPECT_LT(nmse(out.data, want_out.data), 1e-9);
    EXPECT_LT(nmse(states.data, want_states.data), 1e-9);
    for (size_t i = 0; i < out.data.size(); ++i)
        if (want_out.data[i] == -7.0f) EXPECT_EQ(out.data[i], -7.0f) << i;
}

// Sk, Sv, Hk, Hv, T, B, Bq, K, kda, grouped, s0, extremes
INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedChunkForward,
                         ::testing::Values(Shape{32, 32, 1, 2, 70, 1, 1, 1, false, false, true},     // a short last chunk
                                           Shape{16, 64, 2, 4, 40, 2, 1, 1, false, true, false},     // grouped, Bq < B, two slices, no s0
                                           Shape{64, 32, 1, 1, 33, 1, 1, 1, false, false, true, true},  // spikes, beta 0 and 1
                                           Shape{128, 32, 1, 1, 35, 1, 1, 1, false, false, true}));  // the 27B head size

// The chunked backward (tensor cores, emulated WMMA) against ref: every gradient.
class EmulatedChunkBackward : public ::testing::TestWithParam<Shape> {};

TEST_P(EmulatedChunkBackward, MatchesRef) {
    const Shape s = GetParam();
    const Inputs in = make_inputs(s, 22);
    const Sizes n = in.sizes();
    ASSERT_TRUE(chunk_backward_eligible(n, 200 * 1024)) << "the shape must be one the chunked kernel takes";
    HostTensor d_out(s.Sv, s.Hv, s.T, s.B), d_states(s.Sk, s.Sv, s.Hv, s.B);
    std::mt19937 rng(23);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (float &x : d_out.data) x = unit(rng);
    for (float &x : d_states.data) x = unit(rng);
    struct Grads {
        HostTensor dq, dk, dv, dg, dbeta, ds0;
    };
    auto make = [&] {
        return Grads{HostTensor(s.Sk, s.Hk, s.T, s.Bq, -7.0f), HostTensor(s.Sk, s.Hk, s.T, s.Bq, -7.0f, 2),
                     HostTensor(s.Sv, s.Hv, s.T, s.B, -7.0f),   HostTensor(1, s.Hv, s.T, s.B, -7.0f),
                     HostTensor(1, s.Hv, s.T, s.B, -7.0f),      HostTensor(s.Sk, s.Sv, s.Hv, s.B, -7.0f)};
    };
    Grads want = make(), got = make();
    RefContext ref;
    const gdn_problem p = in.problem();
    gdn_grads grads{want.dq.t, want.dk.t, want.dv.t, want.dg.t, want.dbeta.t, want.ds0.t};
    ASSERT_EQ(gdn_backward(ref.ctx, &p, &d_out.t, &d_states.t, &grads), GDN_OK) << gdn_last_error(ref.ctx);

    BackwardViews w{in.q.view(),   in.k.view(),    in.v.view(),      in.g.view(),   in.beta.view(),
                    in.s0.view(),  d_out.view(),   d_states.view(),  got.dq.view(), got.dk.view(),
                    got.dv.view(), got.dg.view(),  got.dbeta.view(), got.ds0.view()};
    // As chunk_backward.cu launches them: checkpoints, the chunk kernel, the reductions.
    const ChunkBackwardPlan plan = make_chunk_backward_plan(n);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
    float *checkpoints = workspace.data() + plan.checkpoints_offset / sizeof(float);
    float *partials = workspace.data() + plan.partials_offset / sizeof(float);
    const ForwardViews f = chunk_checkpoint_views(w, checkpoints, plan.chunks);
    const ChunkGrid g = chunk_forward_grid(n);
    fake_cuda::launch({unsigned(g.x), unsigned(g.y), unsigned(g.z)}, g.threads, [&] { chunk_forward_kernel(f, n); });
    ASSERT_LE(plan.shared_bytes, sizeof(gdn::cuda::shared));
    const ChunkBackwardWork work{checkpoints, partials, plan.chunks, plan.partial_width};
    fake_cuda::launch({unsigned(plan.slices), unsigned(n.Hv), unsigned(n.B)}, kChunkThreads, [&] { chunk_backward_kernel(w, n, work); });
    BackwardWorkspace reduce{};
    reduce.partials = partials;
    reduce.partial_width = plan.partial_width;
    fake_cuda::launch({unsigned(reduce_blocks(key_grad_count(n))), 1, 1}, 256, [&] { reduce_key_grads_kernel(w, n, reduce, plan.slices); });
    fake_cuda::launch({unsigned(reduce_blocks(gate_grad_count(n))), 1, 1}, 256, [&] { reduce_gate_grads_kernel(w, n, reduce, plan.slices); });

    EXPECT_LT(nmse(got.dq.data, want.dq.data), 1e-8) << "dq";
    EXPECT_LT(nmse(got.dk.data, want.dk.data), 1e-8) << "dk";
    EXPECT_LT(nmse(got.dv.data, want.dv.data), 1e-8) << "dv";
    EXPECT_LT(nmse(got.dg.data, want.dg.data), 1e-8) << "dg";
    EXPECT_LT(nmse(got.dbeta.data, want.dbeta.data), 1e-8) << "dbeta";
    if (s.s0) EXPECT_LT(nmse(got.ds0.data, want.ds0.data), 1e-8) << "ds0";
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedChunkBackward,
                         ::testing::Values(Shape{32, 32, 1, 2, 70, 1, 1, 1, false, false, true},     // a short last chunk
                                           Shape{16, 64, 2, 4, 40, 2, 1, 1, false, true, false},     // grouped, Bq < B, two slices, no s0
                                           Shape{64, 32, 1, 1, 33, 1, 1, 1, false, false, true, true},  // spikes, beta 0 and 1
                                           Shape{128, 32, 1, 1, 35, 1, 1, 1, false, false, true}));  // the 27B head size

// Sk, Sv, Hk, Hv, T, B, Bq, K, kda, grouped, s0
const Shape kShapes[] = {
    {16, 16, 1, 2, 5, 1, 1, 1, false, false, true},    // one row per lane, padding lanes
    {40, 24, 1, 2, 7, 2, 1, 3, true, true, true},      // KDA, grouped, Bq < B, snapshots
    {8, 70, 1, 1, 4, 1, 1, 6, false, false, false},    // two column slices / three column blocks, T < K, no s0
    {130, 8, 1, 1, 20, 1, 1, 1, true, false, true},    // largest register columns; 3 staged tiles; 4 segments
    {96, 20, 2, 2, 6, 1, 1, 1, false, false, true},    // four rows per lane (the 27B head size's path)
    {24, 16, 1, 1, 9, 1, 1, 2, true, false, true, true},   // gate spikes, mixed-sign KDA gates, beta 0 and 1
    {24, 16, 1, 1, 9, 1, 1, 2, false, true, true, true},   // the same with a scalar gate
};
// Forward only (the backward's emulation is slow at this length): several staged tiles of 16.
const Shape kLongShape = {32, 40, 1, 2, 37, 1, 1, 2, false, false, true};

INSTANTIATE_TEST_SUITE_P(Shapes, Emulated, ::testing::Values(kShapes[0], kShapes[1], kShapes[2], kShapes[3], kShapes[4], kShapes[5], kShapes[6], kLongShape));
INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedBackward, ::testing::ValuesIn(kShapes));

}  // namespace
