// The element-wise kernels of cpu/chunk_vector.h against plain double arithmetic: exp_to_float
// over its whole range (the reduction, the polynomial, the 2^k built from bits, the clamps and
// NaN), add_rows against a sequence of axpy calls, on lengths around the vector widths; the
// masked triangles, the gate prefix sums, exp(-x) as 1 / exp(x) where KDA takes it, and the KDA
// pair terms of the gate gradient from row and column sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/chunk_plan.h"
#include "cpu/chunk_vector.h"

namespace {

// Distance in units in the last place between two finite floats of the same sign (or zero).
int64_t ulps(float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, sizeof ia);
    std::memcpy(&ib, &b, sizeof ib);
    return std::llabs(int64_t(ia) - int64_t(ib));
}

TEST(CpuVector, ExpToFloatIsWithinOneUlpOfTheRoundedExpAndZeroUnder2ToTheMinus100) {
    std::vector<double> x;
    for (double v = -120.0; v <= 100.0; v += 0.013) x.push_back(v);  // every reduction interval, many times
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> wide(-1e4, 1e4), near_zero(-1e-6, 1e-6);
    for (int i = 0; i < 4000; ++i) x.push_back(wide(rng));
    for (int i = 0; i < 1000; ++i) x.push_back(near_zero(rng));
    for (double v : {0.0, -0.0, -69.3, -69.32, -103.9, -104.0, -104.5, 88.7, 88.8, 89.5, -1e300, 1e300}) x.push_back(v);
    const double inf = std::numeric_limits<double>::infinity();
    x.push_back(-inf);
    x.push_back(inf);
    x.push_back(std::numeric_limits<double>::quiet_NaN());
    // Lengths that leave every possible vector tail: the same values through slices.
    for (size_t offset : {size_t(0), size_t(1), size_t(3), size_t(7)}) {
        std::vector<float> y(x.size() - offset);
        gdn::cpu::exp_to_float(x.data() + offset, y.data(), static_cast<int64_t>(y.size()));
        for (size_t i = 0; i < y.size(); ++i) {
            const double v = x[i + offset];
            const float want = static_cast<float>(std::exp(v));
            if (std::isnan(v)) {
                EXPECT_TRUE(std::isnan(y[i])) << "x = NaN";
            } else if (v < -100 * std::log(2.0)) {
                EXPECT_EQ(y[i], 0.0f) << "x = " << v;  // under 2^-100: no subnormal factors
            } else if (want == 0.0f || std::isinf(want)) {
                EXPECT_EQ(y[i], want) << "x = " << v;
            } else {
                EXPECT_LE(ulps(y[i], want), 1) << "x = " << v << ": " << y[i] << " against " << want;
            }
        }
    }
}

TEST(CpuVector, AddRowsEqualsItsAxpySequence) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t n : {1, 7, 8, 9, 63, 64, 65, 128, 130})
        for (int64_t count : {0, 1, 5, 16}) {
            const int64_t ldx = n + 3, stride = 2;
            std::vector<float> x(count * ldx + 1), coef(count * stride + 1), y(n);
            for (float &v : x) v = u(rng);
            for (float &v : coef) v = u(rng);
            for (float &v : y) v = u(rng);
            std::vector<float> want = y;
            for (int64_t j = 0; j < count; ++j) gdn::cpu::axpy(0.75f * coef[j * stride], x.data() + j * ldx, want.data(), n);
            gdn::cpu::add_rows(0.75f, coef.data(), stride, count, x.data(), ldx, y.data(), n);
            for (int64_t i = 0; i < n; ++i)  // one rounding per step either way; fused or not may differ by an ulp a step
                EXPECT_NEAR(y[i], want[i], 1e-6f * (count + 1)) << "n = " << n << ", count = " << count << ", i = " << i;
        }
}

