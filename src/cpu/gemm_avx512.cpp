// AVX-512 build of the GEMM (compiled with -mavx512f -mfma, called only where the host has it).
#define GDN_GEMM_NS avx512
#define GDN_VEC 16
#define GDN_MR 8
#include "cpu/gemm_kernel.inc"
