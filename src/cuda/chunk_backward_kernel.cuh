// The chunked (WY) backward for scalar gates (GDA), ALGORITHM.md section 3, on tensor cores.
//
// One block per (unit, slice of 32 value columns) walks the chunks in reverse with the carry
// dS = dL/dS (Sk x 32) in shared memory. The chunk factors (chunk_prepare_kernel: M, A, P)
// and the chunk-start states S0 (the chunked forward's walk, checkpoints) come first, for
// every chunk. Per chunk it recomputes, as the forward does,
//   R = V - diag(exp(gam)) K S0, Dm = A diag(beta) R,
// then, with dOc = scale dO and Kl = diag(exp(gam_L - gam)) K:
//   dDm = P^T dOc + Kl dS,  Y = A^T dDm,  dV = diag(beta) Y,  dbeta_r = Y_r . (R - M Dm)_r
//   dP = dOc Dm^T (s <= r),  dM = -diag(beta) Y Dm^T (s < r)
//   dQ = diag(exp(gam)) dOc S0^T + (dP o G) K
//   dK = -diag(exp(gam) beta) Y S0^T + diag(exp(gam_L - gam)) Dm dS^T + (dP o G)^T Q + (dM o G) K + (dM o G)^T K
//   dS <- exp(gam_L) dS + Q^T diag(exp(gam)) dOc - K^T diag(exp(gam) beta) Y      (the carry)
// and the gate gradient without cancelling sums (every factor's exponent is a sum of g over
// a range of tokens; a token's dg collects the factors whose range holds it):
//   dg_t = w + sum_{r >= t} single_r + sum_{r < t} link_r + sum_{s < t <= r} X_rs, where
//   single_r = exp(gam_r) (dQg_r.q_r + dKg_r.k_r), link_r = exp(gam_L - gam_r) dKl_r.k_r,
//   X_rs = dP_rs P_rs + dM_rs M_rs, w = exp(gam_L) sum(dS o S0).
// Every gradient but dV sums over value columns: the block writes its slice's part per token
// as a partial row [dq | dk | dg | dbeta], and the fixed-order reductions of partial_rows.cuh
// finish them. The kernel is launched once per window of chunks (last window first), the
// reductions after each; the carry dS passes between windows through the workspace.
//
// Device code, included by chunk_backward.cu (nvcc) and by the host emulation test.
#pragma once

#include <cstdint>

#include "cuda/chunk_common.cuh"
#include "cuda/chunk_forward_kernel.cuh"
#include "cuda/chunk_prepare_kernel.cuh"
#include "cuda/partial_rows.cuh"
#include "cuda/plans.h"
#include "cuda/warp_ops.cuh"

