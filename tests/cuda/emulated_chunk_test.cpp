// The chunked cuda kernels (tensor cores, fake_cuda.h's WMMA) run on CPU threads against ref.
#include "fake_cuda.h"
// The kernels, compiled by the host compiler.
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/chunk_forward_kernel.cuh"
#include "emulation_support.h"

namespace gdn::cuda {
namespace {  // the kernels' `extern __shared__ float shared[]`, in their (this file's) namespace
alignas(32) float shared[1 << 16];  // the block's dynamic shared memory (blocks run one at a time)
}  // namespace
}  // namespace gdn::cuda

namespace {

using namespace gdn::cuda;
using namespace gdn_emulation;

const EmulatedLauncher kLaunch{gdn::cuda::shared, sizeof(gdn::cuda::shared)};

// The chunked forward as chunk_forward.cu enqueues it, with one window's factors limited to
// `window_budget` bytes; returns the number of windows.
int64_t emulate_forward(const Inputs &in, size_t window_budget, HostTensor &out, HostTensor &states) {
    const Sizes n = in.sizes();
    const ForwardViews w{in.q.view(), in.k.view(), in.v.view(), in.g.view(), in.beta.view(), in.s0.view(), out.view(), states.view()};
    const ChunkForwardPlan plan = make_chunk_forward_plan(n, window_budget);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));  // poisoned: every read must follow a write
    EXPECT_EQ(run_chunk_forward(kLaunch, w, n, plan, workspace.data()), cudaSuccess);
    return plan.windows.count;
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
    ASSERT_EQ(emulate_forward(in, kWindowBudget, out, states), 1) << "these shapes fit one window";
    EXPECT_LT(nmse(out.data, want_out.data), 1e-10);
    EXPECT_LT(nmse(states.data, want_states.data), 1e-10);
    for (size_t i = 0; i < out.data.size(); ++i)
        if (want_out.data[i] == -7.0f) EXPECT_EQ(out.data[i], -7.0f) << i;

    // A window per chunk (the state carried through the workspace): the same bits.
    HostTensor windowed_out(s.Sv, s.Hv, s.T, s.B, -7.0f, 1), windowed_states(s.Sk, s.Sv, s.Hv, s.B, -7.0f);
    EXPECT_EQ(emulate_forward(in, 1, windowed_out, windowed_states), (s.T + kChunk - 1) / kChunk);
    EXPECT_EQ(windowed_out.data, out.data);
    EXPECT_EQ(windowed_states.data, states.data);
}

// Sk, Sv, Hk, Hv, T, B, Bq, K, kda, grouped, s0, extremes
INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedChunkForward,
                         ::testing::Values(Shape{32, 32, 1, 2, 70, 1, 1, 1, false, false, true},     // a short last chunk
                                           Shape{16, 64, 2, 4, 40, 2, 1, 1, false, true, false},     // grouped, Bq < B, two slices, no s0
                                           Shape{64, 32, 1, 1, 33, 1, 1, 1, false, false, true, true},  // spikes, beta 0 and 1
                                           Shape{128, 32, 1, 1, 35, 1, 1, 1, false, false, true},    // the 27B head size
                                           Shape{16, 32, 1, 1, 40, 4, 2, 1, false, false, true}));   // Bq > 1: sequences 0, 1 read q/k sequence 0

// The chunked backward as chunk_backward.cu enqueues it, with one window's partial rows and
// factors limited to `window_budget` bytes; returns the number of windows.
int64_t emulate_backward(const BackwardCase &c, size_t window_budget, Grads &got) {
    const Sizes n = c.in.sizes();
    const ChunkBackwardPlan plan = make_chunk_backward_plan(n, window_budget);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));  // poisoned: every read must follow a write
    EXPECT_EQ(run_chunk_backward(kLaunch, c.views(got), n, plan, workspace.data()), cudaSuccess);
    return plan.windows.count;
}

// The budget that makes windows of two chunks: their partial rows and factors.
size_t two_chunk_budget(const Sizes &n) {
    const ChunkBackwardPlan plan = make_chunk_backward_plan(n);
    const double rows = 4.0 * plan.slices * n.B * n.Hv * plan.partial_width * kChunk;
    return static_cast<size_t>(2 * (rows + chunk_factor_bytes(n, kBackwardFactors)));
}

// The chunked backward (tensor cores, emulated WMMA) against ref: every gradient.
class EmulatedChunkBackward : public ::testing::TestWithParam<Shape> {};

TEST_P(EmulatedChunkBackward, MatchesRef) {
    const Shape s = GetParam();
    const BackwardCase c(s, 22);
    const Sizes n = c.in.sizes();
    ASSERT_TRUE(chunk_backward_eligible(n, 200 * 1024)) << "the shape must be one the chunked kernel takes";
    Grads got(s);
    ASSERT_EQ(emulate_backward(c, kWindowBudget, got), 1) << "these shapes fit one window";
    expect_near(got, c.want);

    // Windows of one and of two chunks (first, middle and last windows; the states, factors and
    // dS carried through the workspace): the same arithmetic in the same order, the same bits.
    const int64_t chunks = (s.T + kChunk - 1) / kChunk;
    Grads one(s), two(s);
    EXPECT_EQ(emulate_backward(c, 1, one), chunks);
    expect_same_bits(one, got);
    EXPECT_EQ(emulate_backward(c, two_chunk_budget(n), two), (chunks + 1) / 2);
    expect_same_bits(two, got);
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedChunkBackward,
                         ::testing::Values(Shape{32, 32, 1, 2, 70, 1, 1, 1, false, false, true},     // a short last chunk
                                           Shape{16, 64, 2, 4, 40, 2, 1, 1, false, true, false},     // grouped, Bq < B, two slices, no s0
                                           Shape{64, 32, 1, 1, 33, 1, 1, 1, false, false, true, true},  // spikes, beta 0 and 1
                                           Shape{128, 32, 1, 1, 35, 1, 1, 1, false, false, true},    // the 27B head size
                                           Shape{16, 32, 1, 1, 150, 1, 1, 1, false, false, true},    // 5 chunks: 3 windows of 2
                                           Shape{16, 32, 1, 1, 40, 4, 2, 1, false, false, true}));   // Bq > 1: sequences 0, 1 read q/k sequence 0

}  // namespace
