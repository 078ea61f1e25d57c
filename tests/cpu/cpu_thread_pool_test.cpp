// The cpu backend's thread pool: every item runs once per call and its writes are seen by the
// caller when the call returns, whether the workers were still spinning from the call before
// (back-to-back calls) or asleep (calls far apart: longer than any spin), and when the caller
// outwaits its own spin for a slow worker; a pool is destroyed cleanly in either state.
// ThreadSanitizer runs this file (label cpu, scripts/ci-sanitizers.sh).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"

namespace {

using gdn::cpu::ThreadPool;

// Runs `calls` calls of `items` items, each item adding its index + call to its own slot (plain
// writes: a missing happens-before edge is a TSan report, a lost or doubled item a wrong sum).
void check_calls(ThreadPool &pool, int64_t items, int calls, bool weighted, std::chrono::microseconds gap) {
    std::vector<int64_t> slots(static_cast<size_t>(items), 0);
    std::vector<int64_t> weights(static_cast<size_t>(items));
    for (int64_t i = 0; i < items; ++i) weights[i] = (i * 7919) % 13;  // an order of their own
    for (int call = 0; call < calls; ++call) {
        const auto body = [&](int64_t i, int worker) {
            ASSERT_GE(worker, 0);
            ASSERT_LT(worker, pool.size());
            slots[i] += i + call;
        };
        if (weighted) pool.run_weighted(weights, body);
        else pool.run(items, body);
        if (gap.count() > 0) std::this_thread::sleep_for(gap);
    }
    const int64_t call_sum = int64_t(calls) * (calls - 1) / 2;
    for (int64_t i = 0; i < items; ++i) ASSERT_EQ(slots[i], calls * i + call_sum) << "item " << i;
}

TEST(CpuThreadPool, EveryItemOnceBackToBackAndAfterSleeping) {
    for (int threads : {1, 2, 3, 8})
        for (bool weighted : {false, true}) {
            SCOPED_TRACE(std::to_string(threads) + " threads" + (weighted ? ", weighted" : ""));
            ThreadPool pool(threads);
            check_calls(pool, 97, 300, weighted, std::chrono::microseconds(0));  // workers still spinning
            check_calls(pool, 5, 20, weighted, std::chrono::microseconds(3000));  // workers asleep again
            check_calls(pool, 1, 10, weighted, std::chrono::microseconds(0));     // the caller alone
        }
}

TEST(CpuThreadPool, CallerSleepsUntilASlowWorkerFinishes) {
    // run() gives worker w the items [w n / size, (w + 1) n / size): with one item per worker the
    // caller (worker 0) finishes at once and the last worker's item takes 20 ms, far past the
    // caller's spin, so the caller sleeps on the pool's condition variable until it is done.
    for (int threads : {2, 3}) {
        ThreadPool pool(threads);
        for (int call = 0; call < 3; ++call) {
            std::vector<int> done(static_cast<size_t>(threads), 0);
            pool.run(threads, [&](int64_t i, int) {
                if (i == threads - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
                done[i] = 1;
            });
            for (int d : done) EXPECT_EQ(d, 1) << threads << " threads, call " << call;
        }
    }
}

TEST(CpuThreadPool, DestroyedWhileSpinningOrAsleep) {
    for (int threads : {2, 4}) {
        {
            ThreadPool pool(threads);  // never used: workers asleep (or still spinning at start)
        }
        {
            ThreadPool pool(threads);
            std::vector<int> hits(16, 0);
            pool.run(16, [&](int64_t i, int) { hits[i] = 1; });
            for (int h : hits) EXPECT_EQ(h, 1);
        }  // destroyed right after a call: workers spinning
        {
            ThreadPool pool(threads);
            pool.run(4, [](int64_t, int) {});
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }  // destroyed asleep
    }
}

}  // namespace