// The masked triangles of the chunk math: exact products below the diagonal, the diagonal as
// asked, zeros above whatever was there (a NaN in the upper half of the gram, or in a decay
// entry that is never set, must reach nothing).
TEST(CpuVector, TrianglesTakeOnlyTheirOwnEntries) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t L : {1, 2, 9, 64}) {
        std::vector<float> gram(L * L), decay(L * L, nan), out(L * L, 5.0f);
        for (int64_t r = 0; r < L; ++r)
            for (int64_t s = 0; s < L; ++s) {
                gram[r * L + s] = s > r ? nan : 0.5f + r - 0.25f * s;
                if (s < r) decay[r * L + s] = 1.0f / (1 + r + s);
            }
        for (bool with_diagonal : {false, true}) {
            gdn::cpu::decayed_lower(gram.data(), decay.data(), L, with_diagonal, out.data());
            for (int64_t r = 0; r < L; ++r)
                for (int64_t s = 0; s < L; ++s) {
                    const float want = s < r ? gram[r * L + s] * decay[r * L + s]
                                             : (s == r && with_diagonal ? gram[r * L + r] : 0.0f);
                    EXPECT_EQ(out[r * L + s], want) << "L " << L << " r " << r << " s " << s;
                }
        }
        for (bool with_diagonal : {false, true}) {
            std::vector<float> cleared = gram;
            gdn::cpu::clear_upper(cleared.data(), L, with_diagonal);
            for (int64_t r = 0; r < L; ++r)
                for (int64_t s = 0; s < L; ++s) {
                    const bool kept = s < r || (s == r && !with_diagonal);
                    EXPECT_EQ(cleared[r * L + s], kept ? gram[r * L + s] : 0.0f) << "L " << L << " r " << r << " s " << s;
                }
        }
    }
}

// KDA takes exp(-gam) as 1 / exp(gam) for |gam| <= 60 (chunk_plan's span limit): within 1.5 ulp
// of the rounded exp(-gam) (the exp is within 1 ulp, the division adds half of one). The factors
// come from kda_gated_rows, which must give the bits of its steps taken one after another (exp,
// division, gL / e, the four row scalings), from the prefix sums or from a kept e alike.
TEST(CpuVector, ReciprocalOfExpIsWithinOneAndAHalfUlpOfExpOfMinusX) {
    constexpr int64_t width = 120;  // channels per row
    std::vector<double> x, minus_x;
    for (double v = -gdn::cpu::kda_span_limit; v <= gdn::cpu::kda_span_limit; v += 0.0137) {
        x.push_back(v);
        minus_x.push_back(-v);
    }
    const int64_t rows = static_cast<int64_t>(x.size()) / width, n = rows * width;
    std::mt19937 rng(23);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> q(n), k(n), gl(width), e(n);
    for (float &v : q) v = u(rng);
    for (float &v : k) v = u(rng);
    gdn::cpu::exp_to_float(x.data(), e.data(), n);
    gdn::cpu::exp_to_float(x.data() + (rows - 1) * width, gl.data(), width);
    struct Out {
        std::vector<float> e, einv, f, qg, kg, kl, kinv;
        explicit Out(int64_t n) : e(n), einv(n), f(n), qg(n), kg(n), kl(n), kinv(n) {}
        gdn::cpu::KdaGated view() { return {e.data(), einv.data(), f.data(), qg.data(), kg.data(), kl.data(), kinv.data()}; }
    } made(n), from_kept(n);
    gdn::cpu::kda_gated_rows(rows, width, x.data(), gl.data(), q.data(), k.data(), made.view());
    from_kept.e = e;
    gdn::cpu::kda_gated_rows(rows, width, nullptr, gl.data(), q.data(), k.data(), from_kept.view());
    for (int64_t i = 0; i < n; ++i) {
        const float inverse = 1.0f / e[i], tail = gl[i % width] * inverse;
        ASSERT_EQ(made.e[i], e[i]) << i;
        ASSERT_EQ(made.einv[i], inverse) << i;
        ASSERT_EQ(made.f[i], tail) << i;
        ASSERT_EQ(made.qg[i], q[i] * e[i]) << i;
        ASSERT_EQ(made.kg[i], k[i] * e[i]) << i;
        ASSERT_EQ(made.kl[i], k[i] * tail) << i;
        ASSERT_EQ(made.kinv[i], k[i] * inverse) << i;
        using Field = std::vector<float> Out::*;
        for (Field field : {&Out::einv, &Out::f, &Out::qg, &Out::kg, &Out::kl, &Out::kinv})
            ASSERT_EQ((made.*field)[i], (from_kept.*field)[i]) << i;
    }
    const std::vector<float> &inv = made.einv;
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isnormal(inv[i])) << "x = " << x[i];
        const double want = std::exp(minus_x[i]);
        const float below = std::nextafter(static_cast<float>(want), 0.0f);
        const double ulp = static_cast<double>(static_cast<float>(want)) - below;  // one float ulp near want
        EXPECT_LE(std::fabs(inv[i] - want), 1.5 * ulp) << "x = " << x[i];
    }
}

