// Vector packing for the bf16 GEMM kernels built with AVX512_BF16 (gemm_bf16_avx512.cpp,
// gemm_bf16_amx.cpp): the layouts of gemm_bf16_pack.h filled 32 values at a time, converted by
// vcvtne2ps2bf16 (the same bits as bf16_detail::round_operand), with transposed operands turned around
// in registers (a 16 x 16 transpose of 32-bit pairs). At the chunk shapes packing takes as long as
// an AMX product when done a value at a time. Views that are neither row- nor column-contiguous
// take the scalar code.
#pragma once

#if !defined(__AVX512BF16__) || !defined(__AVX512BW__)
#error "gemm_bf16_pack_avx512.h needs -mavx512bf16 -mavx512bw"
#endif

#include <immintrin.h>

#include "cpu/gemm_bf16_pack.h"

namespace gdn::cpu::bf16_detail {

inline __mmask16 first16(int64_t count) {
    return count >= 16 ? __mmask16(0xffff) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1);
}
inline __mmask32 first32(int64_t count) {
    return count >= 32 ? __mmask32(0xffffffffu) : count <= 0 ? __mmask32(0) : __mmask32((1u << count) - 1);
}

// 16 values p[0 .. count) (zero past count) as F32, times factor.
inline __m512 load16_f32(const float *p, int64_t count) { return _mm512_maskz_loadu_ps(first16(count), p); }
inline __m512 load16_f32(const uint16_t *p, int64_t count) {
    const __m256i x = _mm256_maskz_loadu_epi16(first16(count), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}

// 16 values as bf16 (times factor when scaled): F32 converted, stored bf16 copied unless scaled.
template <class T>
inline __m256i load16(const T *p, int64_t count, bool scaled, float factor) {
    if constexpr (sizeof(T) == 2) {
        if (!scaled) return _mm256_maskz_loadu_epi16(first16(count), p);
    }
    __m512 x = load16_f32(p, count);
    if (scaled) x = _mm512_mul_ps(_mm512_set1_ps(factor), x);
    return (__m256i)_mm512_cvtneps_pbh(x);
}

// 32 values as bf16, unscaled.
template <class T>
inline __m512i load32(const T *p, int64_t count) {
    if constexpr (sizeof(T) == 2) {
        return _mm512_maskz_loadu_epi16(first32(count), p);
    } else {
        if (count >= 32) return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
        return (__m512i)_mm512_cvtne2ps_pbh(load16_f32(p + 16, count - 16), load16_f32(p, count));
    }
}

// Two rows of 16 bf16 interleaved: lo[0], hi[0], lo[1], hi[1], ... (the VNNI pairs).
inline __m512i interleave(__m256i lo, __m256i hi) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

// Rows r0, r1 (r1 nullptr: a zero row) of 16 values each (count of them, zero past it), times f0 and
// f1 when scaled, as 16 interleaved bf16 pairs: r0[0], r1[0], r0[1], r1[1], ... F32 rows take one
// vcvtne2ps2bf16 for both.
template <class T>
inline __m512i pair_rows(const T *r0, const T *r1, int64_t count, bool scaled, float f0, float f1) {
    if constexpr (sizeof(T) == 4) {
        __m512 lo, hi;
        if (count >= 16) {
            lo = _mm512_loadu_ps(r0);
            hi = r1 ? _mm512_loadu_ps(r1) : _mm512_setzero_ps();
        } else {
            lo = load16_f32(r0, count);
            hi = r1 ? load16_f32(r1, count) : _mm512_setzero_ps();
        }
        if (scaled) {
            lo = _mm512_mul_ps(_mm512_set1_ps(f0), lo);
            hi = _mm512_mul_ps(_mm512_set1_ps(f1), hi);
        }
        const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                             6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    } else {
        return interleave(load16(r0, count, scaled, f0), r1 ? load16(r1, count, scaled, f1) : _mm256_setzero_si256());
    }
}

// r[i] lane j (32 bits) becomes r[j] lane i.
inline void transpose16x16(__m512i r[16]) {
    __m512i t[16];
    for (int a = 0; a < 8; ++a) {  // 32-bit interleave within 128-bit lanes
        t[2 * a] = _mm512_unpacklo_epi32(r[2 * a], r[2 * a + 1]);
        t[2 * a + 1] = _mm512_unpackhi_epi32(r[2 * a], r[2 * a + 1]);
    }
    // q[g][c]: lane L holds element 4L + c of rows 4g .. 4g + 3.
    __m512i q[4][4];
    for (int g = 0; g < 4; ++g) {
        q[g][0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        q[g][1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        q[g][2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        q[g][3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int c = 0; c < 4; ++c) {  // 4 x 4 transpose of the 128-bit lanes of q[0 .. 3][c]
        const __m512i x0 = _mm512_shuffle_i32x4(q[0][c], q[1][c], 0x44), x1 = _mm512_shuffle_i32x4(q[0][c], q[1][c], 0xee);
        const __m512i y0 = _mm512_shuffle_i32x4(q[2][c], q[3][c], 0x44), y1 = _mm512_shuffle_i32x4(q[2][c], q[3][c], 0xee);
        r[c] = _mm512_shuffle_i32x4(x0, y0, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
        r[8 + c] = _mm512_shuffle_i32x4(x1, y1, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
    }
}

// pack_a of gemm_bf16_pack.h for a row-contiguous or column-contiguous A.
template <class T>
void pack_a_vector(int64_t m, int64_t k, const T *p, int64_t rs, int64_t cs, int64_t rows, int64_t ld, uint16_t *dst) {
    if (cs == 1) {
        for (int64_t i = 0; i < rows; ++i) {
            int64_t kk = 0;
            if (i < m)
                for (; kk + 32 <= k; kk += 32) _mm512_storeu_si512(dst + i * ld + kk, load32(p + i * rs + kk, 32));
            for (; kk < ld; kk += 32) {
                const __m512i x = i < m ? load32(p + i * rs + kk, k - kk) : _mm512_setzero_si512();
                _mm512_mask_storeu_epi16(dst + i * ld + kk, first32(ld - kk), x);
            }
        }
        return;
    }
    // Column-contiguous (A^T stored, rs == 1): blocks of 16 rows x 32 values. Rows kk, kk + 1 of
    // A^T interleaved give each row i's pair as one 32-bit lane; 16 such vectors transposed are 16
    // rows of A's 16 pairs.
    for (int64_t i0 = 0; i0 < rows; i0 += 16)
        for (int64_t k0 = 0; k0 < ld; k0 += 32) {
            __m512i r[16];
            for (int q = 0; q < 16; ++q) {
                const int64_t kk = k0 + 2 * q;
                r[q] = kk < k ? pair_rows(p + kk * cs + i0, kk + 1 < k ? p + (kk + 1) * cs + i0 : nullptr, m - i0,
                                          false, 1.0f, 1.0f)
                              : _mm512_setzero_si512();
            }
            transpose16x16(r);
            const __mmask32 mask = first32(ld - k0);
            for (int64_t i = i0; i < i0 + 16 && i < rows; ++i) _mm512_mask_storeu_epi16(dst + i * ld + k0, mask, r[i - i0]);
        }
}

inline void pack_a_fast(int64_t m, int64_t k, const Operand &a, int64_t rows, int64_t ld, uint16_t *dst) {
    if (a.cs != 1 && a.rs != 1) return pack_a(m, k, a, rows, ld, dst);
    if (a.is_bf16) pack_a_vector(m, k, static_cast<const uint16_t *>(a.p), a.rs, a.cs, rows, ld, dst);
    else pack_a_vector(m, k, static_cast<const float *>(a.p), a.rs, a.cs, rows, ld, dst);
}

// pack_b_panel of gemm_bf16_pack.h (NR a multiple of 16) for a row- or column-contiguous B.
template <int NR, class T>
void pack_b_vector(int64_t k, int64_t k_pad, const T *p, int64_t rs, int64_t cs, int64_t j0, int cols,
                   const float *b_rows, uint16_t *panel) {
    const int64_t pairs = k_pad / 2;
    const bool scaled = b_rows != nullptr;
    if (cs == 1) {
        // Rows kk, kk + 1 interleaved, 16 columns at a time.
        for (int64_t q = 0; q < pairs; ++q) {
            const int64_t kk = 2 * q;
            if (kk >= k) {
                for (int j = 0; j < NR; j += 16) _mm512_storeu_si512(panel + (q * NR + j) * 2, _mm512_setzero_si512());
                continue;
            }
            const T *r0 = p + kk * rs + j0, *r1 = kk + 1 < k ? r0 + rs : nullptr;
            const float f0 = scaled ? b_rows[kk] : 1.0f, f1 = scaled && r1 ? b_rows[kk + 1] : 1.0f;
            for (int j = 0; j < NR; j += 16)
                _mm512_storeu_si512(panel + (q * NR + j) * 2,
                                    pair_rows(r0 + j, r1 ? r1 + j : nullptr, cols - j, scaled, f0, f1));
        }
        return;
    }
    // Column-contiguous (B^T stored, rs == 1): column j's pair q is 32 bits of its row of B^T, so
    // 16 columns x 16 pairs read as 16 vectors transpose into 16 rows of the panel.
    alignas(64) float factors[32];
    for (int64_t q0 = 0; q0 < pairs; q0 += 16) {
        const int64_t k0 = 2 * q0;
        if (scaled)
            for (int t = 0; t < 32; ++t) factors[t] = k0 + t < k ? b_rows[k0 + t] : 0.0f;
        for (int j = 0; j < NR; j += 16) {
            __m512i r[16];
            for (int c = 0; c < 16; ++c) {
                if (j + c >= cols) {
                    r[c] = _mm512_setzero_si512();
                    continue;
                }
                const T *src = p + (j0 + j + c) * cs + k0;
                if (!scaled) {
                    r[c] = load32(src, k - k0);
                } else {
                    const __m512 lo = _mm512_mul_ps(_mm512_load_ps(factors), load16_f32(src, k - k0));
                    const __m512 hi = _mm512_mul_ps(_mm512_load_ps(factors + 16), load16_f32(src + 16, k - k0 - 16));
                    r[c] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
                }
            }
            transpose16x16(r);
            for (int64_t q = q0; q < q0 + 16 && q < pairs; ++q)
                _mm512_storeu_si512(panel + (q * NR + j) * 2, r[q - q0]);
        }
    }
}

template <int NR>
void pack_b_panel_fast(int64_t k, int64_t k_pad, const Operand &b, int64_t j0, int cols, const float *b_rows,
                       uint16_t *panel) {
    if (b.cs != 1 && b.rs != 1) return pack_b_panel<NR>(k, k_pad, b, j0, cols, b_rows, panel);
    if (b.is_bf16)
        pack_b_vector<NR>(k, k_pad, static_cast<const uint16_t *>(b.p), b.rs, b.cs, j0, cols, b_rows, panel);
    else
        pack_b_vector<NR>(k, k_pad, static_cast<const float *>(b.p), b.rs, b.cs, j0, cols, b_rows, panel);
}

}  // namespace gdn::cpu::bf16_detail
