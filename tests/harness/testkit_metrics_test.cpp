// The harness's comparison (tools/testkit/metrics.h) fails what differs from the oracle: a
// non-finite oracle value is matched only by the same value (NaN, or the same infinity), a
// finite one only by a finite value near it, and a result of another length not at all.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "metrics.h"

namespace {

using gdn::testkit::compare;

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(HarnessMetrics, TheSameNonFiniteValuesAreTheOnlyMatchForThem) {
    EXPECT_TRUE(compare({kInf, 2.0}, {kInf, 2.0}).finite);
    EXPECT_TRUE(compare({-kInf, kNaN, 2.0}, {-kInf, kNaN, 2.0}).finite);
    const std::vector<std::vector<double>> wrong = {{1.0, 2.0}, {-kInf, 2.0}, {kNaN, 2.0}};
    for (const std::vector<double> &a : wrong) {
        const auto c = compare(a, {kInf, 2.0});
        EXPECT_FALSE(c.finite) << a[0];
        EXPECT_EQ(c.nmse, kInf);
    }
    EXPECT_FALSE(compare({1.0, 2.0}, {kNaN, 2.0}).finite);
    EXPECT_FALSE(compare({kInf, 2.0}, {1.0, 2.0}).finite);
    EXPECT_FALSE(compare({kNaN, 2.0}, {1.0, 2.0}).finite);
}

TEST(HarnessMetrics, FiniteResultsAreMeasuredAgainstTheOracle) {
    const auto same = compare({1.0, -2.0, 3.0}, {1.0, -2.0, 3.0});
    EXPECT_EQ(same.nmse, 0.0);
    EXPECT_EQ(same.max_rel, 0.0);
    const auto scaled = compare({1.1, -2.2, 3.3}, {1.0, -2.0, 3.0});
    EXPECT_NEAR(scaled.nmse, 0.01, 1e-12);  // every element 10% off
    EXPECT_GT(scaled.max_rel, 0.04);
    EXPECT_EQ(compare({1.0}, {1.0, 2.0}).nmse, kInf);
    EXPECT_EQ(compare({1.0, 2.0}, {0.0, 0.0}).nmse, 1.0);  // anything against an all-zero oracle
}

}  // namespace
