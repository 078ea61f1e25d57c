// The chunked (WY) backward for scalar gates (GDA) on tensor cores: the formulas of
// src/cpu/chunk_backward.cpp, per chunk.
//
// First the forward's walk stores the state before every chunk (checkpoints). Then, window by
// window from the last (plans.h: Windows), chunk_prepare_kernel computes the window's factors
// M, A, P (chunk_common.cuh), and one block per (unit, slice of 32 value columns) walks the
// window's chunks in reverse with the carry dS = dL/dS (Sk x 32) in shared memory, handed to
// the earlier window through the workspace. Per chunk, with S0 its start state:
//   R = V - diag(exp(gam)) K S0, D = A diag(beta) R                       (the deltas)
// then, with dOc = scale dO and Kl = diag(exp(gam_L - gam)) K:
//   dD = P^T dOc + Kl dS,  Y = A^T dD,  dV = diag(beta) Y,  dbeta_r = Y_r . (R - M D)_r
//   dP = dOc D^T (s <= r),  dM = -diag(beta) Y D^T (s < r)
//   dQ = diag(exp(gam)) dOc S0^T + (dP o G) K
//   dK = -diag(exp(gam) beta) Y S0^T + diag(exp(gam_L - gam)) D dS^T + (dP o G)^T Q + (dM o G) K + (dM o G)^T K
//   dS <- exp(gam_L) dS + Q^T diag(exp(gam)) dOc - K^T diag(exp(gam) beta) Y      (the carry)
// and the gate gradient without cancelling sums (every factor's exponent is a sum of g over
// a range of tokens; a token's dg collects the factors whose range holds it):
//   dg_t = w + sum_{r >= t} single_r + sum_{r < t} link_r + sum_{s < t <= r} X_rs, where
//   single_r = exp(gam_r) (dQg_r.q_r + dKg_r.k_r), link_r = exp(gam_L - gam_r) dKl_r.k_r,
//   X_rs = dP_rs P_rs + dM_rs M_rs, w = exp(gam_L) sum(dS o S0).
// Every gradient but dV sums over value columns: the block writes its slice's part per token
// as a partial row [dq | dk | dg | dbeta], and the fixed-order reductions of partial_rows.cuh
// finish each window's rows before the next window reuses them.
//
// Device code plus its plan and launch sequence, included by chunk_backward.cu (nvcc) and by
// the host emulation test.
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
    int s0, dkl;                          // S0 (Sk x 32), then dKl = D dS^T (C x Sk) in the same memory
    int ds;                               // Sk x 32
    int r, d, doc, y, t2, t3;             // C x 32
    int m, a, p, dp, dm;                  // C x C
    int gam, beta, row_decay, row_link;   // vectors of C: exp(gam_r), exp(gam_L - gam_r)
    int single, link, dg, dbeta;          // vectors of C: the gate gradient's pieces
    int block_parts, pair_parts;          // per warp: one float (block_sum), C floats (the pairs)
    int floats;
};

__host__ __device__ inline ChunkBackwardLayout chunk_backward_layout(int Sk) {
    constexpr int C = kChunk, warps = kChunkBackwardThreads / 32;
    ChunkBackwardLayout L{};
    L.ldk = Sk + 4, L.ldv = kSlice + 4, L.ldc = C + 4;
    SharedCarver carve;
    L.q = carve.take(C * L.ldk), L.k = carve.take(C * L.ldk), L.dq = carve.take(C * L.ldk), L.dk = carve.take(C * L.ldk);
    L.s0 = L.dkl = carve.take(Sk * L.ldv > C * L.ldk ? Sk * L.ldv : C * L.ldk);
    L.ds = carve.take(Sk * L.ldv);
    L.r = carve.take(C * L.ldv), L.d = carve.take(C * L.ldv), L.doc = carve.take(C * L.ldv), L.y = carve.take(C * L.ldv);
    L.t2 = carve.take(C * L.ldv), L.t3 = carve.take(C * L.ldv);
    L.m = carve.take(C * L.ldc), L.a = carve.take(C * L.ldc), L.p = carve.take(C * L.ldc), L.dp = carve.take(C * L.ldc);
    L.dm = carve.take(C * L.ldc);
    L.gam = carve.take(C), L.beta = carve.take(C), L.row_decay = carve.take(C), L.row_link = carve.take(C);
    L.single = carve.take(C), L.link = carve.take(C), L.dg = carve.take(C), L.dbeta = carve.take(C);
    L.block_parts = carve.take(warps), L.pair_parts = carve.take(warps * C);
    L.floats = carve.at;
    return L;
}

