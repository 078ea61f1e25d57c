// The backwards' device workspace grows with T / chunk (checkpoints), never with T Sk Sv
// (SPEC section 5): the partial gradient rows stay within their budget whatever T is. Host
// code only: the plans are computed on the host.
#include "fake_cuda.h"
// The kernels' headers, compiled by the host compiler, for their plans.
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/token_backward_kernel.cuh"
#include "emulation_support.h"

namespace gdn::cuda {
namespace {  // the kernels' `extern __shared__ float shared[]`, never run here
alignas(32) float shared[1];
}  // namespace
}  // namespace gdn::cuda

namespace {

using namespace gdn::cuda;

Sizes qwen35_27b(int64_t T, int B) {
    Sizes n;
    n.Sk = n.Sv = 128, n.Hk = 16, n.Hv = 48, n.B = n.Bq = B, n.K = 1, n.gate_width = 1, n.grouped = 0, n.T = T;
    n.scale = 0.088f;
    return n;
}

double state_bytes(const Sizes &n) { return 4.0 * n.B * n.Hv * n.Sk * n.Sv; }

TEST(WorkspacePlan, ChunkedBackwardGrowsOnlyWithItsCheckpoints) {
    for (int B : {1, 4})
        for (int64_t T : {int64_t(512), int64_t(4096), int64_t(65536), int64_t(1) << 20}) {
            const Sizes n = qwen35_27b(T, B);
            const ChunkBackwardPlan plan = make_chunk_backward_plan(n);
            SCOPED_TRACE(testing::Message() << "T=" << T << " B=" << B << " windows=" << plan.windows);
            ASSERT_NE(plan.bytes, SIZE_MAX);
            // Checkpoints: one state per chunk; factors: three C x C matrices per chunk.
            EXPECT_GE(plan.factors_offset, state_bytes(n) * static_cast<double>(plan.chunks));
            EXPECT_LT(plan.factors_offset, state_bytes(n) * static_cast<double>(plan.chunks) + 256);
            const double factors = 4.0 * 3 * kChunk * kChunk * static_cast<double>(plan.chunks) * n.B * n.Hv;
            EXPECT_GE(plan.carry_offset - plan.factors_offset, factors);
            EXPECT_LT(plan.carry_offset - plan.factors_offset, factors + 256);
            // The rest, carry and rows, stays within one state plus the budget (or one chunk of
            // rows, where a chunk alone exceeds it).
            const double one_chunk_rows = 4.0 * plan.slices * n.B * n.Hv * plan.partial_width * kChunk;
            EXPECT_LE(static_cast<double>(plan.bytes - plan.carry_offset),
                      state_bytes(n) + std::max<double>(kPartialRowsBudget, one_chunk_rows) + 512);
            EXPECT_EQ(plan.windows, (plan.chunks + plan.window_chunks - 1) / plan.window_chunks);
            if (T >= 4096) EXPECT_GT(plan.windows, 1);
        }
}

TEST(WorkspacePlan, PerTokenBackwardGrowsOnlyWithItsCheckpoints) {
    for (int B : {1, 4})
        for (int64_t T : {int64_t(1), int64_t(512), int64_t(4096), int64_t(65536), int64_t(1) << 20}) {
            const Sizes n = qwen35_27b(T, B);
            const TokenBackwardPlan plan = make_token_backward_plan(n, 227 * 1024);
            SCOPED_TRACE(testing::Message() << "T=" << T << " B=" << B << " windows=" << plan.windows);
            ASSERT_NE(plan.bytes, SIZE_MAX);
            EXPECT_LE(plan.segment, 128);
            const double checkpoints = state_bytes(n) * static_cast<double>(plan.segments + plan.sub_segments);
            EXPECT_LE(static_cast<double>(plan.carry_offset), checkpoints + 512);
            const double one_segment_rows = 4.0 * plan.slices * n.B * n.Hv * plan.partial_width * plan.segment;
            EXPECT_LE(static_cast<double>(plan.bytes - plan.carry_offset),
                      state_bytes(n) + std::max<double>(kPartialRowsBudget, one_segment_rows) + 512);
            EXPECT_EQ(plan.windows, (plan.segments + plan.window_segments - 1) / plan.window_segments);
        }
}

// Windows cover the tokens exactly: whole steps, the last window the only short one.
TEST(WorkspacePlan, WindowsAreWholeSteps) {
    for (int64_t T : {1, 31, 32, 33, 100, 4095, 4096, 4097}) {
        for (size_t budget : {size_t(1), size_t(1) << 20, kPartialRowsBudget}) {
            const int64_t w = window_tokens(T, 32, 1000.0, budget);
            SCOPED_TRACE(testing::Message() << "T=" << T << " budget=" << budget << " window=" << w);
            EXPECT_EQ(w % 32, 0);
            EXPECT_GE(w, 32);
            EXPECT_LE(w, (T + 31) / 32 * 32);
            if (w > 32) EXPECT_LE(1000.0 * static_cast<double>(w), static_cast<double>(budget));
        }
    }
}

}  // namespace
