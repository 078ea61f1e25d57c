#include "cpu/thread_pool.h"

#include <algorithm>

namespace gdn::cpu {

ThreadPool::ThreadPool(int threads) : threads_(threads < 1 ? 1 : threads) {
    try {
        workers_.reserve(static_cast<size_t>(threads_ - 1));
        for (int w = 1; w < threads_; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
    } catch (...) {
        // No destructor runs for a constructor that throws, and a joinable std::thread destroyed
        // unjoined terminates the process.
        stop_workers();
        throw;
    }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true, std::memory_order_release);
    }
    start_.notify_all();
    for (auto &t : workers_) t.join();
}

namespace {

// How long a side spins for the other before it sleeps: 2048 pauses took 50-56 us on the Zen 4
// host of docs/PERF.md (more where a pause is slower), a few us of `yield` on AArch64; bounded,
// so an idle pool costs nothing after it.
constexpr int kSpins = 1 << 11;

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

}  // namespace

void ThreadPool::run_slice(int worker) {
    const int64_t begin = share_begin(items_, worker, threads_), end = share_begin(items_, worker + 1, threads_);
    for (int64_t i = begin; i < end; ++i) (*fn_)(i, worker);
}

void ThreadPool::run(int64_t items, ItemFn fn) {
    if (threads_ == 1 || items <= 1) {
        for (int64_t i = 0; i < items; ++i) fn(i, 0);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        items_ = items;
        fn_ = &fn;
        pending_.store(threads_ - 1, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    start_.notify_all();
    run_slice(0);
    for (int spin = 0; spin < kSpins && pending_.load(std::memory_order_acquire) != 0; ++spin) pause();
    if (pending_.load(std::memory_order_acquire) != 0) {
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    fn_ = nullptr;
}

void ThreadPool::run_weighted(const std::vector<int64_t> &weights, ItemFn fn) {
    const int64_t items = static_cast<int64_t>(weights.size());
    if (threads_ == 1 || items <= 1) {
        for (int64_t i = 0; i < items; ++i) fn(i, 0);
        return;
    }
    order_.resize(static_cast<size_t>(items));
    for (int64_t i = 0; i < items; ++i) order_[i] = i;
    // Ties by index, as a stable sort would order them (std::stable_sort allocates a buffer).
    std::sort(order_.begin(), order_.end(), [&](int64_t a, int64_t b) {
        return weights[a] != weights[b] ? weights[a] > weights[b] : a < b;
    });
    std::atomic<int64_t> next{0};
    run(threads_, [&](int64_t, int worker) {
        for (int64_t taken; (taken = next.fetch_add(1, std::memory_order_relaxed)) < items;) fn(order_[taken], worker);
    });
}

void ThreadPool::worker_loop(int worker) {
    uint64_t seen = 0;
    for (;;) {
        const auto started = [&] {
            return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
        };
        for (int spin = 0; spin < kSpins && !started(); ++spin) pause();
        if (!started()) {
            std::unique_lock<std::mutex> lock(mutex_);
            start_.wait(lock, started);
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = generation_.load(std::memory_order_acquire);
        run_slice(worker);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mutex_);  // the caller checks pending_ under it before it sleeps
            done_.notify_one();
        }
    }
}

}  // namespace gdn::cpu
