// token_block_rows: the per-token recurrence on a value-major state (row i = key channel i, the
// Sv value channels contiguous), with the bits of token_block on the key-major one.
//
// token_block's dot products over the key index (c_j . (a o k) and c_j . q for column j) keep
// kTokenLanes partial sums, lane l adding the products of keys l, l + 8, l + 16, ... in that
// order, then add the eight lanes in a fixed tree. Here the same partial sums are vectors across
// value channels: class[l] holds lane l's sum for every column of a strip, row i goes into class
// i % 8, and the tree adds the eight classes element-wise; every product, sum and update is the
// same float operation on the same operands in the same order, so both layouts give the same
// bits (and every clone the same bits as token_block's same clone).
//
// The state goes through in strips of W value channels (all Sk rows of W floats):
//   first pass:  the strip's deltas (its rows only read);
//   second pass: the update, written, and the output's sums; with another token in the block,
//                also the next token's dot products (the first pass of the next token needs
//                exactly the updated rows this pass holds in registers).
// T = 1 (decoding): W = 32, two cache lines per row, read from the state and written back in
// place (16 class accumulators of 16 floats). T > 1: W = 16 (the two passes' 16 accumulators),
// the strip kept in work rows between tokens, so each token after the first is one pass over a
// strip in L1.
//
// A decoding step updated in place (the serving case) runs its second pass as decoding_update:
// one row pointer, and a strip's share of the next unit's state asked of L2 as it goes.
//
// Measured at the 27B shape, states on cache lines as PyTorch allocates them (docs/PERF.md,
// bench/decode_layouts): B = 1, one thread, the state in L3, 1.00-1.01 of the key-major kernel's
// rate round by round (0.94-0.96 before decoding_update; about 0.85 for states 16 bytes past a
// line, whose strip rows straddle a third line); B = 16, two threads, from memory, 1.4-1.8x this
// kernel's rate before. Tried and dropped: vectors of 8 floats, the strip staged in contiguous
// work rows by the first pass (no faster), the state row by row with the class sums in L1, the
// next strip's first pass fused into this one's second, software prefetches of the next strip of
// the same unit (no change, or slower).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "cpu/token_block.h"
#include "cpu/token_vec.h"
#include "cpu/vectorized.h"

