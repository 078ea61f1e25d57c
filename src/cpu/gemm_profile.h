// Where the F32 GEMM's time goes, by product shape. A library built with
// cmake -DGDN_GEMM_PROFILE=ON times every gdn::cpu::gemm call into the process's profile and
// prints its table to stderr when the process exits: one line per shape (m, n, k, the operands'
// layouts, the row scales, whether C is added to) with its share of the GEMM time, its call count
// and its rate. A call's time is one thread's, so a rate compares with one core's peak
// (gdn-ops perf -t 1 prints it). gemm_bench measures the kernel with its operands in cache; this
// measures it where the chunk math calls it, with the caches as the steps before left them.
// The table is printed by a static's destructor, so a process that leaves through _exit (gdn-ops
// perf's per-case children) prints none: run gdn-ops perf with --no-fork. Without the option
// gemm() times nothing and this code is never called.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace gdn::cpu {

struct GemmShape {
    int64_t m, n, k;
    bool a_transposed, b_transposed;  // read through transposed() views
    bool c_rows, b_rows, c_in;        // which RowScales are given
    bool accumulate;                  // c_scale != 0
    bool operator<(const GemmShape &o) const;
};

class GemmProfile {
public:
    // One call's time (thread-safe).
    void add(const GemmShape &shape, double seconds);
    // The table, longest total first; empty when nothing was added.
    std::string table() const;

private:
    struct Total {
        double seconds = 0;
        int64_t calls = 0;
    };
    mutable std::mutex mutex_;
    std::map<GemmShape, Total> totals_;
};

// The process's profile, whose table is printed to stderr at exit.
GemmProfile &gemm_profile();

// Times the enclosing scope as one call of `shape` in the process's profile.
class GemmProfileScope {
public:
    explicit GemmProfileScope(const GemmShape &shape) : shape_(shape), start_(std::chrono::steady_clock::now()) {}
    ~GemmProfileScope() {
        gemm_profile().add(shape_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    GemmProfileScope(const GemmProfileScope &) = delete;
    GemmProfileScope &operator=(const GemmProfileScope &) = delete;

private:
    GemmShape shape_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace gdn::cpu
