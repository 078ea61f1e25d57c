// How the chunked forward of a call is cut into work items: whole groups (q/k sequence, key
// head), and where whole groups would leave workers waiting, slices of a group's units.
// forward_group computes each unit the same way whatever slice it is in (a slice recomputes its
// group's shared grams and rereads q and k), so the cut never changes the bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "cpu/chunk_drivers.h"  // UnitRange

namespace gdn::cpu {

// Groups [first_group, groups) are cut into `slices` slices of their units (slice_units).
struct ForwardSplit {
    int64_t first_group, slices;
};

// Units of slice s of a group's `units` cut into `slices`: [s units / n, (s + 1) units / n).
inline UnitRange slice_units(int64_t units, int64_t slices, int64_t s) {
    return {s * units / slices, (s + 1) * units / slices};
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
    std::stable_sort(items.begin(), items.end(), std::greater<double>());
    std::vector<double> busy(static_cast<size_t>(workers), 0.0);
    for (double t : items) *std::min_element(busy.begin(), busy.end()) += t;
    return *std::max_element(busy.begin(), busy.end());
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

}  // namespace gdn::cpu
