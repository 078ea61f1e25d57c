// Host side of the tile-operation checks: inputs, and the assertions on the results.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "math/elements.h"
#include "tile_ops_check.h"

namespace gdn_tile_check {

struct Inputs {
    std::vector<float> a, b, l;
};

inline Inputs make_check_inputs() {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Inputs in{std::vector<float>(M * K), std::vector<float>(K * N), std::vector<float>(n * n)};
    for (float &x : in.a) x = u(rng);
    for (float &x : in.b) x = u(rng);
    // L strictly lower with small entries (what beta k.k exp(...) gives for normalised keys),
    // garbage on and above the diagonal (the inverse must ignore it).
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) in.l[i * n + j] = j < i ? 0.15f * u(rng) : 7.0f;
    return in;
}

// X (size x size) is the inverse of I + L, L the strictly lower part of the leading size x size
// block of l (ld_l): (I + L) X = I to F32 accuracy, exact unit diagonal and zeros above.
inline void expect_inverse(const std::vector<float> &l, int ld_l, const std::vector<float> &x, int size) {
    double residual = 0;
    for (int i = 0; i < size; ++i)
        for (int j = 0; j < size; ++j) {
            double r = 0;
            for (int k = 0; k < size; ++k) {
                const double lik = k < i ? l[i * ld_l + k] : (k == i ? 1.0 : 0.0);
                r += lik * x[k * size + j];
            }
            residual = std::max(residual, std::fabs(r - (i == j ? 1.0 : 0.0)));
            if (j > i) EXPECT_EQ(x[i * size + j], 0.0f) << size << ": " << i << "," << j;
            if (j == i) EXPECT_EQ(x[i * size + j], 1.0f) << size << ": " << i;
        }
    EXPECT_LT(residual, 1e-5) << "(I + L) X - I at size " << size;
}

// A value as a bf16 mma operand sees it: rounded to bf16, to nearest with ties to even.
inline double bf16_operand(float x) { return gdn::bf16_to_float(gdn::float_to_bf16(x)); }

// The largest error of C (want: `times` A B) relative to sum_k |A_ik B_kj|, against the product
// of the operands as given (bf16_operands false) or rounded to bf16.
inline double worst_relative_error(const Inputs &in, const std::vector<float> &c, double times, bool bf16_operands) {
    double worst = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; ++k) {
                const double a = bf16_operands ? bf16_operand(in.a[i * K + k]) : in.a[i * K + k];
                const double b = bf16_operands ? bf16_operand(in.b[k * N + j]) : in.b[k * N + j];
                ref += a * b;
                mag += std::fabs(a * b);
            }
            worst = std::max(worst, std::fabs(c[i * N + j] - times * ref) / (times * mag));
        }
    return worst;
}

// EXACT (3xTF32): C = A B to about F32 accuracy (far below TF32's 2^-11), C2 = 2 A B, C3 = A B.
// BF16 products: the same of the bf16-rounded operands, whose products are exact in F32, to
// the roundoff of an F32 sum of K + 1 terms in any order, each addition erring by at most 2^-23
// of the sum's magnitude (allowing truncation, as the tensor core's internal order and rounding
// are not documented): (K + 2) 2^-23 relative to sum |a b|. And the rounding visibly happened:
// against the operands as given, the error is of bf16's size. X (I + L) = I in both.
inline void expect_checks_pass(const Inputs &in, const std::vector<float> &c, const std::vector<float> &c2,
                               const std::vector<float> &c3, const std::vector<float> &x, const std::vector<float> &x_chunk,
                               bool bf16_products) {
    const double bound = bf16_products ? (K + 2) * std::ldexp(1.0, -23) : 1e-6;
    EXPECT_LT(worst_relative_error(in, c, 1, bf16_products), bound) << "C = A B (row-major B): relative error";
    EXPECT_LT(worst_relative_error(in, c2, 2, bf16_products), bound) << "C += A B (col-major B): relative error";
    EXPECT_LT(worst_relative_error(in, c3, 1, bf16_products), bound) << "C = A B (col-major A): relative error";
    if (bf16_products) EXPECT_GT(worst_relative_error(in, c, 1, false), 1e-4) << "bf16 products as accurate as F32: not rounded?";
    expect_inverse(in.l, n, x, n);
    expect_inverse(in.l, n, x_chunk, n_chunk);
}

}  // namespace gdn_tile_check
