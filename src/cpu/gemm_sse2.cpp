// Baseline x86-64 build of the GEMM (SSE2 is part of x86-64): the fallback of hosts without AVX2.
#define GDN_GEMM_NS sse2
#define GDN_VEC 4
#define GDN_MR 6
#ifndef GDN_NV
#define GDN_NV 2
#endif
#include "cpu/gemm_kernel.inc"
