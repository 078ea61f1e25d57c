// The chunked (WY) forward for scalar gates (GDA) on tensor cores: the per-chunk math of
// src/cpu/chunk_core.h.
//
// Window by window (plans.h: Windows; one window holds about 10,000 tokens at the 27B shape),
// chunk_prepare_kernel first computes, for every chunk of the window at once, the factors that
// do not depend on the state (chunk_common.cuh): A = (I + diag(beta) M)^-1 and P. Then one
// block per (unit, slice of 32 value columns) walks the window's chunks of 32 tokens in order,
// the state slice S (Sk x 32) in shared memory, handed to the next window through the
// workspace. Per chunk, with gam the prefix sums of g inside the chunk (restarted at each
// chunk) and beta, Q, K, V its rows:
//   D = A diag(beta) (V - diag(exp(gam)) K S)                 (the deltas; = U - W S)
//   O = scale (diag(exp(gam)) Q S + P D)                      (when out is wanted)
//   S <- exp(gam_L) S + (diag(exp(gam_L - gam)) K)^T D
// Every exponent is a difference gam_r - gam_s with s <= r, gam_r, or gam_L - gam_r: <= 0 for
// g <= 0. Gates are clamped at -1e4 (exp is 0 in F32 far above that) so that differences of
// prefix sums stay numbers. A last chunk shorter than 32 is padded with zero rows (g = 0,
// beta = 0, q = k = v = 0), which changes nothing.
//
// Taken when (chunk_forward_eligible): GDA, K <= 1 snapshot, Sk a multiple of 16 up to 128,
// Sv a multiple of 32, and the shared memory fits; the per-token kernel serves the rest.
//
// Device code plus its launch sequence, included by chunk_forward.cu (nvcc) and by the host
// emulation test, which runs it on CPU threads.
#pragma once

#include "cuda/chunk_common.cuh"
#include "cuda/chunk_prepare_kernel.cuh"
#include "cuda/tile_ops.cuh"

namespace gdn::cuda {
// Internal to the one translation unit that includes this.
namespace {

// Shared-memory regions (float offsets, each 32-byte aligned) for key head size Sk.
struct ChunkLayout {
    int ldk, ldv, ldc;                 // leading dimensions: rows of Sk, of 32 columns, of 32 tokens
    int q, k, s, v, u, a, p, o;        // matrices
    int gam, beta, row_scale;          // per-token vectors
    int floats;
};

__host__ __device__ inline ChunkLayout chunk_layout(int Sk) {
    ChunkLayout L{};
    L.ldk = Sk + 4, L.ldv = kSlice + 4, L.ldc = kChunk + 4;
    SharedCarver carve;
    L.q = carve.take(kChunk * L.ldk);  // Q, then diag(exp(gam)) Q
    L.k = carve.take(kChunk * L.ldk);  // K, then diag(exp(gam_L - gam)) K
    L.s = carve.take(Sk * L.ldv);      // the state slice, S[i][c] at s + i ldv + c
    L.v = carve.take(kChunk * L.ldv);  // V, then diag(beta) (V - diag(exp(gam)) K S)
    L.u = carve.take(kChunk * L.ldv);  // K S, then D
    L.a = carve.take(kChunk * L.ldc);
    L.p = carve.take(kChunk * L.ldc);
    L.o = carve.take(kChunk * L.ldv);  // the output rows
    L.gam = carve.take(kChunk);
    L.beta = carve.take(kChunk);
    L.row_scale = carve.take(kChunk);  // exp(gam_r), then exp(gam_L - gam_r)
    L.floats = carve.at;
    return L;
}

// The walk over one window's chunks (the factors of the window computed before).
// kBf16Products: Sizes::bf16_products as a template parameter (tile_ops.cuh: block_gemm).
template <bool kBf16Products>
__global__ void __launch_bounds__(kChunkThreads) chunk_forward_kernel(ForwardViews w, Sizes n, ChunkWalk walk) {
    namespace tile = gdn::cuda::tile;
    using tile::col_major;
    using tile::row_major;
    extern __shared__ __align__(32) float shared[];
    const ChunkLayout L = chunk_layout(n.Sk);
    float *Q = shared + L.q, *K = shared + L.k, *S = shared + L.s;
    float *V = shared + L.v, *U = shared + L.u, *A = shared + L.a, *P = shared + L.p, *O = shared + L.o;
    float *gam = shared + L.gam, *beta = shared + L.beta, *row_scale = shared + L.row_scale;
    const int Sk = n.Sk, tid = threadIdx.x, threads = blockDim.x;
    const int j0 = blockIdx.x * kSlice, h = blockIdx.y, b = blockIdx.z;
    const int kh = n.key_head(h), bq = n.qk_sequence(b);
    const int64_t unit = static_cast<int64_t>(b) * n.Hv + h;

    // S enters the first window as s0 (or zero) and any other as the earlier window left it.
    float *carry = walk.carry + unit * n.Sv * Sk;
    if (walk.chunk_begin == 0) {
        load_state_slice(w.s0, Sk, j0, h, b, S, L.ldv);
    } else {
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int c = idx / Sk, i = idx % Sk;
            S[i * L.ldv + c] = carry[static_cast<int64_t>(j0 + c) * Sk + i];
        }
    }

