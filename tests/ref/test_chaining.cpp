// Splitting a sequence across calls (ref backend): a call over T1 + T2 tokens equals two calls
// that chain the state, forward and backward (the second call's ds0 is the first call's state
// gradient); and snapshot slot s of a T-token call is the final state of a (T - s)-token call,
// with the matching identity for the snapshot gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "host_problem.h"

namespace {

using namespace gdn::reftest;

const char *type_label(gdn_type t) { return t == GDN_TYPE_F64 ? "F64" : "F32"; }

std::string difference(const HostTensor &a, const HostTensor &b) {
    return "relative difference " + std::to_string(relative_difference(a, b));
}

#define EXPECT_SAME_BITS(a, b, what) EXPECT_TRUE(same_bits(a, b)) << (what) << ": " << difference(a, b)

Sizes chain_sizes(bool kda) {
    Sizes s;
    s.Sk = 5;
    s.Sv = 3;
    s.Hk = 2;
    s.Hv = 4;
    s.T = 13;
    s.B = s.Bq = 2;
    s.kda = kda;
    return s;
}

// Tokens [t0, t1) of a [*, *, T, *] tensor.
HostTensor tokens(const HostTensor &t, int64_t t0, int64_t t1) { return gather(t, 2, range(t0, t1)); }

// Slot s of a [Sk, Sv, Hv, B*K] tensor, as [Sk, Sv, Hv, B].
HostTensor slot(const HostTensor &states, int64_t s, int64_t B) { return gather(states, 3, range(s * B, s * B + B)); }

// Chaining in F64 repeats the one call's arithmetic exactly: the state crosses the split as a
// double, and the second call's ds0 arrives in the first call's carry as 0 + ds0. So the
// results agree to the last bit; the tolerance only leaves room for the ref to reorder sums.
// In F32 the state and its gradient are rounded to float at the split (2^-24 relative), and the
// rounding error is carried through the remaining tokens, which mild gates do not amplify
// (measured: at most 1.1e-7 relative to the largest element).
double chain_tolerance(gdn_type t) { return t == GDN_TYPE_F64 ? 1e-14 : 5e-7; }

TEST(Chaining, ForwardOverT1PlusT2EqualsTwoChainedCalls) {
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32})
        for (bool kda : {false, true})
            for (bool with_state : {true, false})
                for (int64_t T1 : {1, 6, 12}) {
                    SCOPED_TRACE(std::string(type_label(type)) + (kda ? " KDA" : " GDA") + (with_state ? " s0" : " zero s0") +
                                 " T1 = " + std::to_string(T1));
                    const HostProblem p = random_problem(chain_sizes(kda), type, 606, with_state);
                    const int64_t T = p.sizes.T;
                    RefContext ctx;
                    const ForwardResult whole = forward(ctx.get(), p);
                    const ForwardResult first = forward(ctx.get(), token_range(p, 0, T1, p.state));
                    const ForwardResult second = forward(ctx.get(), token_range(p, T1, T, first.states));
                    // The first call is the whole call's prefix: identical arithmetic in either type.
                    EXPECT_SAME_BITS(first.out, tokens(whole.out, 0, T1), "out of the first call");
                    EXPECT_LE(relative_difference(second.out, tokens(whole.out, T1, T)), chain_tolerance(type)) << "out";
                    EXPECT_LE(relative_difference(second.states, whole.states), chain_tolerance(type)) << "final state";
                }
}