struct ChunkBackwardWork {
    ChunkWalk walk;            // the window: M, A, P of its chunks; the carry dS
    const float *checkpoints;  // [unit][chunk][Sv][Sk]: the state before each chunk
    PartialRows rows;          // dq | dk | dg | dbeta per token of the window
};

// Sum over the block of one value per thread, the same bits in every thread (fixed order).
__device__ inline float block_sum(float x, float *parts) {
    x = warp_sum(x);
    if (threadIdx.x % 32 == 0) parts[threadIdx.x / 32] = x;
    __syncthreads();
    float total = 0.0f;
    for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k) total += parts[k];
    __syncthreads();
    return total;
}

// kBf16Products: Sizes::bf16_products as a template parameter (tile_ops.cuh: block_gemm).
template <bool kBf16Products>
__global__ void __launch_bounds__(kChunkBackwardThreads) chunk_backward_kernel(BackwardViews w, Sizes n, ChunkBackwardWork ws) {
    namespace tile = gdn::cuda::tile;
    using tile::col_major;
    using tile::row_major;
    extern __shared__ __align__(32) float shared[];
    const ChunkBackwardLayout L = chunk_backward_layout(n.Sk);
    float *Q = shared + L.q, *K = shared + L.k, *dQ = shared + L.dq, *dK = shared + L.dk;
    float *S0 = shared + L.s0, *dKl = shared + L.dkl, *dS = shared + L.ds;
    float *R = shared + L.r, *D = shared + L.d, *dOc = shared + L.doc, *Y = shared + L.y, *T2 = shared + L.t2, *T3 = shared + L.t3;
    float *M = shared + L.m, *A = shared + L.a, *P = shared + L.p, *dP = shared + L.dp, *dM = shared + L.dm;
    float *gam = shared + L.gam, *beta = shared + L.beta, *row_decay = shared + L.row_decay, *row_link = shared + L.row_link;
    float *single = shared + L.single, *link = shared + L.link, *dg = shared + L.dg, *dbeta = shared + L.dbeta;
    float *block_parts = shared + L.block_parts, *pair_parts = shared + L.pair_parts;
    const int Sk = n.Sk, tid = threadIdx.x, threads = blockDim.x, lane = tid % 32, warp = tid / 32, warps = threads / 32;
    const int slice = blockIdx.x, j0 = slice * kSlice, h = blockIdx.y, b = blockIdx.z;
    const int kh = n.key_head(h), bq = n.qk_sequence(b);
    const int64_t unit = static_cast<int64_t>(b) * n.Hv + h, units = static_cast<int64_t>(n.B) * n.Hv;
    const ChunkWalk &walk = ws.walk;
    constexpr int C = kChunk;

    // The carry starts as the final state's gradient (K <= 1: slot 0 only) in the last window,
    // and as what the later window left in any other.
    float *carry = walk.carry + unit * n.Sv * Sk;
    const bool last_window = walk.chunk_end == walk.chunks;
    if (last_window) {
        load_state_slice(w.d_states, Sk, j0, h, b, dS, L.ldv);
    } else {
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int c = idx / Sk, i = idx % Sk;
            dS[i * L.ldv + c] = carry[static_cast<int64_t>(j0 + c) * Sk + i];
        }
    }

    for (int64_t chunk = walk.chunk_end - 1; chunk >= walk.chunk_begin; --chunk) {
        const int64_t t0 = chunk * C;
        const int len = n.T - t0 < C ? static_cast<int>(n.T - t0) : C;
        __syncthreads();  // the previous chunk is done with every buffer
        // Load the chunk (rows past len are zero), its start state and its factors.
        load_chunk_rows(w.q, Sk, kh, bq, t0, len, Q, L.ldk);
        load_chunk_rows(w.k, Sk, kh, bq, t0, len, K, L.ldk);
        for (int idx = tid; idx < C * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            R[r * L.ldv + c] = r < len ? w.v.load(j0 + c, h, t0 + r, b) : 0.0f;
            dOc[r * L.ldv + c] = (r < len && w.d_out.present()) ? n.scale * w.d_out.load(j0 + c, h, t0 + r, b) : 0.0f;
        }
        const float *ckpt = ws.checkpoints + (unit * walk.chunks + chunk) * n.Sv * Sk;
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int c = idx / Sk, i = idx % Sk;
            S0[i * L.ldv + c] = ckpt[static_cast<int64_t>(j0 + c) * Sk + i];
        }
        load_factor(walk.factors.at(unit, chunk, kFactorM), M, L.ldc);
        load_factor(walk.factors.at(unit, chunk, kFactorA), A, L.ldc);
        load_factor(walk.factors.at(unit, chunk, kFactorP), P, L.ldc);
        load_chunk_gates(w.g, w.beta, h, b, t0, len, gam, beta);
        if (warp == 0) {  // the warp that wrote gam
            __syncwarp();
            const float gam_last = gam[len - 1];
            row_decay[lane] = expf(gam[lane]);
            row_link[lane] = expf(gam_last - gam[lane]);
        }
        __syncthreads();
        const float gam_last = gam[len - 1];

        // R = V - Kg S0, D = A beta R.
        tile::block_gemm<row_major, row_major>(T2, L.ldv, K, L.ldk, S0, L.ldv, C, kSlice, Sk, false, kBf16Products);  // K S0
        for (int idx = tid; idx < C * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            R[r * L.ldv + c] -= row_decay[r] * T2[r * L.ldv + c];
            T3[r * L.ldv + c] = beta[r] * R[r * L.ldv + c];
        }
        __syncthreads();
        tile::block_gemm<row_major, row_major>(D, L.ldv, A, L.ldc, T3, L.ldv, C, kSlice, C, false, kBf16Products);

        // dD = P^T dOc + Kl dS; Y = A^T dD.
        tile::block_gemm<row_major, row_major>(T2, L.ldv, K, L.ldk, dS, L.ldv, C, kSlice, Sk, false, kBf16Products);  // K dS
        tile::block_gemm<col_major, row_major>(T3, L.ldv, P, L.ldc, dOc, L.ldv, C, kSlice, C, false, kBf16Products);  // P^T dOc
        for (int idx = tid; idx < C * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            T3[r * L.ldv + c] += row_link[r] * T2[r * L.ldv + c];
        }
        __syncthreads();
        tile::block_gemm<col_major, row_major>(Y, L.ldv, A, L.ldc, T3, L.ldv, C, kSlice, C, false, kBf16Products);  // Y = A^T dD

        // dV; dbeta = Y . (R - M D); dP, dM.
        tile::block_gemm<row_major, row_major>(T2, L.ldv, M, L.ldc, D, L.ldv, C, kSlice, C, false, kBf16Products);  // M D
        if (w.dv.present())
            for (int idx = tid; idx < len * kSlice; idx += threads) {
                const int r = idx / kSlice, c = idx % kSlice;
                w.dv.store(j0 + c, h, t0 + r, b, beta[r] * Y[r * L.ldv + c]);
            }
        for (int r = warp; r < C; r += warps) {  // a warp per row, a lane per column
            const float sum = warp_sum(Y[r * L.ldv + lane] * (R[r * L.ldv + lane] - T2[r * L.ldv + lane]));
            if (lane == 0) dbeta[r] = sum;
        }
        for (int idx = tid; idx < C * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            T3[r * L.ldv + c] = -beta[r] * Y[r * L.ldv + c];  // -diag(beta) Y
        }
        __syncthreads();
        tile::block_gemm<row_major, col_major>(dP, L.ldc, dOc, L.ldv, D, L.ldv, C, C, kSlice, false, kBf16Products);  // dOc D^T
        tile::block_gemm<row_major, col_major>(dM, L.ldc, T3, L.ldv, D, L.ldv, C, C, kSlice, false, kBf16Products);   // -beta Y D^T

        // dQg = dOc S0^T, dKg = -beta Y S0^T; then S0's last use, w = exp(gam_L) sum(dS o S0),
        // before dKl = D dS^T overwrites it.
        tile::block_gemm<row_major, col_major>(dQ, L.ldk, dOc, L.ldv, S0, L.ldv, C, Sk, kSlice, false, kBf16Products);
        tile::block_gemm<row_major, col_major>(dK, L.ldk, T3, L.ldv, S0, L.ldv, C, Sk, kSlice, false, kBf16Products);
        float state_part = 0.0f;
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int i = idx / kSlice, c = idx % kSlice;
            state_part += dS[i * L.ldv + c] * S0[i * L.ldv + c];
        }
        const float dg_state = expf(gam_last) * block_sum(state_part, block_parts);  // its barriers end the reads of S0
        tile::block_gemm<row_major, col_major>(dKl, L.ldk, D, L.ldv, dS, L.ldv, C, Sk, kSlice, false, kBf16Products);
        // The gate terms of single tokens and of their links to the chunk's end: a warp per row
        // in turn, its lanes over the key channels.
        for (int r = warp; r < C; r += warps) {
            float sq = 0.0f, sk = 0.0f, sl = 0.0f;
            for (int i = lane; i < Sk; i += 32) {
                sq += dQ[r * L.ldk + i] * Q[r * L.ldk + i];
                sk += dK[r * L.ldk + i] * K[r * L.ldk + i];
                sl += dKl[r * L.ldk + i] * K[r * L.ldk + i];
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
        __syncthreads();  // single, link, pair_parts complete; the dots are done with dQ, dK
        for (int idx = tid; idx < C * Sk; idx += threads) {
            const int r = idx / Sk, i = idx % Sk;
            dQ[r * L.ldk + i] *= row_decay[r];
            dK[r * L.ldk + i] = row_decay[r] * dK[r * L.ldk + i] + row_link[r] * dKl[r * L.ldk + i];
        }
        if (warp == 0) {  // dg_t for t = lane: w + suffix of single + prefix of link + pairs
            float pairs = 0.0f;
            for (int k = 0; k < warps; ++k) pairs += pair_parts[k * C + lane];
            dg[lane] = dg_state + warp_suffix_sum(single[lane]) + warp_exclusive_scan(link[lane]) + pairs;
        }
        __syncthreads();  // the pairs are done with dP and dM
        // Gate-masked dP and dM (the gradients of the undecayed products), in place.
        for (int idx = tid; idx < C * C; idx += threads) {
            const int r = idx / C, s = idx % C;
            const float decay = s <= r ? expf(gam[r] - gam[s]) : 0.0f;
            dP[r * L.ldc + s] = s <= r ? dP[r * L.ldc + s] * decay : 0.0f;
            dM[r * L.ldc + s] = s < r ? dM[r * L.ldc + s] * decay : 0.0f;
        }
        __syncthreads();
        tile::block_gemm<row_major, row_major>(dQ, L.ldk, dP, L.ldc, K, L.ldk, C, Sk, C, true, kBf16Products);   // + (dP o G) K
        tile::block_gemm<col_major, row_major>(dK, L.ldk, dP, L.ldc, Q, L.ldk, C, Sk, C, true, kBf16Products);   // + (dP o G)^T Q
        tile::block_gemm<row_major, row_major>(dK, L.ldk, dM, L.ldc, K, L.ldk, C, Sk, C, true, kBf16Products);   // + (dM o G) K
        tile::block_gemm<col_major, row_major>(dK, L.ldk, dM, L.ldc, K, L.ldk, C, Sk, C, true, kBf16Products);   // + (dM o G)^T K

        // The partial rows of this slice: [dq | dk | dg | dbeta].
        for (int idx = tid; idx < len * (2 * Sk + 2); idx += threads) {
            const int r = idx / (2 * Sk + 2), x = idx % (2 * Sk + 2);
            const float value = x < Sk ? dQ[r * L.ldk + x] : x < 2 * Sk ? dK[r * L.ldk + x - Sk] : x == 2 * Sk ? dg[r] : dbeta[r];
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
        tile::block_gemm<col_major, row_major>(dS, L.ldv, Q, L.ldk, T2, L.ldv, Sk, kSlice, C, true, kBf16Products);
        tile::block_gemm<col_major, row_major>(dS, L.ldv, K, L.ldk, T3, L.ldv, Sk, kSlice, C, true, kBf16Products);
    }

    if (walk.chunk_begin > 0) {  // an earlier window follows: hand dS over
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int c = idx / Sk, i = idx % Sk;
            carry[static_cast<int64_t>(j0 + c) * Sk + i] = dS[i * L.ldv + c];
        }
    } else if (w.ds0.present()) {
        store_state_slice(w.ds0, Sk, j0, h, b, dS, L.ldv);
    }
}

