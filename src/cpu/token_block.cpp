#include "cpu/token_block.h"

#include <cstring>

#include "cpu/token_vec.h"
#include "cpu/vectorized.h"

namespace gdn::cpu {

namespace {

using namespace token_vec;

// Lane n < 4 of the result is the sum of the lanes of acc[n], every sum in one fixed tree:
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Four reductions share four adds and seven
// shuffles (a horizontal sum of one vector takes three of each).
GDN_INLINE Vec pair_sums(Vec x, Vec y) {  // x0+x1, x2+x3, y0+y1, y2+y3, x4+x5, x6+x7, y4+y5, y6+y7
    return __builtin_shufflevector(x, y, 0, 2, 8, 10, 4, 6, 12, 14) +
           __builtin_shufflevector(x, y, 1, 3, 9, 11, 5, 7, 13, 15);
}
GDN_INLINE Vec lane_sums(const Vec (&acc)[kTokenGroup]) {
    static_assert(kTokenGroup == 4, "four sums");
    const Vec halves = pair_sums(pair_sums(acc[0], acc[1]), pair_sums(acc[2], acc[3]));
    return halves + __builtin_shufflevector(halves, halves, 4, 5, 6, 7, 0, 1, 2, 3);
}

// Column n of a set of columns (a group's four: base at its first). Stride > 0: the stride is
// known at compile time (every set of the block has it), so the loops below address a set's four
// columns as constant offsets of one register; with a run-time stride GCC keeps a pointer per
// column and spills some of them.
template <int64_t Stride>
GDN_INLINE float *column(StateLines set, int n) {
    return reinterpret_cast<float *>(set.base + n * (Stride > 0 ? Stride : set.stride));
}

// A token is two passes over a group's columns:
//   first:  d_j = beta (v_j - c_j . (a o k))             (the columns are only read)
//   second: c_j = a o c_j + d_j k;  o_j = scale c_j . q   (on the new column)
// and the second needs every d_j of the group, so the passes of one token of one group cannot
// overlap. So the first pass of the next step (another group, or the next token of another
// group) runs inside the second pass of this one: one loop over the rows keeps two groups' eight
// accumulator chains in flight and both FMA pipes busy, instead of a pass of four latency-bound
// chains followed by a wait on its reduction.
template <bool Finish, bool Start, int64_t Stride>
GDN_INLINE void fused_pass(const TokenBlock &b, int64_t fin_t, StateLines fin_src, StateLines fin_dst,
                           const Vec (&delta)[kTokenGroup], Vec (&cq)[kTokenGroup], int64_t start_t,
                           StateLines start_src, Vec (&ck)[kTokenGroup], const char *ahead = nullptr,
                           int ahead_lines = 1) {
    const int64_t P = b.padded;
    const float *k = b.k + fin_t * P, *q = b.q + fin_t * P, *a = b.decay + fin_t * P;
    const float *ak = b.decayed_k + start_t * P;
    for (int64_t i = 0; i < P; i += kTokenLanes) {
        if (ahead)  // ahead_lines lines per vector of the pass, to L2
            for (int n = 0; n < ahead_lines; ++n)
                __builtin_prefetch(ahead + (i / kTokenLanes * ahead_lines + n) * kCacheLine, 0, 2);
        if (Start) {
            const Vec akv = load(ak + i);
            for (int n = 0; n < kTokenGroup; ++n) ck[n] += load(column<Stride>(start_src, n) + i) * akv;
        }
        if (Finish) {
            const Vec kv = load(k + i), qv = load(q + i), av = load(a + i);
            for (int n = 0; n < kTokenGroup; ++n) {
                const Vec updated = load(column<Stride>(fin_src, n) + i) * av + delta[n] * kv;
                store(column<Stride>(fin_dst, n) + i, updated);
                cq[n] += updated * qv;
            }
        }
    }
}

// The block's steps (a group of columns at a token) in the order they run: groups in pairs, the
// pair's tokens interleaved (A0 B0 A1 B1 ...), so that every step but those of a lone last group
// has another group's step beside it to fuse with. (Counters, not a division per step: the next
// step's addresses wait on them.)
struct StepOrder {
    int64_t groups, tokens;
    int64_t group = 0, t = 0;  // the current step; group == groups: none left

