// Rows of the caller's tensors in their element types (SPEC 3.1: F32, BF16, F16), converted to
// and from the float rows the cpu math works on. Every read and write of q, k, v, g, beta, out,
// d_out and the gradients goes through here, at the point where rows are gathered into a chunk's
// (or a token block's) contiguous float buffers and where results are stored: no tensor is
// converted as a whole.
//
// Reading is exact (BF16 and F16 are subsets of F32); writing rounds once, to nearest with ties
// to even. The bits are those of the scalar definitions in src/math/elements.h, on every ISA:
// the vector kernels (AVX-512 with or without AVX512_BF16, AVX2 with F16C, chosen at run time as
// the GEMM kernels are) are tested against them over every half value and random floats.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "gdn/gdn.h"
#include "math/elements.h"

namespace gdn::cpu {

// n elements of type `type` (F32, BF16, F16) at src into floats.
void load_row(gdn_type type, const void *src, int64_t n, float *dst);
// n floats into elements of type `type` at dst, each rounded once.
void store_row(gdn_type type, const float *src, int64_t n, void *dst);
// store_row, with non-temporal stores for whole cache lines of dst (cache_control.h's
// stream_row): for outputs a call writes once and does not read again. Call stream_fence()
// after the last one.
void stream_store_row(gdn_type type, const float *src, int64_t n, void *dst);

// The row as floats: the tensor's own memory when it is F32 (no copy), else converted into
// `scratch` (n floats).
inline const float *row_as_floats(gdn_type type, const void *src, int64_t n, float *scratch) {
    if (type == GDN_TYPE_F32) return static_cast<const float *>(src);
    load_row(type, src, n, scratch);
    return scratch;
}

// One element (a beta, a scalar gate, their gradients).
inline float load_element(gdn_type type, const void *p) {
    switch (type) {
    case GDN_TYPE_BF16: return bf16_to_float(*static_cast<const uint16_t *>(p));
    case GDN_TYPE_F16: return f16_to_float(*static_cast<const uint16_t *>(p));
    default: return *static_cast<const float *>(p);
    }
}
inline void store_element(gdn_type type, void *p, float x) {
    switch (type) {
    case GDN_TYPE_BF16: *static_cast<uint16_t *>(p) = float_to_bf16(x); return;
    case GDN_TYPE_F16: *static_cast<uint16_t *>(p) = float_to_f16(x); return;
    default: *static_cast<float *>(p) = x; return;
    }
}

// Element (0, i1, i2, i3) of t: the start of a row.
inline float load_element(const gdn_tensor &t, int64_t i1, int64_t i2, int64_t i3) {
    return load_element(t.type, element_ptr(t, 0, i1, i2, i3));
}
inline void store_element(const gdn_tensor &t, int64_t i1, int64_t i2, int64_t i3, float x) {
    store_element(t.type, element_ptr(t, 0, i1, i2, i3), x);
}

// Row bytes of n elements of t.
inline int64_t row_bytes(const gdn_tensor &t, int64_t n) { return n * static_cast<int64_t>(type_size(t.type)); }

// Token rows t0 .. t0+L-1 of t at (i1, i3) (n elements each) from src (L rows of n floats,
// contiguous), rounded once, streamed (stream_store_row; fenced before it returns).
void store_token_rows(const float *src, int64_t L, int64_t n, const gdn_tensor &t, int64_t i1, int64_t t0, int64_t i3);

// The conversion kernels by name, for the tests and the benchmarks: "avx512bf16", "avx512",
// "avx2" (with F16C), "generic" (the scalar definitions). typed_rows_isa() is the one in use (the
// best the host has); typed_rows_force_isa() switches to another the host can run (false if it
// cannot). Every kernel gives the same bits.
const char *typed_rows_isa();
bool typed_rows_force_isa(const char *isa);

}  // namespace gdn::cpu
