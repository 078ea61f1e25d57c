// The per-token backward kernels (ALGORITHM.md section 1), column by column.
//
// The carry D = dL/dS is column-local, like the forward: D[:, j] at token t-1 depends only on
// column j of D, S and on token t's inputs. So each warp owns state columns of one
// (sequence b, value head h) unit and keeps S[:, j] and D[:, j] in registers. What is not
// column-local are the gradients of key-channel inputs (dq, dk, per-channel dg) and of scalars
// (dbeta, scalar dg): every column adds a part. A block sums its warps' parts per token in
// shared memory in a fixed order and writes one partial row per (column slice, unit, token) to
// the workspace; a second kernel sums the rows of every slice and every unit that reads a
// key head, in a fixed order. No atomics: the same bits on every run.
//
// S_{t-1} is needed in reverse order. It is never recovered by dividing by exp(g) (overflow);
// it is replayed from stored states, on three levels so that the replayed states themselves
// stay in shared memory:
//   first       the forward kernel over all T stores the state every `segment` tokens
//               (checkpoints; token_forward_kernel.cuh, launched before this kernel);
//   per segment (in reverse): the forward from its checkpoint, storing the state every
//               `sub_segment` tokens (sub-checkpoints);
//   per sub-segment (in reverse): the forward from its sub-checkpoint, storing each S_{t-1}
//               column in shared memory, then the walk backwards over those tokens.
// Every thread reads back only what it wrote itself (workspace and shared replay alike), so
// the stored states need no barrier. Workspace per unit: (T/segment + segment/sub_segment)
// Sk Sv floats.
//
// Device code plus the host-side plan, included by token_backward.cu (nvcc) and by the host
// emulation test (tests/cuda/emulated_kernels_test.cpp), which runs the kernels on CPU threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/plans.h"
#include "cuda/token_step.cuh"

namespace gdn::cuda {
// Internal to the one translation unit that includes this (a launcher, or the emulation test,
// whose host-compiled copies must not meet the launcher's symbols at link time).
namespace {


// Threads per block and columns per warp by rows per lane, sized so that the two register
// columns (S and D) of every column a thread owns fit in 512-thread blocks (128 registers).
template <int R>
struct BackwardShape;
template <> struct BackwardShape<1> { static constexpr int warps = 16, columns = 4; };
template <> struct BackwardShape<2> { static constexpr int warps = 16, columns = 4; };
template <> struct BackwardShape<4> { static constexpr int warps = 16, columns = 4; };
template <> struct BackwardShape<8> { static constexpr int warps = 16, columns = 2; };

// Columns of one block (one slice of a unit's state).
template <int R>
constexpr int columns_per_block() { return BackwardShape<R>::warps * BackwardShape<R>::columns; }
inline int columns_per_block(int rows) {
    switch (rows) {
        case 1: return columns_per_block<1>();
        case 2: return columns_per_block<2>();
        case 4: return columns_per_block<4>();
        default: return columns_per_block<8>();
    }
}

struct BackwardWorkspace {
    float *checkpoints;  // [unit][segment][Sv][Sk]: S before the first token of each segment
    float *sub_checkpoints;  // [unit][sub-segment][Sv][Sk]: S before each sub-segment of the segment being walked
    float *partials;     // [slice][unit][T][partial_width]: dq | dk | dg | dbeta per token
    int64_t segment, segments, sub_segment, sub_segments, partial_width;
};

// The column S[:, j] of a unit inside a [unit][rows][Sv][Sk] buffer.
__device__ __forceinline__ float *packed_column(float *base, int64_t unit, int64_t rows, int64_t row, const Sizes &n, int j) {
    return base + ((unit * rows + row) * n.Sv + j) * n.Sk;
}

template <int R>
__global__ void __launch_bounds__(BackwardShape<R>::warps * 32, 1)
token_backward_kernel(BackwardViews w, Sizes n, BackwardWorkspace ws) {
    constexpr int kWarps = BackwardShape<R>::warps, kColumns = BackwardShape<R>::columns;
    extern __shared__ float shared[];
    float *vec_parts = shared;                            // [3][kWarps][Sk]: dq, dk, dg parts per warp
    float *scalar_parts = shared + 3 * kWarps * n.Sk;     // [2][kWarps]: dbeta, scalar dg
    float *replay = scalar_parts + 2 * kWarps;            // [sub_segment][kWarps * kColumns][Sk]: S_{t-1}

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int slice = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int kh = n.key_head(h), bq = n.qk_sequence(b);
    const int64_t unit = static_cast<int64_t>(b) * n.Hv + h;
    const bool per_channel = n.gate_width != 1;

    int column[kColumns];
    bool column_in[kColumns];  // uniform across the warp
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
        column[c] = slice * (kWarps * kColumns) + c * kWarps + warp;
        column_in[c] = column[c] < n.Sv;
    }

