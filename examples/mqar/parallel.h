// Runs a loop's ranges on a few threads. [0, n) is split into contiguous ranges, one per worker;
// the calling thread takes the first. Every output element is computed by exactly one worker in
// the same order as on one thread, so results do not depend on the number of workers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace mqar {

class Workers {
public:
    explicit Workers(int count = 1) { set_count(count); }
    // count 0: one per hardware thread.
    void set_count(int count) {
        if (count <= 0) count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        count_ = count;
    }
    int count() const { return count_; }

    // fn(begin, end) over [0, n), in ranges of at least `grain` iterations.
    template <class Fn>
    void ranges(int64_t n, int64_t grain, Fn &&fn) const {
        const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(count_, n / std::max<int64_t>(1, grain)));
        if (parts == 1) {
            fn(int64_t(0), n);
            return;
        }
        std::vector<std::thread> threads;
        threads.reserve(parts - 1);
        auto bound = [&](int64_t p) { return n * p / parts; };
        for (int64_t p = 1; p < parts; ++p) threads.emplace_back([&, p] { fn(bound(p), bound(p + 1)); });
        fn(bound(0), bound(1));
        for (std::thread &t : threads) t.join();
    }

private:
    int count_ = 1;
};

}  // namespace mqar
