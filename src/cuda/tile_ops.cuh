// Tensor-core tile operations in shared memory, for the chunked kernels: 16x16 output tiles
// with F32 accumulation, in one of two precisions (gdn_problem.precision):
//   EXACT: TF32 WMMA, error-compensated (3xTF32: a_hi b_hi + a_hi b_lo + a_lo b_hi, each
//     operand split into a TF32 head and a TF32 tail), which keeps products to about F32
//     accuracy: plain TF32 (10-bit mantissa) would miss the harness's NMSE thresholds;
//   BF16: one bf16 mma.sync m16n8k16 per 16x8x16 step, operands rounded to bf16 (to nearest,
//     ties to even) as the fragments are built from the F32 tiles, F32 accumulation.
// Plus the inverse of a unit lower triangular matrix in F32 (the WY form's (I + L)^-1), in both.
//
// Block-level functions: every thread of the block calls them; they end with __syncthreads().
// Device code only; also compiled by the host compiler in the emulation test
// (tests/cuda/fake_cuda.h provides nvcuda::wmma and the bf16 mma on CPU threads).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/element_types.h"

#if defined(__CUDACC__)
#include <mma.h>

namespace gdn::cuda::ptx {
// d += a b for one warp: A 16x16 (row-major fragment, 4 registers of bf16 pairs), B 16x8
// (col-major fragment, 2 registers), D 16x8 F32; the fragments' layouts are PTX's ("Matrix
// Fragments for mma.m16n8k16 with floating point type"). sm_80 and newer.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
}  // namespace gdn::cuda::ptx
#endif

namespace gdn::cuda::tile {

namespace wmma = nvcuda::wmma;

template <class Layout>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, Layout>;
template <class Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, Layout>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;
using wmma::col_major;
using wmma::row_major;

template <class Layout>
struct RowMajor {
    static constexpr bool value = std::is_same<Layout, wmma::row_major>::value;
};

// Splits every element of a loaded fragment into TF32 head (kept in `head`) and tail. The
// head's low 13 bits are cleared explicitly: PTX leaves the bits of a converted tf32 value
// implementation-defined, and the tail must be x minus exactly what the head holds.
template <class Frag>
__device__ __forceinline__ void split_tf32(Frag &head, Frag &tail) {
#pragma unroll
    for (int i = 0; i < head.num_elements; ++i) {
        const float x = head.x[i];
        const float hi = __uint_as_float(__float_as_uint(wmma::__float_to_tf32(x)) & 0xffffe000u);
        head.x[i] = hi;
        tail.x[i] = wmma::__float_to_tf32(x - hi);
    }
}

// acc += A (16 x K) times B (K x 16), from the tiles' first elements a and b. A row-major
// (element (m, k) at a[m lda + k]) or col-major (at a[k lda + m]); B row-major (element (k, n)
// at b[k ldb + n]) or col-major (at b[n ldb + k]). K a multiple of 8; a, b 32-byte aligned,
// lda and ldb multiples of 4 floats (WMMA's rules).
//
// The head products and the two cross terms go to separate accumulators, added at the end:
// the small terms are not rounded against the large running sum, and the two chains of
// dependent tensor-core operations interleave instead of forming one three times as long.
template <class ALayout, class BLayout>
__device__ __forceinline__ void mma_3xtf32(FragC &acc, const float *a, int lda, const float *b, int ldb, int K) {
    FragC cross;
    wmma::fill_fragment(cross, 0.0f);
    for (int k = 0; k < K; k += 8) {
        FragA<ALayout> a_hi, a_lo;
        FragB<BLayout> b_hi, b_lo;
        wmma::load_matrix_sync(a_hi, RowMajor<ALayout>::value ? a + k : a + k * lda, lda);
        wmma::load_matrix_sync(b_hi, RowMajor<BLayout>::value ? b + k * ldb : b + k, ldb);
        split_tf32(a_hi, a_lo);
        split_tf32(b_hi, b_lo);
        wmma::mma_sync(cross, a_lo, b_hi, cross);
        wmma::mma_sync(cross, a_hi, b_lo, cross);
        wmma::mma_sync(acc, a_hi, b_hi, acc);
    }
#pragma unroll
    for (int i = 0; i < acc.num_elements; ++i) acc.x[i] += cross.x[i];  // element-wise: the same layout
}

// Element (m, k) of an A tile and (k, n) of a B tile in either layout (mma_3xtf32's rules).
template <class Layout>
__device__ __forceinline__ float a_element(const float *a, int lda, int m, int k) {
    return RowMajor<Layout>::value ? a[m * lda + k] : a[k * lda + m];
}
template <class Layout>
__device__ __forceinline__ float b_element(const float *b, int ldb, int k, int n) {
    return RowMajor<Layout>::value ? b[k * ldb + n] : b[n * ldb + k];
}

// The bf16 pair (m, k), (m, k + 1) of A and (k, n), (k + 1, n) of B as one fragment register;
// zero past K (k even, K a multiple of 8: k < K covers both).
template <class Layout>
__device__ __forceinline__ uint32_t a_pair(const float *a, int lda, int m, int k, int K) {
    return k < K ? pack_bf16x2(a_element<Layout>(a, lda, m, k), a_element<Layout>(a, lda, m, k + 1)) : 0u;
}
template <class Layout>
__device__ __forceinline__ uint32_t b_pair(const float *b, int ldb, int k, int n, int K) {
    return k < K ? pack_bf16x2(b_element<Layout>(b, ldb, k, n), b_element<Layout>(b, ldb, k + 1, n)) : 0u;
}

// One warp: the 16x16 tile at c (row-major, ldc) = A (16 x K) B (K x 16), or += when
// `accumulate`, by bf16 mma.sync m16n8k16 (two per 16 columns of K: the tile's left and right
// 8 columns). Each lane builds its fragment registers from the F32 tiles in PTX's layout
// (group g = lane / 4 and t = lane % 4: A rows g and g + 8, columns 2t, 2t + 1 and those + 8;
// B rows 2t, 2t + 1 and those + 8, column g; D rows g and g + 8, columns 2t, 2t + 1), rounding
// each operand to bf16 once; columns of K past K are zero (K a multiple of 8 suffices). Each
// lane reads and writes only its own elements of C.
template <class ALayout, class BLayout>
__device__ __forceinline__ void warp_tile_bf16(float *c, int ldc, const float *a, int lda, const float *b, int ldb, int K,
                                               bool accumulate) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float acc[2][4];
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[half][i] = accumulate ? c[(g + 8 * (i / 2)) * ldc + 8 * half + 2 * t + i % 2] : 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        const uint32_t a_frag[4] = {a_pair<ALayout>(a, lda, g, k0 + 2 * t, K), a_pair<ALayout>(a, lda, g + 8, k0 + 2 * t, K),
                                    a_pair<ALayout>(a, lda, g, k0 + 8 + 2 * t, K), a_pair<ALayout>(a, lda, g + 8, k0 + 8 + 2 * t, K)};
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int n = 8 * half + g;
            const uint32_t b_frag[2] = {b_pair<BLayout>(b, ldb, k0 + 2 * t, n, K), b_pair<BLayout>(b, ldb, k0 + 8 + 2 * t, n, K)};
            ptx::mma_m16n8k16_bf16(acc[half], a_frag, b_frag);
        }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int i = 0; i < 4; ++i) c[(g + 8 * (i / 2)) * ldc + 8 * half + 2 * t + i % 2] = acc[half][i];
    __syncwarp();
}

