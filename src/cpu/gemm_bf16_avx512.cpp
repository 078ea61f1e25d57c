// The AVX512_BF16 kernel of gemm_bf16 (compiled with -mavx512bf16; called only where the host has
// it). vdpbf16ps multiplies 16 lanes of bf16 pairs and adds both products to 16 F32 sums, so B is
// packed with pairs of rows interleaved (gemm_bf16_pack.h) and A is broadcast a pair (32 bits) at
// a time. Micro-tiles of MR rows x NV vectors (16 columns each) keep MR * NV sums in registers:
// 6 x 4 (24 sums of the 32 registers) for products with more than 32 columns, 12 x 2 for narrower
// ones. A host that issues vdpbf16ps on two ports needs about 10 independent sums to keep both
// busy; 24 leave room. (The Sapphire Rapids-class Xeon measured issues it once every two cycles:
// half the F32 FMA rate in FLOP/s, so there this kernel is slower than gemm; docs/PERF.md.) The
// tiling changes no bits: each sum is its pairs in order p = 0, 1, ... whichever tile computes it.
#include <immintrin.h>

#include "cpu/gemm_bf16_pack_avx512.h"

namespace gdn::cpu::bf16_avx512 {

using namespace bf16_detail;

namespace {

inline __m512bh broadcast_pair(const uint16_t *p) {
    int32_t pair;
    std::memcpy(&pair, p, sizeof pair);
    return (__m512bh)_mm512_set1_epi32(pair);
}

// ROWS x (NV x 16) of C from packed A rows (lda values apart) and the packed panel.
template <int NV, int ROWS>
void micro(int64_t pairs, const uint16_t *a, int64_t lda, const uint16_t *panel, const Problem &pr, int64_t i0,
           int64_t j0, int cols) {
    constexpr int NR = NV * 16;
    __m512 sum[ROWS][NV];
    for (int r = 0; r < ROWS; ++r)
        for (int v = 0; v < NV; ++v) sum[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
        __m512bh b[NV];
        for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(panel + (p * NR + v * 16) * 2);
        for (int r = 0; r < ROWS; ++r) {
            const __m512bh x = broadcast_pair(a + r * lda + 2 * p);
            for (int v = 0; v < NV; ++v) sum[r][v] = _mm512_dpbf16_ps(sum[r][v], x, b[v]);
        }
    }
    const RowScales &s = pr.scales;
    const bool read_c = pr.c_scale != 0.0f;
#pragma GCC unroll 16
    for (int r = 0; r < ROWS; ++r) {
        const int64_t i = i0 + r;
        const float row_alpha = s.c_rows ? pr.alpha * s.c_rows[i] : pr.alpha;
        const float row_c_scale = s.c_in ? pr.c_scale * s.c_in[i] : pr.c_scale;
        finish_row<NV>(pr.c + i * pr.ldc + j0, sum[r], cols, row_alpha, row_c_scale, read_c);
    }
}

template <int NV, int ROWS>
void micro_rows(int rows_left, int64_t pairs, const uint16_t *a, int64_t lda, const uint16_t *panel,
                const Problem &pr, int64_t i0, int64_t j0, int cols) {
    if constexpr (ROWS > 1) {
        if (rows_left < ROWS) return micro_rows<NV, ROWS - 1>(rows_left, pairs, a, lda, panel, pr, i0, j0, cols);
    }
    micro<NV, ROWS>(pairs, a, lda, panel, pr, i0, j0, cols);
}

// Rows of the next tile when `left` remain: a short last tile is merged with the one before and
// the two split evenly, so no tile has too few sums to fill the pipes (as gemm_kernel.inc does).
template <int MR, int NV>
int64_t tile_rows(int64_t left) {
    constexpr int64_t kMinSums = 10;
    if (left <= MR) return left;
    if (left < 2 * MR && (left - MR) * NV < kMinSums) return (left + 1) / 2;
    return MR;
}

template <int MR, int NV>
void gemm_tiles(const Problem &pr, const uint16_t *a, int64_t lda, uint16_t *panel) {
    constexpr int NR = NV * 16;
    const int64_t pairs = (pr.k + 1) / 2;
    for (int64_t j0 = 0; j0 < pr.n; j0 += NR) {
        const int cols = static_cast<int>(pr.n - j0 < NR ? pr.n - j0 : NR);
        pack_b_panel_fast<NR>(pr.k, 2 * pairs, pr.b, j0, cols, pr.scales.b_rows, panel);
        for (int64_t i0 = 0, rows = 0; i0 < pr.m; i0 += rows) {
            rows = tile_rows<MR, NV>(pr.m - i0);
            micro_rows<NV, MR>(static_cast<int>(rows), pairs, a + i0 * lda, lda, panel, pr, i0, j0, cols);
        }
    }
}

}  // namespace

void gemm(const Problem &pr, void *pack) {
    const Scratch s = scratch(pack, pr.m, pr.k);
    // A stored as bf16 rows of whole pairs is read in place. Else it is packed to rows of an even
    // length (the last pair's second value zero); padding to the common layout's 32 would only add
    // zero pairs this kernel skips.
    const bool a_in_place = pr.a.is_bf16 && pr.a.cs == 1 && pr.k % 2 == 0;
    const int64_t lda = a_in_place ? pr.a.rs : round_up(pr.k, 2);
    const uint16_t *a = a_in_place ? static_cast<const uint16_t *>(pr.a.p) : s.a;
    if (!a_in_place) pack_a_fast(pr.m, pr.k, pr.a, pr.m, lda, s.a);
    if (pr.n <= 32) return gemm_tiles<12, 2>(pr, a, lda, s.panel);
    gemm_tiles<6, 4>(pr, a, lda, s.panel);
}

// round_to_bf16 of gemm_bf16.h, 16 values at a time in integer arithmetic (the bits of
// bf16_detail::round_nearest_even_bits; vcvtne2ps2bf16 would flush subnormals).
void round_to_bf16(const float *src, uint16_t *dst, int64_t n) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mask = first16(n - i);
        const __m512i u = _mm512_maskz_loadu_epi32(mask, src + i);
        const __m512i high = _mm512_srli_epi32(u, 16);
        const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_and_si512(high, one)), 16);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
        const __m512i bits = _mm512_mask_or_epi32(rounded, nan, high, quiet);
        _mm256_mask_storeu_epi16(dst + i, mask, _mm512_cvtepi32_epi16(bits));
    }
}

}  // namespace gdn::cpu::bf16_avx512
