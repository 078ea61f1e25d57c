// Non-finite inputs on the ref backend (SPEC section 6: NaN and Inf flow through the
// arithmetic, they never corrupt memory): a gate of -inf wipes the state, which is the same as
// starting afresh; a NaN stays inside the (sequence, value head) unit that reads it; nothing is
// written outside the outputs' elements. Also: repeated calls give the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "case.h"
#include "host_problem.h"
#include "problem_data.h"
#include "runner.h"

namespace {

using namespace gdn::reftest;

Sizes small_sizes(bool kda) {
    Sizes s;
    s.Sk = 4;
    s.Sv = 3;
    s.Hk = 2;
    s.Hv = 4;
    s.T = 9;
    s.B = s.Bq = 2;
    s.kda = kda;
    return s;
}

TEST(NonFinite, MinusInfiniteGateStartsAfresh) {
    // exp(-inf) = 0: the state before token t0 is wiped, so tokens t0.. behave as a call over
    // tokens t0.. from a zero initial state.
    const double inf = std::numeric_limits<double>::infinity();
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32})
        for (bool kda : {false, true}) {
            SCOPED_TRACE(std::string(type == GDN_TYPE_F64 ? "F64" : "F32") + (kda ? " KDA" : " GDA"));
            HostProblem p = random_problem(small_sizes(kda), type, 1111);
            const int64_t t0 = 4, T = p.sizes.T;
            for (int64_t b = 0; b < p.sizes.B; ++b)
                for (int64_t h = 0; h < p.sizes.Hv; ++h)
                    for (int64_t w = 0; w < p.g.ne()[0]; ++w) p.g.put(w, h, t0, b, -inf);
            RefContext ctx;
            const ForwardResult whole = forward(ctx.get(), p);
            const ForwardResult fresh = forward(ctx.get(), token_range(p, t0, T, HostTensor()));
            EXPECT_EQ(relative_difference(fresh.out, gather(whole.out, 2, range(t0, T))), 0.0);
            EXPECT_EQ(relative_difference(fresh.states, whole.states), 0.0);

            // Backward: finite everywhere, and no gradient crosses the wipe. Tokens t0.. get the
            // gradients of the fresh call; tokens ..t0-1 and s0 those of a call that ends before
            // t0 with a zero final-state gradient.
            const HostTensor d_out = random_tensor(type, whole.out.ne(), 21), d_states = random_tensor(type, whole.states.ne(), 22);
            const Gradients g = backward(ctx.get(), p, d_out, d_states);
            for (const HostTensor *t : {&g.dq, &g.dk, &g.dv, &g.dg, &g.dbeta, &g.ds0})
                for (int64_t n = 0; n < t->count(); ++n) ASSERT_TRUE(std::isfinite(t->get(n))) << n;
            const Gradients gp = backward(ctx.get(), token_range(p, 0, t0, p.state), gather(d_out, 2, range(0, t0)), HostTensor());
            EXPECT_EQ(relative_difference(gp.ds0, g.ds0), 0.0);
            EXPECT_EQ(relative_difference(gp.dq, gather(g.dq, 2, range(0, t0))), 0.0);
            EXPECT_EQ(relative_difference(gp.dk, gather(g.dk, 2, range(0, t0))), 0.0);
            EXPECT_EQ(relative_difference(gp.dv, gather(g.dv, 2, range(0, t0))), 0.0);
            EXPECT_EQ(relative_difference(gp.dg, gather(g.dg, 2, range(0, t0))), 0.0);
            EXPECT_EQ(relative_difference(gp.dbeta, gather(g.dbeta, 2, range(0, t0))), 0.0);
            const Gradients gf = backward(ctx.get(), token_range(p, t0, T, HostTensor()), gather(d_out, 2, range(t0, T)), d_states);
            EXPECT_EQ(relative_difference(gf.dq, gather(g.dq, 2, range(t0, T))), 0.0);
            EXPECT_EQ(relative_difference(gf.dk, gather(g.dk, 2, range(t0, T))), 0.0);
            EXPECT_EQ(relative_difference(gf.dv, gather(g.dv, 2, range(t0, T))), 0.0);
            EXPECT_EQ(relative_difference(gf.dg, gather(g.dg, 2, range(t0, T))), 0.0);
            EXPECT_EQ(relative_difference(gf.dbeta, gather(g.dbeta, 2, range(t0, T))), 0.0);
        }
}