namespace gdn::cuda {
namespace {

static_assert(kSlice == 32, "a slice's columns map to the lanes of one warp");

struct ChunkBackwardLayout {
    int ldk, ldv, ldc;
    int q, k, dq, dk;                     // C x Sk
    int s0, t1;                           // S0 (Sk x 32), then T1 (C x Sk) in the same memory
    int ds;                               // Sk x 32
    int r, dm, doc, y, t2, t3;            // C x 32
    int m, a, p, dp, dmm;                 // C x C
    int gam, beta, single, link, dbeta, row_decay, row_link, scratch;  // vectors of C (scratch: 32 floats)
    int pair_parts;                       // per warp, C floats
    int floats;
};

__host__ __device__ inline ChunkBackwardLayout chunk_backward_layout(int Sk) {
    ChunkBackwardLayout L{};
    L.ldk = Sk + 4, L.ldv = kSlice + 4, L.ldc = kChunk + 4;
    SharedCarver carve;
    L.q = carve.take(kChunk * L.ldk), L.k = carve.take(kChunk * L.ldk), L.dq = carve.take(kChunk * L.ldk), L.dk = carve.take(kChunk * L.ldk);
    L.s0 = L.t1 = carve.take(Sk * L.ldv > kChunk * L.ldk ? Sk * L.ldv : kChunk * L.ldk);
    L.ds = carve.take(Sk * L.ldv);
    L.r = carve.take(kChunk * L.ldv), L.dm = carve.take(kChunk * L.ldv), L.doc = carve.take(kChunk * L.ldv), L.y = carve.take(kChunk * L.ldv);
    L.t2 = carve.take(kChunk * L.ldv), L.t3 = carve.take(kChunk * L.ldv);
    L.m = carve.take(kChunk * L.ldc), L.a = carve.take(kChunk * L.ldc), L.p = carve.take(kChunk * L.ldc), L.dp = carve.take(kChunk * L.ldc);
    L.dmm = carve.take(kChunk * L.ldc);
    L.gam = carve.take(kChunk), L.beta = carve.take(kChunk), L.single = carve.take(kChunk), L.link = carve.take(kChunk), L.dbeta = carve.take(kChunk);
    L.row_decay = carve.take(kChunk), L.row_link = carve.take(kChunk);
    L.scratch = carve.take(32);
    L.pair_parts = carve.take(kChunkBackwardThreads / 32 * kChunk);
    L.floats = carve.at;
    return L;
}

struct ChunkBackwardWork {
    ChunkFactors factors;      // M, A, P of every chunk
    const float *checkpoints;  // [unit][chunk][Sv][Sk]: the state before each chunk
    float *carry;              // [unit][Sv][Sk]: dS before a window's first chunk, for the next launch
    PartialRows rows;          // dq | dk | dg | dbeta per token of the window
    int64_t chunks;            // all chunks of T
    int64_t chunk_begin, chunk_end;  // the window this launch walks (in reverse)
};

// Sum over the block of one value per thread, the same bits in every thread (fixed order).
__device__ inline float block_sum(float x, float *scratch) {
    x = warp_sum(x);
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
    __syncthreads();
    float total = 0.0f;
    for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k) total += scratch[k];
    __syncthreads();
    return total;
}

__global__ void __launch_bounds__(kChunkBackwardThreads) chunk_backward_kernel(BackwardViews w, Sizes n, ChunkBackwardWork ws) {
    namespace tile = gdn::cuda::tile;
    using tile::col_major;
    using tile::row_major;
    extern __shared__ __align__(32) float shared[];
    const ChunkBackwardLayout L = chunk_backward_layout(n.Sk);
    float *Q = shared + L.q, *K = shared + L.k, *dQ = shared + L.dq, *dK = shared + L.dk, *T1 = shared + L.t1;
    float *S0 = shared + L.s0, *dS = shared + L.ds;
    float *R = shared + L.r, *Dm = shared + L.dm, *dOc = shared + L.doc, *Y = shared + L.y, *T2 = shared + L.t2, *T3 = shared + L.t3;
    float *M = shared + L.m, *A = shared + L.a, *P = shared + L.p, *dP = shared + L.dp, *dM = shared + L.dmm;
    float *gam = shared + L.gam, *beta = shared + L.beta, *single = shared + L.single, *link = shared + L.link;
    float *dbeta = shared + L.dbeta, *scratch = shared + L.scratch, *pair_parts = shared + L.pair_parts;
    float *row_decay = shared + L.row_decay, *row_link = shared + L.row_link;
    const int Sk = n.Sk, tid = threadIdx.x, threads = blockDim.x, lane = tid % 32, warp = tid / 32, warps = threads / 32;
    const int slice = blockIdx.x, j0 = slice * kSlice, h = blockIdx.y, b = blockIdx.z;
    const int kh = n.key_head(h), bq = n.qk_sequence(b);
    const int64_t unit = static_cast<int64_t>(b) * n.Hv + h;
    constexpr int C = kChunk;

    // The carry starts as the final state's gradient (K <= 1: slot 0 only) in the last window,
    // and as what the later window left in any other.
    const float *carry_in = ws.carry + unit * n.Sv * Sk;
    for (int idx = tid; idx < Sk * kSlice; idx += threads) {
        const int i = idx / kSlice, c = idx % kSlice;
        dS[i * L.ldv + c] = ws.chunk_end < ws.chunks ? carry_in[static_cast<int64_t>(j0 + c) * Sk + i]
                            : w.d_states.present()   ? *w.d_states.at(i, j0 + c, h, b)
                                                     : 0.0f;
    }

    for (int64_t chunk = ws.chunk_end - 1; chunk >= ws.chunk_begin; --chunk) {
        const int64_t t0 = chunk * C;
        const int len = n.T - t0 < C ? static_cast<int>(n.T - t0) : C;
        __syncthreads();  // the previous chunk is done with every buffer
        // Load the chunk (rows past len are zero), its start state and its factors.
        load_chunk_rows(w.q, Sk, kh, bq, t0, len, Q, L.ldk);
        load_chunk_rows(w.k, Sk, kh, bq, t0, len, K, L.ldk);
        for (int idx = tid; idx < C * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            R[r * L.ldv + c] = r < len ? *w.v.at(j0 + c, h, t0 + r, b) : 0.0f;
            dOc[r * L.ldv + c] = (r < len && w.d_out.present()) ? n.scale * *w.d_out.at(j0 + c, h, t0 + r, b) : 0.0f;
        }
        const float *ckpt = ws.checkpoints + (unit * ws.chunks + chunk) * n.Sv * Sk;
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int c = idx / Sk, i = idx % Sk;
            S0[i * L.ldv + c] = ckpt[static_cast<int64_t>(j0 + c) * Sk + i];
        }
        load_factor(ws.factors.at(unit, chunk, kFactorM), M, L.ldc);
        load_factor(ws.factors.at(unit, chunk, kFactorA), A, L.ldc);
        load_factor(ws.factors.at(unit, chunk, kFactorP), P, L.ldc);
        load_chunk_gates(w.g, w.beta, h, b, t0, len, gam, beta);
        __syncthreads();
        const float gam_last = gam[len - 1];
        if (tid < C) {
            row_decay[tid] = expf(gam[tid]);            // exp(gam_r)
            row_link[tid] = expf(gam_last - gam[tid]);  // exp(gam_L - gam_r)
        }

        // R = V - Kg S0, Dm = A beta R.
        tile::block_gemm<row_major, row_major>(T2, L.ldv, K, L.ldk, S0, L.ldv, C, kSlice, Sk, false);  // K S0 (orders row_decay)
        for (int idx = tid; idx < C * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            R[r * L.ldv + c] -= row_decay[r] * T2[r * L.ldv + c];
            T3[r * L.ldv + c] = beta[r] * R[r * L.ldv + c];
        }
        __syncthreads();
        tile::block_gemm<row_major, row_major>(Dm, L.ldv, A, L.ldc, T3, L.ldv, C, kSlice, C, false);

        // dDm = P^T dOc + Kl dS; Y = A^T dDm.
        tile::block_gemm<row_major, row_major>(T2, L.ldv, K, L.ldk, dS, L.ldv, C, kSlice, Sk, false);  // K dS
        tile::block_gemm<col_major, row_major>(T3, L.ldv, P, L.ldc, dOc, L.ldv, C, kSlice, C, false);  // P^T dOc
        for (int idx = tid; idx < C * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            T3[r * L.ldv + c] += row_link[r] * T2[r * L.ldv + c];
        }
        __syncthreads();
        tile::block_gemm<col_major, row_major>(Y, L.ldv, A, L.ldc, T3, L.ldv, C, kSlice, C, false);  // Y = A^T dDm

        // dV; dbeta = Y . (R - M Dm); dP, dM.
        tile::block_gemm<row_major, row_major>(T2, L.ldv, M, L.ldc, Dm, L.ldv, C, kSlice, C, false);  // M Dm
        if (w.dv.present())
            for (int idx = tid; idx < len * kSlice; idx += threads) {
                const int r = idx / kSlice, c = idx % kSlice;
                *w.dv.at(j0 + c, h, t0 + r, b) = beta[r] * Y[r * L.ldv + c];
            }
        for (int r = warp; r < C; r += warps) {  // a warp per row, a lane per column
            const float product = Y[r * L.ldv + lane] * (R[r * L.ldv + lane] - T2[r * L.ldv + lane]);
            const float sum = warp_sum(product);
            if (lane == 0) dbeta[r] = sum;
        }
        for (int idx = tid; idx < C * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            T3[r * L.ldv + c] = -beta[r] * Y[r * L.ldv + c];  // -diag(beta) Y
        }
        __syncthreads();
        tile::block_gemm<row_major, col_major>(dP, L.ldc, dOc, L.ldv, Dm, L.ldv, C, C, kSlice, false);  // dOc Dm^T
        tile::block_gemm<row_major, col_major>(dM, L.ldc, T3, L.ldv, Dm, L.ldv, C, C, kSlice, false);   // -beta Y Dm^T

        // dQg = dOc S0^T, dKg = -beta Y S0^T; then S0's last use, w = exp(gam_L) sum(dS o S0),
        // before dKl = Dm dS^T overwrites it (T1 shares S0's memory).
        tile::block_gemm<row_major, col_major>(dQ, L.ldk, dOc, L.ldv, S0, L.ldv, C, Sk, kSlice, false);
        tile::block_gemm<row_major, col_major>(dK, L.ldk, T3, L.ldv, S0, L.ldv, C, Sk, kSlice, false);
        float w_part = 0.0f;
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int i = idx / kSlice, c = idx % kSlice;
            w_part += dS[i * L.ldv + c] * S0[i * L.ldv + c];
        }
        const float w_gate = expf(gam_last) * block_sum(w_part, scratch);  // its barriers end the reads of S0
        tile::block_gemm<row_major, col_major>(T1, L.ldk, Dm, L.ldv, dS, L.ldv, C, Sk, kSlice, false);
        // The gate terms of single tokens and of their links to the chunk's end: a warp per row
        // in turn, its lanes over the key channels.
        for (int r = warp; r < C; r += warps) {
            float sq = 0.0f, sk = 0.0f, sl = 0.0f;
            for (int i = lane; i < Sk; i += 32) {
                sq += dQ[r * L.ldk + i] * Q[r * L.ldk + i];
                sk += dK[r * L.ldk + i] * K[r * L.ldk + i];
                sl += T1[r * L.ldk + i] * K[r * L.ldk + i];
            }
            sq = warp_sum(sq), sk = warp_sum(sk), sl = warp_sum(sl);
            if (lane == 0) {
                single[r] = row_decay[r] * (sq + sk);
                link[r] = row_link[r] * sl;
            }
        }
        // The pairs s < t <= r: along each row, Z_rt = sum_{s<t} X_rs (a warp scan, lane t),
        // then lane t of each warp sums Z_rt over the warp's rows r >= t.
        {
            float rows_sum = 0.0f;
            for (int r = warp; r < C; r += warps) {
                const int s = lane;
                const float x = s < r ? dP[r * L.ldc + s] * P[r * L.ldc + s] + dM[r * L.ldc + s] * M[r * L.ldc + s] : 0.0f;
                const float z = warp_exclusive_scan(x);
                if (lane <= r) rows_sum += z;
            }
            pair_parts[warp * C + lane] = rows_sum;
        }
        __syncthreads();
        for (int idx = tid; idx < C * Sk; idx += threads) {
            const int r = idx / Sk, i = idx % Sk;
            dQ[r * L.ldk + i] *= row_decay[r];
            dK[r * L.ldk + i] = row_decay[r] * dK[r * L.ldk + i] + row_link[r] * T1[r * L.ldk + i];
        }
        if (warp == 0) {  // dg_t for t = lane: w + suffix of single + prefix of link + pairs
            float pairs = 0.0f;
            for (int k = 0; k < warps; ++k) pairs += pair_parts[k * C + lane];
            scratch[lane] = w_gate + warp_suffix_sum(single[lane]) + warp_exclusive_scan(link[lane]) + pairs;  // read after the barrier
        }
        // Gate-masked dP and dM (the gradients of the undecayed products), in place after their gate terms.
        __syncthreads();
        for (int idx = tid; idx < C * C; idx += threads) {
            const int r = idx / C, s = idx % C;
            const float decay = s <= r ? expf(gam[r] - gam[s]) : 0.0f;
            dP[r * L.ldc + s] = s <= r ? dP[r * L.ldc + s] * decay : 0.0f;
            dM[r * L.ldc + s] = s < r ? dM[r * L.ldc + s] * decay : 0.0f;
        }
        __syncthreads();
        tile::block_gemm<row_major, row_major>(dQ, L.ldk, dP, L.ldc, K, L.ldk, C, Sk, C, true);   // + (dP o G) K
        tile::block_gemm<col_major, row_major>(dK, L.ldk, dP, L.ldc, Q, L.ldk, C, Sk, C, true);   // + (dP o G)^T Q
        tile::block_gemm<row_major, row_major>(dK, L.ldk, dM, L.ldc, K, L.ldk, C, Sk, C, true);   // + (dM o G) K
        tile::block_gemm<col_major, row_major>(dK, L.ldk, dM, L.ldc, K, L.ldk, C, Sk, C, true);   // + (dM o G)^T K

