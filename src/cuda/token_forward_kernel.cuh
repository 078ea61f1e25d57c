// The per-token forward kernel: one warp per state column S[:, j] of one (sequence, value head)
// unit, the column in registers, the tokens in order. The columns of a state are independent in
// the forward (d_j depends on column j only), so no warp waits for another. The next token's
// inputs are loaded before the current token's arithmetic so that their latency overlaps it.
//
// Device code only, included by token_forward.cu (nvcc) and by the host emulation test
// (tests/cuda/emulated_kernels_test.cpp), which runs it on CPU threads.
#pragma once

#include "cuda/token_step.cuh"

namespace gdn::cuda {
// Internal to the one translation unit that includes this (a launcher, or the emulation test,
// whose host-compiled copies must not meet the launcher's symbols at link time).
namespace {

constexpr int kForwardWarps = 4;  // warps (columns) per block

// The inputs of one token for one column.
template <int R>
struct ColumnToken {
    KeyRows<R> rows;
    float v, beta;
};

template <int R>
__device__ __forceinline__ void load_column_token(const ForwardViews &w, const Sizes &n, int kh, int bq, int h, int b,
                                                  int j, int64_t t, int lane, ColumnToken<R> &x) {
    load_key_rows<R>(w.q, w.k, w.g, n, kh, bq, h, b, t, lane, x.rows);
    x.v = *w.v.at(j, h, t, b);
    x.beta = *w.beta.at(0, h, t, b);
}

template <int R>
__global__ void __launch_bounds__(kForwardWarps * 32) token_forward_kernel(ForwardViews w, Sizes n) {
    const int lane = threadIdx.x % 32;
    const int j = blockIdx.x * kForwardWarps + threadIdx.x / 32;
    const int h = blockIdx.y, b = blockIdx.z;
    if (j >= n.Sv) return;  // a whole warp leaves; this kernel has no block barrier
    const int kh = n.key_head(h), bq = n.qk_sequence(b);

    float s[R];
    load_column<R>(w.s0, n.Sk, j, h, b, lane, s);  // in place (states == s0) is safe: read here, written later by this warp only

    ColumnToken<R> next;
    load_column_token<R>(w, n, kh, bq, h, b, j, 0, lane, next);
    for (int64_t t = 0; t < n.T; ++t) {
        const ColumnToken<R> x = next;
        if (t + 1 < n.T) load_column_token<R>(w, n, kh, bq, h, b, j, t + 1, lane, next);
        forward_column_step<R>(s, x.rows, x.v, x.beta, lane, n.Sk);
        if (w.out.present()) {
            const float o = column_dot<R>(s, x.rows.q, lane, n.Sk);
            if (lane == 0) *w.out.at(j, h, t, b) = n.scale * o;
        }
        const int64_t slot = n.T - 1 - t;
        if (w.states.present() && slot < n.K) store_column<R>(w.states, n.Sk, j, h, slot * n.B + b, lane, s);
    }
}

// Blocks: (column groups, value heads, sequences).
struct ForwardGrid {
    int x, y, z, threads;
};
inline ForwardGrid token_forward_grid(const Sizes &n) { return {(n.Sv + kForwardWarps - 1) / kForwardWarps, n.Hv, n.B, kForwardWarps * 32}; }

}  // namespace
}  // namespace gdn::cuda
