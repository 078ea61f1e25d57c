// The per-token backward kernels (the recurrence of src/math/token_step.h), column by column.
//
// The carry D = dL/dS is column-local, like the forward: D[:, j] at token t-1 depends only on
// column j of D, S and on token t's inputs. So each warp owns state columns of one
// (sequence b, value head h) unit and keeps S[:, j] and D[:, j] in registers. What is not
// column-local are the gradients of key-channel inputs (dq, dk, per-channel dg) and of scalars
// (dbeta, scalar dg): every column adds a part. A block sums its warps' parts per token in
// shared memory in a fixed order and writes one partial row per (column slice, unit, token) to
// the workspace; the reductions of partial_rows.cuh sum the rows of every slice and every
// unit that reads a key head, in a fixed order. No atomics: the same bits on every run. The
// kernel is launched once per window of segments (last window first), the reductions after
// each, and the carry D passes between windows through the workspace.
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
// Sk Sv floats, plus the carry D between windows and one window's partial rows.
//
// Device code plus the host-side plan, included by token_backward.cu (nvcc) and by the host
// emulation test (tests/cuda/emulated_kernels_test.cpp), which runs the kernels on CPU threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/partial_rows.cuh"
#include "cuda/plans.h"
#include "cuda/token_forward_kernel.cuh"
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
    float *checkpoints;      // [unit][segment][Sv][Sk]: S before the first token of each segment
    float *sub_checkpoints;  // [unit][sub-segment][Sv][Sk]: S before each sub-segment of the segment being walked
    float *carry;            // [unit][Sv][Sk]: D after a window (before its first token), for the next launch
    PartialRows rows;        // dq | dk | dg | dbeta per token of the window
    int64_t segment, segments, sub_segment, sub_segments;
    int64_t segment_begin, segment_end;  // the window this launch walks (in reverse)
};

// The column S[:, j] of a unit inside a [unit][rows][Sv][Sk] buffer.
__device__ __forceinline__ float *packed_column(float *base, int64_t unit, int64_t rows, int64_t row, const Sizes &n, int j) {
    return base + ((unit * rows + row) * n.Sv + j) * n.Sk;
}

