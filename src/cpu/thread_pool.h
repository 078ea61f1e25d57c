// A persistent pool of worker threads: run(n, fn) calls fn(i, w) for every item i < n, with a
// static partition (item i always on the worker owning the i-th contiguous slice);
// run_weighted hands items out heaviest first to whichever worker is free. Results never depend
// on which thread ran an item (every item writes its own outputs from its own inputs), so
// either schedule gives the same bits for every thread count; the schedule only balances load.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gdn::cpu {

// The static partition: worker w of n owns items [share_begin(items, w, n), share_begin(items, w + 1, n)).
inline int64_t share_begin(int64_t items, int worker, int workers) { return items * worker / workers; }

class ThreadPool {
public:
    // threads >= 1; the calling thread is worker 0. Throws std::system_error when the system
    // cannot start a worker, after joining those it started.
    explicit ThreadPool(int threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    int size() const { return threads_; }

    // Calls fn(item, worker) for item in [0, items); returns when all are done. Worker w runs
    // items [w*items/size, (w+1)*items/size).
    void run(int64_t items, const std::function<void(int64_t, int)> &fn);

    // Calls fn(item, worker) for item in [0, weights.size()): items in order of decreasing
    // weight (ties by index), each taken by the next free worker. Which worker runs an item
    // depends on timing; the weights need only rank the items' costs (longest first, then the
    // short ones fill the gaps: a batch of many short sequences and a few long ones balances
    // where a static split by estimated weight did not, measured in docs/PERF.md).
    void run_weighted(const std::vector<int64_t> &weights, const std::function<void(int64_t, int)> &fn);

private:
    void stop_workers();
    void worker_loop(int worker);
    void run_slice(int worker);

    int threads_;
    std::vector<std::thread> workers_;
    // A call's items are published by generation_ (release; its readers acquire), and its end by
    // pending_ reaching 0. Both sides spin a short while before they sleep on the condition
    // variables (under mutex_, so no wake-up is lost): back-to-back calls, as decoding makes
    // them, then do not wait for a thread to be woken (tens of microseconds on a shared host,
    // against a 0.1 ms call).
    std::mutex mutex_;
    std::condition_variable start_, done_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
    int64_t items_ = 0;
    const std::function<void(int64_t, int)> *fn_ = nullptr;
};

}  // namespace gdn::cpu
