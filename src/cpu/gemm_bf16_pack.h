// What the bf16 GEMM kernels share (gemm_bf16.h): the bf16 rounding, the packed layouts of A and
// B and the code that fills them, the scratch layout, and the scalar form of the epilogue. Each
// kernel file includes it and compiles it with its own flags; the loops are plain C++ that GCC
// vectorises for the file's ISA, and give the same bits whatever the ISA (integer rounding, one F32
// multiply for a row factor).
//
// Layouts (bf16 as uint16_t):
//   A: row-major, m_pad rows of k_pad values (rows past m and values past k are zero);
//   B: one panel of NR columns at a time, pairs of rows interleaved (the VNNI layout both
//      vdpbf16ps and tdpbf16ps read): B(2p + t, j0 + j) at panel[(p * NR + j) * 2 + t], zero past k
//      and past the last column.
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/gemm_bf16.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace gdn::cpu::bf16_detail {

// bf16 of an F32, round to nearest even: NaN keeps its sign and top payload bits and is made
// quiet (its rounded payload could otherwise carry into the exponent and read as Inf), past the
// largest bf16 gives Inf, subnormals are kept (the element conversion of SPEC 3.1 for bf16).
inline uint16_t round_nearest_even_bits(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// An operand as the kernels pack it, bit for bit as vcvtne2ps2bf16 converts: the same, but an F32
// subnormal becomes a zero of its sign (the products read bf16 subnormals as zero anyway).
inline uint16_t round_operand(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
    return round_nearest_even_bits(u);
}
inline float widen(uint16_t x) {
    const uint32_t u = static_cast<uint32_t>(x) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// An element of an operand as bf16, times a row factor (b_rows) when there is one: an F32 is
// rounded once (after the factor), a stored bf16 is copied as it is unless a factor multiplies it.
inline uint16_t element(float x) { return round_operand(x); }
inline uint16_t element(uint16_t x) { return x; }
inline uint16_t element(float x, float factor) { return round_operand(factor * x); }
inline uint16_t element(uint16_t x, float factor) { return round_operand(factor * widen(x)); }

constexpr int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Every kernel packs A to rows of a multiple of 32 values (an AMX tile row is 32 bf16) and a
// multiple of 16 rows (an AMX tile's), so the scratch is the same whichever kernel runs.
constexpr int64_t kKPad = 32;
constexpr int64_t kRowPad = 16;
constexpr int64_t kMaxPanelWidth = 64;  // the widest B panel of any kernel (columns)
constexpr int64_t kTileBytes = 32 * 32 * sizeof(float);  // AMX: the 2 x 2 C tiles of a block
constexpr int64_t kAlign = 64;

struct Scratch {
    uint16_t *a;      // packed A
    uint16_t *panel;  // one packed panel of B
    float *tiles;     // AMX's C tiles
};

inline int64_t a_bytes(int64_t m, int64_t k) {
    return round_up(m, kRowPad) * round_up(k > 0 ? k : 1, kKPad) * 2;
}
inline int64_t panel_bytes(int64_t k) { return round_up(k > 0 ? k : 1, kKPad) * kMaxPanelWidth * 2; }
inline int64_t pack_bytes(int64_t m, int64_t k) { return a_bytes(m, k) + panel_bytes(k) + kTileBytes + 3 * kAlign; }

inline Scratch scratch(void *pack, int64_t m, int64_t k) {
    auto align = [](uintptr_t p) { return (p + kAlign - 1) / kAlign * kAlign; };
    const uintptr_t a = align(reinterpret_cast<uintptr_t>(pack));
    const uintptr_t panel = align(a + a_bytes(m, k));
    const uintptr_t tiles = align(panel + panel_bytes(k));
    return {reinterpret_cast<uint16_t *>(a), reinterpret_cast<uint16_t *>(panel), reinterpret_cast<float *>(tiles)};
}

// A (m x k, any strides) into dst: `rows` rows (m <= rows) of ld values (k <= ld), zero-filled.
template <class T>
void pack_a(int64_t m, int64_t k, const T *p, int64_t rs, int64_t cs, int64_t rows, int64_t ld, uint16_t *dst) {
    if (cs == 1) {
        for (int64_t i = 0; i < m; ++i) {
            const T *src = p + i * rs;
            uint16_t *d = dst + i * ld;
            for (int64_t kk = 0; kk < k; ++kk) d[kk] = element(src[kk]);
            for (int64_t kk = k; kk < ld; ++kk) d[kk] = 0;
        }
    } else {
        // A transposed (rows contiguous down a column): 16 rows at a time, so each source line
        // read is used 16 times while the 16 destination rows stay in L1.
        for (int64_t i0 = 0; i0 < m; i0 += 16) {
            const int64_t i1 = i0 + 16 < m ? i0 + 16 : m;
            for (int64_t kk = 0; kk < k; ++kk)
                for (int64_t i = i0; i < i1; ++i) dst[i * ld + kk] = element(p[i * rs + kk * cs]);
            for (int64_t i = i0; i < i1; ++i)
                for (int64_t kk = k; kk < ld; ++kk) dst[i * ld + kk] = 0;
        }
    }
    for (int64_t i = m; i < rows; ++i)
        for (int64_t kk = 0; kk < ld; ++kk) dst[i * ld + kk] = 0;
}

// Columns j0 .. j0 + cols of B (k x n, any strides; row kk times b_rows[kk] when given) into the
// panel of NR columns, for k_pad rows (k <= k_pad, even), zero-filled.
template <int NR, class T>
void pack_b_panel(int64_t k, int64_t k_pad, const T *p, int64_t rs, int64_t cs, int64_t j0, int cols,
                  const float *b_rows, uint16_t *panel) {
    auto at = [&](int64_t kk, int64_t j) -> uint16_t {
        const T x = p[kk * rs + (j0 + j) * cs];
        return b_rows ? element(x, b_rows[kk]) : element(x);
    };
    const int64_t pairs = k / 2;
    if (cs == 1) {
        // Rows contiguous: two rows at a time, interleaved.
        for (int64_t q = 0; q < pairs; ++q) {
            uint16_t *d = panel + q * NR * 2;
            for (int j = 0; j < cols; ++j) {
                d[2 * j] = at(2 * q, j);
                d[2 * j + 1] = at(2 * q + 1, j);
            }
        }
    } else {
        // Columns contiguous (B^T as stored): column by column, each read once in order.
        for (int j = 0; j < cols; ++j)
            for (int64_t kk = 0; kk < 2 * pairs; ++kk) panel[((kk >> 1) * NR + j) * 2 + (kk & 1)] = at(kk, j);
    }
    if (cols < NR)
        for (int64_t q = 0; q < pairs; ++q) std::memset(panel + (q * NR + cols) * 2, 0, (NR - cols) * 2 * sizeof(uint16_t));
    // An odd last row pairs with a zero; rows past k (to k_pad) are zero.
    if (k % 2 == 1) {
        uint16_t *d = panel + pairs * NR * 2;
        for (int j = 0; j < NR; ++j) {
            d[2 * j] = j < cols ? at(k - 1, j) : 0;
            d[2 * j + 1] = 0;
        }
    }
    const int64_t filled = round_up(k, 2);
    if (k_pad > filled) std::memset(panel + filled * NR, 0, (k_pad - filled) * NR * sizeof(uint16_t));
}

// An operand as the kernels take it: F32 (rounded as packed) or bf16 (copied) elements.
struct Operand {
    const void *p;
    int64_t rs, cs;
    bool is_bf16;
};
inline Operand operand(Mat x) { return {x.p, x.row_stride, x.col_stride, false}; }
inline Operand operand(MatBf16 x) { return {x.p, x.row_stride, x.col_stride, true}; }

inline void pack_a(int64_t m, int64_t k, const Operand &a, int64_t rows, int64_t ld, uint16_t *dst) {
    if (a.is_bf16) pack_a(m, k, static_cast<const uint16_t *>(a.p), a.rs, a.cs, rows, ld, dst);
    else pack_a(m, k, static_cast<const float *>(a.p), a.rs, a.cs, rows, ld, dst);
}
template <int NR>
void pack_b_panel(int64_t k, int64_t k_pad, const Operand &b, int64_t j0, int cols, const float *b_rows,
                  uint16_t *panel) {
    if (b.is_bf16) pack_b_panel<NR>(k, k_pad, static_cast<const uint16_t *>(b.p), b.rs, b.cs, j0, cols, b_rows, panel);
    else pack_b_panel<NR>(k, k_pad, static_cast<const float *>(b.p), b.rs, b.cs, j0, cols, b_rows, panel);
}

// The arguments every kernel takes (gemm_bf16's, the operands as Operand).
struct Problem {
    int64_t m, n, k;
    float alpha;
    Operand a, b;
    float c_scale;
    float *c;
    int64_t ldc;
    RowScales scales;
};

// The epilogue of one element (the vector kernels do the same per lane): C = r(alpha_i s), or
// fma(c_scale_i, C, r(alpha_i s)) when C is read.
inline float finish(float sum, float row_alpha, float row_c_scale, bool read_c, float c_old) {
    const float scaled = row_alpha * sum;
    return read_c ? __builtin_fmaf(row_c_scale, c_old, scaled) : scaled;
}

// k = 0: C = c_scale diag(c_in) C, as gemm leaves it (nothing to do for c_scale 1 and no c_in).
inline void scale_c_only(int64_t m, int64_t n, float c_scale, float *c, int64_t ldc, const float *c_in) {
    if (c_scale == 1.0f && !c_in) return;
    for (int64_t i = 0; i < m; ++i) {
        const float row_c_scale = c_in ? c_scale * c_in[i] : c_scale;
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = c_scale != 0.0f ? row_c_scale * c[i * ldc + j] : 0.0f;
    }
}

#if defined(__AVX512F__)
// The epilogue of one row of C for up to `NV` x 16 columns (cols of them written), lane by lane
// the same operations as finish().
template <int NV>
inline void finish_row(float *c, const __m512 *sum, int cols, float row_alpha, float row_c_scale, bool read_c) {
    const __m512 alpha_v = _mm512_set1_ps(row_alpha), c_scale_v = _mm512_set1_ps(row_c_scale);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
        const int left = cols - v * 16;
        if (left <= 0) break;
        const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
        __m512 x = _mm512_mul_ps(alpha_v, sum[v]);
        if (read_c) x = _mm512_fmadd_ps(c_scale_v, _mm512_maskz_loadu_ps(mask, c + v * 16), x);
        _mm512_mask_storeu_ps(c + v * 16, mask, x);
    }
}
#endif

}  // namespace gdn::cpu::bf16_detail
