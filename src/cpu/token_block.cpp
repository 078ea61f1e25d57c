#include "cpu/token_block.h"

#include <cstring>

#include "cpu/vectorized.h"

// The helpers below take and return 32-byte vectors; they are always inlined, so the ABI that
// GCC warns about (vectors passed without AVX in the baseline clone) is never used.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace gdn::cpu {

namespace {

// GCC's portable vectors: one AVX register, two SSE or NEON registers. Every clone adds the same
// lanes in the same order, so a result depends only on the host's FMA, never on threads.
typedef float Vec __attribute__((vector_size(kTokenLanes * sizeof(float))));
static_assert(kTokenLanes == 8, "lane_sum below adds eight lanes");

#define GDN_INLINE inline __attribute__((always_inline))

GDN_INLINE Vec load(const float *p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
GDN_INLINE void store(float *p, Vec v) { std::memcpy(p, &v, sizeof v); }
GDN_INLINE Vec splat(float x) { return Vec{x, x, x, x, x, x, x, x}; }

// The eight lanes in a fixed tree: (l0 + l4) + (l2 + l6) + ((l1 + l5) + (l3 + l7)).
GDN_INLINE float lane_sum(Vec v) {
    v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
    v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5);
    v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
    return v[0];
}

// Sk floats between a state column in memory and a padded column of the scratch, a vector at a
// time (glibc's memcpy for these 512-byte pieces ran at a third of this loop's speed: its stores
// and the kernel's loads of the same bytes do not forward).
GDN_INLINE void copy_row(float *to, const float *from, int64_t n) {
    int64_t i = 0;
    for (; i + kTokenLanes <= n; i += kTokenLanes) store(to + i, load(from + i));
    for (; i < n; ++i) to[i] = from[i];
}

// Columns j0 .. j0 + N - 1 of the state through every token of the block: token 0 reads them
// from in[n], the last token writes them to out[n], and the tokens between run in work[n] (all
// padded rows; in and out may be the same memory, each element is read before it is written).
template <int N>
GDN_INLINE void column_group(const TokenBlock &b, int64_t j0, const float *const (&in)[N], float *const (&work)[N],
                             float *const (&out)[N]) {
    const int64_t P = b.padded;
    const float *src[N];
    for (int n = 0; n < N; ++n) src[n] = in[n];
    for (int64_t t = 0; t < b.tokens; ++t) {
        float *const(&dst)[N] = t + 1 == b.tokens ? out : work;
        const float *k = b.k + t * P, *q = b.q + t * P;
        const float *a = b.per_channel ? b.decay + t * P : nullptr;
        const Vec a_all = splat(b.per_channel ? 0.0f : b.decay[t]);
        // d_j = beta (v_j - (a o c_j) . k): the columns are only read here.
        Vec ck[N] = {};
        for (int64_t i = 0; i < P; i += kTokenLanes) {
            const Vec kv = load(k + i), av = a ? load(a + i) : a_all;
            for (int n = 0; n < N; ++n) ck[n] += (load(src[n] + i) * av) * kv;
        }
        Vec delta[N];
        for (int n = 0; n < N; ++n) delta[n] = splat(b.beta[t] * (b.v[t][j0 + n] - lane_sum(ck[n])));
        // c_j = a o c_j + d_j k, and o_j = scale c_j . q on the new column.
        Vec cq[N] = {};
        for (int64_t i = 0; i < P; i += kTokenLanes) {
            const Vec kv = load(k + i), qv = load(q + i), av = a ? load(a + i) : a_all;
            for (int n = 0; n < N; ++n) {
                const Vec decayed = load(src[n] + i) * av;
                const Vec updated = decayed + delta[n] * kv;
                store(dst[n] + i, updated);
                cq[n] += updated * qv;
            }
        }
        if (b.out)
            for (int n = 0; n < N; ++n) b.out[t][j0 + n] = b.scale * lane_sum(cq[n]);
        if (b.snapshot[t].base)
            for (int n = 0; n < N; ++n) copy_row(b.snapshot[t].column(j0 + n), dst[n], b.Sk);
        for (int n = 0; n < N; ++n) src[n] = dst[n];
    }
}

// Where a group's columns come from and go: straight from and to the state's memory when its
// columns are whole vectors (Sk a multiple of kTokenLanes), else through padded scratch rows.
template <int N>
GDN_INLINE void run_group(const TokenBlock &b, int64_t j0, StateColumns from, StateColumns to, float *scratch) {
    const bool direct = b.padded == b.Sk;
    const float *zeros = scratch + kTokenBlockColumns * b.padded;
    const float *in[N];
    float *work[N], *out[N];
    for (int n = 0; n < N; ++n) {
        work[n] = scratch + n * b.padded;
        if (!direct) {
            if (from.base) copy_row(work[n], from.column(j0 + n), b.Sk);
            else std::memset(work[n], 0, sizeof(float) * b.Sk);
            std::memset(work[n] + b.Sk, 0, sizeof(float) * (b.padded - b.Sk));  // zero times the zero pads of k, q
            in[n] = out[n] = work[n];
        } else {
            in[n] = from.base ? from.column(j0 + n) : zeros;
            out[n] = to.base ? to.column(j0 + n) : work[n];
        }
    }
    column_group<N>(b, j0, in, work, out);
    if (!direct && to.base)
        for (int n = 0; n < N; ++n) copy_row(to.column(j0 + n), work[n], b.Sk);
}

}  // namespace

GDN_VECTORIZED void token_block(const TokenBlock &b, StateColumns from, StateColumns to, float *scratch) {
    static_assert(kTokenBlockColumns == 4, "the groups below");
    std::memset(scratch + kTokenBlockColumns * b.padded, 0, sizeof(float) * b.padded);  // the zero state's column
    int64_t j = 0;
    for (; j + 4 <= b.Sv; j += 4) run_group<4>(b, j, from, to, scratch);
    switch (b.Sv - j) {
        case 3: run_group<3>(b, j, from, to, scratch); break;
        case 2: run_group<2>(b, j, from, to, scratch); break;
        case 1: run_group<1>(b, j, from, to, scratch); break;
        default: break;
    }
}

}  // namespace gdn::cpu