        // The partial rows of this slice: [dq | dk | dg | dbeta].
        const int64_t units = static_cast<int64_t>(n.B) * n.Hv;
        for (int idx = tid; idx < len * (2 * Sk + 2); idx += threads) {
            const int r = idx / (2 * Sk + 2), x = idx % (2 * Sk + 2);
            const float value = x < Sk ? dQ[r * L.ldk + x] : x < 2 * Sk ? dK[r * L.ldk + x - Sk] : x == 2 * Sk ? scratch[r] : dbeta[r];
            ws.rows.row(slice, unit, units, t0 + r)[x] = value;
        }

        // The carry: dS = exp(gam_L) dS + Q^T diag(exp(gam)) dOc - K^T diag(exp(gam) beta) Y.
        for (int idx = tid; idx < C * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            T2[r * L.ldv + c] = row_decay[r] * dOc[r * L.ldv + c];
            T3[r * L.ldv + c] = -row_decay[r] * beta[r] * Y[r * L.ldv + c];
        }
        const float decay_last = expf(gam_last);
        for (int idx = tid; idx < Sk * kSlice; idx += threads) dS[(idx / kSlice) * L.ldv + idx % kSlice] *= decay_last;
        __syncthreads();
        tile::block_gemm<col_major, row_major>(dS, L.ldv, Q, L.ldk, T2, L.ldv, Sk, kSlice, C, true);
        tile::block_gemm<col_major, row_major>(dS, L.ldv, K, L.ldk, T3, L.ldv, Sk, kSlice, C, true);
    }

    if (ws.chunk_begin > 0) {  // an earlier window follows: hand dS over
        float *carry_out = ws.carry + unit * n.Sv * Sk;
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int c = idx / Sk, i = idx % Sk;
            carry_out[static_cast<int64_t>(j0 + c) * Sk + i] = dS[i * L.ldv + c];
        }
    } else if (w.ds0.present()) {
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int i = idx / kSlice, c = idx % kSlice;
            *w.ds0.at(i, j0 + c, h, b) = dS[i * L.ldv + c];
        }
    }
}