    for (int64_t chunk = walk.chunk_begin; chunk < walk.chunk_end; ++chunk) {
        const int64_t t0 = chunk * kChunk;
        const int len = n.T - t0 < kChunk ? static_cast<int>(n.T - t0) : kChunk;
        if (w.checkpoints != nullptr) {  // the backward's chunk-start states, [unit][chunk][Sv][Sk]
            __syncthreads();             // S is complete (the previous chunk's last block_gemm, or the load above)
            float *dst = w.checkpoints + (unit * w.checkpoint_count + chunk) * n.Sv * Sk;
            for (int idx = tid; idx < Sk * kSlice; idx += threads) {
                const int c = idx / Sk, i = idx % Sk;
                dst[static_cast<int64_t>(j0 + c) * Sk + i] = S[i * L.ldv + c];
            }
        }
        // Load the chunk (rows past len are zero) and its factors; exp(gam) per row.
        if (w.out.present()) load_chunk_rows(w.q, Sk, kh, bq, t0, len, Q, L.ldk);
        load_chunk_rows(w.k, Sk, kh, bq, t0, len, K, L.ldk);
        for (int idx = tid; idx < kChunk * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            V[r * L.ldv + c] = r < len ? w.v.load(j0 + c, h, t0 + r, b) : 0.0f;
        }
        load_factor(walk.factors.at(unit, chunk, kFactorA), A, L.ldc);
        if (w.out.present()) load_factor(walk.factors.at(unit, chunk, kFactorP), P, L.ldc);
        load_chunk_gates(w.g, w.beta, h, b, t0, len, gam, beta);
        if (tid < kChunk) row_scale[tid] = expf(gam[tid]);  // the warp that wrote gam
        __syncthreads();
        const float gam_last = gam[len - 1];

        tile::block_gemm<row_major, row_major>(U, L.ldv, K, L.ldk, S, L.ldv, kChunk, kSlice, Sk, false, kBf16Products);  // K S
        for (int idx = tid; idx < kChunk * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            V[r * L.ldv + c] = beta[r] * (V[r * L.ldv + c] - row_scale[r] * U[r * L.ldv + c]);  // beta R
        }
        __syncthreads();
        tile::block_gemm<row_major, row_major>(U, L.ldv, A, L.ldc, V, L.ldv, kChunk, kSlice, kChunk, false, kBf16Products);  // D = A beta R

        if (w.out.present()) {
            for (int idx = tid; idx < kChunk * Sk; idx += threads) {
                const int r = idx / Sk, i = idx % Sk;
                Q[r * L.ldk + i] *= row_scale[r];
            }
            __syncthreads();
            tile::block_gemm<row_major, row_major>(O, L.ldv, Q, L.ldk, S, L.ldv, kChunk, kSlice, Sk, false, kBf16Products);     // Qg S
            tile::block_gemm<row_major, row_major>(O, L.ldv, P, L.ldc, U, L.ldv, kChunk, kSlice, kChunk, true, kBf16Products);  // + P D
            for (int idx = tid; idx < len * kSlice; idx += threads) {
                const int r = idx / kSlice, c = idx % kSlice;
                w.out.store(j0 + c, h, t0 + r, b, n.scale * O[r * L.ldv + c]);
            }
        }
        // (every read of exp(gam) is behind the barrier that ended the last block_gemm)
        if (tid < kChunk) row_scale[tid] = expf(gam_last - gam[tid]);
        __syncthreads();
        for (int idx = tid; idx < kChunk * Sk; idx += threads) {
            const int r = idx / Sk, i = idx % Sk;
            K[r * L.ldk + i] *= row_scale[r];  // Kl
        }
        const float decay_last = expf(gam_last);
        for (int idx = tid; idx < Sk * kSlice; idx += threads) S[(idx / kSlice) * L.ldv + idx % kSlice] *= decay_last;
        __syncthreads();
        tile::block_gemm<col_major, row_major>(S, L.ldv, K, L.ldk, U, L.ldv, Sk, kSlice, kChunk, true, kBf16Products);  // S += Kl^T D
    }