// C (M x N, row-major, ldc) = A (M x K) B (K x N), or C += A B when `accumulate`, the layouts
// as for mma_3xtf32. M, N multiples of 16, K of 8. The block's warps take the 16x16 tiles of C
// in turn. Every thread of the block calls this; C is complete for all of them on return.
template <class ALayout, class BLayout>
__device__ void block_gemm_3xtf32(float *c, int ldc, const float *a, int lda, const float *b, int ldb, int M, int N, int K,
                                  bool accumulate) {
    const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int tiles_n = N / 16, tiles = (M / 16) * tiles_n;
    for (int tile = warp; tile < tiles; tile += warps) {
        const int tm = tile / tiles_n, tn = tile % tiles_n;
        float *c_tile = c + tm * 16 * ldc + tn * 16;
        FragC acc;
        if (accumulate) wmma::load_matrix_sync(acc, c_tile, ldc, wmma::mem_row_major);
        else wmma::fill_fragment(acc, 0.0f);
        const float *a_tile = RowMajor<ALayout>::value ? a + tm * 16 * lda : a + tm * 16;
        const float *b_tile = RowMajor<BLayout>::value ? b + tn * 16 : b + tn * 16 * ldb;
        mma_3xtf32<ALayout, BLayout>(acc, a_tile, lda, b_tile, ldb, K);
        wmma::store_matrix_sync(c_tile, acc, ldc, wmma::mem_row_major);
    }
    __syncthreads();
}

// The same with bf16 operands (warp_tile_bf16).
template <class ALayout, class BLayout>
__device__ void block_gemm_bf16(float *c, int ldc, const float *a, int lda, const float *b, int ldb, int M, int N, int K,
                                bool accumulate) {
    const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int tiles_n = N / 16, tiles = (M / 16) * tiles_n;
    for (int tile = warp; tile < tiles; tile += warps) {
        const int tm = tile / tiles_n, tn = tile % tiles_n;
        const float *a_tile = RowMajor<ALayout>::value ? a + tm * 16 * lda : a + tm * 16;
        const float *b_tile = RowMajor<BLayout>::value ? b + tn * 16 : b + tn * 16 * ldb;
        warp_tile_bf16<ALayout, BLayout>(c + tm * 16 * ldc + tn * 16, ldc, a_tile, lda, b_tile, ldb, K, accumulate);
    }
    __syncthreads();
}

