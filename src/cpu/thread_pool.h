// A persistent pool of worker threads: run(n, fn) calls fn(i, w) for every item i < n, with a
// static partition (item i always on the worker owning the i-th contiguous slice);
// run_weighted hands items out heaviest first to whichever worker is free. Results never depend
// on which thread ran an item (every item writes its own outputs from its own inputs), so
// either schedule gives the same bits for every thread count; the schedule only balances load.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <type_traits>
#include <mutex>
#include <thread>
#include <vector>

namespace gdn::cpu {

// The static partition: worker w of n owns items [share_begin(items, w, n), share_begin(items, w + 1, n)).
inline int64_t share_begin(int64_t items, int worker, int workers) { return items * worker / workers; }

// What a pool runs for each item: a reference to the caller's callable fn(item, worker), which
// must outlive the run (a lambda passed straight to run() does). Unlike std::function it never
// allocates: decoding makes a call per token and layer, each a run or two.
class ItemFn {
public:
    template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ItemFn>>>
    ItemFn(const F &f)  // NOLINT: converts from any callable, as std::function does
        : object_(&f), call_([](const void *o, int64_t item, int worker) { (*static_cast<const F *>(o))(item, worker); }) {}
    void operator()(int64_t item, int worker) const { call_(object_, item, worker); }

private:
    const void *object_;
    void (*call_)(const void *, int64_t, int);
};

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
    void run(int64_t items, ItemFn fn);

    // Calls fn(item, worker) for item in [0, weights.size()): items in order of decreasing
    // weight (ties by index), each taken by the next free worker. Which worker runs an item
    // depends on timing; the weights need only rank the items' costs (longest first, then the
    // short ones fill the gaps: a batch of many short sequences and a few long ones balances
    // where a static split by estimated weight did not, measured in docs/PERF.md).
    void run_weighted(const std::vector<int64_t> &weights, ItemFn fn);

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
    const ItemFn *fn_ = nullptr;
    std::vector<int64_t> order_;  // run_weighted's items, heaviest first (kept: no allocation per call)
};

}  // namespace gdn::cpu