TEST(Chaining, BackwardOfChainedCallsEqualsBackwardOfOneCall) {
    // Backward of the second call with the final-state gradient; its ds0 is the gradient of the
    // state between the calls, which becomes the first call's d_states.
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32})
        for (bool kda : {false, true})
            for (bool with_state : {true, false})
                for (int64_t T1 : {1, 6, 12}) {
                    SCOPED_TRACE(std::string(type_label(type)) + (kda ? " KDA" : " GDA") + (with_state ? " s0" : " zero s0") +
                                 " T1 = " + std::to_string(T1));
                    const HostProblem p = random_problem(chain_sizes(kda), type, 707, with_state);
                    const int64_t T = p.sizes.T;
                    RefContext ctx;
                    const ForwardResult whole_fwd = forward(ctx.get(), p);
                    const HostTensor d_out = random_tensor(type, whole_fwd.out.ne(), 17);
                    const HostTensor d_final = random_tensor(type, whole_fwd.states.ne(), 18);
                    const Gradients whole = backward(ctx.get(), p, d_out, d_final);

                    const HostProblem p1 = token_range(p, 0, T1, p.state);
                    const HostProblem p2 = token_range(p, T1, T, forward(ctx.get(), p1).states);
                    const Gradients second = backward(ctx.get(), p2, tokens(d_out, T1, T), d_final);
                    const Gradients first = backward(ctx.get(), p1, tokens(d_out, 0, T1), second.ds0);

                    const double tol = chain_tolerance(type);
                    struct Pair {
                        const char *name;
                        const HostTensor &whole, &first, &second;
                    };
                    for (const Pair &x : {Pair{"dq", whole.dq, first.dq, second.dq}, Pair{"dk", whole.dk, first.dk, second.dk},
                                          Pair{"dv", whole.dv, first.dv, second.dv}, Pair{"dg", whole.dg, first.dg, second.dg},
                                          Pair{"dbeta", whole.dbeta, first.dbeta, second.dbeta}}) {
                        EXPECT_LE(relative_difference(x.first, tokens(x.whole, 0, T1)), tol) << x.name << " of the first tokens";
                        EXPECT_LE(relative_difference(x.second, tokens(x.whole, T1, T)), tol) << x.name << " of the last tokens";
                    }
                    EXPECT_LE(relative_difference(first.ds0, whole.ds0), tol) << "ds0";
                }
}

TEST(Chaining, SplittingIntoSingleTokensChainsToo) {
    // Decoding: one token per call, the state updated in place, equals one prefill call.
    const HostProblem p = random_problem(chain_sizes(true), GDN_TYPE_F64, 808);
    RefContext ctx;
    const ForwardResult whole = forward(ctx.get(), p);
    HostTensor state = p.state;
    for (int64_t t = 0; t < p.sizes.T; ++t) {
        const HostProblem step = token_range(p, t, t + 1, state);
        const gdn_problem view = step.view();
        const HostTensor out(GDN_TYPE_F64, {p.sizes.Sv, p.sizes.Hv, 1, p.sizes.B});
        const gdn_tensor out_view = out.view();
        ASSERT_EQ(gdn_forward(ctx.get(), &view, &out_view, &view.state), GDN_OK) << gdn_last_error(ctx.get());
        state = step.state;  // updated in place
        EXPECT_LE(relative_difference(out, tokens(whole.out, t, t + 1)), 1e-14) << "token " << t;
    }
    EXPECT_LE(relative_difference(state, whole.states), 1e-14);
}

// ---- snapshots ---------------------------------------------------------------------------------

TEST(Snapshots, SlotSEqualsTheFinalStateOfAShorterCall) {
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32})
        for (auto [T, K] : {std::pair<int64_t, int64_t>{7, 4}, {3, 5}, {4, 4}, {1, 3}}) {
            SCOPED_TRACE(std::string(type_label(type)) + " T = " + std::to_string(T) + " K = " + std::to_string(K));
            Sizes s = chain_sizes(T == 7);
            s.T = T;
            const HostProblem p = random_problem(s, type, 909);
            RefContext ctx;
            const ForwardResult f = forward(ctx.get(), p, K);
            const ForwardResult k1 = forward(ctx.get(), p, 1);
            EXPECT_SAME_BITS(f.out, k1.out, "out with K snapshots");
            for (int64_t sl = 0; sl < K; ++sl) {
                const HostTensor got = slot(f.states, sl, s.B);
                if (sl < T) {
                    // The prefix of T - s tokens is the same arithmetic: the same bits.
                    EXPECT_SAME_BITS(got, forward(ctx.get(), token_range(p, 0, T - sl, p.state)).states,
                                     "slot " + std::to_string(sl));
                } else {
                    for (int64_t n = 0; n < got.count(); ++n)
                        ASSERT_TRUE(got.element_is_poison(n)) << "slot " << sl << " >= T was written";
                }
            }
        }
}

