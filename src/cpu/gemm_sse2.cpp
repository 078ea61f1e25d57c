// Baseline x86-64 (or any target) build of the GEMM: the portable fallback.
#define GDN_GEMM_NS sse2
#define GDN_VEC 4
#define GDN_MR 6
#ifndef GDN_NV
#define GDN_NV 2
#endif
#include "cpu/gemm_kernel.inc"