inline size_t chunk_backward_shared_bytes(int Sk) { return sizeof(float) * static_cast<size_t>(chunk_backward_layout(Sk).floats); }

inline bool chunk_backward_eligible(const Sizes &n, size_t shared_limit) {
    return chunk_forward_eligible(n, shared_limit) && chunk_backward_shared_bytes(n.Sk) <= shared_limit;
}

// `partial_budget`: the bytes the partial rows of a window may take.
inline ChunkBackwardPlan make_chunk_backward_plan(const Sizes &n, size_t partial_budget = kPartialRowsBudget) {
    ChunkBackwardPlan plan;
    plan.chunks = (n.T + kChunk - 1) / kChunk;
    plan.slices = n.Sv / kSlice;
    plan.partial_width = 2 * static_cast<int64_t>(n.Sk) + 2;
    plan.shared_bytes = chunk_backward_shared_bytes(n.Sk);
    const double units = static_cast<double>(n.B) * n.Hv, area = static_cast<double>(n.Sv) * n.Sk;
    const double row_bytes = 4.0 * plan.slices * units * static_cast<double>(plan.partial_width);  // per token
    plan.window_chunks = window_tokens(n.T, kChunk, row_bytes, partial_budget) / kChunk;
    plan.windows = (plan.chunks + plan.window_chunks - 1) / plan.window_chunks;
    const double checkpoints = 4.0 * units * static_cast<double>(plan.chunks) * area;
    const double factors = chunk_factor_bytes(n, 3);
    const double carry = plan.windows > 1 ? 4.0 * units * area : 0.0;
    const double partials = row_bytes * static_cast<double>(plan.window_chunks * kChunk);
    if (checkpoints + factors + carry + partials > 0x1p62) {
        plan.bytes = SIZE_MAX;
        return plan;
    }
    const auto aligned = [](double bytes) { return (static_cast<size_t>(bytes) + 255) / 256 * 256; };
    plan.checkpoints_offset = 0;
    plan.factors_offset = aligned(checkpoints);
    plan.carry_offset = plan.factors_offset + aligned(factors);
    plan.partials_offset = plan.carry_offset + aligned(carry);
    plan.bytes = plan.partials_offset + aligned(partials);
    return plan;
}

