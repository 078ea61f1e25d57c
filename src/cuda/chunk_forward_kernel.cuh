// The chunked (WY) forward for scalar gates (GDA), ALGORITHM.md section 2, on tensor cores.
//
// One block per (unit, slice of 32 value columns) walks the chunks of 32 tokens in order,
// the state slice S (Sk x 32) in shared memory. Per chunk, with gam the prefix sums of g
// inside the chunk (restarted at each chunk) and beta, Q, K, V its rows:
//   Gk = K K^T, Gq = Q K^T                                    (3xTF32 WMMA, block_gemm)
//   L_rs = beta_r exp(gam_r - gam_s) Gk_rs (s < r), A = (I + L)^-1   (F32, row by row)
//   P_rs = exp(gam_r - gam_s) Gq_rs (s <= r)
//   Dm = A diag(beta) (V - diag(exp(gam)) K S)                 (the deltas; = U - W S)
//   O = scale (diag(exp(gam)) Q S + P Dm)
//   S <- exp(gam_L) S + (diag(exp(gam_L - gam)) K)^T Dm
// Every exponent is a difference gam_r - gam_s with s <= r, gam_r, or gam_L - gam_r: <= 0 for
// g <= 0. Gates are clamped at -1e4 (exp is 0 in F32 far above that) so that differences of
// prefix sums stay numbers. A last chunk shorter than 32 is padded with zero rows (g = 0,
// beta = 0, q = k = v = 0), which changes nothing.
//
// Taken when (chunk_forward_eligible): GDA, K <= 1 snapshot, Sk a multiple of 16 up to 128,
// Sv a multiple of 32, and the shared memory fits; the per-token kernel serves the rest.
//
// Device code plus its launch shape, included by chunk_forward.cu (nvcc) and by the host
// emulation test, which runs it on CPU threads.
#pragma once

#include "cuda/device_views.h"
#include "cuda/plans.h"
#include "cuda/tile_ops.cuh"
#include "cuda/warp_ops.cuh"