    GDN_INLINE void advance() {
        const bool paired = group / 2 * 2 + 1 < groups;  // group and its partner form a pair
        if (paired && group % 2 == 0) {
            ++group;  // A_t -> B_t
        } else if (t + 1 < tokens) {
            ++t;
            if (paired) --group;  // B_t -> A_t+1
        } else {
            ++group;  // the next pair (or lone group), token 0
            t = 0;
        }
    }
};

// Where a group's columns are: the state's own memory when they are whole vectors (Sk a
// multiple of kTokenLanes) and four real columns, else padded work rows that hold a copy (with
// zero columns past Sv). Between tokens they are kept in work rows too. Work rows are
// kTokenGroupsInFlight groups' worth, by group parity: at most two groups are in flight, the one
// whose second pass is pending and the next one (its pair partner, or the first of the next pair).
struct GroupPlaces {
    const TokenBlock &b;
    StateLines from, to;
    float *scratch;
    char *zeros;

    GDN_INLINE int columns(int64_t g) const {
        return static_cast<int>(b.Sv - g * kTokenGroup < kTokenGroup ? b.Sv - g * kTokenGroup : kTokenGroup);
    }
    GDN_INLINE bool copied(int64_t g) const { return b.padded != b.Sk || columns(g) < kTokenGroup; }
    GDN_INLINE StateLines work(int64_t g) const {
        return {reinterpret_cast<char *>(scratch + (g % kTokenGroupsInFlight) * kTokenGroup * b.padded),
                b.padded * int64_t(sizeof(float))};
    }
    GDN_INLINE StateLines src(int64_t g, int64_t t) const {
        if (t > 0 || copied(g)) return work(g);
        if (!from.base) return {zeros, b.padded * int64_t(sizeof(float))};
        return {from.base + g * kTokenGroup * from.stride, from.stride};
    }
    GDN_INLINE StateLines dst(int64_t g, int64_t t) const {
        if (t + 1 < b.tokens || copied(g) || !to.base) return work(g);
        return {to.base + g * kTokenGroup * to.stride, to.stride};
    }
    // Before a copied group's first step: its columns into the work rows, padded with zeros.
    GDN_INLINE void copy_in(int64_t g) const {
        const StateLines rows = work(g);
        for (int n = 0; n < kTokenGroup; ++n) {
            float *row = column<0>(rows, n);
            const int64_t j = g * kTokenGroup + n;
            if (n < columns(g) && from.base) copy_row(row, from.line(j), b.Sk);
            else std::memset(row, 0, sizeof(float) * b.Sk);
            std::memset(row + b.Sk, 0, sizeof(float) * (b.padded - b.Sk));  // zero times the zero pads of k, q
        }
    }
    // What step (g, t) asks L2 for while it runs (nullptr: nothing), ahead_lines() lines per
    // vector of its pass.
    // - A decoding step (one token): group g of the next unit's state (b.ahead), its four
    //   columns; a batch's states come from memory, and the hardware prefetchers do not cross
    //   from one unit's state to the next one's pages.
    // - With several tokens a pair of groups stays in L1 for 2T steps, and the next pair's first
    //   reads would wait on L3: its eight columns (P / 2 lines, contiguous in the state when
    //   Stride is its column stride), a quarter per step over this pair's first four steps
    //   (measured: without it this kernel lost to the one before it, `70e1a57`, at 48 heads and
    //   T = 4).
    GDN_INLINE int ahead_lines() const { return b.tokens == 1 ? 2 : 1; }  // 4 columns: 128 bytes a vector
    template <int64_t Stride>
    GDN_INLINE const char *ahead_part(int64_t g, int64_t t) const {
        if (b.tokens == 1)
            return Stride > 0 && b.ahead.base && b.ahead.stride == Stride && b.padded == b.Sk &&
                           (g + 1) * kTokenGroup <= b.Sv
                       ? b.ahead.base + g * kTokenGroup * Stride
                       : nullptr;
        const int64_t pair_step = 2 * t + g % 2, next_pair = g / 2 * 2 + 2;
        if (Stride == 0 || !from.base || from.stride != Stride || pair_step >= 4 ||
            (next_pair + 2) * kTokenGroup > b.Sv)
            return nullptr;
        return from.base + next_pair * kTokenGroup * Stride + pair_step * 2 * Stride;
    }
    // After a copied group's last step: its real columns back to the state.
    GDN_INLINE void copy_out(int64_t g) const {
        if (!to.base) return;
        const StateLines rows = work(g);
        for (int n = 0; n < columns(g); ++n) copy_row(to.line(g * kTokenGroup + n), column<0>(rows, n), b.Sk);
    }
};

// The block's steps, each one's first pass with the previous one's second pass.
template <int64_t Stride>
GDN_INLINE void run_steps(const TokenBlock &b, const GroupPlaces &places) {
    StepOrder order{(b.Sv + kTokenGroup - 1) / kTokenGroup, b.tokens};
    Vec delta[kTokenGroup] = {};  // the previous step's deltas
    int64_t fin_g = -1, fin_t = 0;
    StateLines fin_src, fin_dst;
    for (;; order.advance()) {
        const bool starting = order.group < order.groups;  // a step to start (else only one to finish)
        if (!starting && fin_g < 0) break;
        const int64_t g = starting ? order.group : -1, t = starting ? order.t : 0;
        if (starting && t == 0 && places.copied(g)) places.copy_in(g);
        const StateLines start_src = g >= 0 ? places.src(g, t) : StateLines{};
        const char *ahead = g >= 0 ? places.ahead_part<Stride>(g, t) : nullptr;
        const int ahead_lines = places.ahead_lines();
        Vec ck[kTokenGroup] = {}, cq[kTokenGroup] = {};
        const bool finishing = fin_g >= 0;
        if (finishing && g >= 0 && g != fin_g) {
            fused_pass<true, true, Stride>(b, fin_t, fin_src, fin_dst, delta, cq, t, start_src, ck, ahead, ahead_lines);
        } else {  // nothing to fuse: the first step, the last, or a lone group's next token
            if (finishing) fused_pass<true, false, Stride>(b, fin_t, fin_src, fin_dst, delta, cq, t, start_src, ck);
            if (g >= 0) fused_pass<false, true, Stride>(b, fin_t, fin_src, fin_dst, delta, cq, t, start_src, ck, ahead, ahead_lines);
        }
        if (finishing) {
            const int count = places.columns(fin_g);
            if (b.out) {
                const Vec outs = lane_sums(cq);
                for (int n = 0; n < count; ++n) b.out[fin_t][fin_g * kTokenGroup + n] = b.scale * outs[n];
            }
            if (b.snapshot[fin_t].base)
                for (int n = 0; n < count; ++n)
                    copy_row(b.snapshot[fin_t].line(fin_g * kTokenGroup + n), column<Stride>(fin_dst, n), b.Sk);
            if (fin_t + 1 == b.tokens && places.copied(fin_g)) places.copy_out(fin_g);
        }
        if (g >= 0) {
            const Vec dots = lane_sums(ck);
            const int count = places.columns(g);
            for (int n = 0; n < kTokenGroup; ++n)
                delta[n] = splat(n < count ? b.beta[t] * (b.v[t][g * kTokenGroup + n] - dots[n]) : 0.0f);
            fin_src = start_src;
            fin_dst = places.dst(g, t);
        }
        fin_g = g;
        fin_t = t;
    }
}

}  // namespace

GDN_VECTORIZED void token_block(const TokenBlock &b, StateLines from, StateLines to, float *scratch) {
    const int64_t P = b.padded, row_bytes = P * int64_t(sizeof(float));
    float *zeros = scratch + kTokenGroupsInFlight * kTokenGroup * P;
    std::memset(zeros, 0, sizeof(float) * kTokenGroup * P);
    const GroupPlaces places{b, from, to, scratch, reinterpret_cast<char *>(zeros)};
    // Every set the steps address is state columns (from, to) or padded rows (work, zeros; only
    // these when Sk is padded): with contiguous states, or padded ones, of the common head sizes,
    // one stride known at compile time.
    const bool contiguous =
        P != b.Sk || ((!from.base || from.stride == row_bytes) && (!to.base || to.stride == row_bytes));
    if (contiguous && P == 128) run_steps<128 * sizeof(float)>(b, places);
    else if (contiguous && P == 64) run_steps<64 * sizeof(float)>(b, places);
    else run_steps<0>(b, places);
}

}  // namespace gdn::cpu