// One row of gate prefix sums: prev + the clamped gate, in double; no previous row is 0; a NaN
// gate stays NaN and -inf is clamped to the floor (so later differences stay numbers).
TEST(CpuVector, AddGatesClampsAndKeepsNaN) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> gate = {-0.25f, -inf, nan, 0.5f, -3.0e4f, -1.0e-3f, 0.0f, -7.0f, -2.0f};
    const int64_t n = static_cast<int64_t>(gate.size());
    std::vector<double> prev(n), first(n), next(n);
    for (int64_t i = 0; i < n; ++i) prev[i] = 0.5 * i - 1.0;
    gdn::cpu::add_gates(nullptr, gate.data(), first.data(), n);
    gdn::cpu::add_gates(prev.data(), gate.data(), next.data(), n);
    for (int64_t i = 0; i < n; ++i) {
        const double g = gate[i];
        if (std::isnan(g)) {
            EXPECT_TRUE(std::isnan(first[i]) && std::isnan(next[i]));
            continue;
        }
        const double clamped = g < gdn::cpu::gate_floor ? gdn::cpu::gate_floor : g;
        EXPECT_EQ(first[i], clamped) << i;
        EXPECT_EQ(next[i], prev[i] + clamped) << i;
    }
}

// The strict-triangle products the KDA backward has for kda_pair_sums, in float and summed in
// order as a GEMM would: dP Kinv, dM Kinv, dP^T Qg + dM^T Kg.
struct KdaPairProducts {
    std::vector<float> dp_kinv, dm_kinv, dkinv;
    KdaPairProducts(int64_t L, int64_t n, const std::vector<float> &dP, const std::vector<float> &dM,
                    const std::vector<float> &qg, const std::vector<float> &kg, const std::vector<float> &kinv)
        : dp_kinv(L * n, 0.0f), dm_kinv(L * n, 0.0f), dkinv(L * n, 0.0f) {
        for (int64_t r = 0; r < L; ++r)
            for (int64_t i = 0; i < n; ++i)
                for (int64_t s = 0; s < r; ++s) {
                    dp_kinv[r * n + i] += dP[r * L + s] * kinv[s * n + i];
                    dm_kinv[r * n + i] += dM[r * L + s] * kinv[s * n + i];
                }
        for (int64_t s = 0; s < L; ++s)
            for (int64_t i = 0; i < n; ++i)
                for (int64_t r = s + 1; r < L; ++r)
                    dkinv[s * n + i] += dP[r * L + s] * qg[r * n + i] + dM[r * L + s] * kg[r * n + i];
    }
};

// The KDA pair terms from row and column sums: with exact row and column sums (small integers,
// so every float product and sum is exact), kda_pair_sums' recursion gives each
// pair_t = sum_{s < t <= r} X_rs, X_rs[i] = (dP_rs qg_r[i] + dM_rs kg_r[i]) kinv_s[i], exactly as
// the pairs summed one by one; row 0 is left alone.
TEST(CpuVector, KdaPairSumsAreTheSumsOverThePairsCrossingEachToken) {
    for (int64_t L : {1, 2, 5, 64})
        for (int64_t n : {1, 7, 32}) {
            std::mt19937 rng(static_cast<uint32_t>(L * 100 + n));
            std::uniform_int_distribution<int> small(-4, 4);
            std::vector<float> dP(L * L), dM(L * L), qg(L * n), kg(L * n), kinv(L * n);
            for (auto *v : {&dP, &dM, &qg, &kg, &kinv})
                for (float &x : *v) x = static_cast<float>(small(rng));
            const auto X = [&](int64_t r, int64_t s, int64_t i) {
                return (double(dP[r * L + s]) * qg[r * n + i] + double(dM[r * L + s]) * kg[r * n + i]) * kinv[s * n + i];
            };
            const KdaPairProducts products(L, n, dP, dM, qg, kg, kinv);
            std::vector<double> pair(L * n, -9.0);
            gdn::cpu::kda_pair_sums(L, n, qg.data(), kg.data(), kinv.data(), products.dp_kinv.data(),
                                    products.dm_kinv.data(), products.dkinv.data(), pair.data());
            for (int64_t i = 0; i < n; ++i) EXPECT_EQ(pair[i], -9.0) << "row 0 written";
            for (int64_t t = 1; t < L; ++t)
                for (int64_t i = 0; i < n; ++i) {
                    double want = 0.0;
                    for (int64_t r = t; r < L; ++r)
                        for (int64_t s = 0; s < t; ++s) want += X(r, s, i);
                    EXPECT_EQ(pair[t * n + i], want) << "L " << L << " t " << t << " i " << i;
                }
        }
}

