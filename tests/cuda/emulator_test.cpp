// fake_cuda.h itself: what the kernels' tests rely on it for. Barriers order a block's writes and
// reads, shuffles exchange within a warp, threadIdx and blockIdx are each thread's own across its
// barriers, and (fibers) a block whose threads never meet stops with a message.
#include <gtest/gtest.h>

#include <vector>

#include "fake_cuda.h"

namespace {

// Each thread writes its slot, meets the block, then reads its neighbour's: correct only if the
// barrier held every reader until every writer had written, over several rounds.
TEST(Emulator, SyncthreadsOrdersTheBlocksWritesAndReads) {
    constexpr int kThreads = 96, kRounds = 5, kBlocks = 3;
    std::vector<int> slots(kBlocks * kThreads), seen(kBlocks * kThreads * kRounds, -1);
    fake_cuda::launch({kBlocks, 1, 1}, kThreads, [&] {
        const int t = static_cast<int>(threadIdx.x), b = static_cast<int>(blockIdx.x);
        for (int round = 0; round < kRounds; ++round) {
            slots[b * kThreads + t] = 1000 * b + 10 * t + round;
            __syncthreads();
            seen[(b * kThreads + t) * kRounds + round] = slots[b * kThreads + (t + 1) % kThreads];
            __syncthreads();
        }
    });
    for (int b = 0; b < kBlocks; ++b)
        for (int t = 0; t < kThreads; ++t)
            for (int round = 0; round < kRounds; ++round)
                ASSERT_EQ(seen[(b * kThreads + t) * kRounds + round], 1000 * b + 10 * ((t + 1) % kThreads) + round)
                    << "block " << b << " thread " << t << " round " << round;
}

// A butterfly sum over each warp with __shfl_xor_sync: every lane ends with its warp's total;
// __shfl_sync and __shfl_down_sync read the lanes they name.
TEST(Emulator, ShufflesExchangeWithinEachWarp) {
    constexpr int kThreads = 64;
    std::vector<float> total(kThreads), from_lane3(kThreads), down(kThreads);
    fake_cuda::launch({1, 1, 1}, kThreads, [&] {
        const int t = static_cast<int>(threadIdx.x);
        float x = static_cast<float>(t);
        for (int mask = 16; mask > 0; mask /= 2) x += __shfl_xor_sync(0xffffffffu, x, mask);
        total[t] = x;
        from_lane3[t] = __shfl_sync(0xffffffffu, static_cast<float>(t), 3);
        down[t] = __shfl_down_sync(0xffffffffu, static_cast<float>(t), 1);
    });
    for (int t = 0; t < kThreads; ++t) {
        const int warp = t / 32, lane = t % 32;
        EXPECT_EQ(total[t], 32.0f * 32 * warp + 31 * 32 / 2) << t;
        EXPECT_EQ(from_lane3[t], static_cast<float>(32 * warp + 3)) << t;
        EXPECT_EQ(down[t], static_cast<float>(lane == 31 ? t : t + 1)) << t;
    }
}

#if !FAKE_CUDA_OS_THREADS
// Thread 0 never reaches the barrier the others wait at: a hang on a GPU, an abort here.
TEST(EmulatorDeathTest, ABlockThatNeverMeetsAbortsWithAMessage) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(fake_cuda::launch({1, 1, 1}, 64,
                                   [] {
                                       if (threadIdx.x != 0) __syncthreads();
                                   }),
                 "deadlock");
}
#endif

}  // namespace