    // Column c of this warp at token offset r of the sub-segment, in the shared replay buffer.
    auto replay_column = [&](int64_t r, int c) { return replay + (r * (kWarps * kColumns) + c * kWarps + warp) * n.Sk; };

    float s[kColumns][R];   // S[:, j]: the state at the current position
    float dS[kColumns][R];  // D[:, j]: dL/dS at the current position
    // Segments in reverse (the checkpoints come from the forward kernel, run first).
#pragma unroll
    for (int c = 0; c < kColumns; ++c)
#pragma unroll
        for (int r = 0; r < R; ++r) dS[c][r] = 0.0f;
    for (int64_t seg = ws.segments - 1; seg >= 0; --seg) {
        const int64_t t0 = seg * ws.segment, t1 = t0 + ws.segment < n.T ? t0 + ws.segment : n.T;

        // The segment forward from its checkpoint: sub-checkpoints.
#pragma unroll
        for (int c = 0; c < kColumns; ++c)
            if (column_in[c]) load_packed<R>(packed_column(ws.checkpoints, unit, ws.segments, seg, n, column[c]), n.Sk, lane, s[c]);
        for (int64_t t = t0; t < t1; ++t) {
            KeyRows<R> x;
            load_key_rows<R>(w.q, w.k, w.g, n, kh, bq, h, b, t, lane, x);
            const float beta = *w.beta.at(0, h, t, b);
            float v[kColumns];
#pragma unroll
            for (int c = 0; c < kColumns; ++c) {
                v[c] = column_in[c] ? *w.v.at(column[c], h, t, b) : 0.0f;
                if (column_in[c] && (t - t0) % ws.sub_segment == 0)
                    store_packed<R>(packed_column(ws.sub_checkpoints, unit, ws.sub_segments, (t - t0) / ws.sub_segment, n, column[c]),
                                    n.Sk, lane, s[c]);
            }
            forward_columns_step<R, kColumns>(s, x, v, beta, column_in, lane, n.Sk);
        }

        for (int64_t sub = (t1 - t0 - 1) / ws.sub_segment; sub >= 0; --sub) {
            const int64_t u0 = t0 + sub * ws.sub_segment, u1 = u0 + ws.sub_segment < t1 ? u0 + ws.sub_segment : t1;

            // Replay: S_{t-1} for t in [u0, u1) into shared memory; s ends as S_{u1-1}.
#pragma unroll
            for (int c = 0; c < kColumns; ++c)
                if (column_in[c])
                    load_packed<R>(packed_column(ws.sub_checkpoints, unit, ws.sub_segments, sub, n, column[c]), n.Sk, lane, s[c]);
            for (int64_t t = u0; t < u1; ++t) {
                KeyRows<R> x;
                load_key_rows<R>(w.q, w.k, w.g, n, kh, bq, h, b, t, lane, x);
                const float beta = *w.beta.at(0, h, t, b);
                float v[kColumns];
#pragma unroll
                for (int c = 0; c < kColumns; ++c) {
                    v[c] = column_in[c] ? *w.v.at(column[c], h, t, b) : 0.0f;
                    if (column_in[c]) store_packed<R>(replay_column(t - u0, c), n.Sk, lane, s[c]);
                }
                forward_columns_step<R, kColumns>(s, x, v, beta, column_in, lane, n.Sk);
            }

            // Walk the sub-segment backwards; s holds S_t on entry to token t.
            for (int64_t t = u1 - 1; t >= u0; --t) {
                KeyRows<R> x;
                load_key_rows<R>(w.q, w.k, w.g, n, kh, bq, h, b, t, lane, x);
                const float beta = *w.beta.at(0, h, t, b);
                const int64_t slot = n.T - 1 - t;
                const bool slot_gradient = w.d_states.present() && slot < n.K;

                float dq_part[R], dk_part[R], dg_part[R];
#pragma unroll
                for (int r = 0; r < R; ++r) dq_part[r] = dk_part[r] = dg_part[r] = 0.0f;
                float dbeta_part = 0.0f;

                // Per column: the incoming gradients, then the partial sums p_j = S'_t[:, j] . k and
                // e_j = (dL/dS_t)[:, j] . k, all 2 C of them finished in one warp_sums.
                float pe[2 * kColumns];  // p for column c at c, e at kColumns + c
#pragma unroll
                for (int c = 0; c < kColumns; ++c) {
                    pe[c] = pe[kColumns + c] = 0.0f;
                    if (!column_in[c]) continue;
                    const int j = column[c];
                    if (slot_gradient) {
                        float extra[R];
                        load_column<R>(w.d_states, n.Sk, j, h, slot * n.B + b, lane, extra);
#pragma unroll
                        for (int r = 0; r < R; ++r) dS[c][r] += extra[r];
                    }
                    // The output o_t = scale S_t^T q_t: dS_t += scale q dO_j, dq += scale S_t[:, j] dO_j.
                    const float out_weight = w.d_out.present() ? n.scale * *w.d_out.at(j, h, t, b) : 0.0f;
                    float prev[R];
                    load_packed<R>(replay_column(t - u0, c), n.Sk, lane, prev);
#pragma unroll
                    for (int r = 0; r < R; ++r)
                        if (row_in(lane, r, n.Sk)) {
                            if (w.d_out.present()) {
                                dS[c][r] += x.q[r] * out_weight;
                                dq_part[r] += s[c][r] * out_weight;
                            }
                            pe[c] += (x.decay[r] * prev[r]) * x.k[r];  // S'_t = diag(a) S_{t-1}
                            pe[kColumns + c] += dS[c][r] * x.k[r];
                        }
                }
                warp_sums<2 * kColumns>(pe);

#pragma unroll
                for (int c = 0; c < kColumns; ++c) {
                    if (!column_in[c]) continue;
                    const int j = column[c];
                    const float p = pe[c], e = pe[kColumns + c];  // e_j: the gradient of the delta d_j
                    const float v = *w.v.at(j, h, t, b);
                    const float residual = v - p;
                    const float d = beta * residual;
                    if (w.dv.present() && lane == 0) *w.dv.at(j, h, t, b) = beta * e;
                    dbeta_part += e * residual;
                    const float beta_e = beta * e;
                    float prev[R];
                    load_packed<R>(replay_column(t - u0, c), n.Sk, lane, prev);
#pragma unroll
                    for (int r = 0; r < R; ++r)
                        if (row_in(lane, r, n.Sk)) {
                            const float decayed = x.decay[r] * prev[r];  // S'_t
                            dk_part[r] += dS[c][r] * d - decayed * beta_e;
                            const float d_decayed = dS[c][r] - x.k[r] * beta_e;  // dL/dS'_t
                            dg_part[r] += d_decayed * decayed;
                            dS[c][r] = x.decay[r] * d_decayed;  // dL/dS_{t-1}
                            s[c][r] = prev[r];
                        }
                }

                // Sum the warps' parts in a fixed order and write this block's partial row.
                float dg_scalar = 0.0f;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (!row_in(lane, r, n.Sk)) continue;
                    const int i = lane + 32 * r;
                    vec_parts[(0 * kWarps + warp) * n.Sk + i] = dq_part[r];
                    vec_parts[(1 * kWarps + warp) * n.Sk + i] = dk_part[r];
                    vec_parts[(2 * kWarps + warp) * n.Sk + i] = dg_part[r];
                    dg_scalar += dg_part[r];
                }
                dg_scalar = warp_sum(dg_scalar);
                if (lane == 0) {
                    scalar_parts[warp] = dbeta_part;
                    scalar_parts[kWarps + warp] = dg_scalar;
                }
                __syncthreads();
                float *row = ws.partials + ((static_cast<int64_t>(slice) * n.B * n.Hv + unit) * n.T + t) * ws.partial_width;
                for (int idx = threadIdx.x; idx < ws.partial_width; idx += blockDim.x) {
                    float sum = 0.0f;
                    if (idx < 2 * n.Sk) {
                        const int vec = idx / n.Sk, i = idx % n.Sk;
                        for (int k = 0; k < kWarps; ++k) sum += vec_parts[(vec * kWarps + k) * n.Sk + i];
                    } else if (idx < 2 * n.Sk + n.gate_width) {
                        if (per_channel)
                            for (int k = 0; k < kWarps; ++k) sum += vec_parts[(2 * kWarps + k) * n.Sk + (idx - 2 * n.Sk)];
                        else
                            for (int k = 0; k < kWarps; ++k) sum += scalar_parts[kWarps + k];
                    } else {
                        for (int k = 0; k < kWarps; ++k) sum += scalar_parts[k];
                    }
                    row[idx] = sum;
                }
                __syncthreads();  // the parts are rewritten by the next token
            }
        }
    }

