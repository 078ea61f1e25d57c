// Small dense GEMM for the chunked kernels: C = alpha * A * B (+ C), row-major float matrices
// of a few hundred rows and columns at most (64x128x128 is the typical call).
//
// A and B are read through Mat views, so the transposes the chunk math needs (K^T D, D S^T, ...)
// cost no copies of A. A is read in place; B's column panels are packed (zero-padded), except a
// row-major B read by few row tiles or too wide for half of L1, or one panel of a matrix kept in
// panels (B's rows exactly as many floats apart as the columns of the tile the product takes,
// n that many: one call per panel), read in place (unless its rows are scaled: RowScales::b_rows).
// The kernel is chosen once at run time from the host's ISA (x86-64: AVX-512, AVX2+FMA, or SSE2;
// AArch64: NEON), so one binary runs on every host of its target and every thread uses the same
// kernel (same bits for any thread count).
#pragma once

#include <cstdint>

namespace gdn::cpu {

// Element (r, c) of the viewed matrix is p[r * row_stride + c * col_stride].
struct Mat {
    const float *p;
    int64_t row_stride, col_stride;
};
inline Mat rows(const float *p, int64_t ld) { return {p, ld, 1}; }        // A as stored
inline Mat transposed(const float *p, int64_t ld) { return {p, 1, ld}; }  // A^T of a stored A

// Row factors folded into a product (nullptr: none), so that a row-scaled operand such as Q o e
// or K o f (one gate factor per token) is never stored: c_rows (m floats) scales row r of A B as
// it is written (alpha * c_rows[r] times the row's sums), b_rows (k floats) scales row kk of B as
// its panel is packed (a B with b_rows is always packed), c_in (m floats) scales row r of the C
// that is added (a KDA state decayed per key channel as it is updated, S = diag(gL) S + ...).
struct RowScales {
    const float *c_rows = nullptr;
    const float *b_rows = nullptr;
    const float *c_in = nullptr;
};

// C[m x n] (leading dimension ldc) = alpha * diag(c_rows) A[m x k] diag(b_rows) B[k x n]
//                                    + c_scale * diag(c_in) C;
// C is not read when c_scale is 0 (so true / false read as accumulate / overwrite); a c_in
// factor of 0 still reads its row (0 times an Inf or NaN is NaN). c_scale * c_in[r] is rounded
// once before it multiplies the row (exact for c_scale = 1, as the chunk math calls it).
// pack: at least gemm_pack_floats(k) floats of scratch.
void gemm(int64_t m, int64_t n, int64_t k, float alpha, Mat a, Mat b, float c_scale, float *c, int64_t ldc,
          float *pack, RowScales scales = {});

int64_t gemm_pack_floats(int64_t k);

// Columns of C the narrowest micro-tile of the kernel in use covers (16 for AVX2, 32 for AVX-512,
// whose products with more than 32 rows and columns of C take 64-column tiles): callers that cut
// a product into column blocks keep them multiples of it.
int64_t gemm_panel_width();
// Columns of the widest micro-tile (the same as gemm_panel_width but for AVX-512: 64): a product
// with m and n over the narrow width takes that tile, so a matrix kept in panels of this width is
// read in place by such products (the forward's [Qg; Kg] S0; chunk_core.h, StatePanels).
int64_t gemm_wide_panel_width();

// The kernel in use: "avx512", "avx2" or "sse2" on x86-64, "neon" on AArch64, "generic" elsewhere.
const char *gemm_isa();

// The kernel chosen at start-up: the best this host has.
const char *gemm_best_isa();

// Forces a kernel (a name gemm_isa() can return; "generic" too on AArch64) for benchmarks and
// tests; false when this build or the host lacks it. Not thread-safe against running calls.
bool gemm_force_isa(const char *isa);

}  // namespace gdn::cpu
