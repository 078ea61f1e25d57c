#include "data.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace mqar {

std::string check_task(const TaskConfig &task) {
    if (task.pairs < 1) return "pairs must be at least 1";
    if (task.vocab < 4) return "vocab must be at least 4";
    if (task.pairs > task.vocab / 2 - 1)
        return "pairs = " + std::to_string(task.pairs) + " needs vocab >= " + std::to_string(2 * task.pairs + 2) +
               " (distinct keys in [1, vocab/2), distinct values in [vocab/2, vocab))";
    if (task.seq_len < 4 * task.pairs)
        return "seq_len = " + std::to_string(task.seq_len) + " is too short for " + std::to_string(task.pairs) +
               " pairs and their queries (needs >= " + std::to_string(4 * task.pairs) + ")";
    return "";
}

namespace {

// The first `count` entries of a random permutation of `pool` (partial Fisher-Yates).
void draw_distinct(std::vector<int32_t> &pool, int count, Rng &rng) {
    for (int i = 0; i < count; ++i) std::swap(pool[i], pool[i + rng.below(static_cast<int64_t>(pool.size()) - i)]);
}

}  // namespace

void generate(const TaskConfig &task, int sequences, Rng &rng, Batch &out) {
    const int T = task.seq_len, P = task.pairs, half = task.vocab / 2;
    out.sequences = sequences;
    out.seq_len = T;
    out.tokens.assign(static_cast<size_t>(sequences) * T, 0);
    out.targets.assign(static_cast<size_t>(sequences) * T, kNoTarget);

    std::vector<int32_t> keys(half - 1), values(task.vocab - half), order(P);
    const int query_region = T - 2 * P, slots = query_region / 2;
    std::vector<int32_t> slot(slots);
    for (int s = 0; s < sequences; ++s) {
        int32_t *tok = out.tokens.data() + static_cast<size_t>(s) * T;
        int32_t *tgt = out.targets.data() + static_cast<size_t>(s) * T;
        std::iota(keys.begin(), keys.end(), 1);
        std::iota(values.begin(), values.end(), half);
        draw_distinct(keys, P, rng);
        draw_distinct(values, P, rng);
        for (int p = 0; p < P; ++p) {
            tok[2 * p] = keys[p];
            tok[2 * p + 1] = values[p];
        }
        std::iota(order.begin(), order.end(), 0);
        draw_distinct(order, P, rng);  // which pair each query asks for
        std::iota(slot.begin(), slot.end(), 0);
        draw_distinct(slot, P, rng);   // where the queries go
        std::sort(slot.begin(), slot.begin() + P);
        for (int q = 0; q < P; ++q) {
            const int pos = 2 * P + 2 * slot[q];
            tok[pos] = keys[order[q]];
            tok[pos + 1] = values[order[q]];
            tgt[pos] = values[order[q]];
        }
    }
}

}  // namespace mqar