    if (w.ds0.present()) {
#pragma unroll
        for (int c = 0; c < kColumns; ++c)
            if (column_in[c]) store_column<R>(w.ds0, n.Sk, column[c], h, b, lane, dS[c]);
    }
}

// dq, dk: element (i, kh, t, bq) sums, in a fixed order, the partial rows of every unit that
// reads key head kh of q/k sequence bq (sequences ascending, then value heads ascending) and
// of every column slice.
__global__ void reduce_key_grads_kernel(BackwardViews w, Sizes n, BackwardWorkspace ws, int slices) {
    const int64_t total = static_cast<int64_t>(n.Bq) * n.Hk * n.T * n.Sk;
    const int64_t units = static_cast<int64_t>(n.B) * n.Hv;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int i = static_cast<int>(idx % n.Sk);
        int64_t rest = idx / n.Sk;
        const int64_t t = rest % n.T;
        rest /= n.T;
        const int kh = static_cast<int>(rest % n.Hk);
        const int bq = static_cast<int>(rest / n.Hk);
        float dq = 0.0f, dk = 0.0f;
        for (int sb = 0; sb < n.sequences_per_qk_sequence(); ++sb) {
            const int b = bq * n.sequences_per_qk_sequence() + sb;
            for (int jv = 0; jv < n.value_heads_per_key_head(); ++jv) {
                const int64_t unit = static_cast<int64_t>(b) * n.Hv + n.value_head_of(kh, jv);
                for (int slice = 0; slice < slices; ++slice) {
                    const float *row = ws.partials + ((slice * units + unit) * n.T + t) * ws.partial_width;
                    dq += row[i];
                    dk += row[n.Sk + i];
                }
            }
        }
        if (w.dq.present()) *w.dq.at(i, kh, t, bq) = dq;
        if (w.dk.present()) *w.dk.at(i, kh, t, bq) = dk;
    }
}

