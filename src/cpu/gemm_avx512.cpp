// AVX-512 build of the GEMM (compiled with -mavx512f -mfma, called only where the host has it).
// 6 x 64 micro-tiles (24 accumulators of the 32 registers; measured in bench/gemm_bench), and
// 12 x 32 (24 too) for products with 32 rows or columns of C or fewer (gemm in gemm_kernel.inc).
#define GDN_GEMM_NS avx512
#define GDN_VEC 16
#ifndef GDN_MR
#define GDN_MR 6
#endif
#ifndef GDN_NV
#define GDN_NV 4
#endif
#ifndef GDN_SMALL_MR
#define GDN_SMALL_MR 12
#endif
#ifndef GDN_SMALL_NV
#define GDN_SMALL_NV 2
#endif
#include "cpu/gemm_kernel.inc"