namespace gdn::cuda {
// Internal to the one translation unit that includes this.
namespace {

constexpr int kChunk = 32;          // tokens per chunk
constexpr int kSlice = 32;          // value columns per block
constexpr int kChunkThreads = 128;  // four warps
constexpr float kGateFloor = -1.0e4f;
static_assert(kChunk == 32, "a chunk's tokens map to the lanes of one warp");

// beta and gam (the prefix sums inside the chunk of the clamped gates; padded rows add 0) of
// the chunk of `len` tokens at t0, into shared memory by warp 0. The caller's next barrier
// publishes them.
__device__ inline void load_chunk_gates(const View &g, const View &beta_in, int h, int b, int64_t t0, int len, float *gam,
                                        float *beta) {
    if (threadIdx.x >= kChunk) return;
    const int r = threadIdx.x;
    beta[r] = r < len ? *beta_in.at(0, h, t0 + r, b) : 0.0f;
    const float gate = r < len ? *g.at(0, h, t0 + r, b) : 0.0f;
    gam[r] = warp_inclusive_scan(gate < kGateFloor ? kGateFloor : gate);  // NaN stays NaN
}

// Carves a block's shared memory into regions that start on 32-byte boundaries (8 floats),
// for the WMMA tile loads; offsets and the total are in floats.
struct SharedCarver {
    int at = 0;
    __host__ __device__ int take(int count) {
        const int region = at;
        at += (count + 7) / 8 * 8;
        return region;
    }
};

// Shared-memory regions (float offsets, each 32-byte aligned) for key head size Sk.
struct ChunkLayout {
    int ldk, ldv, ldc;                       // leading dimensions: rows of Sk, of 32 columns, of 32 tokens
    int q, k, s, v, u, gk, gq, o;            // matrices
    int gam, beta;                           // per-token vectors
    int floats;
};

__host__ __device__ inline ChunkLayout chunk_layout(int Sk) {
    ChunkLayout L{};
    L.ldk = Sk + 4, L.ldv = kSlice + 4, L.ldc = kChunk + 4;
    SharedCarver carve;
    L.q = carve.take(kChunk * L.ldk);   // Q, then diag(exp(gam)) Q
    L.k = carve.take(kChunk * L.ldk);   // K, then diag(exp(gam_L - gam)) K
    L.s = carve.take(Sk * L.ldv);       // the state slice, S[i][c] at s + i ldv + c
    L.v = carve.take(kChunk * L.ldv);   // V, then diag(beta) (V - diag(exp(gam)) K S)
    L.u = carve.take(kChunk * L.ldv);   // K S, then Dm
    L.gk = carve.take(kChunk * L.ldc);  // K K^T, then L, then A
    L.gq = carve.take(kChunk * L.ldc);  // Q K^T, then P
    L.o = carve.take(kChunk * L.ldv);   // the output rows
    L.gam = carve.take(kChunk);
    L.beta = carve.take(kChunk);
    L.floats = carve.at;
    return L;
}

__global__ void __launch_bounds__(kChunkThreads) chunk_forward_kernel(ForwardViews w, Sizes n) {
    namespace tile = gdn::cuda::tile;
    using tile::col_major;
    using tile::row_major;
    extern __shared__ __align__(32) float shared[];
    const ChunkLayout L = chunk_layout(n.Sk);
    float *Q = shared + L.q, *K = shared + L.k, *S = shared + L.s;
    float *V = shared + L.v, *U = shared + L.u, *Gk = shared + L.gk, *Gq = shared + L.gq, *O = shared + L.o;
    float *gam = shared + L.gam, *beta = shared + L.beta;
    const int Sk = n.Sk, tid = threadIdx.x, threads = blockDim.x;
    const int j0 = blockIdx.x * kSlice, h = blockIdx.y, b = blockIdx.z;
    const int kh = n.key_head(h), bq = n.qk_sequence(b);

    for (int idx = tid; idx < Sk * kSlice; idx += threads) {
        const int i = idx / kSlice, c = idx % kSlice;
        S[i * L.ldv + c] = w.s0.present() ? *w.s0.at(i, j0 + c, h, b) : 0.0f;
    }

    for (int64_t t0 = 0; t0 < n.T; t0 += kChunk) {
        const int len = n.T - t0 < kChunk ? static_cast<int>(n.T - t0) : kChunk;
        if (w.checkpoints != nullptr) {  // the backward's chunk-start states, [unit][chunk][Sv][Sk]
            __syncthreads();             // S is complete (the previous chunk's last block_gemm, or the load above)
            float *dst = w.checkpoints + ((static_cast<int64_t>(b) * n.Hv + h) * w.checkpoint_count + t0 / kChunk) * n.Sv * Sk;
            for (int idx = tid; idx < Sk * kSlice; idx += threads) {
                const int c = idx / Sk, i = idx % Sk;
                dst[static_cast<int64_t>(j0 + c) * Sk + i] = S[i * L.ldv + c];
            }
        }
        // Load the chunk (rows past len are zero).
        for (int idx = tid; idx < kChunk * Sk; idx += threads) {
            const int r = idx / Sk, i = idx % Sk;
            Q[r * L.ldk + i] = r < len ? *w.q.at(i, kh, t0 + r, bq) : 0.0f;
            K[r * L.ldk + i] = r < len ? *w.k.at(i, kh, t0 + r, bq) : 0.0f;
        }
        for (int idx = tid; idx < kChunk * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            V[r * L.ldv + c] = r < len ? *w.v.at(j0 + c, h, t0 + r, b) : 0.0f;
        }
        load_chunk_gates(w.g, w.beta, h, b, t0, len, gam, beta);
        __syncthreads();
        const float gam_last = gam[len - 1];

        tile::block_gemm<row_major, col_major>(Gk, L.ldc, K, L.ldk, K, L.ldk, kChunk, kChunk, Sk, false);  // K K^T
        tile::block_gemm<row_major, col_major>(Gq, L.ldc, Q, L.ldk, K, L.ldk, kChunk, kChunk, Sk, false);  // Q K^T
        tile::block_gemm<row_major, row_major>(U, L.ldv, K, L.ldk, S, L.ldv, kChunk, kSlice, Sk, false);     // K S
        for (int idx = tid; idx < kChunk * kChunk; idx += threads) {
            const int r = idx / kChunk, s = idx % kChunk;
            const float decay = s <= r ? expf(gam[r] - gam[s]) : 0.0f;
            Gk[r * L.ldc + s] = s < r ? beta[r] * decay * Gk[r * L.ldc + s] : 0.0f;  // L
            Gq[r * L.ldc + s] = s <= r ? decay * Gq[r * L.ldc + s] : 0.0f;           // P
        }
        for (int idx = tid; idx < kChunk * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            V[r * L.ldv + c] = beta[r] * (V[r * L.ldv + c] - expf(gam[r]) * U[r * L.ldv + c]);  // beta R
        }
        __syncthreads();
        tile::block_unit_lower_inverse(Gk, L.ldc, kChunk);  // A = (I + L)^-1
        tile::block_gemm<row_major, row_major>(U, L.ldv, Gk, L.ldc, V, L.ldv, kChunk, kSlice, kChunk, false);  // Dm = A beta R

        for (int idx = tid; idx < kChunk * Sk; idx += threads) {
            const int r = idx / Sk, i = idx % Sk;
            Q[r * L.ldk + i] *= expf(gam[r]);
        }
        __syncthreads();
        tile::block_gemm<row_major, row_major>(O, L.ldv, Q, L.ldk, S, L.ldv, kChunk, kSlice, Sk, false);        // Qg S
        tile::block_gemm<row_major, row_major>(O, L.ldv, Gq, L.ldc, U, L.ldv, kChunk, kSlice, kChunk, true);    // + P Dm

        if (w.out.present())
            for (int idx = tid; idx < len * kSlice; idx += threads) {
                const int r = idx / kSlice, c = idx % kSlice;
                if (j0 + c < n.Sv) *w.out.at(j0 + c, h, t0 + r, b) = n.scale * O[r * L.ldv + c];
            }
        for (int idx = tid; idx < kChunk * Sk; idx += threads) {
            const int r = idx / Sk, i = idx % Sk;
            K[r * L.ldk + i] *= expf(gam_last - gam[r]);  // Kl
        }
        const float decay_last = expf(gam_last);
        for (int idx = tid; idx < Sk * kSlice; idx += threads) S[(idx / kSlice) * L.ldv + idx % kSlice] *= decay_last;
        __syncthreads();
        tile::block_gemm<col_major, row_major>(S, L.ldv, K, L.ldk, U, L.ldv, Sk, kSlice, kChunk, true);  // S += Kl^T Dm
    }

    if (w.states.present())  // K = 1: the final state (chunk_forward_eligible)
        for (int idx = tid; idx < Sk * kSlice; idx += threads) {
            const int i = idx / kSlice, c = idx % kSlice;
            *w.states.at(i, j0 + c, h, b) = S[i * L.ldv + c];
        }
}

// Whether the chunked forward takes a call, given the device's shared-memory limit per block.
inline bool chunk_forward_eligible(const Sizes &n, size_t shared_limit) {
    return n.gate_width == 1 && n.K <= 1 && n.Sk % 16 == 0 && n.Sk <= 128 && n.Sv % kSlice == 0 &&
           sizeof(float) * static_cast<size_t>(chunk_layout(n.Sk).floats) <= shared_limit;
}

inline LaunchShape chunk_forward_shape(const Sizes &n) {
    return {n.Sv / kSlice, n.Hv, n.B, kChunkThreads, sizeof(float) * static_cast<size_t>(chunk_layout(n.Sk).floats)};
}

// Enqueues the chunked forward (launch: a StreamLauncher, or the emulation's launcher).
template <class Launch>
cudaError_t run_chunk_forward(const Launch &launch, const ForwardViews &w, const Sizes &n) {
    return launch(chunk_forward_kernel, chunk_forward_shape(n), w, n);
}

}  // namespace
}  // namespace gdn::cuda
