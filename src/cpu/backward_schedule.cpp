#include "cpu/backward_schedule.h"

#include <algorithm>

namespace gdn::cpu {

void backward_in_rounds(ThreadPool &pool, const BackwardArgs &a, const GroupPlans &plans, BackwardItems items,
                        std::vector<GroupBackward> &states, std::vector<BackwardWork> &work) {
    const Dims &d = a.dims;
    const int64_t groups = d.Bq * d.Hk, units = units_of(d);
    // Per unit, its panels one item each (split by panels) or one item of all of them.
    const int64_t panels = items == BackwardItems::Panels ? states.front().panels.count : 1;
    const int64_t per_group = units * panels;
    auto unit_of = [&](int64_t i) { return (i % per_group) / panels; };
    auto panels_of = [&](int64_t i) {
        return panels == 1 ? all_panels(states.front()) : PanelRange{i % panels, i % panels + 1};
    };
    auto bq = [&](int64_t g) { return g / d.Hk; };
    auto kh = [&](int64_t g) { return g % d.Hk; };
    std::vector<int64_t> rounds_of(groups);
    int64_t rounds = 0;
    for (int64_t g = 0; g < groups; ++g) {
        rounds_of[g] = backward_rounds(a, plans(g), states[g]);
        rounds = std::max(rounds, rounds_of[g]);
    }
    // A step per (group, chunk j of a round): the items of a phase after the unit steps.
    struct ChunkItem {
        int64_t g, j;
    };
    std::vector<ChunkItem> chunk_items;
    std::vector<int64_t> weights;
    auto add_chunks = [&](int64_t g, int64_t round) {
        for (int64_t j = 0, n = backward_round_chunks(a, plans(g), round, states[g]); j < n; ++j) {
            chunk_items.push_back({g, j});
            weights.push_back(1);
        }
    };
    // Items weigh their tokens (the pool runs the heaviest first). First the forward pass per unit
    // (panel) and round 0's grams per chunk; then per round the units' (panels') steps,
    // split by panels the units' finishes per chunk, and per chunk the groups' reductions beside
    // the grams of their next round.
    weights.assign(groups * per_group, d.T);
    for (int64_t g = 0; g < groups; ++g) add_chunks(g, 0);
    pool.run_weighted(weights, [&](int64_t i, int worker) {
        if (i < groups * per_group) {
            const int64_t g = i / per_group, u = unit_of(i);
            backward_checkpoints(a, bq(g), kh(g), plans(g), {u, u + 1}, panels_of(i), states[g], work[worker]);
        } else {
            const ChunkItem c = chunk_items[i - groups * per_group];
            backward_gram(a, bq(c.g), kh(c.g), plans(c.g), 0, c.j, states[c.g], work[worker]);
        }
    });
    std::vector<int64_t> active;  // groups with this round
    for (int64_t round = 0; round < rounds; ++round) {
        active.clear();
        weights.clear();
        for (int64_t g = 0; g < groups; ++g)
            if (round < rounds_of[g]) active.push_back(g);
        for (int64_t g : active)
            for (int64_t i = 0; i < per_group; ++i) weights.push_back(backward_round_tokens(a, plans(g), round, states[g]));
        pool.run_weighted(weights, [&](int64_t i, int worker) {
            const int64_t g = active[i / per_group], u = unit_of(i);
            backward_unit_round(a, bq(g), kh(g), plans(g), {u, u + 1}, panels_of(i), round, states[g], work[worker]);
        });
        if (panels > 1) {
            chunk_items.clear();
            weights.clear();
            for (int64_t g : active) add_chunks(g, round);
            const int64_t n = static_cast<int64_t>(chunk_items.size());
            weights.assign(n * units, 1);
            pool.run_weighted(weights, [&](int64_t i, int worker) {
                const ChunkItem c = chunk_items[i / units];
                backward_finish_chunk(a, bq(c.g), kh(c.g), plans(c.g), i % units, round, c.j, states[c.g], work[worker]);
            });
        }
        // The reductions of this round, then (lighter: the pool hands them out after) the grams
        // of the next.
        chunk_items.clear();
        weights.clear();
        for (int64_t g : active) add_chunks(g, round);
        const int64_t reductions = static_cast<int64_t>(chunk_items.size());
        for (int64_t g : active) add_chunks(g, round + 1);
        std::fill_n(weights.begin(), reductions, 2);
        pool.run_weighted(weights, [&](int64_t i, int worker) {
            const ChunkItem c = chunk_items[i];
            if (i < reductions) backward_reduce_chunk(a, bq(c.g), kh(c.g), plans(c.g), round, c.j, states[c.g], work[worker]);
            else backward_gram(a, bq(c.g), kh(c.g), plans(c.g), round + 1, c.j, states[c.g], work[worker]);
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
        backward_checkpoints(a, bq(g), kh(g), plans(g), {u, u + 1}, all_panels(states[threads + t]), states[threads + t],
                             work[worker]);
    });
    pool.run_weighted(std::vector<int64_t>(tail, d.T), [&](int64_t t, int worker) {
        const int64_t g = head + t;
        backward_reverse_walk(a, bq(g), kh(g), plans(g), states[threads + t], work[worker]);
    });
}

}  // namespace gdn::cpu
