// How the chunked forward of a call is cut into work items: whole groups (q/k sequence, key
// head), and where whole groups would leave workers waiting, slices of a group's units.
// forward_group computes each unit the same way whatever slice it is in (a slice recomputes its
// group's shared grams and rereads q and k), so the cut never changes the bits.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gdn::cpu {

// Groups [first_group, groups) are cut into `slices` slices of their units.
struct ForwardSplit {
    int64_t first_group, slices;
};

// Fewer groups than workers: every group, so every worker has work. Otherwise, in a single
// call, the groups of the last round when the workers do not divide them (16 groups on 3
// workers: the 16th; on 12: the last 4), so that the round's workers share them instead of most
// waiting for a few: a slice costs its group's grams and q/k reads again (about a tenth of a
// group at the 27B shape), against a last round that ends a whole group's time later. The pool
// runs items longest first, so the whole groups go before the slices. Packed sequences
// (several calls) keep whole groups there: their lengths already fill the gaps.
inline ForwardSplit forward_split(int64_t groups, int64_t units, int workers, bool single_call) {
    const auto ceil_div = [](int64_t x, int64_t y) { return (x + y - 1) / y; };
    if (groups == 0) return {0, 1};
    if (groups < workers) return {0, std::min<int64_t>(units, ceil_div(workers, groups))};
    const int64_t last_round = groups % workers;
    if (!single_call || last_round == 0) return {groups, 1};
    return {groups - last_round, std::min<int64_t>(units, ceil_div(workers, last_round))};
}

}  // namespace gdn::cpu