TEST(Snapshots, SnapshotGradientsEqualShorterCallGradients) {
    // L = sum over written slots s of dS_s . state_s is a sum of final-state losses of the
    // (T - s)-token prefixes, so its gradients are the sum of those calls' gradients (zero on
    // the tokens a prefix does not have). Slots s >= T are not written: their gradients are ignored.
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32})
        for (auto [T, K] : {std::pair<int64_t, int64_t>{7, 3}, {2, 4}}) {
            SCOPED_TRACE(std::string(type_label(type)) + " T = " + std::to_string(T) + " K = " + std::to_string(K));
            Sizes s = chain_sizes(false);
            s.T = T;
            const HostProblem p = random_problem(s, type, 1010);
            RefContext ctx;
            HostTensor d_states = random_tensor(type, {s.Sk, s.Sv, s.Hv, s.B * K}, 19);
            const Gradients all = backward(ctx.get(), p, HostTensor(), d_states);

            // Sum of the prefixes' gradients, accumulated in double.
            Gradients expected{HostTensor(GDN_TYPE_F64, p.q.ne()),    HostTensor(GDN_TYPE_F64, p.k.ne()),
                               HostTensor(GDN_TYPE_F64, p.v.ne()),    HostTensor(GDN_TYPE_F64, p.g.ne()),
                               HostTensor(GDN_TYPE_F64, p.beta.ne()), HostTensor(GDN_TYPE_F64, p.state.ne())};
            for (HostTensor *t : {&expected.dq, &expected.dk, &expected.dv, &expected.dg, &expected.dbeta, &expected.ds0})
                for (int64_t n = 0; n < t->count(); ++n) t->set(n, 0.0);
            for (int64_t sl = 0; sl < std::min(T, K); ++sl) {
                const HostProblem prefix = token_range(p, 0, T - sl, p.state);
                const Gradients g = backward(ctx.get(), prefix, HostTensor(), slot(d_states, sl, s.B));
                auto add = [](HostTensor &into, const HostTensor &part) {
                    for (int64_t i3 = 0; i3 < part.ne()[3]; ++i3)
                        for (int64_t i2 = 0; i2 < part.ne()[2]; ++i2)
                            for (int64_t i1 = 0; i1 < part.ne()[1]; ++i1)
                                for (int64_t i0 = 0; i0 < part.ne()[0]; ++i0)
                                    into.put(i0, i1, i2, i3, into.at(i0, i1, i2, i3) + part.at(i0, i1, i2, i3));
                };
                add(expected.dq, g.dq);
                add(expected.dk, g.dk);
                add(expected.dv, g.dv);
                add(expected.dg, g.dg);
                add(expected.dbeta, g.dbeta);
                add(expected.ds0, g.ds0);
            }
            // In F32 each prefix's gradient is rounded before the sum: up to K half-ulps.
            const double tol = type == GDN_TYPE_F64 ? 1e-14 : 5e-7;
            auto as_f64 = [](const HostTensor &t) {
                HostTensor r(GDN_TYPE_F64, t.ne());
                for (int64_t n = 0; n < t.count(); ++n) r.set(n, t.get(n));
                return r;
            };
            EXPECT_LE(relative_difference(as_f64(all.dq), expected.dq), tol) << "dq";
            EXPECT_LE(relative_difference(as_f64(all.dk), expected.dk), tol) << "dk";
            EXPECT_LE(relative_difference(as_f64(all.dv), expected.dv), tol) << "dv";
            EXPECT_LE(relative_difference(as_f64(all.dg), expected.dg), tol) << "dg";
            EXPECT_LE(relative_difference(as_f64(all.dbeta), expected.dbeta), tol) << "dbeta";
            EXPECT_LE(relative_difference(as_f64(all.ds0), expected.ds0), tol) << "ds0";

            if (T < K) {
                // Changing the gradients of unwritten slots changes nothing.
                for (int64_t n = d_states.flat(0, 0, 0, T * s.B); n < d_states.count(); ++n) d_states.set(n, 1e3);
                const Gradients again = backward(ctx.get(), p, HostTensor(), d_states);
                EXPECT_SAME_BITS(again.dq, all.dq, "dq");
                EXPECT_SAME_BITS(again.dk, all.dk, "dk");
                EXPECT_SAME_BITS(again.dv, all.dv, "dv");
                EXPECT_SAME_BITS(again.dg, all.dg, "dg");
                EXPECT_SAME_BITS(again.dbeta, all.dbeta, "dbeta");
                EXPECT_SAME_BITS(again.ds0, all.ds0, "ds0");
            }
        }
}

}  // namespace
