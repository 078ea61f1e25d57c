// The tile-operation checks shared by the emulated test (host threads) and the GPU test: a
// kernel body that runs block_gemm and block_unit_lower_inverse on shared-memory tiles, and the
// host reference. Included after fake_cuda.h (emulation) or under nvcc (GPU).
#pragma once

#include "cuda/tile_ops.cuh"

namespace gdn_tile_check {

// Sizes of the check: C (M x N) = A (M x K) B (K x N), then an n x n inverse (the block's
// row-by-row path) and the inverse of its leading n_chunk x n_chunk part (the chunk size: the
// two-halves path).
constexpr int M = 32, N = 48, K = 24, n = 64, n_chunk = 32;
constexpr int lda = K + 4, ldb = N + 4, ldb_t = K + 4, ldc = N + 4, ldm = n + 4, ldm_chunk = n_chunk + 4;

// Shared-memory layout (floats), each region 32-byte aligned.
constexpr int ldat = M + 4;
constexpr int a_at = 0, b_at = a_at + M * lda, bt_at = b_at + K * ldb, c_at = bt_at + N * ldb_t, c2_at = c_at + M * ldc,
              m_at = c2_at + M * ldc, at_at = m_at + n * ldm, c3_at = at_at + K * ldat, m_chunk_at = c3_at + M * ldc,
              shared_floats = m_chunk_at + n_chunk * ldm_chunk;

// One block: loads A, B (row-major) and B^T (so B col-major), L; computes C = A B (row-major B),
// C2 = C + A B (col-major B), C3 = A B from A stored transposed (col-major A), the products in
// 3xTF32 or (bf16_products) with bf16 operands, and the inverses; copies C, C2, C3, X and
// X_chunk out.
__device__ inline void run_checks(float *smem, const float *a, const float *b, const float *l, float *c_out, float *c2_out,
                                  float *c3_out, float *x_out, float *x_chunk_out, bool bf16_products) {
    namespace tile = gdn::cuda::tile;
    for (int i = threadIdx.x; i < M * K; i += blockDim.x) {
        smem[a_at + (i / K) * lda + i % K] = a[i];
        smem[at_at + (i % K) * ldat + i / K] = a[i];
    }
    for (int i = threadIdx.x; i < K * N; i += blockDim.x) {
        smem[b_at + (i / N) * ldb + i % N] = b[i];
        smem[bt_at + (i % N) * ldb_t + i / N] = b[i];
    }
    for (int i = threadIdx.x; i < n * n; i += blockDim.x) smem[m_at + (i / n) * ldm + i % n] = l[i];
    for (int i = threadIdx.x; i < n_chunk * n_chunk; i += blockDim.x)
        smem[m_chunk_at + (i / n_chunk) * ldm_chunk + i % n_chunk] = l[(i / n_chunk) * n + i % n_chunk];
    __syncthreads();
    tile::block_gemm<tile::row_major, tile::row_major>(smem + c_at, ldc, smem + a_at, lda, smem + b_at, ldb, M, N, K, false, bf16_products);
    for (int i = threadIdx.x; i < M * N; i += blockDim.x) smem[c2_at + (i / N) * ldc + i % N] = smem[c_at + (i / N) * ldc + i % N];
    __syncthreads();
    tile::block_gemm<tile::row_major, tile::col_major>(smem + c2_at, ldc, smem + a_at, lda, smem + bt_at, ldb_t, M, N, K, true, bf16_products);
    // C3 = A^T^T B with A stored transposed (col-major A).
    tile::block_gemm<tile::col_major, tile::row_major>(smem + c3_at, ldc, smem + at_at, ldat, smem + b_at, ldb, M, N, K, false, bf16_products);
    tile::block_unit_lower_inverse(smem + m_at, ldm, n);
    tile::block_unit_lower_inverse(smem + m_chunk_at, ldm_chunk, n_chunk);
    for (int i = threadIdx.x; i < M * N; i += blockDim.x) {
        c_out[i] = smem[c_at + (i / N) * ldc + i % N];
        c2_out[i] = smem[c2_at + (i / N) * ldc + i % N];
        c3_out[i] = smem[c3_at + (i / N) * ldc + i % N];
    }
    for (int i = threadIdx.x; i < n * n; i += blockDim.x) x_out[i] = smem[m_at + (i / n) * ldm + i % n];
    for (int i = threadIdx.x; i < n_chunk * n_chunk; i += blockDim.x)
        x_chunk_out[i] = smem[m_chunk_at + (i / n_chunk) * ldm_chunk + i % n_chunk];
}

}  // namespace gdn_tile_check
