// A persistent pool of worker threads with a static partition of work: run(n, fn) calls fn(i, w)
// for every item i < n, item i always on worker w = the one owning the i-th contiguous slice.
// Results never depend on which thread ran an item; the partition only balances the load.
#pragma once

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
    explicit ThreadPool(int threads);  // threads >= 1; the calling thread is worker 0
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    int size() const { return threads_; }

    // Calls fn(item, worker) for item in [0, items); returns when all are done. Worker w runs
    // items [w*items/size, (w+1)*items/size).
    void run(int64_t items, const std::function<void(int64_t, int)> &fn);

    // Calls fn(item, worker) for item in [0, weights.size()), in contiguous ranges of items of
    // about equal total weight, one range per worker (a static partition: which worker runs an
    // item depends only on the weights and the thread count, never on timing).
    void run_weighted(const std::vector<int64_t> &weights, const std::function<void(int64_t, int)> &fn);

private:
    void worker_loop(int worker);
    void run_slice(int worker);

    int threads_;
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable start_, done_;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
    int64_t items_ = 0;
    const std::function<void(int64_t, int)> *fn_ = nullptr;
};

}  // namespace gdn::cpu
