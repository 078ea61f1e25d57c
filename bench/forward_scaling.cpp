// How the cpu forward spreads over threads, modelled from measured item times (this machine has
// 2 cores; the question is every thread count a user may have, which need not divide the groups).
//
// Runs the chunked forward of the 27B shape (Hk 16, Hv 48, Sk = Sv = 128, B 1, the harness's perf
// case; T = 4096 by default) on one thread, --passes times, and keeps the fastest time of every
// item the backend can hand out: each group whole (forward_group over its 3 units), each slice
// of it (units [s U / n, (s + 1) U / n) for n = 2 .. U slices), and each block of a single unit's
// value columns (cpu/value_columns.h: n = 2 .. Sv / quantum blocks). Then, for each thread count
// up to 192, replays the pool's schedule (items in decreasing weight, each to the first free
// worker, as ThreadPool::run_weighted) over three cuts:
//   whole:  groups whole unless there are fewer groups than threads (the cut before forward_split
//           cut the last round's groups)
//   slices: forward_split's cut (cpu/forward_schedule.h) without column blocks
//   blocks: what the backend cuts now: slices, and where single units leave threads idle,
//           blocks of their columns (forward_column_blocks)
// and prints the makespans, the speedups over one thread, and the balance: makespan over the mean
// work per thread (1.00 is perfect; repeated grams and q/k reads count as work). It also prints
// what a block costs beyond its share of a unit, the constant forward_column_blocks weighs.
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
#include "cpu/gemm.h"
#include "problem_data.h"
#include "runner.h"

namespace {

using namespace gdn;
using namespace gdn::testkit;
using Clock = std::chrono::steady_clock;
using Range = std::pair<int64_t, int64_t>;  // units [first, second) of a group, or value columns
using ItemKey = std::pair<int64_t, std::pair<Range, Range>>;  // group, units, columns

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
    int64_t weight;  // as the backend weighs it: units times columns (all items have the call's tokens)
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

// The items of one call cut as `split` and `blocks` say, with the measured times.
std::vector<Item> items_of(const std::map<ItemKey, double> &time, int64_t groups, int64_t units, int64_t columns,
                           int64_t quantum, cpu::ForwardSplit split, int64_t blocks) {
    std::vector<Item> items;
    for (int64_t g = 0; g < groups; ++g) {
        const int64_t n = g >= split.first_group ? split.slices : 1;
        for (int64_t s = 0; s < n; ++s) {
            const cpu::UnitRange u = cpu::slice_units(units, n, s);
            for (int64_t b = 0; b < blocks; ++b) {
                const cpu::ColumnRange c = cpu::column_block(columns, quantum, blocks, b);
                items.push_back({(u.end - u.begin) * (c.end - c.begin), time.at({g, {{u.begin, u.end}, {c.begin, c.end}}})});
            }
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
    const int64_t columns = d.Sv, quantum = cpu::gemm_panel_width();
    // Every item: the slices with all columns, and each single unit's column blocks.
    std::vector<std::pair<Range, Range>> cuts;
    for (const Range &r : slice_ranges(units)) cuts.push_back({r, {0, columns}});
    for (int64_t u = 0; u < units; ++u)
        for (int64_t n = 2; n <= columns / quantum; ++n)
            for (int64_t b = 0; b < n; ++b) {
                const cpu::ColumnRange c = cpu::column_block(columns, quantum, n, b);
                const std::pair<Range, Range> cut{{u, u + 1}, {c.begin, c.end}};
                if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) cuts.push_back(cut);
            }
    std::map<ItemKey, double> time;  // fastest of the passes (the first also warms up)
    for (int pass = 0; pass < passes; ++pass)
        for (int64_t g = 0; g < groups; ++g)
            for (const auto &cut : cuts) {
                const Clock::time_point t = Clock::now();
                const int64_t kh = g % d.Hk;
                cpu::forward_group(a, g / d.Hk, {kh, kh + 1}, max_chunk, cut.first.first, cut.first.second,
                                   {cut.second.first, cut.second.second}, w);
                const double s = seconds_since(t);
                auto [it, fresh] = time.emplace(ItemKey{g, cut}, s);
                if (!fresh) it->second = std::min(it->second, s);
            }
    const auto mean_ms = [&](const std::pair<Range, Range> &cut) {
        double total = 0;
        for (int64_t g = 0; g < groups; ++g) total += time.at({g, cut});
        return 1e3 * total / groups;
    };
    for (const Range &r : slice_ranges(units))
        std::printf("units [%lld, %lld): %.2f ms a group (mean)\n", (long long)r.first, (long long)r.second,
                    mean_ms({r, {0, columns}}));
    // A block's cost beyond its columns' share of its unit, in units (kColumnBlockOverheadUnits).
    std::printf("\n| blocks of one unit | mean block ms | one unit ms | overhead a block, in units |\n|---:|---:|---:|---:|\n");
    for (int64_t n = 2; n <= columns / quantum; ++n) {
        double block = 0, unit = 0;
        for (int64_t u = 0; u < units; ++u) {
            unit += mean_ms({{u, u + 1}, {0, columns}}) / units;
            for (int64_t b = 0; b < n; ++b) {
                const cpu::ColumnRange c = cpu::column_block(columns, quantum, n, b);
                block += mean_ms({{u, u + 1}, {c.begin, c.end}}) / (units * n);
            }
        }
        std::printf("| %lld | %.2f | %.2f | %.3f |\n", (long long)n, block, unit, block / unit - 1.0 / n);
    }
    const double one = replay(items_of(time, groups, units, columns, quantum, {groups, 1}, 1), 1).makespan;
    std::printf("\none thread, whole groups: %.1f ms\n\n", 1e3 * one);
    std::printf("| threads | whole: ms | speedup | balance | slices: ms | speedup | balance | blocks | blocks: ms | speedup | balance |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int threads : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 144, 192}) {
        const int64_t before_slices = groups < threads ? cpu::forward_split(groups, units, threads, true).slices : 1;
        const cpu::ForwardSplit split = cpu::forward_split(groups, units, threads, true);
        const int64_t blocks = cpu::forward_column_blocks(split, groups, units, columns, quantum, threads);
        const Modelled whole = replay(
            items_of(time, groups, units, columns, quantum, {before_slices > 1 ? 0 : groups, before_slices}, 1), threads);
        const Modelled sliced = replay(items_of(time, groups, units, columns, quantum, split, 1), threads);
        const Modelled cut = replay(items_of(time, groups, units, columns, quantum, split, blocks), threads);
        std::printf("| %d | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f | %lld | %.1f | %.2f | %.2f |\n", threads,
                    1e3 * whole.makespan, one / whole.makespan, whole.balance, 1e3 * sliced.makespan,
                    one / sliced.makespan, sliced.balance, (long long)blocks, 1e3 * cut.makespan, one / cut.makespan,
                    cut.balance);
    }
    return 0;
}
