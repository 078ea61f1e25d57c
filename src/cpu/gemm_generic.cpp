// The portable build of the GEMM: 4-float GCC vectors, lowered to whatever the target has (its
// SIMD, or scalar code), with SSE2's blocking (12 accumulators fit 16 registers). The kernel of
// targets other than x86-64 and AArch64; on AArch64 the baseline "neon" is measured against.
#define GDN_GEMM_NS generic
#define GDN_VEC 4
#define GDN_MR 6
#ifndef GDN_NV
#define GDN_NV 2
#endif
#include "cpu/gemm_kernel.inc"