// Blocks (column slice, value head h, sequence z of the table): the sequence walked as a call of
// its own (sequence_views.h), b = bq = 0 in its views; its checkpoints at unit z Hv + h, its
// partial rows at unit b Hv + h of the call from row `entry.rows`.
template <int R>
__global__ void __launch_bounds__(BackwardShape<R>::warps * 32, 1)
token_backward_kernel(BackwardViews call, Sizes call_sizes, BackwardWorkspace ws, SequenceTable table) {
    constexpr int kWarps = BackwardShape<R>::warps, kColumns = BackwardShape<R>::columns;
    extern __shared__ float shared[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const SequenceEntry entry = sequence_entry(table, call_sizes, blockIdx.z);
    const BackwardViews w = sequence_views(call, entry, snapshot_step(table, call_sizes));
    const Sizes n = sequence_sizes(call_sizes, entry);
    float *vec_parts = shared;                            // [3][kWarps][Sk]: dq, dk, dg parts per warp
    float *scalar_parts = shared + 3 * kWarps * n.Sk;     // [2][kWarps]: dbeta, scalar dg
    float *replay = scalar_parts + 2 * kWarps;            // [sub_segment][kWarps * kColumns][Sk]: S_{t-1}
    const int slice = blockIdx.x, h = blockIdx.y, b = 0, bq = 0;
    const int kh = n.key_head(h);
    const int64_t unit = static_cast<int64_t>(blockIdx.z) * n.Hv + h;  // of the checkpoints and the carry
    const int64_t row_unit = static_cast<int64_t>(entry.b) * n.Hv + h, row_units = static_cast<int64_t>(call_sizes.B) * n.Hv;
    // This sequence's segments (a packed group's are fewer than the plan's, its longest's).
    const int64_t segments = (n.T + ws.segment - 1) / ws.segment;
    const int64_t segment_end = ws.segment_end < segments ? ws.segment_end : segments;
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
    // D enters the last window as zero (d_states is added per token) and any other window as
    // the carry the later window left.
    const bool last_window = ws.segment_end >= segments;
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
#pragma unroll
        for (int r = 0; r < R; ++r) dS[c][r] = 0.0f;
        if (!last_window && column_in[c]) load_packed<R>(packed_column(ws.carry, unit, 1, 0, n, column[c]), n.Sk, lane, dS[c]);
    }
    // Segments in reverse (the checkpoints come from the forward kernel, run first).
    for (int64_t seg = segment_end - 1; seg >= ws.segment_begin; --seg) {
        const int64_t t0 = seg * ws.segment, t1 = t0 + ws.segment < n.T ? t0 + ws.segment : n.T;

        // The segment forward from its checkpoint: sub-checkpoints.
#pragma unroll
        for (int c = 0; c < kColumns; ++c)
            if (column_in[c]) load_packed<R>(packed_column(ws.checkpoints, unit, ws.segments, seg, n, column[c]), n.Sk, lane, s[c]);
        for (int64_t t = t0; t < t1; ++t) {
            KeyRows<R> x;
            load_key_rows<R>(w.q, w.k, w.g, n, kh, bq, h, b, t, lane, x);
            const float beta = w.beta.load(0, h, t, b);
            float v[kColumns];
#pragma unroll
            for (int c = 0; c < kColumns; ++c) {
                v[c] = column_in[c] ? w.v.load(column[c], h, t, b) : 0.0f;
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
                const float beta = w.beta.load(0, h, t, b);
                float v[kColumns];
#pragma unroll
                for (int c = 0; c < kColumns; ++c) {
                    v[c] = column_in[c] ? w.v.load(column[c], h, t, b) : 0.0f;
                    if (column_in[c]) store_packed<R>(replay_column(t - u0, c), n.Sk, lane, s[c]);
                }
                forward_columns_step<R, kColumns>(s, x, v, beta, column_in, lane, n.Sk);
            }

            // Walk the sub-segment backwards; s holds S_t on entry to token t.
            for (int64_t t = u1 - 1; t >= u0; --t) {
                KeyRows<R> x;
                load_key_rows<R>(w.q, w.k, w.g, n, kh, bq, h, b, t, lane, x);
                const float beta = w.beta.load(0, h, t, b);
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
                        load_column<R>(w.d_states, n.Sk, j, h, slot, lane, extra);  // the view steps between slots
#pragma unroll
                        for (int r = 0; r < R; ++r) dS[c][r] += extra[r];
                    }
                    // The output o_t = scale S_t^T q_t: dS_t += scale q dO_j, dq += scale S_t[:, j] dO_j.
                    const float out_weight = w.d_out.present() ? n.scale * w.d_out.load(j, h, t, b) : 0.0f;
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
                    const float v = w.v.load(j, h, t, b);
                    const float residual = v - p;
                    const float d = beta * residual;
                    if (w.dv.present() && lane == 0) w.dv.store(j, h, t, b, beta * e);
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
                float *row = ws.rows.row(slice, row_unit, row_units, entry.rows + t);
                for (int idx = threadIdx.x; idx < ws.rows.width; idx += blockDim.x) {
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

    if (ws.segment_begin > 0) {  // an earlier window follows: hand D over
#pragma unroll
        for (int c = 0; c < kColumns; ++c)
            if (column_in[c]) store_packed<R>(packed_column(ws.carry, unit, 1, 0, n, column[c]), n.Sk, lane, dS[c]);
    } else if (w.ds0.present()) {
#pragma unroll
        for (int c = 0; c < kColumns; ++c)
            if (column_in[c]) store_column<R>(w.ds0, n.Sk, column[c], h, b, lane, dS[c]);
    }
}


inline int backward_warps(int rows) { return rows == 8 ? BackwardShape<8>::warps : BackwardShape<1>::warps; }
static_assert(BackwardShape<1>::warps == BackwardShape<2>::warps && BackwardShape<2>::warps == BackwardShape<4>::warps,
              "backward_warps assumes one block size for R <= 4");

// Bytes of the partial rows of one token of every value head (and sequence, unpacked).
inline double token_backward_row_bytes(const Sizes &n) {
    const int columns = columns_per_block(rows_per_lane(n.Sk));
    const double slices = (n.Sv + columns - 1) / columns;
    return 4.0 * slices * static_cast<double>(n.B) * n.Hv * (2.0 * n.Sk + n.gate_width + 1);
}

// `shared_limit`: the most dynamic shared memory one block may use on this device;
// `window_budget`: the bytes the partial rows of a window may take. A packed group
// (table.packed: short sequences of one packed call, formed so that the partial rows of all
// their tokens fit the budget) is walked in one window, segments sized for its longest.
inline TokenBackwardPlan make_token_backward_plan(const Sizes &n, size_t shared_limit, size_t window_budget = kWindowBudget,
                                                  const SequenceTable &table = {}) {
    TokenBackwardPlan plan;
    const int64_t longest = table.packed ? table.longest : n.T;
    // sqrt(T) balances checkpoints (T/segment) against sub-checkpoints; capped for long inputs.
    plan.segment = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(longest)))), 1, 128);
    plan.segments = (longest + plan.segment - 1) / plan.segment;
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
    const double units = static_cast<double>(sequence_count(table, n)) * n.Hv, area = static_cast<double>(n.Sk) * n.Sv;
    const double row_bytes = token_backward_row_bytes(n);  // per token
    plan.windows = table.packed ? Windows::fit(longest, plan.segment, 1.0, SIZE_MAX)
                                : Windows::fit(n.T, plan.segment, row_bytes * static_cast<double>(plan.segment), window_budget);
    plan.row_tokens = table.packed ? table.tokens : plan.windows.per_window * plan.segment;
    const double checkpoints = 4.0 * units * static_cast<double>(plan.segments) * area;
    const double sub_checkpoints = 4.0 * units * static_cast<double>(plan.sub_segments) * area;
    const double carry = plan.windows.count > 1 ? 4.0 * units * area : 0.0;
    const double partials = row_bytes * static_cast<double>(plan.row_tokens);
    if (checkpoints + sub_checkpoints + carry + partials > 0x1p62) {
        plan.bytes = SIZE_MAX;
        return plan;
    }
    plan.checkpoints_offset = 0;
    plan.sub_checkpoints_offset = align_up(checkpoints);
    plan.carry_offset = plan.sub_checkpoints_offset + align_up(sub_checkpoints);
    plan.partials_offset = plan.carry_offset + align_up(carry);
    plan.bytes = plan.partials_offset + align_up(partials);
    return plan;
}