    if (walk.chunk_end < walk.chunks) {  // a later window follows: hand S over
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int c = idx / Sk, i = idx % Sk;
            carry[static_cast<int64_t>(j0 + c) * Sk + i] = S[i * L.ldv + c];
        }
    } else if (w.states.present()) {  // K = 1: the final state (chunk_forward_eligible)
        store_state_slice(w.states, Sk, j0, h, b, S, L.ldv);
    }
}

// Whether the chunked forward takes a call, given the device's shared-memory limit per block.
inline bool chunk_forward_eligible(const Sizes &n, size_t shared_limit) {
    return chunk_shape_eligible(n) && (n.T + kChunk - 1) / kChunk <= INT32_MAX &&
           sizeof(float) * static_cast<size_t>(chunk_layout(n.Sk).floats) <= shared_limit &&
           sizeof(float) * static_cast<size_t>(chunk_prepare_layout(n.Sk).floats) <= shared_limit;
}

inline LaunchShape chunk_forward_shape(const Sizes &n) {
    return {n.Sv / kSlice, n.Hv, n.B, kChunkThreads, sizeof(float) * static_cast<size_t>(chunk_layout(n.Sk).floats)};
}

// The forward's workspace: the factors of one window of chunks and the carried state.
inline ChunkForwardPlan make_chunk_forward_plan(const Sizes &n, size_t window_budget = kWindowBudget) {
    ChunkForwardPlan plan;
    const double factors = chunk_factor_bytes(n, kForwardFactors);  // per chunk
    plan.windows = Windows::fit(n.T, kChunk, factors, window_budget);
    const double carry = plan.windows.count > 1 ? 4.0 * n.B * n.Hv * n.Sk * n.Sv : 0.0;
    if (factors * static_cast<double>(plan.windows.per_window) + carry > 0x1p62) {
        plan.bytes = SIZE_MAX;
        return plan;
    }
    plan.factors_offset = 0;
    plan.carry_offset = align_up(factors * static_cast<double>(plan.windows.per_window));
    plan.bytes = plan.carry_offset + align_up(carry);
    return plan;
}

// The windows in order, each its factors then its walk, with `count` factors per chunk (the
// forward's two; the backward's checkpoint pass writes them into its three-factor buffer).
template <class Launch>
cudaError_t run_chunk_walks(const Launch &launch, const ForwardViews &w, const Sizes &n, const Windows &windows, float *factors,
                            float *carry) {
    ChunkFactors f;
    f.data = factors;
    f.count = kForwardFactors;
    for (int64_t i = 0; i < windows.count; ++i) {
        const ChunkWalk walk = chunk_walk(windows, i, n.T, f, carry);
        cudaError_t e = run_chunk_prepare(launch, w, n, walk);
        if (e != cudaSuccess) return e;
        const LaunchShape shape = chunk_forward_shape(n);
        e = n.bf16_products ? launch(chunk_forward_kernel<true>, shape, w, n, walk) : launch(chunk_forward_kernel<false>, shape, w, n, walk);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

// Enqueues the chunked forward into `workspace` (plan.bytes; launch: a StreamLauncher, or the
// emulation's launcher).
template <class Launch>
cudaError_t run_chunk_forward(const Launch &launch, const ForwardViews &w, const Sizes &n, const ChunkForwardPlan &plan,
                              void *workspace) {
    char *base = static_cast<char *>(workspace);
    return run_chunk_walks(launch, w, n, plan.windows, reinterpret_cast<float *>(base + plan.factors_offset),
                           reinterpret_cast<float *>(base + plan.carry_offset));
}

}  // namespace
}  // namespace gdn::cuda
