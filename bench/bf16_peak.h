// Throughput probes of the host's F32 and bf16 units (bf16_peak.cpp): each runs `iterations`
// rounds of independent products in registers and returns the floating-point operations done.
#pragma once

#include <cstdint>

namespace bench {

double fma_f32_flops(int64_t iterations);   // vfmadd231ps zmm (AVX-512F)
double dpbf16_flops(int64_t iterations);    // vdpbf16ps zmm (AVX512_BF16)
double tdpbf16_flops(int64_t iterations);   // tdpbf16ps (AMX-BF16); 0 where not built

}  // namespace bench
