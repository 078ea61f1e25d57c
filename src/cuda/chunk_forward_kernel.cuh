// The chunked (WY) forward for scalar gates (GDA), ALGORITHM.md section 2, on tensor cores.
//
// First chunk_prepare_kernel computes, for every chunk at once, the factors that do not depend
// on the state (chunk_common.cuh): A = (I + diag(beta) M)^-1 and P. Then one block per (unit,
// slice of 32 value columns) walks the chunks of 32 tokens in order, the state slice S
// (Sk x 32) in shared memory. Per chunk, with gam the prefix sums of g inside the chunk
// (restarted at each chunk) and beta, Q, K, V its rows:
//   Dm = A diag(beta) (V - diag(exp(gam)) K S)                 (the deltas; = U - W S)
//   O = scale (diag(exp(gam)) Q S + P Dm)                      (when out is wanted)
//   S <- exp(gam_L) S + (diag(exp(gam_L - gam)) K)^T Dm
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
    int ldk, ldv, ldc;                       // leading dimensions: rows of Sk, of 32 columns, of 32 tokens
    int q, k, s, v, u, gk, gq, o;            // matrices
    int gam, beta, row_decay;                // per-token vectors
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
    L.gk = carve.take(kChunk * L.ldc);  // A
    L.gq = carve.take(kChunk * L.ldc);  // P
    L.o = carve.take(kChunk * L.ldv);   // the output rows
    L.gam = carve.take(kChunk);
    L.beta = carve.take(kChunk);
    L.row_decay = carve.take(kChunk);
    L.floats = carve.at;
    return L;
}

__global__ void __launch_bounds__(kChunkThreads) chunk_forward_kernel(ForwardViews w, Sizes n, ChunkFactors f) {
    namespace tile = gdn::cuda::tile;
    using tile::col_major;
    using tile::row_major;
    extern __shared__ __align__(32) float shared[];
    const ChunkLayout L = chunk_layout(n.Sk);
    float *Q = shared + L.q, *K = shared + L.k, *S = shared + L.s;
    float *V = shared + L.v, *U = shared + L.u, *Gk = shared + L.gk, *Gq = shared + L.gq, *O = shared + L.o;
    float *gam = shared + L.gam, *beta = shared + L.beta, *row_decay = shared + L.row_decay;
    const int Sk = n.Sk, tid = threadIdx.x, threads = blockDim.x;
    const int j0 = blockIdx.x * kSlice, h = blockIdx.y, b = blockIdx.z;
    const int kh = n.key_head(h), bq = n.qk_sequence(b);
    const int64_t unit = static_cast<int64_t>(b) * n.Hv + h;

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
        // Load the chunk (rows past len are zero) and its factors.
        const int64_t chunk = t0 / kChunk;
        if (w.out.present()) load_chunk_rows(w.q, Sk, kh, bq, t0, len, Q, L.ldk);
        load_chunk_rows(w.k, Sk, kh, bq, t0, len, K, L.ldk);
        for (int idx = tid; idx < kChunk * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            V[r * L.ldv + c] = r < len ? *w.v.at(j0 + c, h, t0 + r, b) : 0.0f;
        }
        load_factor(f.at(unit, chunk, kFactorA), Gk, L.ldc);
        if (w.out.present()) load_factor(f.at(unit, chunk, kFactorP), Gq, L.ldc);
        load_chunk_gates(w.g, w.beta, h, b, t0, len, gam, beta);
        __syncthreads();
        const float gam_last = gam[len - 1];
        if (tid < kChunk) row_decay[tid] = expf(gam[tid]);

        tile::block_gemm<row_major, row_major>(U, L.ldv, K, L.ldk, S, L.ldv, kChunk, kSlice, Sk, false);  // K S
        for (int idx = tid; idx < kChunk * kSlice; idx += threads) {
            const int r = idx / kSlice, c = idx % kSlice;
            V[r * L.ldv + c] = beta[r] * (V[r * L.ldv + c] - row_decay[r] * U[r * L.ldv + c]);  // beta R
        }
        __syncthreads();
        tile::block_gemm<row_major, row_major>(U, L.ldv, Gk, L.ldc, V, L.ldv, kChunk, kSlice, kChunk, false);  // Dm = A beta R

        if (w.out.present()) {
            for (int idx = tid; idx < kChunk * Sk; idx += threads) {
                const int r = idx / Sk, i = idx % Sk;
                Q[r * L.ldk + i] *= row_decay[r];
            }
            __syncthreads();
            tile::block_gemm<row_major, row_major>(O, L.ldv, Q, L.ldk, S, L.ldv, kChunk, kSlice, Sk, false);      // Qg S
            tile::block_gemm<row_major, row_major>(O, L.ldv, Gq, L.ldc, U, L.ldv, kChunk, kSlice, kChunk, true);  // + P Dm
            for (int idx = tid; idx < len * kSlice; idx += threads) {
                const int r = idx / kSlice, c = idx % kSlice;
                *w.out.at(j0 + c, h, t0 + r, b) = n.scale * O[r * L.ldv + c];
            }
        }
        if (tid < kChunk) row_decay[tid] = expf(gam_last - gam[tid]);
        __syncthreads();
        for (int idx = tid; idx < kChunk * Sk; idx += threads) {
            const int r = idx / Sk, i = idx % Sk;
            K[r * L.ldk + i] *= row_decay[r];  // Kl
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
    return chunk_shape_eligible(n) && (n.T + kChunk - 1) / kChunk <= INT32_MAX &&
           sizeof(float) * static_cast<size_t>(chunk_layout(n.Sk).floats) <= shared_limit &&
           sizeof(float) * static_cast<size_t>(chunk_prepare_layout(n.Sk).floats) <= shared_limit;
}

inline LaunchShape chunk_forward_shape(const Sizes &n) {
    return {n.Sv / kSlice, n.Hv, n.B, kChunkThreads, sizeof(float) * static_cast<size_t>(chunk_layout(n.Sk).floats)};
}

// The forward's workspace: the factors A, P of every chunk and unit.
inline size_t chunk_forward_workspace_bytes(const Sizes &n) {
    const double bytes = chunk_factor_bytes(n, 2);
    return bytes > 0x1p62 ? SIZE_MAX : static_cast<size_t>(bytes);
}

// The walk over the chunks, given the factors (which hold at least A and P).
template <class Launch>
cudaError_t run_chunk_walk(const Launch &launch, const ForwardViews &w, const Sizes &n, const ChunkFactors &f) {
    return launch(chunk_forward_kernel, chunk_forward_shape(n), w, n, f);
}

// Enqueues the chunked forward: the factors into `workspace` (chunk_forward_workspace_bytes),
// then the walk (launch: a StreamLauncher, or the emulation's launcher).
template <class Launch>
cudaError_t run_chunk_forward(const Launch &launch, const ForwardViews &w, const Sizes &n, void *workspace) {
    ChunkFactors f;
    f.data = static_cast<float *>(workspace);
    f.chunks = (n.T + kChunk - 1) / kChunk;
    f.count = 2;
    const cudaError_t e = run_chunk_prepare(launch, w, n, f);
    return e != cudaSuccess ? e : run_chunk_walk(launch, w, n, f);
}

}  // namespace
}  // namespace gdn::cuda