// dg, dbeta: element (c, h, t, b) sums the partial rows of the unit's column slices in order.
__global__ void reduce_gate_grads_kernel(BackwardViews w, Sizes n, BackwardWorkspace ws, int slices) {
    const int width = n.gate_width + 1;  // dg channels, then dbeta
    const int64_t units = static_cast<int64_t>(n.B) * n.Hv;
    const int64_t total = units * n.T * width;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(idx % width);
        const int64_t rest = idx / width;
        const int64_t t = rest % n.T;
        const int64_t unit = rest / n.T;
        const int h = static_cast<int>(unit % n.Hv), b = static_cast<int>(unit / n.Hv);
        float sum = 0.0f;
        for (int slice = 0; slice < slices; ++slice)
            sum += ws.partials[((slice * units + unit) * n.T + t) * ws.partial_width + 2 * n.Sk + c];
        if (c < n.gate_width) {
            if (w.dg.present()) *w.dg.at(c, h, t, b) = sum;
        } else if (w.dbeta.present()) {
            *w.dbeta.at(0, h, t, b) = sum;
        }
    }
}

inline size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

inline int backward_warps(int rows) { return rows == 8 ? BackwardShape<8>::warps : BackwardShape<1>::warps; }
static_assert(BackwardShape<1>::warps == BackwardShape<2>::warps && BackwardShape<2>::warps == BackwardShape<4>::warps,
              "backward_warps assumes one block size for R <= 4");

