// How the chunked backward of a call is spread over workers (the steps are in chunk_drivers.h).
//
// The group schedule hands each worker whole groups (backward_group: every step of the group in
// order), with a tail where the workers do not divide the groups (backward_tail_groups); the
// split schedule runs rounds over every group's units, so a call of G groups of u units keeps
// G u workers busy instead of G. All run the same steps and sum in the same order, so the
// schedule (and the thread count) never changes the bits.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cpu/chunk_drivers.h"
#include "cpu/thread_pool.h"

namespace gdn::cpu {

// Whether a call of `groups` groups of `units` units runs split on `threads` workers: when the
// group schedule would leave workers idle, i.e. its makespan in unit-times, ceil(G / threads) u,
// exceeds the split one's, ceil(G u / threads); and at most 2 threads groups, because the split
// schedule holds every group's state at once (the group schedule one per worker, and one per
// tail group).
inline bool split_backward_units(int64_t groups, int64_t units, int threads) {
    const auto ceil_div = [](int64_t x, int64_t y) { return (x + y - 1) / y; };
    return groups <= 2 * int64_t(threads) && ceil_div(groups, threads) * units > ceil_div(groups * units, threads);
}

// What a panel item costs beyond its columns' share of a unit, in unit-times: it prepares the
// unit's chunk again (gates, P, M; KDA's gated rows), and each unit is finished once more from
// its panels' sums (bench/backward_scaling measures both).
constexpr double kPanelOverheadUnits = 0.1;

// The items of a call's backward (cpu_backend.cpp: one unpacked call): panels where even single
// units leave workers idle and the panels' rounds, overhead included, end sooner (B = 1 on a
// many-core host: 48 units of the 27B shape on 64 threads are one round, and 96 panels would be
// two of half a unit); else units where split_backward_units says so; else groups. The bits are
// the same for each (value_columns.h).
inline BackwardItems backward_items(int64_t groups, int64_t units, int64_t panels, int threads) {
    const auto ceil_div = [](int64_t x, int64_t y) { return (x + y - 1) / y; };
    const int64_t unit_items = groups * units;
    if (panels > 1 && unit_items < threads &&
        double(ceil_div(unit_items * panels, threads)) * (1.0 / double(panels) + kPanelOverheadUnits) <
            double(ceil_div(unit_items, threads)))
        return BackwardItems::Panels;
    return split_backward_units(groups, units, threads) ? BackwardItems::Units : BackwardItems::Groups;
}

// The group schedule on more groups than workers that do not divide them (16 groups on 3, 5, 6
// or 7): whole groups handed out, the last round leaves workers waiting a whole group's time.
// There the tail, the last `threads` groups, runs in two steps instead: their forward passes
// (backward_checkpoints), one item per unit, join the other groups' items, which the pool hands
// out longest first, so they fill the gaps the whole groups leave; then their reverse walks, one
// item each. The same steps and sums as backward_group, on one more group state per worker.
// Where the workers divide the groups only unequal cores (a shared host) leave waits: about 2%
// of the time on two, a tail there measured within noise of none (docs/PERF.md), not worth the
// states. Returns the tail's length (0: none; every group whole).
inline int64_t backward_tail_groups(int64_t groups, int threads) {
    return threads > 1 && groups > threads && groups % threads != 0 ? threads : 0;
}

// Chunk ends of group g = bq * Hk + kh.
using GroupPlans = std::function<const std::vector<int64_t> &(int64_t group)>;

// The split schedule of one call: the forward pass per unit (per panel), then per round (a run of
// segments, the last first: backward_rounds) the unit (panel) steps of every group that has it,
// split by panels the units' finishes, then the groups' reductions (each followed by the grams of
// its group's next round). items: Units or Panels. states[g] belongs to group g; work[w] to
// worker w.
void backward_in_rounds(ThreadPool &pool, const BackwardArgs &a, const GroupPlans &plans, BackwardItems items,
                        std::vector<GroupBackward> &states, std::vector<BackwardWork> &work);

// The group schedule with a tail (backward_tail_groups): states[w] belongs to worker w for the
// whole groups, states[threads + t] to tail group groups - tail + t; work[w] to worker w.
void backward_with_tail(ThreadPool &pool, const BackwardArgs &a, const GroupPlans &plans, int64_t tail,
                        std::vector<GroupBackward> &states, std::vector<BackwardWork> &work);

}  // namespace gdn::cpu