inline size_t chunk_backward_shared_bytes(int Sk) { return sizeof(float) * static_cast<size_t>(chunk_backward_layout(Sk).floats); }

inline bool chunk_backward_eligible(const Sizes &n, size_t shared_limit) {
    return chunk_forward_eligible(n, shared_limit) && chunk_backward_shared_bytes(n.Sk) <= shared_limit;
}

// `window_budget`: the bytes one window's partial rows and factors may take.
inline ChunkBackwardPlan make_chunk_backward_plan(const Sizes &n, size_t window_budget = kWindowBudget) {
    ChunkBackwardPlan plan;
    plan.slices = n.Sv / kSlice;
    plan.partial_width = 2 * static_cast<int64_t>(n.Sk) + 2;
    plan.shared_bytes = chunk_backward_shared_bytes(n.Sk);
    const double units = static_cast<double>(n.B) * n.Hv, area = static_cast<double>(n.Sv) * n.Sk;
    const double rows = 4.0 * plan.slices * units * static_cast<double>(plan.partial_width) * kChunk;  // per chunk
    const double factors = chunk_factor_bytes(n, kBackwardFactors);                                     // per chunk
    plan.windows = Windows::fit(n.T, kChunk, rows + factors, window_budget);
    const double per_window = static_cast<double>(plan.windows.per_window);
    const double checkpoints = 4.0 * units * static_cast<double>(plan.windows.steps) * area;
    const double carry = plan.windows.count > 1 ? 4.0 * units * area : 0.0;
    if (checkpoints + (rows + factors) * per_window + carry > 0x1p62) {
        plan.bytes = SIZE_MAX;
        return plan;
    }
    plan.checkpoints_offset = 0;
    plan.factors_offset = align_up(checkpoints);
    plan.carry_offset = plan.factors_offset + align_up(factors * per_window);
    plan.partials_offset = plan.carry_offset + align_up(carry);
    plan.bytes = plan.partials_offset + align_up(rows * per_window);
    return plan;
}

