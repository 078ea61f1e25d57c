// The per-token cuda kernels run on CPU threads (fake_cuda.h) against ref: their indexing,
// padding rows, column slices, warp and block reductions, checkpoints and snapshot slots are
// checked on every machine, GPU or not. Small shapes: each CUDA thread is an OS thread here.
#include "fake_cuda.h"
// The kernels, compiled by the host compiler.
#include "cuda/token_backward_kernel.cuh"
#include "cuda/token_forward_kernel.cuh"
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

// Small shared-memory budgets so that segments split into sub-segments: one token each at
// 16 KiB; at Sk > 128, 60 KiB gives two tokens each, the last sub-segment shorter.
size_t shared_budget(const Sizes &n) { return (n.Sk > 128 ? 60 : 16) * 1024; }

// The per-token backward as token_backward.cu enqueues it, with the partial rows of a window
// limited to `window_budget` bytes; returns the plan.
TokenBackwardPlan emulate_backward(const BackwardCase &c, size_t window_budget, Grads &got) {
    const Sizes n = c.in.sizes();
    const TokenBackwardPlan plan = make_token_backward_plan(n, shared_budget(n), window_budget);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));  // poisoned: every read must follow a write
    EXPECT_EQ(run_token_backward(kLaunch, c.views(got), n, plan, workspace.data()), cudaSuccess);
    return plan;
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
    ASSERT_EQ(run_token_forward(kLaunch, w, in.sizes()), cudaSuccess);
    EXPECT_LT(nmse(out.data, want_out.data), 1e-10);
    EXPECT_LT(nmse(states.data, want_states.data), 1e-10);
    // Padding of out and unwritten slots (T < K) keep their fill, as in ref.
    for (size_t i = 0; i < out.data.size(); ++i)
        if (want_out.data[i] == -7.0f) EXPECT_EQ(out.data[i], -7.0f) << i;
    for (size_t i = 0; i < states.data.size(); ++i)
        if (want_states.data[i] == -7.0f) EXPECT_EQ(states.data[i], -7.0f) << i;
}

TEST_P(EmulatedBackward, MatchesRef) {
    const Shape s = GetParam();
    const BackwardCase c(s, 12);
    Grads got(s);
    const TokenBackwardPlan plan = emulate_backward(c, kWindowBudget, got);
    ASSERT_EQ(plan.windows.count, 1) << "these shapes fit one window";
    expect_near(got, c.want);

    // Windows of one and of two segments (the carry passed through the workspace): the same
    // arithmetic in the same order, the same bits.
    const double segment_rows = 4.0 * plan.slices * s.B * s.Hv * plan.partial_width * plan.segment;
    Grads one(s), two(s);
    EXPECT_EQ(emulate_backward(c, 1, one).windows.count, plan.segments);
    expect_same_bits(one, got);
    EXPECT_EQ(emulate_backward(c, static_cast<size_t>(2 * segment_rows), two).windows.count, (plan.segments + 1) / 2);
    expect_same_bits(two, got);
}

// Sk, Sv, Hk, Hv, T, B, Bq, K, kda, grouped, s0
const Shape kShapes[] = {
    {16, 16, 1, 2, 5, 1, 1, 1, false, false, true},    // one row per lane, padding lanes
    {40, 24, 1, 2, 7, 2, 1, 3, true, true, true},      // KDA, grouped, Bq < B, snapshots
    {8, 70, 1, 1, 4, 1, 1, 6, false, false, false},    // two column slices / three column blocks, T < K, no s0
    {130, 8, 1, 1, 20, 1, 1, 1, true, false, true},    // largest register columns; 3 staged tiles; 4 segments
    {96, 20, 2, 2, 6, 1, 1, 1, false, false, true},    // four rows per lane (the 27B head size's path)
    {24, 16, 1, 1, 9, 1, 1, 2, true, false, true, true},   // gate spikes, mixed-sign KDA gates, beta 0 and 1
    {24, 16, 1, 1, 9, 1, 1, 2, false, true, true, true},   // the same with a scalar gate
    {16, 16, 1, 1, 3, 4, 2, 2, false, false, true},    // Bq > 1: sequences 0, 1 read q/k sequence 0, and 2, 3 read 1
    {16, 16, 1, 1, 3, 4, 2, 1, true, false, true},     // the same with KDA
};
// Forward only (the backward's emulation is slow at this length): several staged tiles of 16.
const Shape kLongShape = {32, 40, 1, 2, 37, 1, 1, 2, false, false, true};

INSTANTIATE_TEST_SUITE_P(Shapes, Emulated, ::testing::Values(kShapes[0], kShapes[1], kShapes[2], kShapes[3], kShapes[4], kShapes[5],
                                                             kShapes[6], kShapes[7], kShapes[8], kLongShape));
INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedBackward, ::testing::ValuesIn(kShapes));

}  // namespace
