// The row conversion kernels of one ISA (typed_rows.cpp chooses among them at run time). Each
// gives exactly the bits of the scalar definitions in src/math/elements.h.
#pragma once

#include <cstdint>

namespace gdn::cpu {

struct RowKernels {
    void (*bf16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_bf16)(const float *src, uint16_t *dst, int64_t n);
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
    bool (*host_has)();
    const char *name;
};

#if defined(__x86_64__) && defined(__GNUC__)
#define GDN_TYPED_ROWS_X86 1
namespace x86 {
RowKernels avx512bf16_kernels();  // AVX-512 (F, BW, VL) with AVX512_BF16's vcvtneps2bf16
RowKernels avx512_kernels();      // AVX-512 (F, BW, VL): bf16 rounding in integer arithmetic
RowKernels avx2_kernels();        // AVX2 with F16C
}  // namespace x86
#endif

}  // namespace gdn::cpu
