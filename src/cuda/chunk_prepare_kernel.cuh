// The state-independent part of the chunked (WY) form (chunk_common.cuh: ChunkFactors), for
// every chunk of a window at once: a block per (chunk, unit). Per chunk, with gam the prefix sums of g
// inside the chunk:
//   Gk = K K^T, Gq = Q K^T                                       (block_gemm: 3xTF32, or bf16 mma)
//   M_rs = exp(gam_r - gam_s) Gk_rs (s < r), A = (I + diag(beta) M)^-1   (F32, by halves)
//   P_rs = exp(gam_r - gam_s) Gq_rs (s <= r)
// The walking kernels then keep only the state-dependent products in their sequential loop,
// and no longer repeat this per 32-column slice.
//
// Device code plus its launch, included by the chunk kernel launchers (nvcc) and by the host
// emulation tests.
#pragma once

#include "cuda/chunk_common.cuh"
#include "cuda/tile_ops.cuh"

namespace gdn::cuda {
namespace {

struct ChunkPrepareLayout {
    int ldk, ldc;
    int q, k, gk, gq, gam, beta;
    int floats;
};

__host__ __device__ inline ChunkPrepareLayout chunk_prepare_layout(int Sk) {
    ChunkPrepareLayout L{};
    L.ldk = Sk + 4, L.ldc = kChunk + 4;
    SharedCarver carve;
    L.q = carve.take(kChunk * L.ldk), L.k = carve.take(kChunk * L.ldk);
    L.gk = carve.take(kChunk * L.ldc);  // K K^T, then diag(beta) M, then A
    L.gq = carve.take(kChunk * L.ldc);  // Q K^T, then P
    L.gam = carve.take(kChunk), L.beta = carve.take(kChunk);
    L.floats = carve.at;
    return L;
}

// kBf16Products: Sizes::bf16_products as a template parameter (tile_ops.cuh: block_gemm).
template <bool kBf16Products>
__global__ void __launch_bounds__(kChunkThreads) chunk_prepare_kernel(ForwardViews w, Sizes n, ChunkFactors f) {
    namespace tile = gdn::cuda::tile;
    extern __shared__ __align__(32) float shared[];
    const ChunkPrepareLayout L = chunk_prepare_layout(n.Sk);
    float *Q = shared + L.q, *K = shared + L.k, *Gk = shared + L.gk, *Gq = shared + L.gq;
    float *gam = shared + L.gam, *beta = shared + L.beta;
    const int64_t chunk = f.chunk_begin + blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, kh = n.key_head(h), bq = n.qk_sequence(b);
    const int64_t unit = static_cast<int64_t>(b) * n.Hv + h, t0 = chunk * kChunk;
    const int len = n.T - t0 < kChunk ? static_cast<int>(n.T - t0) : kChunk;

    load_chunk_rows(w.q, n.Sk, kh, bq, t0, len, Q, L.ldk);
    load_chunk_rows(w.k, n.Sk, kh, bq, t0, len, K, L.ldk);
    load_chunk_gates(w.g, w.beta, h, b, t0, len, gam, beta);
    __syncthreads();
    tile::block_gemm<tile::row_major, tile::col_major>(Gk, L.ldc, K, L.ldk, K, L.ldk, kChunk, kChunk, n.Sk, false, kBf16Products);  // K K^T
    tile::block_gemm<tile::row_major, tile::col_major>(Gq, L.ldc, Q, L.ldk, K, L.ldk, kChunk, kChunk, n.Sk, false, kBf16Products);  // Q K^T

    float *m_out = f.count > kFactorM ? f.at(unit, chunk, kFactorM) : nullptr;
    float *p_out = f.at(unit, chunk, kFactorP);
    for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += blockDim.x) {
        const int r = idx / kChunk, s = idx % kChunk;
        const float decay = s <= r ? expf(gam[r] - gam[s]) : 0.0f;
        const float m = s < r ? decay * Gk[r * L.ldc + s] : 0.0f;
        if (m_out != nullptr) m_out[idx] = m;
        Gk[r * L.ldc + s] = beta[r] * m;                                   // diag(beta) M
        p_out[idx] = s <= r ? decay * Gq[r * L.ldc + s] : 0.0f;  // P
    }
    __syncthreads();
    tile::block_unit_lower_inverse(Gk, L.ldc, kChunk);
    float *a_out = f.at(unit, chunk, kFactorA);
    for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += blockDim.x) a_out[idx] = Gk[(idx / kChunk) * L.ldc + idx % kChunk];
}

// Enqueues the factors of the walk's window (launch: a StreamLauncher, or the emulation's).
template <class Launch>
cudaError_t run_chunk_prepare(const Launch &launch, const ForwardViews &w, const Sizes &n, const ChunkWalk &walk) {
    const LaunchShape shape{static_cast<int>(walk.chunk_end - walk.chunk_begin), n.Hv, n.B, kChunkThreads,
                            sizeof(float) * static_cast<size_t>(chunk_prepare_layout(n.Sk).floats)};
    return n.bf16_products ? launch(chunk_prepare_kernel<true>, shape, w, n, walk.factors)
                           : launch(chunk_prepare_kernel<false>, shape, w, n, walk.factors);
}

}  // namespace
}  // namespace gdn::cuda
