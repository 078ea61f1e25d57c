// The scalar element conversions (src/math/elements.h) against definitions that share no code
// with them: the nearest representable neighbour chosen by exact double arithmetic, and the
// compiler's own _Float16 conversions where it has them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "math/elements.h"

namespace gdn {
namespace {

bool is_nan_bf16(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }
bool is_nan_f16(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }

TEST(Elements, EveryBf16AndF16SurvivesTheRoundTripThroughFloatAndDouble) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<uint16_t>(i);
        if (is_nan_bf16(h)) {
            EXPECT_TRUE(std::isnan(bf16_to_float(h)));
            EXPECT_TRUE(is_nan_bf16(float_to_bf16(bf16_to_float(h))));
            EXPECT_EQ(float_to_bf16(bf16_to_float(h)), h | 0x0040u) << i;  // quieted, sign and payload kept
        } else {
            EXPECT_EQ(float_to_bf16(bf16_to_float(h)), h) << i;
            EXPECT_EQ(double_to_bf16(bf16_to_float(h)), h) << i;
        }
        if (is_nan_f16(h)) {
            EXPECT_TRUE(std::isnan(f16_to_float(h)));
            EXPECT_EQ(float_to_f16(f16_to_float(h)), h | 0x0200u) << i;
        } else {
            EXPECT_EQ(float_to_f16(f16_to_float(h)), h) << i;
            EXPECT_EQ(double_to_f16(f16_to_float(h)), h) << i;
        }
    }
}

// The two neighbours of x among the values `decode` gives for the codes of one sign, by
// bisection over the codes (monotonic in magnitude), then the nearer, ties to the even code.
template <class Decode>
uint16_t nearest(double x, Decode decode, uint16_t max_finite, uint16_t inf, double overflow_threshold) {
    const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
    const double a = std::fabs(x);
    if (a >= overflow_threshold) return sign | inf;
    uint32_t lo = 0, hi = max_finite;  // decode(lo) <= a < decode(hi) unless a >= decode(max_finite)
    if (a >= decode(max_finite)) return static_cast<uint16_t>(sign | max_finite);  // below the threshold
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        (decode(static_cast<uint16_t>(mid)) <= a ? lo : hi) = mid;
    }
    const double dl = a - decode(static_cast<uint16_t>(lo)), dh = decode(static_cast<uint16_t>(hi)) - a;
    const uint32_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return static_cast<uint16_t>(sign | pick);
}

uint16_t nearest_bf16(double x) {
    // Overflow: at or above the midpoint between the largest finite bf16 and 2^128.
    return nearest(x, [](uint16_t h) { return double{bf16_to_float(h)}; }, 0x7f7fu, 0x7f80u, 0x1.ffp127);
}
uint16_t nearest_f16(double x) {
    return nearest(x, [](uint16_t h) { return double{f16_to_float(h)}; }, 0x7bffu, 0x7c00u, 65520.0);
}

// Floats and doubles from every binade and every kind: ties, the values next to ties, subnormals,
// overflow.
std::vector<double> samples() {
    std::vector<double> xs;
    std::mt19937_64 rng(1234);
    for (int i = 0; i < 200000; ++i) {
        const uint32_t u = static_cast<uint32_t>(rng());
        const float f = bits_float(u);
        if (!std::isnan(f)) xs.push_back(f);
        uint64_t w = rng();
        double d;
        std::memcpy(&d, &w, 8);
        if (std::isfinite(d) && std::fabs(d) < 1e39 && std::fabs(d) > 1e-46) xs.push_back(d);
        // A double near a bf16 / f16 tie: a tie moved by a few double ulps (a float would round it to the tie).
        const uint16_t h = static_cast<uint16_t>(rng() & 0x7f7fu);
        const double tie = (double{bf16_to_float(h)} + double{bf16_to_float(static_cast<uint16_t>(h + 1))}) / 2;
        xs.push_back(std::nextafter(tie, 0.0));
        xs.push_back(std::nextafter(tie, 1e300));
        xs.push_back(tie);
        const uint16_t e = static_cast<uint16_t>(rng() % 0x7bffu);
        const double tie16 = (double{f16_to_float(e)} + double{f16_to_float(static_cast<uint16_t>(e + 1))}) / 2;
        xs.push_back(std::nextafter(tie16, 0.0));
        xs.push_back(std::nextafter(tie16, 1e300));
        xs.push_back(-tie16);
    }
    for (double x : {0.0, -0.0, 65504.0, 65519.99, 65520.0, 0x1p-24, 0x1p-25, 0x1.8p-25, 0x1p-14, 3.3895e38, 3.40e38,
                     1e-45, 1e-40, std::numeric_limits<double>::infinity()})
        xs.push_back(x), xs.push_back(-x);
    return xs;
}

TEST(Elements, DoublesAndFloatsRoundOnceToTheNearestWithTiesToEven) {
    for (double x : samples()) {
        EXPECT_EQ(double_to_bf16(x), nearest_bf16(x)) << x;
        EXPECT_EQ(double_to_f16(x), nearest_f16(x)) << x;
        const float f = static_cast<float>(x);
        EXPECT_EQ(float_to_bf16(f), nearest_bf16(f)) << f;
        EXPECT_EQ(float_to_f16(f), nearest_f16(f)) << f;
    }
}

// GCC gives C++ a _Float16 type on x86-64 only (AArch64 from GCC 13); clang on both.
#if defined(__FLT16_MANT_DIG__) && (defined(__x86_64__) || defined(__clang__) || __GNUC__ >= 13)
TEST(Elements, F16AgreesWithTheCompilersFloat16) {
    for (double x : samples()) {
        const _Float16 from_double = static_cast<_Float16>(x), from_float = static_cast<_Float16>(static_cast<float>(x));
        uint16_t a, b;
        std::memcpy(&a, &from_double, 2);
        std::memcpy(&b, &from_float, 2);
        EXPECT_EQ(double_to_f16(x), a) << x;
        EXPECT_EQ(float_to_f16(static_cast<float>(x)), b) << x;
    }
}
#endif

TEST(Elements, RowsConvertByTheirTensorsType) {
    const double values[] = {1.0, -2.5, 0x1.01000004p0, 1e-3};
    uint16_t half[4];
    double back[4];
    store_elements(GDN_TYPE_BF16, half, 4, values);
    load_elements(GDN_TYPE_BF16, half, 4, back);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], double{bf16_to_float(double_to_bf16(values[i]))});
    // 1 + 2^-8 + 2^-30: just above bf16's tie at 1 + 2^-8, so up to 1 + 2^-7 (through float it would
    // land on the tie first and go down to 1).
    EXPECT_EQ(back[2], 0x1.02p0);
    store_elements(GDN_TYPE_F16, half, 4, values);
    load_elements(GDN_TYPE_F16, half, 4, back);
    EXPECT_EQ(back[2], 0x1.01p0);  // f16 keeps 1 + 2^-8
    EXPECT_EQ(back[1], -2.5);
}

}  // namespace
}  // namespace gdn
