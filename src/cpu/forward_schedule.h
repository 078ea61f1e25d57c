// How the chunked forward of a call is cut into work items: whole groups (q/k sequence, key
// head); where whole groups would leave workers waiting, slices of a group's units; and where
// even single units would (B = 1 on a many-core host), blocks of each unit's value columns.
// forward_group computes each unit and each column the same way whatever slice or block it is
// in (a slice or a block recomputes its group's shared grams and rereads q and k), so the cut
// never changes the bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "cpu/chunk_drivers.h"  // UnitRange
#include "cpu/value_columns.h"

namespace gdn::cpu {

// Groups [first_group, groups) are cut into `slices` slices of their units (slice_units).
struct ForwardSplit {
    int64_t first_group, slices;
};

// Units of slice s of a group's `units` cut into `slices`: [s units / n, (s + 1) units / n).
inline UnitRange slice_units(int64_t units, int64_t slices, int64_t s) {
    return {s * units / slices, (s + 1) * units / slices};
}

// The time, in units, of `items` (their times) run longest first, each to the worker free first.
inline double makespan(std::vector<double> items, int workers) {
    std::stable_sort(items.begin(), items.end(), std::greater<double>());
    std::vector<double> busy(static_cast<size_t>(workers), 0.0);
    for (double t : items) *std::min_element(busy.begin(), busy.end()) += t;
    return *std::max_element(busy.begin(), busy.end());
}

// What a slice costs beyond its units' work, in units: its group's grams and q/k rows again
// (measured at the 27B shape, bench/forward_scaling: about 1 ms a slice against 6.1 ms a unit).
constexpr double kSliceOverheadUnits = 0.15;

// The time, in units, of a round that starts with every worker free and runs `groups` groups
// cut into `slices` slices each, longest first, each slice to the worker free first (as
// ThreadPool::run_weighted hands them out).
inline double round_span(int64_t groups, int64_t units, int64_t slices, int workers) {
    std::vector<double> items;
    for (int64_t g = 0; g < groups; ++g)
        for (int64_t s = 0; s < slices; ++s) {
            const UnitRange r = slice_units(units, slices, s);
            items.push_back(double(r.end - r.begin) + (slices > 1 ? kSliceOverheadUnits : 0.0));
        }
    return makespan(std::move(items), workers);
}

// Fewer groups than workers: every group, so every worker has work. Otherwise, in a single call,
// the groups of a last round the workers do not divide (16 groups on 12 workers: the last 4),
// into as many slices as make that round shortest by round_span (none where the slices' extra
// work outweighs the wait: 16 groups of 3 units on 9 workers stay whole), so that the round's
// workers share them instead of most waiting for a few. The pool runs items longest first, so
// the whole groups go before the slices. Packed sequences (several calls) keep whole groups
// there: their lengths already fill the gaps.
inline ForwardSplit forward_split(int64_t groups, int64_t units, int workers, bool single_call) {
    if (groups == 0) return {0, 1};
    if (groups < workers) return {0, std::min<int64_t>(units, (workers + groups - 1) / groups)};
    const int64_t last_round = groups % workers;
    if (!single_call || last_round == 0) return {groups, 1};
    int64_t best = 1;
    for (int64_t slices = 2; slices <= units; ++slices)
        if (round_span(last_round, units, slices, workers) < round_span(last_round, units, best, workers)) best = slices;
    return {best > 1 ? groups - last_round : groups, best};
}

// What a block of a unit's value columns costs beyond its columns' share of the unit's work, in
// units: its group's grams, the q/k rows and the unit's gates again (measured at the 27B shape,
// bench/forward_scaling on Zen 4: 0.13 a block for halves, 0.19 for quarters).
constexpr double kColumnBlockOverheadUnits = 0.17;

// Into how many blocks of value columns (value_columns.h: whole quanta of `quantum` columns)
// each unit is cut: 1 unless `split` already makes every unit of the `groups` an item of its own
// and workers remain; then the count that makes the call shortest by makespan, 1 where the
// blocks' repeated key side outweighs the wait (48 units on 64 workers: halves would take two
// rounds, each longer than half a unit).
inline int64_t forward_column_blocks(ForwardSplit split, int64_t groups, int64_t units, int64_t columns,
                                     int64_t quantum, int workers) {
    const int64_t unit_items = groups * units;
    if (split.first_group != 0 || split.slices != units || unit_items >= workers || quantum <= 0) return 1;
    const auto span = [&](int64_t blocks) {
        std::vector<double> items;
        for (int64_t u = 0; u < unit_items; ++u)
            for (int64_t i = 0; i < blocks; ++i) {
                const ColumnRange c = column_block(columns, quantum, blocks, i);
                items.push_back(double(c.end - c.begin) / double(columns) + kColumnBlockOverheadUnits);
            }
        return makespan(std::move(items), workers);
    };
    int64_t best = 1;
    double best_span = span(1);
    for (int64_t blocks = 2; blocks <= columns / quantum && unit_items * (blocks - 1) < workers; ++blocks)
        if (const double s = span(blocks); s < best_span) best = blocks, best_span = s;
    return best;
}

// How many neighbouring key heads each work item of whole groups takes (forward_group: they go
// chunk by chunk in turn, so that each token's rows, which share pages across key heads, are
// read by all of them while the pages' translations are in the TLB). The most of 4, 2 that
// divides every q/k sequence's key heads, whose groups' running states (`group_state_bytes`
// each) fit in the core's L2 (`l2_bytes`: they are read and written every chunk), and whose
// items keep the workers as busy as single groups do (16 groups on 2 workers: 4 items of 4, 8
// groups' time either way; on 8 workers pairs, 2 groups' time; on 16 workers none: pairs would
// take 2 groups' time instead of 1); else 1. At the 27B shape on Zen 4 (2 workers) the forward
// took 0.96-0.97 of its time with pairs, 0.95-0.96 with 4; 8 (whose states leave the L2) were
// about 0.5% slower than 4 (docs/PERF.md).
inline int64_t forward_groups_per_item(ForwardSplit split, int64_t groups, int64_t Hk, int64_t blocks, int workers,
                                       int64_t group_state_bytes, int64_t l2_bytes) {
    if (split.first_group != groups || blocks != 1 || groups == 0) return 1;
    const auto rounds = [&](int64_t items) { return (items + workers - 1) / workers; };
    for (int64_t n = kMaxForwardGroups; n > 1; n /= 2)
        if (Hk % n == 0 && n * group_state_bytes <= l2_bytes && n * rounds(groups / n) <= rounds(groups)) return n;
    return 1;
}

}  // namespace gdn::cpu
