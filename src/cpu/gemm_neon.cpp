// AArch64 Advanced SIMD (NEON) build of the GEMM: 4-float vectors, 32 registers. Every AArch64
// host has NEON and FMA, so no extra flags; GCC turns `sum += x * b` into fmla.
// 5 x 16 micro-tiles: 20 accumulators + 4 vectors of B + 5 broadcasts of A (GCC loads the tile's
// A column before the fmlas) = 29 of the 32 registers, and 20 independent fmla chains cover the
// latency of 4 FMA pipes. 16 columns divide the chunk math's widths (32, 64, 128), so row-major B
// panels are read in place, never packed with a padded edge. Larger tiles spill: with 6 x 16 or
// BLIS's 8 x 12, GCC 12 keeps one accumulator on the stack, and its chain then runs through a
// store and a load every k step (checked in the k loop's assembly).
#define GDN_GEMM_NS neon
#define GDN_VEC 4
#ifndef GDN_MR
#define GDN_MR 5
#endif
#ifndef GDN_NV
#define GDN_NV 4
#endif
#include "cpu/gemm_kernel.inc"
