// The element types a kernel reads and writes (SPEC section 3.1: F32, BF16, F16), converted one
// element at a time: reading is exact, writing rounds once to nearest with ties to even. On the
// device by the hardware's conversions (cvt.rn.bf16.f32, cvt.rn.f16.f32); in host code (the
// backend, the emulation tests) by src/math/elements.h, whose bits these equal for every
// non-NaN value (a NaN stays a NaN; its payload bits may differ).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define GDN_HD __host__ __device__ __forceinline__
#else
#define GDN_HD inline
#endif

#include "math/elements.h"

namespace gdn::cuda {

enum class Element : uint8_t { F32 = 0, BF16 = 1, F16 = 2 };

GDN_HD int element_bytes(Element e) { return e == Element::F32 ? 4 : 2; }

GDN_HD float bf16_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
    return __bfloat162float(__ushort_as_bfloat16(h));
#else
    return gdn::bf16_to_float(h);
#endif
}

GDN_HD uint16_t float_to_bf16_bits(float x) {
#if defined(__CUDA_ARCH__)
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
    return gdn::float_to_bf16(x);
#endif
}

GDN_HD float f16_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    return gdn::f16_to_float(h);
#endif
}

GDN_HD uint16_t float_to_f16_bits(float x) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(x));
#else
    return gdn::float_to_f16(x);
#endif
}

// Element `i` of a tensor of type e at p, as a float.
GDN_HD float load_element(Element e, const void *p, int64_t i) {
    if (e == Element::F32) return static_cast<const float *>(p)[i];
    const uint16_t h = static_cast<const uint16_t *>(p)[i];
    return e == Element::BF16 ? bf16_bits_to_float(h) : f16_bits_to_float(h);
}

// x rounded once to type e, stored as element `i` at p.
GDN_HD void store_element(Element e, void *p, int64_t i, float x) {
    if (e == Element::F32) static_cast<float *>(p)[i] = x;
    else static_cast<uint16_t *>(p)[i] = e == Element::BF16 ? float_to_bf16_bits(x) : float_to_f16_bits(x);
}

// Two floats rounded to bf16 and packed as a bf16x2 register: `lo` in the low half (the
// element of lower index in an mma fragment), `hi` in the high half.
GDN_HD uint32_t pack_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&pair);
#else
    return static_cast<uint32_t>(gdn::float_to_bf16(lo)) | (static_cast<uint32_t>(gdn::float_to_bf16(hi)) << 16);
#endif
}

}  // namespace gdn::cuda