// The chunked forward's views for the backward's checkpoint pass.
inline ForwardViews chunk_checkpoint_views(const BackwardViews &w, float *checkpoints, int64_t chunks) {
    ForwardViews f;
    f.q = w.q, f.k = w.k, f.v = w.v, f.g = w.g, f.beta = w.beta, f.s0 = w.s0;
    f.checkpoints = checkpoints;
    f.checkpoint_every = kChunk;
    f.checkpoint_count = chunks;
    return f;
}

// Enqueues the chunked backward: the factors of every chunk, the forward's walk writing the
// chunk-start states, then per window of chunks (last first) the chunk kernel and the
// reductions of its rows.
template <class Launch>
cudaError_t run_chunk_backward(const Launch &launch, const BackwardViews &w, const Sizes &n, const ChunkBackwardPlan &plan,
                               void *workspace) {
    char *base = static_cast<char *>(workspace);
    float *checkpoints = reinterpret_cast<float *>(base + plan.checkpoints_offset);
    ChunkBackwardWork work{};
    work.factors.data = reinterpret_cast<float *>(base + plan.factors_offset);
    work.factors.chunks = plan.chunks;
    work.factors.count = 3;
    work.checkpoints = checkpoints;
    work.carry = reinterpret_cast<float *>(base + plan.carry_offset);
    work.rows.data = reinterpret_cast<float *>(base + plan.partials_offset);
    work.rows.width = plan.partial_width;
    work.rows.slices = plan.slices;
    work.rows.capacity = plan.window_chunks * kChunk;
    work.chunks = plan.chunks;
    const ForwardViews states = chunk_checkpoint_views(w, checkpoints, plan.chunks);
    cudaError_t e = run_chunk_prepare(launch, states, n, work.factors);
    if (e != cudaSuccess || (e = run_chunk_walk(launch, states, n, work.factors)) != cudaSuccess) return e;
    const LaunchShape shape{plan.slices, n.Hv, n.B, kChunkBackwardThreads, plan.shared_bytes};
    for (int64_t window = plan.windows - 1; window >= 0; --window) {
        work.chunk_begin = window * plan.window_chunks;
        work.chunk_end = std::min(work.chunk_begin + plan.window_chunks, plan.chunks);
        work.rows.t_begin = work.chunk_begin * kChunk;
        work.rows.tokens = std::min(work.chunk_end * kChunk, n.T) - work.rows.t_begin;
        if ((e = launch(chunk_backward_kernel, shape, w, n, work)) != cudaSuccess) return e;
        if ((e = launch_reductions(launch, w, n, work.rows)) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

}  // namespace
}  // namespace gdn::cuda