namespace gdn::cpu {

namespace {

using namespace token_vec;

constexpr int kClasses = kTokenLanes;
constexpr int64_t kWideLanes = 16;
static_assert(2 * kWideLanes <= kRowStrip, "the scratch holds the widest strip");

#define GDN_INLINE_LAMBDA __attribute__((always_inline))

// The vectors across value channels: as wide as the widest registers (AVX-512; two AVX or four
// SSE registers elsewhere). Their width is free: lanes here are value channels, each computed
// on its own, while the key index's partial sums are the classes below.
typedef float Wide __attribute__((vector_size(kWideLanes * sizeof(float))));

GDN_INLINE Wide wload(const float *p) {
    Wide v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
GDN_INLINE void wstore(float *p, Wide v) { std::memcpy(p, &v, sizeof v); }
// x in every lane, as one broadcast (GCC builds an initializer list lane by lane).
GDN_INLINE Wide broadcast(float x) {
    const Wide first{x};
    return __builtin_shufflevector(first, first, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

// The eight partial sums of token_block's lanes, in its tree: ((l0 + l1) + (l2 + l3)) + ((l4 +
// l5) + (l6 + l7)).
GDN_INLINE Wide class_sum(const Wide *c) { return ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7])); }

// The rows of a strip: row i < Sk at base + i * stride bytes, the padded rows Sk .. P - 1 at
// pad (W floats apart): the next rows of the work rows, or zeros (a state in memory read), or
// rows nobody reads (written to one).
template <int V>
struct Strip {
    static constexpr int64_t W = V * kWideLanes;
    char *base;
    int64_t stride;
    float *pad;
    GDN_INLINE float *row(int64_t i, int64_t Sk) const {
        return i < Sk ? reinterpret_cast<float *>(base + i * stride) : pad + (i - Sk) * W;
    }
};

// Calls body(i, row_of) for every padded row i in classes of eight: the rows below Sk through
// the strips' base, the last class (which holds the padded rows, if any) through row().
template <class Body>
GDN_INLINE void for_rows(int64_t Sk, int64_t P, Body body) {
    const int64_t whole = Sk / kClasses * kClasses;
    for (int64_t i0 = 0; i0 < whole; i0 += kClasses) {
#pragma GCC unroll 8
        for (int l = 0; l < kClasses; ++l) body(i0 + l, l, std::false_type{});
    }
    for (int64_t i0 = whole; i0 < P; i0 += kClasses) {
#pragma GCC unroll 8
        for (int l = 0; l < kClasses; ++l) body(i0 + l, l, std::true_type{});
    }
}

template <int V, class Padded>
GDN_INLINE float *row_of(const Strip<V> &s, int64_t i, int64_t Sk, Padded) {
    if constexpr (Padded::value) return s.row(i, Sk);
    return reinterpret_cast<float *>(s.base + i * s.stride);
}

// First pass of token t: ck[l] += row_i * (a o k)_i for the rows i of class l.
template <int V>
GDN_INLINE void strip_dots(const TokenBlock &b, int64_t t, const Strip<V> &src, Wide (&ck)[kClasses][V]) {
    const float *ak = b.decayed_k + t * b.padded;
    for_rows(b.Sk, b.padded, [&](int64_t i, int l, auto padded) GDN_INLINE_LAMBDA {
        const float *row = row_of(src, i, b.Sk, padded);
        const Wide akv = broadcast(ak[i]);
        for (int v = 0; v < V; ++v) ck[l][v] += wload(row + v * kWideLanes) * akv;
    });
}

// What a second pass computes beside the update: nothing more, the first pass of token t + 1 on
// the new rows, or the first pass of token t on the next strip (rows `next`).
enum class Fused { None, NextToken, NextStrip };

// Second pass of token t: row_i = a_i row_i + delta k_i (src to dst), cq[l] += row_i q_i, and
// what F fuses in: ck[l] += row_i' (a o k)_i for row_i' of the next token or strip.
template <int V, Fused F>
GDN_INLINE void strip_update(const TokenBlock &b, int64_t t, const Strip<V> &src, const Strip<V> &dst,
                             const Wide (&delta)[V], Wide (&cq)[kClasses][V], Wide (&ck)[kClasses][V],
                             const Strip<V> *next = nullptr) {
    const int64_t P = b.padded;
    const float *k = b.k + t * P, *q = b.q + t * P, *a = b.decay + t * P;
    const float *ak = b.decayed_k + (F == Fused::NextToken ? t + 1 : t) * P;
    for_rows(b.Sk, P, [&](int64_t i, int l, auto padded) GDN_INLINE_LAMBDA {
        const float *from = row_of(src, i, b.Sk, padded);
        float *to = row_of(dst, i, b.Sk, padded);
        const float *beside = F == Fused::NextStrip ? row_of(*next, i, b.Sk, padded) : nullptr;
        const Wide av = broadcast(a[i]), kv = broadcast(k[i]), qv = broadcast(q[i]);
        for (int v = 0; v < V; ++v) {
            const Wide updated = wload(from + v * kWideLanes) * av + delta[v] * kv;
            wstore(to + v * kWideLanes, updated);
            cq[l][v] += updated * qv;
            if constexpr (F == Fused::NextToken) ck[l][v] += updated * broadcast(ak[i]);
            if constexpr (F == Fused::NextStrip) ck[l][v] += wload(beside + v * kWideLanes) * broadcast(ak[i]);
        }
    });
}

// Where a decoding step's second pass asks L2 for the next unit's state: W floats at `first`
// beside the strip's first row, `step` bytes further beside each next one.
struct Ahead {
    uintptr_t first;
    int64_t step;
};

// strip_update for a decoding step (one token) on a strip read and written in place, whose
// rows are whole classes (Sk a multiple of 8): the same operations in the same order, through
// one row pointer, while a share of the next unit's state is asked of L2. strip_update's
// separate source and destination rows, one pointer per class each, need more registers than
// x86 has (GCC spills them), and the next unit's state is beyond the hardware prefetchers'
// reach (another unit's pages, read in strips): this pass is the last reading of the strip, so
// the next unit's first pass finds its rows in L2 rather than in L3 or memory.
template <int V>
GDN_INLINE void decoding_update(const TokenBlock &b, const Strip<V> &rows, const Wide (&delta)[V],
                                Wide (&cq)[kClasses][V], Ahead ahead) {
    const float *k = b.k, *q = b.q, *a = b.decay;
    char *row = rows.base;
    uintptr_t next = ahead.first;
    for (int64_t i0 = 0; i0 < b.Sk; i0 += kClasses) {
#pragma GCC unroll 8
        for (int l = 0; l < kClasses; ++l) {
            const int64_t i = i0 + l;
            float *r = reinterpret_cast<float *>(row);
            for (int v = 0; v < V; ++v)
                __builtin_prefetch(reinterpret_cast<const void *>(next + v * kWideLanes * sizeof(float)), 0, 2);
            next += ahead.step;
            const Wide av = broadcast(a[i]), kv = broadcast(k[i]), qv = broadcast(q[i]);
            for (int v = 0; v < V; ++v) {
                const Wide updated = wload(r + v * kWideLanes) * av + delta[v] * kv;
                wstore(r + v * kWideLanes, updated);
                cq[l][v] += updated * qv;
            }
            row += rows.stride;
        }
    }
}

// The deltas of token t from its first pass's sums: beta (v - c . (a o k)).
template <int V>
GDN_INLINE void strip_deltas(const TokenBlock &b, int64_t t, const float *v, const Wide (&ck)[kClasses][V],
                             Wide (&delta)[V]) {
    for (int n = 0; n < V; ++n) {
        Wide classes[kClasses];
        for (int l = 0; l < kClasses; ++l) classes[l] = ck[l][n];
        delta[n] = broadcast(b.beta[t]) * (wload(v + n * kWideLanes) - class_sum(classes));
    }
}

// out of token t for `columns` value channels from out_row: scale c . q from the sums.
template <int V>
GDN_INLINE void strip_out(const TokenBlock &b, const Wide (&cq)[kClasses][V], float *out_row, int64_t columns) {
    float sums[V * kWideLanes];
    for (int n = 0; n < V; ++n) {
        Wide classes[kClasses];
        for (int l = 0; l < kClasses; ++l) classes[l] = cq[l][n];
        wstore(sums + n * kWideLanes, broadcast(b.scale) * class_sum(classes));
    }
    std::memcpy(out_row, sums, sizeof(float) * columns);
}

// The block on one strip of `columns` <= W value channels from column j0. Where the strip is
// whole and the state is in memory (from / to), its rows are read and written there; else in
// the work rows (copied in, padded with zero columns, and out).
template <int V>
GDN_INLINE void run_strip(const TokenBlock &b, StateLines from, StateLines to, int64_t j0, float *scratch) {
    constexpr int64_t W = Strip<V>::W;
    const int64_t Sk = b.Sk, P = b.padded, columns = std::min(W, b.Sv - j0);
    float *work = scratch, *zeros = scratch + kRowStrip * P, *unread = zeros + kRowStrip * P;
    float *v_row = unread + kRowStrip * P;
    const Strip<V> work_rows{reinterpret_cast<char *>(work), W * int64_t(sizeof(float)), work + Sk * W};
    const Strip<V> zero_rows{reinterpret_cast<char *>(zeros), W * int64_t(sizeof(float)), zeros};
    auto memory = [&](StateLines m, float *pad) {
        return Strip<V>{m.base + j0 * int64_t(sizeof(float)), m.stride, pad};
    };
    const bool whole = columns == W;
    if (!whole) {  // the rows' real columns, zeros after them; the padded rows are zero
        for (int64_t i = 0; i < P; ++i) {
            float *row = work + i * W;
            std::fill(row, row + W, 0.0f);
            if (i < Sk && from.base) std::memcpy(row, from.line(i) + j0, sizeof(float) * columns);
        }
    } else {
        std::fill(work + Sk * W, work + P * W, 0.0f);  // the padded rows, as token_block's zero pads
    }
    const Strip<V> first = !whole ? work_rows : from.base ? memory(from, zeros) : zero_rows;
    const Strip<V> last = whole && to.base ? memory(to, unread) : work_rows;
    // A decoding step on a whole strip updated in place, with no padded rows: decoding_update.
    const bool in_place = b.tokens == 1 && whole && from.base && from.base == to.base && from.stride == to.stride &&
                          Sk == P && !b.snapshot[0].base;
    // The next unit's state, a strip's worth: in memory order when its rows are contiguous and
    // whole strips (strip s asks for bytes [s, s + 1) x Sk x W floats: one stream the memory
    // side can follow), else its rows of this strip; with none, this strip's own rows again.
    const int64_t row_bytes = W * int64_t(sizeof(float));
    const uintptr_t next = reinterpret_cast<uintptr_t>(b.ahead.base);
    const Ahead ahead = !b.ahead.base ? Ahead{reinterpret_cast<uintptr_t>(first.base), first.stride}
                        : b.ahead.stride == b.Sv * int64_t(sizeof(float)) && b.Sv % W == 0
                            ? Ahead{next + uintptr_t(j0 / W * Sk * row_bytes), row_bytes}
                            : Ahead{next + uintptr_t(j0 * int64_t(sizeof(float))), b.ahead.stride};

    Wide ck[kClasses][V] = {}, delta[V];
    strip_dots(b, 0, first, ck);
    for (int64_t t = 0; t < b.tokens; ++t) {
        const float *v = b.v[t] + j0;
        if (!whole) {
            std::fill(v_row, v_row + W, 0.0f);
            std::memcpy(v_row, v, sizeof(float) * columns);
            v = v_row;
        }
        strip_deltas(b, t, v, ck, delta);
        const Strip<V> &src = t == 0 ? first : work_rows, &dst = t + 1 == b.tokens ? last : work_rows;
        Wide cq[kClasses][V] = {};
        for (auto &c : ck)
            for (Wide &x : c) x = Wide{};
        if (t + 1 < b.tokens) strip_update<V, Fused::NextToken>(b, t, src, dst, delta, cq, ck);
        else if (in_place) decoding_update(b, first, delta, cq, ahead);
        else strip_update<V, Fused::None>(b, t, src, dst, delta, cq, ck);
        if (b.out) strip_out(b, cq, b.out[t] + j0, columns);
        if (b.snapshot[t].base)
            for (int64_t i = 0; i < Sk; ++i)
                copy_row(b.snapshot[t].line(i) + j0, dst.row(i, Sk), columns);
    }
    if (!whole && to.base)
        for (int64_t i = 0; i < Sk; ++i) std::memcpy(to.line(i) + j0, work + i * W, sizeof(float) * columns);
}

}  // namespace

GDN_VECTORIZED void token_block_rows(const TokenBlock &b, StateLines from, StateLines to, float *scratch) {
    std::fill(scratch + kRowStrip * b.padded, scratch + 2 * kRowStrip * b.padded, 0.0f);  // the zero rows
    if (b.tokens == 1) {
        for (int64_t j0 = 0; j0 < b.Sv; j0 += 2 * kWideLanes) run_strip<2>(b, from, to, j0, scratch);
    } else {
        for (int64_t j0 = 0; j0 < b.Sv; j0 += kWideLanes) run_strip<1>(b, from, to, j0, scratch);
    }
}

}  // namespace gdn::cpu
