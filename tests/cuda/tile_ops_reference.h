// Host side of the tile-operation checks: inputs, and the assertions on the results.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

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

// C = A B to about F32 accuracy (3xTF32: far below TF32's 2^-11), C2 = 2 A B; X (I + L) = I.
inline void expect_checks_pass(const Inputs &in, const std::vector<float> &c, const std::vector<float> &c2,
                               const std::vector<float> &c3, const std::vector<float> &x, const std::vector<float> &x_chunk) {
    double worst = 0, worst2 = 0, worst3 = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; ++k) {
                ref += double(in.a[i * K + k]) * in.b[k * N + j];
                mag += std::fabs(double(in.a[i * K + k]) * in.b[k * N + j]);
            }
            worst = std::max(worst, std::fabs(c[i * N + j] - ref) / mag);
            worst2 = std::max(worst2, std::fabs(c2[i * N + j] - 2 * ref) / (2 * mag));
            worst3 = std::max(worst3, std::fabs(c3[i * N + j] - ref) / mag);
        }
    EXPECT_LT(worst, 1e-6) << "C = A B (row-major B): relative error";
    EXPECT_LT(worst2, 1e-6) << "C += A B (col-major B): relative error";
    EXPECT_LT(worst3, 1e-6) << "C = A B (col-major A): relative error";
    expect_inverse(in.l, n, x, n);
    expect_inverse(in.l, n, x_chunk, n_chunk);
}

}  // namespace gdn_tile_check
