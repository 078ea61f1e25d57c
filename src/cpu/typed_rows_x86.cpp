// x86-64 row conversion kernels (typed_rows_kernels.h), each function built for its ISA by a
// target attribute and called only where the host has it (typed_rows.cpp). They give exactly the
// bits of the scalar definitions in src/math/elements.h, where the instructions differ from them
// with a fix-up:
//  - vcvtneps2bf16 (AVX512_BF16) flushes subnormal inputs to zero; the definition rounds them, so
//    a vector with a subnormal lane takes the integer rounding instead (rare: one test per 16).
//  - vcvtph2ps (F16C) quiets a signalling NaN; the definition keeps its bits, so those lanes get
//    the quiet bit cleared again.
// bf16 -> f32 is a 16-bit shift; f32 -> f16 is vcvtps2ph with round to nearest even, which agrees
// with the definition everywhere (NaN payloads, overflow to Inf, subnormal results).
// GCC 12 warns about the intrinsics' own `__m512 __Y = __Y` placeholders when they are inlined
// into a function with a target attribute (a false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>

#include "cpu/typed_rows_kernels.h"
#include "math/elements.h"

namespace gdn::cpu::x86 {

namespace {

#define GDN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))
#define GDN_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,avx512bf16")))
#define GDN_AVX2 __attribute__((target("avx2,f16c")))

// ---- AVX-512: 16 elements a step, the tail under a mask (masked-off lanes do not fault).

GDN_AVX512 inline __m512 bf16x16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// float_to_bf16 in integer arithmetic: (u + 0x7fff + lsb) >> 16, NaN -> (u >> 16) | 0x40.
GDN_AVX512 inline __m256i f32x16_to_bf16_rne(__m512 f) {
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

GDN_AVX512BF16 inline __m256i f32x16_to_bf16_hw(__m512 f) {
    const __m512i u = _mm512_castps_si512(f);
    const __mmask16 subnormal = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff)) &
                                _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    if (subnormal != 0) return f32x16_to_bf16_rne(f);
    return (__m256i)_mm512_cvtneps_pbh(f);
}

GDN_AVX512 inline __m512 f16x16_to_f32(__m256i h) {
    const __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h));
    const __mmask16 signalling =
        _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7e00)), _mm256_set1_epi16(0x7c00)) &
        _mm256_test_epi16_mask(h, _mm256_set1_epi16(0x01ff));
    return _mm512_castsi512_ps(_mm512_mask_and_epi32(f, signalling, f, _mm512_set1_epi32(~0x00400000)));
}

GDN_AVX512 inline __m256i f32x16_to_f16(__m512 f) { return _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

GDN_AVX512 inline __mmask16 tail_mask(int64_t left) { return static_cast<__mmask16>((1u << left) - 1u); }

GDN_AVX512 void bf16_to_f32_avx512(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i))));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, bf16x16_to_f32(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

GDN_AVX512 void f16_to_f32_avx512(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, f16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(src + i))));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, f16x16_to_f32(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

GDN_AVX512 void f32_to_bf16_avx512(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), f32x16_to_bf16_rne(_mm512_loadu_ps(src + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(dst + i, m, f32x16_to_bf16_rne(_mm512_maskz_loadu_ps(m, src + i)));
    }
}

GDN_AVX512BF16 void f32_to_bf16_avx512bf16(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), f32x16_to_bf16_hw(_mm512_loadu_ps(src + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(dst + i, m, f32x16_to_bf16_hw(_mm512_maskz_loadu_ps(m, src + i)));
    }
}

GDN_AVX512 void f32_to_f16_avx512(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), f32x16_to_f16(_mm512_loadu_ps(src + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(dst + i, m, f32x16_to_f16(_mm512_maskz_loadu_ps(m, src + i)));
    }
}

// ---- AVX2 + F16C: 8 elements a step, the tail by the scalar definitions.

GDN_AVX2 inline __m128i pack_low_halves(__m256i x) {  // eight 32-bit lanes < 2^16 -> eight 16-bit
    return _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
}

GDN_AVX2 void bf16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

GDN_AVX2 void f32_to_bf16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
        const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i), pack_low_halves(_mm256_blendv_epi8(rounded, quiet, nan)));
    }
    for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

GDN_AVX2 void f16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i));
        const __m128i nan_quiet_clear = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7e00)), _mm_set1_epi16(0x7c00));
        const __m128i payload = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x01ff)), _mm_setzero_si128());
        const __m128i signalling = _mm_andnot_si128(payload, nan_quiet_clear);
        const __m256i clear = _mm256_and_si256(_mm256_cvtepi16_epi32(signalling), _mm256_set1_epi32(0x00400000));
        const __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_andnot_si256(clear, f)));
    }
    for (; i < n; ++i) dst[i] = f16_to_float(src[i]);
}

GDN_AVX2 void f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) dst[i] = float_to_f16(src[i]);
}

// F16C from CPUID leaf 1 (not every compiler's __builtin_cpu_supports knows "f16c").
bool has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool has_avx512() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && has_f16c();
}
bool has_avx512bf16() { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }
bool has_avx2() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && has_f16c();
}

}  // namespace

RowKernels avx512bf16_kernels() {
    return {bf16_to_f32_avx512, f32_to_bf16_avx512bf16, f16_to_f32_avx512, f32_to_f16_avx512, has_avx512bf16, "avx512bf16"};
}
RowKernels avx512_kernels() {
    return {bf16_to_f32_avx512, f32_to_bf16_avx512, f16_to_f32_avx512, f32_to_f16_avx512, has_avx512, "avx512"};
}
RowKernels avx2_kernels() { return {bf16_to_f32_avx2, f32_to_bf16_avx2, f16_to_f32_avx2, f32_to_f16_avx2, has_avx2, "avx2"}; }

}  // namespace gdn::cpu::x86
