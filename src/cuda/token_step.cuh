// One token of the recurrence for one state column, as a warp sees it: the column S[:, j] of
// Sk key channels lives in registers, lane l holding rows i = l + 32 r for r < R (R = ceil(Sk/32)).
// Rows i >= Sk are padding: every update of them is predicated off so that they stay exactly
// zero and add exact zeros to the warp sums (NaN and Inf in real rows never reach them).
#pragma once

#include <cmath>

#include "cuda/device_views.h"
#include "cuda/warp_ops.cuh"

namespace gdn::cuda {

__device__ __forceinline__ bool row_in(int lane, int r, int Sk) { return lane + 32 * r < Sk; }

// The key-channel inputs of one token (q, k and the decay a = exp(g)) for one lane's rows.
template <int R>
struct KeyRows {
    float q[R], k[R], decay[R];
};

// Token t of unit (b, h) reading key head kh of q/k sequence bq.
template <int R>
__device__ __forceinline__ void load_key_rows(const View &q, const View &k, const View &g, const Sizes &n, int kh, int bq,
                                              int h, int b, int64_t t, int lane, KeyRows<R> &x) {
    const bool per_channel = n.gate_width != 1;
    const float scalar_decay = per_channel ? 1.0f : expf(g.load(0, h, t, b));
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int i = lane + 32 * r;
        const bool in = i < n.Sk;
        x.q[r] = in ? q.load(i, kh, t, bq) : 0.0f;
        x.k[r] = in ? k.load(i, kh, t, bq) : 0.0f;
        x.decay[r] = !in ? 1.0f : per_channel ? expf(g.load(i, h, t, b)) : scalar_decay;
    }
}

// Column j of a [Sk, Sv, Hv, *] state tensor at (h, index) into registers; zero when absent.
// Either layout (View::s0): a value-major column is strided, read once per call.
template <int R>
__device__ __forceinline__ void load_column(const View &t, int Sk, int j, int h, int64_t index, int lane, float (&col)[R]) {
    const float *src = t.present() ? t.at(0, j, h, index) : nullptr;
#pragma unroll
    for (int r = 0; r < R; ++r) col[r] = (src != nullptr && row_in(lane, r, Sk)) ? src[(lane + 32 * r) * t.s0] : 0.0f;
}

template <int R>
__device__ __forceinline__ void store_column(const View &t, int Sk, int j, int h, int64_t index, int lane, const float (&col)[R]) {
    float *dst = t.at(0, j, h, index);
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (row_in(lane, r, Sk)) dst[(lane + 32 * r) * t.s0] = col[r];
}

// A column of Sk floats in a contiguous workspace buffer (checkpoints, replay).
template <int R>
__device__ __forceinline__ void load_packed(const float *src, int Sk, int lane, float (&col)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) col[r] = row_in(lane, r, Sk) ? src[lane + 32 * r] : 0.0f;
}

template <int R>
__device__ __forceinline__ void store_packed(float *dst, int Sk, int lane, const float (&col)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (row_in(lane, r, Sk)) dst[lane + 32 * r] = col[r];
}

// S' = diag(a) S; p = S'^T k (this column's entry); d = beta (v - p); S = S' + k d.
// Returns d. The column holds S_t on return.
template <int R>
__device__ __forceinline__ float forward_column_step(float (&s)[R], const KeyRows<R> &x, float v, float beta, int lane, int Sk) {
    float p = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (row_in(lane, r, Sk)) {
            s[r] *= x.decay[r];
            p += s[r] * x.k[r];
        }
    p = warp_sum(p);
    const float d = beta * (v - p);
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (row_in(lane, r, Sk)) s[r] += x.k[r] * d;
    return d;
}

// Sum over the column of S[:, j] q: the unscaled output entry o_j.
template <int R>
__device__ __forceinline__ float column_dot(const float (&s)[R], const float (&w)[R], int lane, int Sk) {
    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (row_in(lane, r, Sk)) acc += s[r] * w[r];
    return warp_sum(acc);
}

// Rows per lane for a key head size: 1, 2, 4 or 8 (Sk <= 256).
inline int rows_per_lane(int Sk) { return Sk <= 32 ? 1 : Sk <= 64 ? 2 : Sk <= 128 ? 4 : 8; }

}  // namespace gdn::cuda

namespace gdn::cuda {

// forward_column_step for the C columns a warp owns (state s[c], value v[c]) at once, their C
// sums p in one warp_sums. Columns with column_in[c] false are left alone (their lanes still
// take part in the shuffles).
template <int R, int C>
__device__ __forceinline__ void forward_columns_step(float (&s)[C][R], const KeyRows<R> &x, const float (&v)[C], float beta,
                                                     const bool (&column_in)[C], int lane, int Sk) {
    float p[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
        p[c] = 0.0f;
        if (!column_in[c]) continue;
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (row_in(lane, r, Sk)) {
                s[c][r] *= x.decay[r];
                p[c] += s[c][r] * x.k[r];
            }
    }
    warp_sums<C>(p);
#pragma unroll
    for (int c = 0; c < C; ++c) {
        if (!column_in[c]) continue;
        const float d = beta * (v[c] - p[c]);
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (row_in(lane, r, Sk)) s[c][r] += x.k[r] * d;
    }
}

}  // namespace gdn::cuda