// The workspace regions of a plan inside the buffer at `base`.
inline BackwardWorkspace workspace_of(const TokenBackwardPlan &plan, void *base) {
    char *p = static_cast<char *>(base);
    BackwardWorkspace ws{};
    ws.checkpoints = reinterpret_cast<float *>(p + plan.checkpoints_offset);
    ws.sub_checkpoints = reinterpret_cast<float *>(p + plan.sub_checkpoints_offset);
    ws.carry = reinterpret_cast<float *>(p + plan.carry_offset);
    ws.rows.data = reinterpret_cast<float *>(p + plan.partials_offset);
    ws.rows.width = plan.partial_width;
    ws.rows.slices = plan.slices;
    ws.rows.capacity = plan.row_tokens;
    ws.segment = plan.segment, ws.segments = plan.segments;
    ws.sub_segment = plan.sub_segment, ws.sub_segments = plan.sub_segments;
    return ws;
}

// Enqueues the per-token backward of every sequence of `table` (none: the unpacked call's B):
// the forward writing the checkpoints, then per window of segments (last first) the column
// kernel and the reductions of its rows; one launch each.
template <class Launch>
cudaError_t run_token_backward(const Launch &launch, const BackwardViews &w, const Sizes &n, const TokenBackwardPlan &plan,
                               void *workspace, const SequenceTable &table = {}) {
    BackwardWorkspace ws = workspace_of(plan, workspace);
    cudaError_t e = run_token_forward(launch, checkpoint_pass(w, ws.checkpoints, ws.segment, ws.segments), n, table);
    if (e != cudaSuccess) return e;
    const int rows = rows_per_lane(n.Sk);
    const LaunchShape shape{plan.slices, n.Hv, sequence_count(table, n), backward_warps(rows) * 32, plan.shared_bytes};
    for (int64_t i = plan.windows.count - 1; i >= 0; --i) {
        const Windows::Range window = plan.windows.range(i, n.T);
        ws.segment_begin = window.begin, ws.segment_end = window.end;
        ws.rows.t_begin = window.t_begin, ws.rows.tokens = window.tokens;
        switch (rows) {
            case 1: e = launch(token_backward_kernel<1>, shape, w, n, ws, table); break;
            case 2: e = launch(token_backward_kernel<2>, shape, w, n, ws, table); break;
            case 4: e = launch(token_backward_kernel<4>, shape, w, n, ws, table); break;
            default: e = launch(token_backward_kernel<8>, shape, w, n, ws, table); break;
        }
        if (e != cudaSuccess) return e;
        if ((e = run_reductions(launch, w, n, ws.rows, table)) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

}  // namespace
}  // namespace gdn::cuda
