// AVX2 + FMA build of the GEMM (compiled with -mavx2 -mfma, called only where the host has it).
#define GDN_GEMM_NS avx2
#define GDN_VEC 8
#define GDN_MR 6
#ifndef GDN_NV
#define GDN_NV 2
#endif
#include "cpu/gemm_kernel.inc"
