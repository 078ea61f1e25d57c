// SPEC 6: NaN and Inf in the inputs flow through the arithmetic of SPEC 2 as IEEE 754 says,
// and never corrupt memory or hang. Each test plants one non-finite value and checks exactly
// which outputs it reaches, from the recurrence:
//
//   S' = diag(exp(g_t)) S;  p = S'^T k_t;  d = beta_t (v_t - p);  S = S' + k_t d^T;  o_t = scale S^T q_t
//
//   NaN in q_t           -> o_t (every channel of the units reading it); nothing else
//   NaN in v_t[j]        -> column j of S from t on, so o[j] from t on; other columns exact
//   NaN in s0[i][j]      -> column j of S from the start; other columns exact
//   NaN in k_t or beta_t -> all of S from t on, so every o from t on
//   g_t = -Inf           -> exp(-Inf) = 0: the state is forgotten; tokens from t on equal a
//                           fresh run from zero state, and nothing is NaN
//   g_t = +Inf           -> exp(+Inf) = Inf: S becomes Inf/NaN from t on
//   NaN in dO_t          -> gradients of tokens after t exact, dq_t all NaN
// Outputs a value does not reach stay bit-identical to a clean run.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "dense_problem.h"

namespace gdn::reliability {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Sk = Sv = 4, Hk = 1, Hv = 2, T = 8, B = 1: both value heads read the one key head.
Sizes sizes() { return Sizes{}; }

struct Runs {
    DenseProblem clean, dirty;
    Runs(const char *backend, const std::function<void(DenseProblem &)> &plant, bool backward = false)
        : clean(sizes(), GDN_TYPE_F32, 7), dirty(sizes(), GDN_TYPE_F32, 7) {
        plant(dirty);
        gdn_context *ctx = make_context(backend);
        EXPECT_EQ(clean.forward(ctx), GDN_OK) << gdn_last_error(ctx);
        EXPECT_EQ(dirty.forward(ctx), GDN_OK) << gdn_last_error(ctx);
        if (backward) {
            EXPECT_EQ(clean.backward(ctx), GDN_OK) << gdn_last_error(ctx);
            EXPECT_EQ(dirty.backward(ctx), GDN_OK) << gdn_last_error(ctx);
        }
        gdn_context_free(ctx);
    }
};

// o[j, h, t, 0]: which ones are NaN, which are exactly the clean value.
void expect_out(const Runs &r, const std::function<bool(int64_t j, int64_t h, int64_t t)> &reached) {
    const Sizes s = sizes();
    for (int64_t t = 0; t < s.T; ++t)
        for (int64_t h = 0; h < s.Hv; ++h)
            for (int64_t j = 0; j < s.Sv; ++j) {
                const int64_t i = r.clean.out.index(j, h, t, 0);
                const double got = r.dirty.out.get(i), clean = r.clean.out.get(i);
                SCOPED_TRACE(testing::Message() << "o[j=" << j << ", h=" << h << ", t=" << t << "]");
                if (reached(j, h, t)) EXPECT_TRUE(std::isnan(got)) << got;
                else EXPECT_EQ(got, clean);
            }
}

class NonFinite : public ::testing::TestWithParam<const char *> {
protected:
    bool is_ref() const { return std::string(GetParam()) == "ref"; }
};

TEST_P(NonFinite, NanInQReachesOnlyThatTokensOutput) {
    Runs r(GetParam(), [](DenseProblem &p) { p.q.set(p.q.index(2, 0, 5, 0), kNaN); });
    expect_out(r, [](int64_t, int64_t, int64_t t) { return t == 5; });
    EXPECT_TRUE(r.dirty.states.same_bits(r.clean.states));
}

TEST_P(NonFinite, NanInVReachesOneStateColumn) {
    Runs r(GetParam(), [](DenseProblem &p) { p.v.set(p.v.index(1, 1, 3, 0), kNaN); });
    expect_out(r, [](int64_t j, int64_t h, int64_t t) { return j == 1 && h == 1 && t >= 3; });
    const Sizes s = sizes();
    for (int64_t j = 0; j < s.Sv; ++j)
        for (int64_t i = 0; i < s.Sk; ++i) {
            const int64_t at = r.clean.states.index(i, j, 1, 0);
            if (j == 1) EXPECT_TRUE(std::isnan(r.dirty.states.get(at)));
            else EXPECT_EQ(r.dirty.states.get(at), r.clean.states.get(at));
        }
}

TEST_P(NonFinite, NanInInitialStateReachesOneColumn) {
    Runs r(GetParam(), [](DenseProblem &p) { p.s0.set(p.s0.index(3, 2, 0, 0), kNaN); });
    expect_out(r, [](int64_t j, int64_t h, int64_t) { return j == 2 && h == 0; });
}

TEST_P(NonFinite, NanInKOrBetaReachesEverythingAfter) {
    Runs rk(GetParam(), [](DenseProblem &p) { p.k.set(p.k.index(0, 0, 4, 0), kNaN); });
    expect_out(rk, [](int64_t, int64_t, int64_t t) { return t >= 4; });  // key head 0 feeds both value heads
    Runs rb(GetParam(), [](DenseProblem &p) { p.beta.set(p.beta.index(0, 1, 6, 0), kNaN); });
    expect_out(rb, [](int64_t, int64_t h, int64_t t) { return h == 1 && t >= 6; });
}

TEST_P(NonFinite, PlusInfGateBlowsUpTheStateFromThatToken) {
    Runs r(GetParam(), [](DenseProblem &p) { p.g.set(p.g.index(0, 0, 2, 0), kInf); });
    const Sizes s = sizes();
    for (int64_t t = 0; t < s.T; ++t)
        for (int64_t j = 0; j < s.Sv; ++j) {
            const int64_t i = r.clean.out.index(j, 0, t, 0);
            if (t < 2) EXPECT_EQ(r.dirty.out.get(i), r.clean.out.get(i));
            else EXPECT_FALSE(std::isfinite(r.dirty.out.get(i))) << "t=" << t;
        }
    for (int64_t j = 0; j < s.Sv; ++j)  // the other head never saw it
        EXPECT_EQ(r.dirty.out.get(r.clean.out.index(j, 1, 7, 0)), r.clean.out.get(r.clean.out.index(j, 1, 7, 0)));
}

// exp(-Inf) = 0 exactly: the state is wiped, and from that token on the run is a fresh one
// from a zero state over the remaining tokens.
TEST_P(NonFinite, MinusInfGateForgetsTheState) {
    const int64_t t0 = 3;
    Runs r(GetParam(), [&](DenseProblem &p) {
        for (int64_t h = 0; h < p.s.Hv; ++h) p.g.set(p.g.index(0, h, t0, 0), -kInf);
    });
    Sizes tail = sizes();
    tail.T = sizes().T - t0;
    DenseProblem fresh(tail, GDN_TYPE_F32, 7);
    fresh.with_s0 = false;
    const DenseProblem &d = r.dirty;
    for (int64_t t = 0; t < tail.T; ++t)
        for (int64_t h = 0; h < tail.Hv; ++h) {
            for (int64_t i = 0; i < tail.Sk; ++i) {
                fresh.q.set(fresh.q.index(i, 0, t, 0), d.q.get(d.q.index(i, 0, t + t0, 0)));
                fresh.k.set(fresh.k.index(i, 0, t, 0), d.k.get(d.k.index(i, 0, t + t0, 0)));
            }
            for (int64_t j = 0; j < tail.Sv; ++j) fresh.v.set(fresh.v.index(j, h, t, 0), d.v.get(d.v.index(j, h, t + t0, 0)));
            fresh.g.set(fresh.g.index(0, h, t, 0), t == 0 ? 0.0 : d.g.get(d.g.index(0, h, t + t0, 0)));
            fresh.beta.set(fresh.beta.index(0, h, t, 0), d.beta.get(d.beta.index(0, h, t + t0, 0)));
        }
    gdn_context *ctx = make_context(GetParam());
    ASSERT_EQ(fresh.forward(ctx), GDN_OK) << gdn_last_error(ctx);
    gdn_context_free(ctx);
    for (int64_t t = 0; t < tail.T; ++t)
        for (int64_t h = 0; h < tail.Hv; ++h)
            for (int64_t j = 0; j < tail.Sv; ++j) {
                const double got = d.out.get(d.out.index(j, h, t + t0, 0)), want = fresh.out.get(fresh.out.index(j, h, t, 0));
                EXPECT_TRUE(std::isfinite(got));
                // The ref recurrence is the same arithmetic on the same numbers: exact. A
                // chunked backend reorders it: close.
                if (is_ref()) EXPECT_EQ(got, want) << "t=" << t + t0;
                else EXPECT_NEAR(got, want, 1e-5 * (1 + std::fabs(want))) << "t=" << t + t0;
            }
}

TEST_P(NonFinite, NanInOutputGradientStaysBehindItsToken) {
    const int64_t t0 = 4;
    Runs r(GetParam(), [&](DenseProblem &p) { p.d_out.set(p.d_out.index(1, 0, t0, 0), kNaN); }, true);
    const Sizes s = sizes();
    for (int64_t t = 0; t < s.T; ++t) {
        for (int64_t i = 0; i < s.Sk; ++i) {
            const int64_t at = r.clean.dq.index(i, 0, t, 0);
            if (t > t0) {
                EXPECT_EQ(r.dirty.dq.get(at), r.clean.dq.get(at)) << "dq t=" << t;
                EXPECT_EQ(r.dirty.dk.get(at), r.clean.dk.get(at)) << "dk t=" << t;
            } else if (t == t0) {
                EXPECT_TRUE(std::isnan(r.dirty.dq.get(at))) << "dq t=" << t;
            }
        }
        for (int64_t h = 0; h < s.Hv; ++h)
            for (int64_t j = 0; j < s.Sv; ++j) {
                const int64_t at = r.clean.dv.index(j, h, t, 0);
                if (t > t0) EXPECT_EQ(r.dirty.dv.get(at), r.clean.dv.get(at)) << "dv t=" << t;
            }
    }
}

// Every input, every kind of non-finite value, both ops: the call succeeds (non-finite values
// are data, not errors), writes every output element (no stale poison) and nothing else.
TEST_P(NonFinite, AnyNonFiniteValueAnywhereIsData) {
    const double specials[] = {kNaN, kInf, -kInf, 1e38, -1e38};
    int planted = 0;
    for (int which = 0; which < 8; ++which)
        for (double x : specials) {
            DenseProblem p(sizes(), GDN_TYPE_F32, 11);
            Buffer *targets[] = {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.s0, &p.d_out, &p.d_states};
            targets[which]->set(targets[which]->count() / 2, x);
            const float poison = 12345.0f;
            for (Buffer *b : {&p.out, &p.states, &p.dq, &p.dk, &p.dv, &p.dg, &p.dbeta, &p.ds0})
                for (int64_t i = 0; i < b->count(); ++i) b->set(i, poison);
            gdn_context *ctx = make_context(GetParam());
            EXPECT_EQ(p.forward(ctx), GDN_OK) << gdn_last_error(ctx);
            EXPECT_EQ(p.backward(ctx), GDN_OK) << gdn_last_error(ctx);
            gdn_context_free(ctx);
            for (Buffer *b : {&p.out, &p.states, &p.dq, &p.dk, &p.dv, &p.dg, &p.dbeta, &p.ds0})
                for (int64_t i = 0; i < b->count(); ++i) ASSERT_NE(b->get(i), poison) << "input " << which << " value " << x;
            ++planted;
        }
    EXPECT_EQ(planted, 40);
}

std::vector<const char *> backends() {
    std::vector<const char *> out = {"ref"};
    if (gdn_backend_available("cpu")) out.push_back("cpu");
    return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, NonFinite, ::testing::ValuesIn(backends()),
                         [](const testing::TestParamInfo<const char *> &i) { return std::string(i.param); });

}  // namespace
}  // namespace gdn::reliability