// The chunked kernels' product: bf16 operands when `bf16_products` (GDN_PRECISION_BF16), else
// 3xTF32. The kernels pass a template parameter, so that each instantiation holds one path
// (EXACT's code is what it was without the bf16 one); uniform over the block either way.
template <class ALayout, class BLayout>
__device__ __forceinline__ void block_gemm(float *c, int ldc, const float *a, int lda, const float *b, int ldb, int M, int N,
                                           int K, bool accumulate, bool bf16_products) {
    if (bf16_products) block_gemm_bf16<ALayout, BLayout>(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
    else block_gemm_3xtf32<ALayout, BLayout>(c, ldc, a, lda, b, ldb, M, N, K, accumulate);
}

// One warp, in place: the unit lower inverse of the n x n (n <= 32) block at m, whose strictly
// lower part holds L and whose diagonal is 1 and upper part 0 already. Row by row,
// X_i = -(L_i + sum_{k<i} L_ik X_k) restricted to columns < i: n - 1 steps, lane j computing
// column j.
__device__ inline void warp_unit_lower_inverse(float *m, int ld, int n) {
    const int j = threadIdx.x % 32;
    for (int i = 1; i < n; ++i) {
        float value = 0.0f;
        if (j < i) {
            float sum = m[i * ld + j];
            for (int k = j + 1; k < i; ++k) sum += m[i * ld + k] * m[k * ld + j];
            value = -sum;
        }
        __syncwarp();  // every lane has read row i of L before any lane overwrites it
        if (j < i) m[i * ld + j] = value;
        __syncwarp();
    }
}

// In place: the strictly lower part of the n x n matrix at m (row-major, ld) holds L (the
// diagonal and above are ignored); on return m holds X = (I + L)^-1, unit lower triangular,
// with its diagonal set to 1 and zeros above. F32 throughout (the inverse's accuracy matters
// more than its speed). Needs blockDim.x >= n.
//
// n = 32 with two warps or more (the chunk size): by halves, which halves the serial chain.
// With L = [L11 0; L21 L22], X = [X11 0; X21 X22] where X11, X22 are the halves' inverses
// (two warps at once, 15 steps each) and X21 = -X22 (L21 X11) (two 16 x 16 products by the
// whole block). Any other n: the block, row by row (n - 1 steps).
__device__ inline void block_unit_lower_inverse(float *m, int ld, int n) {
    for (int idx = threadIdx.x; idx < n * n; idx += blockDim.x) {
        const int i = idx / n, j = idx % n;
        if (j > i) m[i * ld + j] = 0.0f;
        if (j == i) m[i * ld + j] = 1.0f;
    }
    __syncthreads();
    const int warp = threadIdx.x / 32;
    if (n == 32 && blockDim.x >= 64) {
        constexpr int h = 16, kPerThread = 4;  // 256 entries of the off-diagonal block, blockDim >= 64
        if (warp < 2) warp_unit_lower_inverse(m + warp * h * (ld + 1), ld, h);
        __syncthreads();
        float *lower = m + h * ld;                  // L21, then L21 X11, then X21
        const float *x11 = m, *x22 = m + h * (ld + 1);
        float value[kPerThread];
        // L21 X11: entry (i, j) sums L21_ik X11_kj over j <= k < 16.
        for (int e = 0; e < kPerThread; ++e) {
            const int idx = threadIdx.x + e * blockDim.x, i = idx / h, j = idx % h;
            value[e] = 0.0f;
            if (idx < h * h)
                for (int k = j; k < h; ++k) value[e] += lower[i * ld + k] * x11[k * ld + j];
        }
        __syncthreads();
        for (int e = 0; e < kPerThread; ++e) {
            const int idx = threadIdx.x + e * blockDim.x;
            if (idx < h * h) lower[(idx / h) * ld + idx % h] = value[e];
        }
        __syncthreads();
        // X21 = -X22 (L21 X11): entry (i, j) sums X22_ik T_kj over k <= i.
        for (int e = 0; e < kPerThread; ++e) {
            const int idx = threadIdx.x + e * blockDim.x, i = idx / h, j = idx % h;
            value[e] = 0.0f;
            if (idx < h * h)
                for (int k = 0; k <= i; ++k) value[e] -= x22[i * ld + k] * lower[k * ld + j];
        }
        __syncthreads();
        for (int e = 0; e < kPerThread; ++e) {
            const int idx = threadIdx.x + e * blockDim.x;
            if (idx < h * h) lower[(idx / h) * ld + idx % h] = value[e];
        }
        __syncthreads();
        return;
    }
    for (int i = 1; i < n; ++i) {
        // x_ij = -(L_ij + sum_{j < k < i} L_ik X_kj) for j < i. Each thread computes some j;
        // they read L_ik for k > j, which other threads overwrite: compute all, barrier, write.
        float value = 0.0f;
        const int j = threadIdx.x;
        if (j < i) {
            float sum = m[i * ld + j];
            for (int k = j + 1; k < i; ++k) sum += m[i * ld + k] * m[k * ld + j];
            value = -sum;
        }
        __syncthreads();
        if (j < i) m[i * ld + j] = value;
        __syncthreads();
    }
}

}  // namespace gdn::cuda::tile
