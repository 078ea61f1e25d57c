// The backwards' device workspace grows with T / chunk (checkpoints), never with T Sk Sv
// (SPEC section 5): the partial gradient rows stay within their budget whatever T is. Host
// code only: the plans are computed on the host.
#include "fake_cuda.h"
// The kernels' headers, compiled by the host compiler, for their plans.
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/sequence_views.h"
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

const int64_t kTokens[] = {1, 512, 4096, 65536, int64_t(1) << 20};

TEST(WorkspacePlan, ChunkedForwardStaysWithinItsBudget) {
    for (int B : {1, 4, 32})
        for (int64_t T : kTokens) {
            const Sizes n = qwen35_27b(T, B);
            const ChunkForwardPlan plan = make_chunk_forward_plan(n);
            SCOPED_TRACE(testing::Message() << "T=" << T << " B=" << B << " windows=" << plan.windows.count);
            ASSERT_NE(plan.bytes, SIZE_MAX);
            // One window's factors (at least one chunk's) and one state.
            const double one_chunk = chunk_factor_bytes(n, kForwardFactors);
            EXPECT_LE(static_cast<double>(plan.bytes), std::max<double>(kWindowBudget, one_chunk) + state_bytes(n) + 512);
            if (T <= 4096 && B == 1) EXPECT_EQ(plan.windows.count, 1) << "the 27B prefill in one window";
        }
}

TEST(WorkspacePlan, ChunkedBackwardGrowsOnlyWithItsCheckpoints) {
    for (int B : {1, 4})
        for (int64_t T : kTokens) {
            const Sizes n = qwen35_27b(T, B);
            const ChunkBackwardPlan plan = make_chunk_backward_plan(n);
            SCOPED_TRACE(testing::Message() << "T=" << T << " B=" << B << " windows=" << plan.windows.count);
            ASSERT_NE(plan.bytes, SIZE_MAX);
            // Checkpoints: one state per chunk.
            EXPECT_GE(plan.factors_offset, state_bytes(n) * static_cast<double>(plan.windows.steps));
            EXPECT_LT(plan.factors_offset, state_bytes(n) * static_cast<double>(plan.windows.steps) + 256);
            // The rest, one window's factors and rows and the carry, stays within the budget
            // (or one chunk's, where a chunk alone exceeds it) and one state.
            const double one_chunk = 4.0 * plan.slices * n.B * n.Hv * plan.partial_width * kChunk + chunk_factor_bytes(n, kBackwardFactors);
            EXPECT_LE(static_cast<double>(plan.bytes - plan.factors_offset),
                      state_bytes(n) + std::max<double>(kWindowBudget, one_chunk) + 1024);
            if (T >= 4096) EXPECT_GT(plan.windows.count, 1);
        }
}

TEST(WorkspacePlan, PerTokenBackwardGrowsOnlyWithItsCheckpoints) {
    for (int B : {1, 4})
        for (int64_t T : kTokens) {
            const Sizes n = qwen35_27b(T, B);
            const TokenBackwardPlan plan = make_token_backward_plan(n, 227 * 1024);
            SCOPED_TRACE(testing::Message() << "T=" << T << " B=" << B << " windows=" << plan.windows.count);
            ASSERT_NE(plan.bytes, SIZE_MAX);
            EXPECT_LE(plan.segment, 128);
            const double checkpoints = state_bytes(n) * static_cast<double>(plan.segments + plan.sub_segments);
            EXPECT_LE(static_cast<double>(plan.carry_offset), checkpoints + 512);
            const double one_segment_rows = 4.0 * plan.slices * n.B * n.Hv * plan.partial_width * plan.segment;
            EXPECT_LE(static_cast<double>(plan.bytes - plan.carry_offset),
                      state_bytes(n) + std::max<double>(kWindowBudget, one_segment_rows) + 512);
        }
}

// Windows cover the steps exactly, in order, within the budget; only the last is short.
TEST(WorkspacePlan, WindowsCoverTheSteps) {
    for (int64_t T : {1, 31, 32, 33, 100, 4095, 4096, 4097}) {
        for (size_t budget : {size_t(1), size_t(64000), size_t(1) << 20, kWindowBudget}) {
            const Windows windows = Windows::fit(T, 32, 32000.0, budget);
            SCOPED_TRACE(testing::Message() << "T=" << T << " budget=" << budget << " per window=" << windows.per_window);
            EXPECT_EQ(windows.steps, (T + 31) / 32);
            EXPECT_GE(windows.per_window, 1);
            if (windows.per_window > 1) EXPECT_LE(32000.0 * static_cast<double>(windows.per_window), static_cast<double>(budget));
            int64_t next_step = 0, next_token = 0;
            for (int64_t i = 0; i < windows.count; ++i) {
                const Windows::Range r = windows.range(i, T);
                EXPECT_EQ(r.begin, next_step);
                EXPECT_EQ(r.t_begin, next_token);
                EXPECT_GT(r.end, r.begin);
                if (i + 1 < windows.count) {
                    EXPECT_EQ(r.end - r.begin, windows.per_window);
                    EXPECT_EQ(r.tokens, windows.per_window * 32);
                }
                next_step = r.end, next_token = r.t_begin + r.tokens;
            }
            EXPECT_EQ(next_step, windows.steps);
            EXPECT_EQ(next_token, T);
        }
    }
}

// Serving batches of short packed requests: one group (one launch chain) for 64 requests of
// up to 4 tokens at the 27B shape, its workspace within kGroupBudget; many longer requests
// split into groups, each within it, rows restarting per group.
TEST(WorkspacePlan, PackedGroupsStayWithinTheirBudget) {
    const Sizes call = qwen35_27b(0, 1);
    const auto fits = [&](const SequenceTable &g) { return make_token_backward_plan(call, 227 * 1024, kWindowBudget, g).bytes <= kGroupBudget; };
    for (int64_t length : {1, 4}) {
        std::vector<SequenceEntry> entries(64);
        for (size_t i = 0; i < entries.size(); ++i) entries[i].begin = int64_t(i) * length, entries[i].length = length;
        const std::vector<SequenceGroup> groups = sequence_groups(entries, true, 64, 65535, fits);
        ASSERT_EQ(groups.size(), 1u) << "T = " << length;
        EXPECT_EQ(groups[0].table.tokens, 64 * length);
        EXPECT_EQ(entries.back().rows, 63 * length);
        // The checkpoints of every sequence of the group (planned before the table is on the device).
        const TokenBackwardPlan plan = make_token_backward_plan(call, 227 * 1024, kWindowBudget, groups[0].table);
        const double states = 64.0 * (plan.segments + plan.sub_segments) * state_bytes(call);
        EXPECT_GE(static_cast<double>(plan.bytes), states);
    }
    std::vector<SequenceEntry> entries(1000);
    for (SequenceEntry &e : entries) e.length = 63;
    const std::vector<SequenceGroup> groups = sequence_groups(entries, true, 1000, 65535, fits);
    ASSERT_GT(groups.size(), 1u);
    int64_t count = 0;
    for (const SequenceGroup &g : groups) {
        EXPECT_LE(make_token_backward_plan(call, 227 * 1024, kWindowBudget, g.table).bytes, kGroupBudget);
        EXPECT_EQ(g.first, static_cast<size_t>(count));
        EXPECT_EQ(entries[g.first].rows, 0) << "each group's rows start at 0";
        count += g.table.count;
    }
    EXPECT_EQ(count, 1000);
}

}  // namespace