// `shared_limit`: the most dynamic shared memory one block may use on this device.
inline TokenBackwardPlan make_token_backward_plan(const Sizes &n, size_t shared_limit) {
    TokenBackwardPlan plan;
    // sqrt(T) balances checkpoints (T/segment) against sub-checkpoints; capped for long inputs.
    plan.segment = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n.T)))), 1, 128);
    plan.segments = (n.T + plan.segment - 1) / plan.segment;
    const int rows = rows_per_lane(n.Sk), warps = backward_warps(rows), columns = columns_per_block(rows);
    plan.slices = (n.Sv + columns - 1) / columns;
    plan.partial_width = 2 * static_cast<int64_t>(n.Sk) + n.gate_width + 1;
    // Shared memory: the reduction parts, then as many replayed states as fit (at least one).
    const size_t parts = sizeof(float) * (3 * static_cast<size_t>(warps) * n.Sk + 2 * warps);
    const size_t per_token = sizeof(float) * static_cast<size_t>(columns) * n.Sk;
    const int64_t fit = shared_limit > parts ? static_cast<int64_t>((shared_limit - parts) / per_token) : 1;
    plan.sub_segment = std::clamp<int64_t>(fit, 1, plan.segment);
    plan.sub_segments = (plan.segment + plan.sub_segment - 1) / plan.sub_segment;
    plan.shared_bytes = parts + per_token * static_cast<size_t>(plan.sub_segment);
    // Sizes in double first: a product past 2^62 bytes cannot be allocated and must not wrap.
    const double units = static_cast<double>(n.B) * n.Hv, area = static_cast<double>(n.Sk) * n.Sv;
    const double checkpoints = 4.0 * units * static_cast<double>(plan.segments) * area;
    const double sub_checkpoints = 4.0 * units * static_cast<double>(plan.sub_segments) * area;
    const double partials = 4.0 * plan.slices * units * static_cast<double>(n.T) * static_cast<double>(plan.partial_width);
    if (checkpoints + sub_checkpoints + partials > 0x1p62) {
        plan.bytes = SIZE_MAX;
        return plan;
    }
    plan.checkpoints_offset = 0;
    plan.sub_checkpoints_offset = align_up(static_cast<size_t>(checkpoints));
    plan.partials_offset = plan.sub_checkpoints_offset + align_up(static_cast<size_t>(sub_checkpoints));
    plan.bytes = plan.partials_offset + align_up(static_cast<size_t>(partials));
    return plan;
}

// The workspace regions of a plan inside the buffer at `base`.
inline BackwardWorkspace workspace_of(const TokenBackwardPlan &plan, void *base) {
    char *p = static_cast<char *>(base);
    return {reinterpret_cast<float *>(p + plan.checkpoints_offset),
            reinterpret_cast<float *>(p + plan.sub_checkpoints_offset),
            reinterpret_cast<float *>(p + plan.partials_offset),
            plan.segment,
            plan.segments,
            plan.sub_segment,
            plan.sub_segments,
            plan.partial_width};
}

// Launch shapes: the column kernel's blocks are (slices, value heads, sequences), with
// plan.shared_bytes of dynamic shared memory; the reductions are grid-stride loops.
inline int64_t key_grad_count(const Sizes &n) { return static_cast<int64_t>(n.Bq) * n.Hk * n.T * n.Sk; }
inline int64_t gate_grad_count(const Sizes &n) { return static_cast<int64_t>(n.B) * n.Hv * n.T * (n.gate_width + 1); }
inline int reduce_blocks(int64_t total) { return static_cast<int>(std::min<int64_t>((total + 255) / 256, 65536)); }

}  // namespace
}  // namespace gdn::cuda

namespace gdn::cuda {
namespace {

// The forward kernel's views for the backward's checkpoint pass.
inline ForwardViews checkpoint_views(const BackwardViews &w, const BackwardWorkspace &ws) {
    ForwardViews f;
    f.q = w.q, f.k = w.k, f.v = w.v, f.g = w.g, f.beta = w.beta, f.s0 = w.s0;
    f.checkpoints = ws.checkpoints;
    f.checkpoint_every = ws.segment;
    f.checkpoint_count = ws.segments;
    return f;
}

}  // namespace
}  // namespace gdn::cuda
