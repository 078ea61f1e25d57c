// Scalar conversions between the element types of SPEC section 3.1 and float / double, bit
// exact and portable (no _Float16, no FP environment): the definition every vectorised
// conversion of a backend is tested against.
//
// Reading (bf16 or f16 to float or double) is exact. Writing rounds once, to nearest with ties to
// even, as IEEE 754 and the hardware instructions do: a double is rounded straight to the
// 8 (bf16) or 11 (f16) significant bits, never through float (which could round twice). NaN stays
// NaN (quiet, sign kept), overflow gives Inf, and subnormals are kept, not flushed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gdn/gdn.h"

namespace gdn {

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
    const uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float f16_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
    if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // zero or subnormal: exact
    return sign != 0 ? -magnitude : magnitude;
}

inline uint16_t float_to_f16(float f) {
    const uint32_t u = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t x = u & 0x7fffffffu;
    if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // quiet NaN
    if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (and Inf): Inf
    if (x < 0x38800000u) {
        // Below 2^-14: a multiple of 2^-24 (a subnormal, or the smallest normal when it rounds up,
        // whose encoding follows the subnormals'). The scaling is exact; nearbyint rounds to even.
        const float units = std::nearbyint(bits_float(x) * 0x1p24f);
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
    }
    uint32_t r = x - (112u << 23);  // exponent bias 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);  // round 23 -> 10 mantissa bits, ties to even (a carry moves the exponent)
    return static_cast<uint16_t>(sign | (r >> 13));
}

// A double rounded to float by truncation, with the last bit set when anything was cut off
// ("round to odd"): rounding that to 8 or 11 significant bits to nearest gives the double's
// correctly rounded value, since float keeps at least two more bits than either.
inline float round_to_odd_float(double x) {
    if (std::isnan(x)) return static_cast<float>(x);
    float f = static_cast<float>(x);
    if (static_cast<double>(f) == x) return f;
    if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
    return bits_float(float_bits(f) | 1u);
}

inline uint16_t double_to_bf16(double x) { return float_to_bf16(round_to_odd_float(x)); }
inline uint16_t double_to_f16(double x) { return float_to_f16(round_to_odd_float(x)); }

// One row of n elements of a tensor of element type `type` (F32, F64, BF16 or F16), converted as
// it is read or rounded once as it is written. Acc is float or double.
template <class Acc>
inline void load_elements(gdn_type type, const void *src, int64_t n, Acc *dst) {
    switch (type) {
        case GDN_TYPE_F64:
            for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Acc>(static_cast<const double *>(src)[i]);
            return;
        case GDN_TYPE_BF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(static_cast<const uint16_t *>(src)[i]);
            return;
        case GDN_TYPE_F16:
            for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(static_cast<const uint16_t *>(src)[i]);
            return;
        default:
            for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Acc>(static_cast<const float *>(src)[i]);
            return;
    }
}

template <class Acc>
inline void store_elements(gdn_type type, void *dst, int64_t n, const Acc *src) {
    static_assert(sizeof(Acc) == 4 || sizeof(Acc) == 8, "float or double");
    auto to_bf16 = [](Acc x) { return sizeof(Acc) == 8 ? double_to_bf16(x) : float_to_bf16(static_cast<float>(x)); };
    auto to_f16 = [](Acc x) { return sizeof(Acc) == 8 ? double_to_f16(x) : float_to_f16(static_cast<float>(x)); };
    switch (type) {
        case GDN_TYPE_F64:
            for (int64_t i = 0; i < n; ++i) static_cast<double *>(dst)[i] = static_cast<double>(src[i]);
            return;
        case GDN_TYPE_BF16:
            for (int64_t i = 0; i < n; ++i) static_cast<uint16_t *>(dst)[i] = to_bf16(src[i]);
            return;
        case GDN_TYPE_F16:
            for (int64_t i = 0; i < n; ++i) static_cast<uint16_t *>(dst)[i] = to_f16(src[i]);
            return;
        default:
            for (int64_t i = 0; i < n; ++i) static_cast<float *>(dst)[i] = static_cast<float>(src[i]);
            return;
    }
}

}  // namespace gdn
