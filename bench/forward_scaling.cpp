// How the cpu forward spreads over threads, modelled from measured item times (this machine has
// 2 cores; the question is every thread count a user may have, which need not divide the groups).
//
// Runs the chunked forward of the 27B shape (Hk 16, Hv 48, Sk = Sv = 128, B 1, the harness's perf
// case; T = 4096 by default) on one thread, --passes times, and keeps the fastest time of every
// item the backend can hand out: each group whole (forward_group over its 3 units) and each slice
// of it (units [s U / n, (s + 1) U / n) for n = 2 .. U slices). Then, for each thread count,
// replays the pool's schedule (items in decreasing weight, each to the first free worker, as
// ThreadPool::run_weighted) over two cuts:
//   whole: groups whole unless there are fewer groups than threads (the cut before forward_split
//          cut the last round's groups)
//   split: what the backend cuts now (cpu/forward_schedule.h)
// and prints the makespans, the speedups over one thread, and the balance: makespan over the mean
// work per thread (1.00 is perfect; a slice's repeated grams and q/k reads count as work).
//
//   forward_scaling [--tokens=4096] [--passes=3]
//
// The model ignores memory bandwidth: every thread is assumed to run an item as fast as one thread
// alone does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "case.h"
#include "core/validate.h"
#include "cpu/chunk_drivers.h"
#include "cpu/chunk_plan.h"
#include "cpu/forward_schedule.h"
#include "problem_data.h"
#include "runner.h"

namespace {

using namespace gdn;
using namespace gdn::testkit;
using Clock = std::chrono::steady_clock;
using Range = std::pair<int64_t, int64_t>;  // units [first, second) of a group

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int flag(int argc, char **argv, const char *name, int fallback) {
    const size_t n = std::strlen(name);
    for (int i = 1; i < argc; ++i)
        if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return std::atoi(argv[i] + n + 1);
    return fallback;
}

// Every slice [s U / n, (s + 1) U / n) of n = 1 .. U slices, as the backend cuts them.
std::vector<Range> slice_ranges(int64_t units) {
    std::vector<Range> ranges;
    for (int64_t n = 1; n <= units; ++n)
        for (int64_t s = 0; s < n; ++s) {
            const cpu::UnitRange u = cpu::slice_units(units, n, s);
            const Range r{u.begin, u.end};
            if (std::find(ranges.begin(), ranges.end(), r) == ranges.end()) ranges.push_back(r);
        }
    return ranges;
}

struct Item {
    int64_t weight;  // as the backend weighs it: units (all items have the call's tokens)
    double seconds;
};

struct Modelled {
    double makespan, balance;
};

// The pool's schedule: decreasing weight (stable), each item to the worker free first.
Modelled replay(std::vector<Item> items, int threads) {
    std::stable_sort(items.begin(), items.end(), [](const Item &a, const Item &b) { return a.weight > b.weight; });
    std::vector<double> busy(threads, 0.0);
    double work = 0;
    for (const Item &item : items) {
        *std::min_element(busy.begin(), busy.end()) += item.seconds;
        work += item.seconds;
    }
    const double span = *std::max_element(busy.begin(), busy.end());
    return {span, span / (work / threads)};
}

// The items of one call cut as `split` says, with the measured times.
std::vector<Item> items_of(const std::map<std::pair<int64_t, Range>, double> &time, int64_t groups, int64_t units,
                           cpu::ForwardSplit split) {
    std::vector<Item> items;
    for (int64_t g = 0; g < groups; ++g) {
        const int64_t n = g >= split.first_group ? split.slices : 1;
        for (int64_t s = 0; s < n; ++s) {
            const cpu::UnitRange u = cpu::slice_units(units, n, s);
            const Range r{u.begin, u.end};
            items.push_back({r.second - r.first, time.at({g, r})});
        }
    }
    return items;
}

}  // namespace

int main(int argc, char **argv) {
    const int64_t tokens = flag(argc, argv, "--tokens", 4096);
    const int passes = std::max(1, flag(argc, argv, "--passes", 3));
    Case c;  // the harness's 27B forward case at T = 4096, at --tokens
    bool found = false;
    for (const Case &p : perf_cases())
        if (p.op == Op::Forward && p.model == "qwen3.5-27b" && p.shape.T == 4096 && p.cu_seqlens.empty() && !p.kda) {
            c = p;
            found = true;
            break;
        }
    if (!found) {
        std::fprintf(stderr, "the harness has no 27B forward case at T = 4096\n");
        return 1;
    }
    c.shape.T = tokens;
    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0)), outputs = make_outputs(c, GDN_TYPE_F32);
    Mirror in(inputs, host_memory()), out(outputs, host_memory());
    const gdn_problem p = problem_of(c, in);
    const gdn_tensor o = out.tensor("out"), states = out.tensor("states");
    ForwardArgs a;
    if (Status st = validate_forward(&p, &o, &states, a); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.message.c_str());
        return 1;
    }
    const Dims &d = a.dims;
    const int64_t max_chunk = std::min<int64_t>(d.T, cpu::default_chunk(false, false));
    const int64_t groups = d.Bq * d.Hk, units = cpu::units_of(d);
    std::printf("case: %s\n", c.label().c_str());
    std::printf("groups (Hk B) %lld, units per group %lld, chunk %lld\n\n", (long long)groups, (long long)units,
                (long long)max_chunk);

    cpu::ForwardWork w;
    w.resize(d, max_chunk);
    const std::vector<Range> ranges = slice_ranges(units);
    std::map<std::pair<int64_t, Range>, double> time;  // fastest of the passes (the first also warms up)
    for (int pass = 0; pass < passes; ++pass)
        for (int64_t g = 0; g < groups; ++g)
            for (const Range &r : ranges) {
                const Clock::time_point t = Clock::now();
                cpu::forward_group(a, g / d.Hk, g % d.Hk, max_chunk, r.first, r.second, w);
                const double s = seconds_since(t);
                auto [it, fresh] = time.emplace(std::make_pair(g, r), s);
                if (!fresh) it->second = std::min(it->second, s);
            }
    for (const Range &r : ranges) {
        double total = 0;
        for (int64_t g = 0; g < groups; ++g) total += time.at({g, r});
        std::printf("units [%lld, %lld): %.2f ms a group (mean)\n", (long long)r.first, (long long)r.second,
                    1e3 * total / groups);
    }
    const double one = replay(items_of(time, groups, units, {groups, 1}), 1).makespan;
    std::printf("\none thread, whole groups: %.1f ms\n\n", 1e3 * one);
    std::printf("| threads | whole: ms | speedup | balance | split: ms | speedup | balance | split / whole |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int threads : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 24, 32, 48, 64}) {
        const int64_t before_slices = groups < threads ? cpu::forward_split(groups, units, threads, true).slices : 1;
        const Modelled whole = replay(items_of(time, groups, units, {before_slices > 1 ? 0 : groups, before_slices}), threads);
        const Modelled split = replay(items_of(time, groups, units, cpu::forward_split(groups, units, threads, true)), threads);
        std::printf("| %d | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f | %.3f |\n", threads, 1e3 * whole.makespan,
                    one / whole.makespan, whole.balance, 1e3 * split.makespan, one / split.makespan, split.balance,
                    split.makespan / whole.makespan);
    }
    return 0;
}