// Enqueues the chunked backward: the forward's walks writing the chunk-start states (window by
// window in order, the state carried), then per window from the last its factors, the chunk
// kernel (dS carried) and the reductions of its rows.
template <class Launch>
cudaError_t run_chunk_backward(const Launch &launch, const BackwardViews &w, const Sizes &n, const ChunkBackwardPlan &plan,
                               void *workspace) {
    char *base = static_cast<char *>(workspace);
    float *checkpoints = reinterpret_cast<float *>(base + plan.checkpoints_offset);
    float *factors = reinterpret_cast<float *>(base + plan.factors_offset);
    float *carry = reinterpret_cast<float *>(base + plan.carry_offset);

    const ForwardViews states = checkpoint_pass(w, checkpoints, kChunk, plan.windows.steps);
    cudaError_t e = run_chunk_walks(launch, states, n, plan.windows, factors, carry);
    if (e != cudaSuccess) return e;

    ChunkFactors f;
    f.data = factors;
    f.count = kBackwardFactors;
    ChunkBackwardWork work{};
    work.checkpoints = checkpoints;
    work.rows.data = reinterpret_cast<float *>(base + plan.partials_offset);
    work.rows.width = plan.partial_width;
    work.rows.slices = plan.slices;
    work.rows.capacity = plan.windows.per_window * kChunk;
    const LaunchShape shape{plan.slices, n.Hv, n.B, kChunkBackwardThreads, plan.shared_bytes};
    for (int64_t i = plan.windows.count - 1; i >= 0; --i) {
        const Windows::Range window = plan.windows.range(i, n.T);
        work.walk = chunk_walk(plan.windows, i, n.T, f, carry);
        work.rows.t_begin = window.t_begin, work.rows.tokens = window.tokens;
        if ((e = run_chunk_prepare(launch, states, n, work.walk)) != cudaSuccess) return e;
        e = n.bf16_products ? launch(chunk_backward_kernel<true>, shape, w, n, work) : launch(chunk_backward_kernel<false>, shape, w, n, work);
        if (e != cudaSuccess) return e;
        if ((e = run_reductions(launch, w, n, work.rows)) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

}  // namespace
}  // namespace gdn::cuda