TEST(NonFinite, NanStaysInsideItsUnit) {
    // A NaN in v[j] of one (sequence, value head, token) poisons column j of that unit's state
    // from then on, so its later outputs o[j]; every other output and every other unit's
    // gradients keep their bits. dq and dk are shared by the value heads of a key head, so the
    // check there is per key head and q/k sequence.
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32}) {
        SCOPED_TRACE(type == GDN_TYPE_F64 ? "F64" : "F32");
        const HostProblem clean = random_problem(small_sizes(false), type, 1212);
        HostProblem dirty = clean;
        const int64_t bad_j = 1, bad_b = 1, bad_h = 2, bad_t = 3;  // value head 2 reads key head 0 (tiled)
        dirty.v.put(bad_j, bad_h, bad_t, bad_b, std::numeric_limits<double>::quiet_NaN());
        RefContext ctx;
        const ForwardResult fc = forward(ctx.get(), clean), fd = forward(ctx.get(), dirty);
        const Sizes &s = clean.sizes;
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t h = 0; h < s.Hv; ++h) {
                const bool bad = b == bad_b && h == bad_h;
                for (int64_t t = 0; t < s.T; ++t)
                    for (int64_t j = 0; j < s.Sv; ++j) {
                        const double x = fd.out.at(j, h, t, b), y = fc.out.at(j, h, t, b);
                        if (bad && t >= bad_t && j == bad_j) ASSERT_TRUE(std::isnan(x)) << "t " << t;
                        else ASSERT_EQ(std::memcmp(&x, &y, sizeof x), 0) << "b " << b << " h " << h << " t " << t;
                    }
            }
        const HostTensor d_out = random_tensor(type, fc.out.ne(), 23), d_states = random_tensor(type, fc.states.ne(), 24);
        const Gradients gc = backward(ctx.get(), clean, d_out, d_states), gd = backward(ctx.get(), dirty, d_out, d_states);
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t h = 0; h < s.Hv; ++h) {
                if (b == bad_b && h == bad_h) continue;
                for (int64_t t = 0; t < s.T; ++t) {
                    ASSERT_EQ(gd.dbeta.at(0, h, t, b), gc.dbeta.at(0, h, t, b));
                    ASSERT_EQ(gd.dg.at(0, h, t, b), gc.dg.at(0, h, t, b));
                }
            }
        const int64_t bad_kh = bad_h % s.Hk;
        for (int64_t bq = 0; bq < s.Bq; ++bq)
            for (int64_t kh = 0; kh < s.Hk; ++kh) {
                if (bq == bad_b && kh == bad_kh) continue;
                for (int64_t t = 0; t < s.T; ++t)
                    for (int64_t i = 0; i < s.Sk; ++i) {
                        ASSERT_EQ(gd.dq.at(i, kh, t, bq), gc.dq.at(i, kh, t, bq));
                        ASSERT_EQ(gd.dk.at(i, kh, t, bq), gc.dk.at(i, kh, t, bq));
                    }
            }
    }
}

TEST(NonFinite, NonFiniteInputsWriteNothingOutsideTheOutputs) {
    // Through the test kit's guarded, padded, packed layouts: NaN, +inf and -inf sprinkled over
    // every input, forward and backward run, and every guard and gap byte is still poison.
    gdn::testkit::BackendSession session({"REF", "ref", 0}, 1);
    ASSERT_TRUE(session.ok()) << session.error();
    const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity()};
    for (gdn::testkit::Op op : {gdn::testkit::Op::Forward, gdn::testkit::Op::Backward})
        for (gdn_type type : {GDN_TYPE_F32, GDN_TYPE_F64}) {
            gdn::testkit::Case c;
            c.op = op;
            c.shape = {8, 4, 2, 4, 7, 2, 2, 3};
            c.kda = true;
            c.strided = true;
            SCOPED_TRACE(c.label());
            gdn::testkit::TensorSet inputs = gdn::testkit::make_inputs(c, type, 77);
            int k = 0;
            for (const auto &[name, view] : inputs.views()) {
                std::vector<double> values = inputs.read(name);
                for (size_t n = static_cast<size_t>(k % 5); n < values.size(); n += 11) values[n] = specials[k++ % 3];
                inputs.write(name, values);
            }
            const gdn::testkit::RunResult r = gdn::testkit::run_case(c, inputs, session);
            EXPECT_EQ(r.status, GDN_OK) << r.error;
            EXPECT_EQ(r.stray_write, "");
        }
}

TEST(Determinism, RepeatedCallsGiveTheSameBits) {
    const HostProblem p = random_problem(small_sizes(true), GDN_TYPE_F32, 1313);
    RefContext a, b;
    const ForwardResult f1 = forward(a.get(), p), f2 = forward(a.get(), p), f3 = forward(b.get(), p);
    EXPECT_TRUE(same_bits(f1.out, f2.out) && same_bits(f1.out, f3.out));
    EXPECT_TRUE(same_bits(f1.states, f2.states) && same_bits(f1.states, f3.states));
    const HostTensor d_out = random_tensor(GDN_TYPE_F32, f1.out.ne(), 25), d_states = random_tensor(GDN_TYPE_F32, f1.states.ne(), 26);
    const Gradients g1 = backward(a.get(), p, d_out, d_states), g2 = backward(b.get(), p, d_out, d_states);
    EXPECT_TRUE(same_bits(g1.dq, g2.dq));
    EXPECT_TRUE(same_bits(g1.dk, g2.dk));
    EXPECT_TRUE(same_bits(g1.dv, g2.dv));
    EXPECT_TRUE(same_bits(g1.dg, g2.dg));
    EXPECT_TRUE(same_bits(g1.dbeta, g2.dbeta));
    EXPECT_TRUE(same_bits(g1.ds0, g2.ds0));
}

}  // namespace