// With the products in float (as the backward's GEMMs give them), each pair_t is within the
// float error of the row and column sums it is built from: |error| <= 2 L u sum over t' >= t of
// (row t' and column t' of |X|), u = 2^-24. That bound is relative to the chunk's other pairs,
// not to pair_t: where a strong gate makes every pair crossing t tiny (here exp(-50) at token 30),
// pair_t's error is of the size of its neighbours' rounding, far above pair_t itself (summing
// every pair one by one in double had it to about 1e-16 of its neighbours).
TEST(CpuVector, KdaPairSumsFromFloatProductsAreWithinTheirRoundingBound) {
    constexpr int64_t L = 64, n = 8, spike = 30;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f), mild(-0.3f, 0.0f);
    // Per-channel prefix sums of gates, a -50 gate at token `spike`; qg = q e^gam, kg = k e^gam,
    // kinv = k e^-gam, so X_rs carries exp(gam_r - gam_s).
    std::vector<double> gam(L * n);
    for (int64_t i = 0; i < n; ++i) {
        double sum = 0.0;
        for (int64_t t = 0; t < L; ++t) gam[t * n + i] = sum += (t == spike ? -50.0 : mild(rng));
    }
    std::vector<float> dP(L * L, 0.0f), dM(L * L, 0.0f), qg(L * n), kg(L * n), kinv(L * n);
    for (int64_t r = 0; r < L; ++r)
        for (int64_t s = 0; s < r; ++s) {
            dP[r * L + s] = uniform(rng);
            dM[r * L + s] = uniform(rng);
        }
    for (int64_t t = 0; t < L; ++t)
        for (int64_t i = 0; i < n; ++i) {
            const double e = std::exp(gam[t * n + i]);
            qg[t * n + i] = static_cast<float>(uniform(rng) * e);
            const float k = uniform(rng);
            kg[t * n + i] = static_cast<float>(k * e);
            kinv[t * n + i] = static_cast<float>(k / e);
        }
    const KdaPairProducts products(L, n, dP, dM, qg, kg, kinv);
    std::vector<double> pair(L * n, 0.0);
    gdn::cpu::kda_pair_sums(L, n, qg.data(), kg.data(), kinv.data(), products.dp_kinv.data(), products.dm_kinv.data(),
                            products.dkinv.data(), pair.data());
    const auto abs_x = [&](int64_t r, int64_t s, int64_t i) {
        return (std::fabs(double(dP[r * L + s]) * qg[r * n + i]) + std::fabs(double(dM[r * L + s]) * kg[r * n + i])) *
               std::fabs(double(kinv[s * n + i]));
    };
    const double u = std::ldexp(1.0, -24);
    for (int64_t i = 0; i < n; ++i) {
        double bound = 0.0;
        for (int64_t t = L - 1; t >= 1; --t) {
            double exact = 0.0, row_col = 0.0;
            for (int64_t r = t; r < L; ++r)
                for (int64_t s = 0; s < t; ++s)
                    exact += (double(dP[r * L + s]) * qg[r * n + i] + double(dM[r * L + s]) * kg[r * n + i]) *
                             kinv[s * n + i];
            for (int64_t s = 0; s < t; ++s) row_col += abs_x(t, s, i);
            for (int64_t r = t + 1; r < L; ++r) row_col += abs_x(r, t, i);
            bound += 2.0 * L * u * row_col;
            const double error = std::fabs(pair[t * n + i] - exact);
            EXPECT_LE(error, bound) << "t " << t << " channel " << i << " exact " << exact;
        }
    }
}

}  // namespace
