// The cpu backend's schedule allocates nothing once it has run a call of the same size: decoding
// makes a call per token and layer (with state pools, a run of the pool per sequence), each of
// them a run of the thread pool. Counted by replacing the global operator new in this program
// (not under the sanitizers, which bring their own).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "cpu/thread_pool.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GDN_COUNTS_ALLOCATIONS 0
#else
#define GDN_COUNTS_ALLOCATIONS 1
namespace {
std::atomic<int64_t> allocations{0};
}
void *operator new(std::size_t n) {
    allocations.fetch_add(1, std::memory_order_relaxed);
    if (void *p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
#endif

namespace {

TEST(CpuAllocation, ThreadPoolRunsAllocateNothingAfterTheFirst) {
#if !GDN_COUNTS_ALLOCATIONS
    GTEST_SKIP() << "the sanitizers replace operator new";
#else
    // A pooled decoding call at the 27B shape: 16 sequences x 48 heads of equal weight.
    for (int threads : {1, 2, 3}) {
        gdn::cpu::ThreadPool pool(threads);
        const std::vector<int64_t> weights(16 * 48, 9);
        std::vector<int64_t> seen(weights.size(), 0);
        const auto body = [&](int64_t i, int) { ++seen[static_cast<size_t>(i)]; };
        pool.run_weighted(weights, body);
        pool.run(static_cast<int64_t>(weights.size()), body);
        const int64_t before = allocations.load();
        for (int call = 0; call < 20; ++call) {
            pool.run_weighted(weights, body);
            pool.run(static_cast<int64_t>(weights.size()), body);
        }
        EXPECT_EQ(allocations.load() - before, 0) << threads << " threads";
        for (int64_t n : seen) ASSERT_EQ(n, 42);
    }
#endif
}

}  // namespace
