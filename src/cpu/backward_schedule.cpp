#include "cpu/backward_schedule.h"

#include <algorithm>

namespace gdn::cpu {

void backward_in_rounds(ThreadPool &pool, const BackwardArgs &a, const GroupPlans &plans,
                        std::vector<GroupBackward> &states, std::vector<BackwardWork> &work) {
    const Dims &d = a.dims;
    const int64_t groups = d.Bq * d.Hk, units = units_of(d);
    const int64_t max_chunk = states.front().C;
    auto bq = [&](int64_t g) { return g / d.Hk; };
    auto kh = [&](int64_t g) { return g % d.Hk; };
    std::vector<int64_t> segments(groups), weights;
    int64_t rounds = 0;
    for (int64_t g = 0; g < groups; ++g) {
        segments[g] = backward_layout(d, plans(g), max_chunk).segments;
        rounds = std::max(rounds, segments[g]);
    }
    // Items weigh their tokens (the pool runs the heaviest first). First the forward pass per unit
    // and the last segment's grams per group; then per round the units' steps, and per group the
    // reduction and the grams of its next segment.
    std::vector<int64_t> first(groups * units + groups, d.T);
    pool.run_weighted(first, [&](int64_t i, int worker) {
        if (i < groups * units) {
            const int64_t g = i / units;
            backward_checkpoints(a, bq(g), kh(g), plans(g), {i % units, i % units + 1}, states[g], work[worker]);
        } else {
            const int64_t g = i - groups * units;
            backward_gram(a, bq(g), kh(g), plans(g), segments[g] - 1, states[g], work[worker]);
        }
    });
    std::vector<int64_t> active;  // groups with a segment in this round
    for (int64_t round = 0; round < rounds; ++round) {
        active.clear();
        weights.clear();
        for (int64_t g = 0; g < groups; ++g) {
            if (segments[g] <= round) continue;
            const std::vector<int64_t> &ends = plans(g);
            const int64_t per_seg = backward_layout(d, ends, max_chunk).chunks_per_segment;
            const int64_t seg = segments[g] - 1 - round, c0 = seg * per_seg;
            const int64_t c1 = std::min<int64_t>(static_cast<int64_t>(ends.size()), c0 + per_seg);
            active.push_back(g);
            weights.push_back(ends[c1 - 1] - (c0 ? ends[c0 - 1] : 0));
        }
        std::vector<int64_t> unit_weights(active.size() * units);
        for (size_t i = 0; i < unit_weights.size(); ++i) unit_weights[i] = weights[i / units];
        pool.run_weighted(unit_weights, [&](int64_t i, int worker) {
            const int64_t g = active[i / units];
            backward_unit_segment(a, bq(g), kh(g), plans(g), {i % units, i % units + 1}, segments[g] - 1 - round, states[g],
                                  work[worker]);
        });
        pool.run_weighted(weights, [&](int64_t i, int worker) {
            const int64_t g = active[i];
            const int64_t seg = segments[g] - 1 - round;
            backward_reduce_segment(a, bq(g), kh(g), plans(g), seg, states[g], work[worker]);
            backward_gram(a, bq(g), kh(g), plans(g), seg - 1, states[g], work[worker]);
        });
    }
}

void backward_with_tail(ThreadPool &pool, const BackwardArgs &a, const GroupPlans &plans, int64_t tail,
                        std::vector<GroupBackward> &states, std::vector<BackwardWork> &work) {
    const Dims &d = a.dims;
    const int64_t groups = d.Bq * d.Hk, units = units_of(d), head = groups - tail;
    const int64_t threads = pool.size();
    auto bq = [&](int64_t g) { return g / d.Hk; };
    auto kh = [&](int64_t g) { return g % d.Hk; };
    // Whole groups weigh their units' tokens, a tail unit's forward pass (about a quarter of its
    // backward) one unit's: the pool runs the whole groups first.
    std::vector<int64_t> weights(head + tail * units, d.T);
    std::fill_n(weights.begin(), head, d.T * units);
    pool.run_weighted(weights, [&](int64_t i, int worker) {
        if (i < head) return backward_group(a, bq(i), kh(i), plans(i), states[worker], work[worker]);
        const int64_t t = (i - head) / units, g = head + t, u = (i - head) % units;
        backward_checkpoints(a, bq(g), kh(g), plans(g), {u, u + 1}, states[threads + t], work[worker]);
    });
    pool.run_weighted(std::vector<int64_t>(tail, d.T), [&](int64_t t, int worker) {
        const int64_t g = head + t;
        backward_reverse_walk(a, bq(g), kh(g), plans(g), states[threads + t], work[worker]);
    });
}

}  // namespace gdn::cpu
