// The small GEMM of gemm.h with bf16 operands and F32 accumulation, for the chunk products of a
// bf16 product mode: a caller swaps gemm for gemm_bf16 per product (same arguments but for the
// scratch), keeping states, gate sums and the triangular solve in F32.
//
// Result definition. With bf16(x) the round-to-nearest-even of an F32 to bf16 as vcvtne2ps2bf16
// rounds (NaN stays a quiet NaN, a subnormal becomes a zero of its sign, a finite value past the
// bf16 range becomes Inf):
//   a'(i, kk) = bf16(A(i, kk)),  b'(kk, j) = bf16(b_rows[kk] * B(kk, j))   (the F32 product rounded)
//   s(i, j)   = the F32 sum over kk of a'(i, kk) b'(kk, j), in the kernel's order (below)
//   C(i, j)   = c_scale == 0 ? r(alpha_i s)  :  fma(c_scale_i, C(i, j), r(alpha_i s))
// where alpha_i = r(alpha * c_rows[i]) and c_scale_i = r(c_scale * c_in[i]) (r: F32 rounding; a
// missing factor is 1). As in gemm, C is not read when c_scale is 0, and a c_in factor of 0 still
// reads its row (0 times Inf or NaN is NaN). k = 0 leaves C = c_scale diag(c_in) C, as gemm does.
//
// The sum s. The product of two bf16 is exact in F32; what differs between the kernels is the
// order of the additions, fixed per kernel (never by alignment, thread count or tiling):
//   "avx512bf16" (vdpbf16ps): pairs kk = 2p, 2p + 1 in order p = 0, 1, ...; each pair adds the odd
//       term first, then the even one, each addition a fused multiply-add rounded to nearest even
//       with subnormal inputs read as zero and subnormal results flushed to zero (the instruction
//       ignores MXCSR). A bf16 subnormal operand therefore contributes nothing.
//   "amx" (tdpbf16ps on 16 x 32 bf16 tiles): k in blocks of 32 in order (zero-padded), each block
//       added into the F32 sums by the hardware in an order of its own: Intel documents the pairs
//       in sequence (even term first) with DAZ / FTZ and nearest even, but Sapphire Rapids-class
//       hardware differs from that, and from the other simple orders tried (odd first, pairwise,
//       trees, exact blocks, other rounding modes), in about 1% of the sums at k = 8 and a
//       quarter at k = 64. Its results are fixed (the same bits every call, however the product
//       is cut) and within the bound below.
//   "generic": plain C++ that computes the "avx512bf16" definition exactly (std::fma), for hosts
//       without the instruction and as the tests' bit-exact model of that kernel.
// Each kernel gives the same bits on every call and at any thread count; "avx512bf16" and "amx"
// may differ from each other in the last bits of a sum (and from gemm by the operand rounding).
// The error against the exact product of the rounded operands is within about
// ceil(k / 2) * 2 * 2^-24 * sum_kk |a'(i, kk) b'(kk, j)| (F32 additions of exact products).
#pragma once

#include <cstdint>

#include "cpu/gemm.h"

namespace gdn::cpu {

// A matrix of bf16 values (the upper 16 bits of an F32) kept by the caller, e.g. q / k / v rows
// rounded once per chunk: element (r, c) is p[r * row_stride + c * col_stride].
struct MatBf16 {
    const uint16_t *p;
    int64_t row_stride, col_stride;
};
inline MatBf16 rows(const uint16_t *p, int64_t ld) { return {p, ld, 1}; }
inline MatBf16 transposed(const uint16_t *p, int64_t ld) { return {p, 1, ld}; }

// C[m x n] = alpha diag(c_rows) A[m x k] diag(b_rows) B[k x n] + c_scale diag(c_in) C with A and
// B rounded to bf16 as they are packed (b_rows folded into B before its rounding), the sums in
// F32: the result definition above. pack: at least gemm_bf16_pack_bytes(m, k) bytes of scratch,
// any alignment.
void gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, Mat a, Mat b, float c_scale, float *c, int64_t ldc,
               void *pack, RowScales scales = {});

// The same with operands stored as bf16: packing copies them instead of converting (a b_rows
// factor still multiplies B's rows, the products rounded to bf16 again).
void gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, MatBf16 a, MatBf16 b, float c_scale, float *c,
               int64_t ldc, void *pack, RowScales scales = {});

// One operand stored as bf16, the other F32 (e.g. q / k rows kept in bf16 for a chunk times a
// state): each packed as its own entry above packs it.
void gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, MatBf16 a, Mat b, float c_scale, float *c, int64_t ldc,
               void *pack, RowScales scales = {});
void gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, Mat a, MatBf16 b, float c_scale, float *c, int64_t ldc,
               void *pack, RowScales scales = {});

// Scratch bytes gemm_bf16 needs for an m x k A (its packed copy, one packed panel of B, the
// tile buffer of the AMX kernel); the same for every kernel.
int64_t gemm_bf16_pack_bytes(int64_t m, int64_t k);

// bf16 of an F32 as SPEC 3.1 writes elements: nearest even, NaN quiet, overflow to Inf and
// subnormals kept (unlike bf16() above; the products read a bf16 subnormal as zero, so the two
// entries of gemm_bf16 agree but for F32 operands within 2^-134 below the smallest normal, which
// this rounds up to it); and back (exact).
uint16_t to_bf16(float x);
float from_bf16(uint16_t x);
// dst[i] = to_bf16(src[i]) for n values, for callers that keep operands in bf16 (AVX-512 where the
// host has AVX512_BF16: the same bits).
void round_to_bf16(const float *src, uint16_t *dst, int64_t n);

// The kernel in use: "amx", "avx512bf16" or "generic".
const char *gemm_bf16_isa();
// The kernel chosen at start-up: "amx" where the host has AMX-BF16 and Linux grants the process
// its tile state (requested once; refused e.g. where a thread's signal stack is too small for
// it), else "avx512bf16" where the host has AVX512_BF16, else "generic".
const char *gemm_bf16_best_isa();
// Whether this host runs the bf16 products natively ("amx" or "avx512bf16"). Only "amx" was
// measured faster than gemm (docs/PERF.md): a bf16 product mode should check gemm_bf16_isa().
bool gemm_bf16_native();
// Forces a kernel (a name gemm_bf16_isa() can return) for benchmarks and tests; false when this
// build or the host lacks it. Not thread-safe against running calls.
bool gemm_bf16_force_isa(const char *isa);

}  // namespace gdn::cpu
