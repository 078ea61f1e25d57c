// The finite-difference checker of the test kit (tools/testkit/finite_diff.h), which every
// backend's backward is held against: it passes the ref backward on the fd cases, exactly the
// way `gdn-ops grad -p fd` runs them, and it fails when a single element of any one of the six
// analytic gradients is off by 1e-3 relative, so a real bug cannot slip through it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "case.h"
#include "finite_diff.h"
#include "problem_data.h"
#include "runner.h"
#include "thresholds.h"

namespace {

using gdn::testkit::Case;
using gdn::testkit::GradientCheck;
using gdn::testkit::Op;

const char *const kGradients[] = {"dq", "dk", "dv", "dg", "dbeta", "ds0"};

std::vector<Case> fd_backward_cases() {
    std::vector<Case> out;
    for (const Case &c : gdn::testkit::default_cases())
        if (c.group == "fd" && c.op == Op::Backward) out.push_back(c);
    return out;
}

struct Checked {
    std::vector<GradientCheck> checks;
    gdn::testkit::TensorSet grads{GDN_TYPE_F64};
};

class GradCheck : public ::testing::Test {
protected:
    gdn::testkit::BackendSession ref_{{"REF", "ref", 0}, 1};

    // gdn-ops grad's path for one case and seed on the ref backend: support check, poisoned
    // and guarded outputs through the C API, then finite differences of the F64 ref forward.
    Checked run(const Case &c, gdn_type type, uint64_t seed, int samples) {
        gdn::testkit::TensorSet inputs = gdn::testkit::make_inputs(c, type, seed);
        std::string why;
        EXPECT_EQ(gdn::testkit::check_case(c, inputs, ref_, why), GDN_OK) << why;
        gdn::testkit::RunResult r = gdn::testkit::run_case(c, inputs, ref_);
        EXPECT_EQ(r.status, GDN_OK) << r.error;
        EXPECT_EQ(r.stray_write, "");
        Checked out;
        out.checks = gdn::testkit::check_gradients(c, seed, r.outputs, ref_.context(), samples);
        out.grads = std::move(r.outputs);
        return out;
    }
};

TEST_F(GradCheck, RefBackwardPassesOnEveryFdCaseLikeGdnOpsGrad) {
    const std::vector<Case> cases = fd_backward_cases();
    ASSERT_GE(cases.size(), 7u);
    for (const Case &c : cases)
        for (uint64_t run_seed : {0, 1, 2})
            for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32}) {
                SCOPED_TRACE(c.label() + (type == GDN_TYPE_F64 ? " F64" : " F32") + " seed " + std::to_string(run_seed));
                const Checked r = run(c, type, c.seed(run_seed), 8);  // gdn-ops grad's default --samples
                ASSERT_EQ(r.checks.size(), 6u);
                for (const GradientCheck &check : r.checks) {
                    EXPECT_GT(check.samples, 0) << check.tensor;
                    EXPECT_LE(check.worst, gdn::testkit::grad_threshold(c, type, check.tensor)) << check.describe();
                }
            }
}

// The element of a gradient whose magnitude is the median of the tensor's non-zero magnitudes:
// a typical element, neither the largest (easy to catch) nor one that is nearly zero.
int64_t median_element(const std::vector<double> &values) {
    std::vector<std::pair<double, int64_t>> order;
    for (size_t n = 0; n < values.size(); ++n)
        if (values[n] != 0) order.push_back({std::fabs(values[n]), static_cast<int64_t>(n)});
    if (order.empty()) return -1;
    std::nth_element(order.begin(), order.begin() + order.size() / 2, order.end());
    return order[order.size() / 2].second;
}

class GradCheckCatches : public GradCheck, public ::testing::WithParamInterface<const char *> {};

TEST_P(GradCheckCatches, OneElementOffByOneThousandth) {
    const std::string target = GetParam();
    // Every element of every gradient is checked (samples above every tensor's size), so the
    // perturbed one is among them; the fd cases cover a grouped map, KDA, Bq < B and K > 1.
    int cases_checked = 0;
    for (const Case &c : fd_backward_cases())
        for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32}) {
            SCOPED_TRACE(c.label() + (type == GDN_TYPE_F64 ? " F64" : " F32"));
            const uint64_t seed = c.seed(0);
            const double limit = gdn::testkit::grad_threshold(c, type, target);
            // The metric is |analytic - fd| / (|fd| + rms): a relative error e on one element
            // scores below e, so every limit must stay well below the 1e-3 planted here.
            ASSERT_LT(limit, 1e-3);
            Checked clean = run(c, type, seed, 100000);
            for (const GradientCheck &check : clean.checks) ASSERT_LE(check.worst, limit) << check.describe();

            std::vector<double> values = clean.grads.read(target);
            const int64_t at = median_element(values);
            if (at < 0) continue;  // an all-zero gradient (beta = 0 regimes): nothing to perturb
            values[static_cast<size_t>(at)] *= 1 + 1e-3;
            clean.grads.write(target, values);
            const std::vector<GradientCheck> checks =
                gdn::testkit::check_gradients(c, seed, clean.grads, ref_.context(), 100000);
            for (const GradientCheck &check : checks) {
                if (check.tensor == target) EXPECT_GT(check.worst, limit) << "missed: " << check.describe();
                else EXPECT_LE(check.worst, limit) << "blamed the wrong tensor: " << check.describe();
            }
            ++cases_checked;
        }
    EXPECT_GE(cases_checked, 12);
}

INSTANTIATE_TEST_SUITE_P(EachGradient, GradCheckCatches, ::testing::ValuesIn(kGradients),
                         [](const ::testing::TestParamInfo<const char *> &info) { return std::string(info.param); });

TEST_F(GradCheck, CatchesAGradientWithTheWrongSign) {
    // A gross bug, for contrast: dg negated must fail by a wide margin (worst near 2).
    const Case c = fd_backward_cases().front();
    Checked r = run(c, GDN_TYPE_F64, c.seed(0), 100000);
    std::vector<double> dg = r.grads.read("dg");
    for (double &x : dg) x = -x;
    r.grads.write("dg", dg);
    for (const GradientCheck &check : gdn::testkit::check_gradients(c, c.seed(0), r.grads, ref_.context(), 100000))
        if (check.tensor == "dg") EXPECT_GT(check.worst, 0.5) << check.describe();
}

}  // namespace
