// Context parallel through the C API, on the ref (F64 and F32 calls) and cpu backends: a sequence cut into 2 to 8
// token ranges, each computed on its own from a zero state, then combined, gives the call over
// the whole sequence (docs/SPEC.md, "A token range's summary").
//
// A range takes the state S it starts from to M S + E, and its outputs are o|zero + P S. One
// call with the value dimension widened by Sk gives all four: values [v | 0] from the state
// [0 | I] end in [E | M] and output [o|zero | P]. The backward of a range from its true start
// state and the true gradient at its end gives the whole call's gradients on its tokens, and
// the gradient at its start is P^T dO + M^T dS_end (what the ranks exchange). The widened call's
// two halves are plain calls of their own, with the same bits.
#include <gtest/gtest.h>

#include <cctype>
#include <utility>
#include <string>
#include <vector>

#include "host_problem.h"

namespace {

using namespace gdn::reftest;

HostTensor tokens(const HostTensor &t, int64_t t0, int64_t t1) { return gather(t, 2, range(t0, t1)); }

// A range's summary, read out of its widened call.
struct Summary {
    HostTensor E, M;      // [Sk, Sv, Hv, B], [Sk, Sk, Hv, B]: M[i][m] at (i, m)
    HostTensor o_zero, P;  // [Sv, Hv, T, B], [Sk, Hv, T, B]
};

Summary summarize(gdn_context *ctx, const HostProblem &range_problem) {
    const Sizes &s = range_problem.sizes;
    const gdn_type type = range_problem.q.type(), st = state_type(type);
    HostProblem wide = range_problem;
    wide.sizes.Sv = s.Sv + s.Sk;
    wide.v = HostTensor(type, {s.Sv + s.Sk, s.Hv, s.T, s.B});
    wide.state = HostTensor(st, {s.Sk, s.Sv + s.Sk, s.Hv, s.B});
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.Hv; ++h) {
            for (int64_t t = 0; t < s.T; ++t)
                for (int64_t j = 0; j < s.Sv + s.Sk; ++j) wide.v.put(j, h, t, b, j < s.Sv ? range_problem.v.at(j, h, t, b) : 0.0);
            for (int64_t i = 0; i < s.Sk; ++i)
                for (int64_t j = 0; j < s.Sv + s.Sk; ++j) wide.state.put(i, j, h, b, j == s.Sv + i ? 1.0 : 0.0);
        }
    const ForwardResult f = forward(ctx, wide);
    return {gather(f.states, 1, range(0, s.Sv)), gather(f.states, 1, range(s.Sv, s.Sv + s.Sk)),
            gather(f.out, 0, range(0, s.Sv)), gather(f.out, 0, range(s.Sv, s.Sv + s.Sk))};
}

// A S + B per head and sequence: A [n, m, Hv, B] (A[i][m] at (i, m)), S [m, Sv, Hv, B]; in double.
// Transposed: A^T S.
HostTensor apply(const HostTensor &A, const HostTensor &S, const HostTensor *plus, bool transposed = false) {
    const Extents &a = A.ne(), &x = S.ne();
    HostTensor r(S.type(), {transposed ? a[1] : a[0], x[1], x[2], x[3]});
    for (int64_t b = 0; b < x[3]; ++b)
        for (int64_t h = 0; h < x[2]; ++h)
            for (int64_t i = 0; i < r.ne()[0]; ++i)
                for (int64_t j = 0; j < x[1]; ++j) {
                    double sum = plus ? plus->at(i, j, h, b) : 0.0;
                    for (int64_t m = 0; m < x[0]; ++m) sum += (transposed ? A.at(m, i, h, b) : A.at(i, m, h, b)) * S.at(m, j, h, b);
                    r.put(i, j, h, b, sum);
                }
    return r;
}

// out[j, h, t] = o_zero[j, h, t] + sum_m P[m, h, t] S[m, j, h].
HostTensor outputs(const Summary &s, const HostTensor &S) {
    HostTensor r(s.o_zero.type(), s.o_zero.ne());
    const Extents &ne = r.ne();
    for (int64_t b = 0; b < ne[3]; ++b)
        for (int64_t t = 0; t < ne[2]; ++t)
            for (int64_t h = 0; h < ne[1]; ++h)
                for (int64_t j = 0; j < ne[0]; ++j) {
                    double sum = s.o_zero.at(j, h, t, b);
                    for (int64_t m = 0; m < s.P.ne()[0]; ++m) sum += s.P.at(m, h, t, b) * S.at(m, j, h, b);
                    r.put(j, h, t, b, sum);
                }
    return r;
}

// sum_t P[:, h, t]^T dO[:, h, t] + M^T dS_end: the gradient of a range's start state.
HostTensor start_gradient(const Summary &s, const HostTensor &d_out, const HostTensor &d_end) {
    HostTensor r = apply(s.M, d_end, nullptr, true);
    const Extents &ne = d_out.ne();
    for (int64_t b = 0; b < ne[3]; ++b)
        for (int64_t h = 0; h < ne[1]; ++h)
            for (int64_t i = 0; i < s.P.ne()[0]; ++i)
                for (int64_t j = 0; j < ne[0]; ++j) {
                    double sum = r.at(i, j, h, b);
                    for (int64_t t = 0; t < ne[2]; ++t) sum += s.P.at(i, h, t, b) * d_out.at(j, h, t, b);
                    r.put(i, j, h, b, sum);
                }
    return r;
}

struct Split {
    const char *backend;
    gdn_type type;
    bool kda, strong;
    std::vector<int64_t> cuts;  // range boundaries, 0 and T included
};

std::string label(const Split &c) {
    std::string s = std::string(c.backend) + (c.type == GDN_TYPE_F64 ? " F64" : " F32") + (c.kda ? " KDA" : " GDA") +
                    (c.strong ? " strong" : " mild") + " cuts";
    for (int64_t t : c.cuts) s += " " + std::to_string(t);
    return s;
}

HostProblem problem_for(const Split &c, gdn_type type) {
    Sizes s;
    s.Sk = 8;
    s.Sv = 6;
    s.Hk = 2;
    s.Hv = 4;
    s.T = c.cuts.back();
    s.B = s.Bq = 2;
    s.kda = c.kda;
    HostProblem p = random_problem(s, type, 4242);
    if (c.strong)  // [-3, -0.2]: a range's transition shrinks by e^-0.2 to e^-3 a token
        for (int64_t n = 0; n < p.g.count(); ++n) p.g.set(n, 10.0 * p.g.get(n));
    return p;
}

// F64: the split reorders sums only, so it agrees with the whole call to rounding (1e-12 of the
// largest element). F32: the split result is held to the F64 truth, within twice the whole F32
// call's own error plus 1e-6 (about 16 roundings of 2^-24: the state rounded at every cut, the
// summary's own rounding, carried through the ranges after it). Measured: at most 2.1e-7, 4x
// the whole call's error where that was smallest.
void expect_close(const HostTensor &split, const HostTensor &whole, const HostTensor &truth, gdn_type type,
                  const std::string &what) {
    if (type == GDN_TYPE_F64) {
        EXPECT_LE(relative_difference(split, whole), 1e-12) << what;
    } else {
        const double whole_error = relative_difference(whole, truth);
        EXPECT_LE(relative_difference(split, truth), 2 * whole_error + 1e-6) << what << " (the whole call's error "
                                                                            << whole_error << ")";
    }
}

class RangeSummary : public testing::TestWithParam<Split> {};

TEST_P(RangeSummary, SplitForwardAndBackwardEqualTheWholeCall) {
    const Split &c = GetParam();
    BackendContext ctx(c.backend);
    RefContext ref;
    const HostProblem p = problem_for(c, c.type);
    const HostProblem truth_problem = problem_for(c, GDN_TYPE_F64);
    const ForwardResult whole = forward(ctx.get(), p);
    const ForwardResult truth = forward(ref.get(), truth_problem);
    const HostTensor d_out = random_tensor(c.type, whole.out.ne(), 51);
    const HostTensor d_final = random_tensor(c.type, whole.states.ne(), 52);
    const Gradients whole_grads = backward(ctx.get(), p, d_out, d_final);
    const Gradients truth_grads = backward(ref.get(), truth_problem, retyped(d_out, GDN_TYPE_F64), retyped(d_final, GDN_TYPE_F64));

    // Forward: each range summarised from zero, on its own; then the states combined in order.
    const size_t ranges = c.cuts.size() - 1;
    std::vector<HostProblem> parts;
    std::vector<Summary> summaries;
    for (size_t r = 0; r < ranges; ++r) {
        parts.push_back(token_range(p, c.cuts[r], c.cuts[r + 1], HostTensor()));
        summaries.push_back(summarize(ctx.get(), parts.back()));
    }
    std::vector<HostTensor> starts{p.state};
    for (size_t r = 0; r < ranges; ++r) {
        const std::string where = label(c) + ", range " + std::to_string(r);
        const HostTensor &S = starts.back();
        expect_close(outputs(summaries[r], S), tokens(whole.out, c.cuts[r], c.cuts[r + 1]),
                     tokens(truth.out, c.cuts[r], c.cuts[r + 1]), c.type, where + ": out");
        starts.push_back(apply(summaries[r].M, S, &summaries[r].E));
    }
    expect_close(starts.back(), whole.states, truth.states, c.type, label(c) + ": final state");

    // Backward: the gradient at each range's end, from the ranges after it; then each range's
    // plain backward from its true start state.
    std::vector<HostTensor> ends(ranges);
    ends[ranges - 1] = d_final;
    for (size_t r = ranges - 1; r > 0; --r)
        ends[r - 1] = start_gradient(summaries[r], tokens(d_out, c.cuts[r], c.cuts[r + 1]), ends[r]);
    for (size_t r = 0; r < ranges; ++r) {
        const std::string where = label(c) + ", range " + std::to_string(r);
        HostProblem part = parts[r];
        part.state = retyped(starts[r], state_type(c.type));
        const int64_t t0 = c.cuts[r], t1 = c.cuts[r + 1];
        const Gradients g = backward(ctx.get(), part, tokens(d_out, t0, t1), retyped(ends[r], state_type(c.type)));
        expect_close(g.dq, tokens(whole_grads.dq, t0, t1), tokens(truth_grads.dq, t0, t1), c.type, where + ": dq");
        expect_close(g.dk, tokens(whole_grads.dk, t0, t1), tokens(truth_grads.dk, t0, t1), c.type, where + ": dk");
        expect_close(g.dv, tokens(whole_grads.dv, t0, t1), tokens(truth_grads.dv, t0, t1), c.type, where + ": dv");
        expect_close(g.dg, tokens(whole_grads.dg, t0, t1), tokens(truth_grads.dg, t0, t1), c.type, where + ": dg");
        expect_close(g.dbeta, tokens(whole_grads.dbeta, t0, t1), tokens(truth_grads.dbeta, t0, t1), c.type,
                     where + ": dbeta");
        // The range's own start gradient is what the summaries give (the exchange's premise).
        const HostTensor exchanged = start_gradient(summaries[r], tokens(d_out, t0, t1), ends[r]);
        if (r == 0)
            expect_close(g.ds0, whole_grads.ds0, truth_grads.ds0, c.type, where + ": ds0");
        if (c.type == GDN_TYPE_F64)
            EXPECT_LE(relative_difference(exchanged, g.ds0), 1e-12) << where << ": P^T dO + M^T dS_end";
    }
}

// The summary's halves as calls of their own: the values from zero give o|zero and E; values of
// zero from the identity give P and M, the zeros one buffer read through overlapping strides
// (SPEC section 3: inputs may overlap themselves). Value channels never mix, so each half has
// the widened call's bits, on ref and on cpu, with the chunked and the per-token forms.
TEST(RangeSummaryHalves, PlainCallsGiveTheWidenedCallsBits) {
    const std::pair<const char *, gdn_type> calls[] = {{"ref", GDN_TYPE_F64}, {"ref", GDN_TYPE_F32}, {"cpu", GDN_TYPE_F32}};
    for (const auto &[backend, type] : calls)
        for (bool kda : {false, true})
            for (int64_t T : {5, 40}) {
                const Split c{backend, type, kda, false, {0, T}};
                SCOPED_TRACE(label(c));
                BackendContext ctx(backend);
                const HostProblem p = problem_for(c, type);
                const Sizes &s = p.sizes;
                const Summary wide = summarize(ctx.get(), token_range(p, 0, T, HostTensor()));

                const ForwardResult from_zero = forward(ctx.get(), token_range(p, 0, T, HostTensor()));
                EXPECT_TRUE(same_bits(from_zero.out, wide.o_zero));
                EXPECT_TRUE(same_bits(from_zero.states, wide.E));

                HostProblem identity = token_range(p, 0, T, HostTensor());
                identity.sizes.Sv = s.Sk;
                identity.state = HostTensor(state_type(type), {s.Sk, s.Sk, s.Hv, s.B});
                for (int64_t b = 0; b < s.B; ++b)
                    for (int64_t h = 0; h < s.Hv; ++h)
                        for (int64_t i = 0; i < s.Sk; ++i)
                            for (int64_t j = 0; j < s.Sk; ++j) identity.state.put(i, j, h, b, i == j ? 1.0 : 0.0);
                HostTensor zeros(type, {s.Sk + s.Hv + T + s.B, 1, 1, 1});
                for (int64_t i = 0; i < zeros.count(); ++i) zeros.set(i, 0.0);
                gdn_problem problem = identity.view();
                problem.v = zeros.view();
                const int64_t element = problem.v.nb[0];
                for (int d = 0; d < 4; ++d) problem.v.nb[d] = element;  // (i, h, t, b) at i + h + t + b
                problem.v.ne[0] = s.Sk, problem.v.ne[1] = s.Hv, problem.v.ne[2] = T, problem.v.ne[3] = s.B;
                HostTensor P(type, {s.Sk, s.Hv, T, s.B}), M(state_type(type), {s.Sk, s.Sk, s.Hv, s.B});
                const gdn_tensor P_view = P.view(), M_view = M.view();
                ASSERT_EQ(gdn_forward(ctx.get(), &problem, &P_view, &M_view), GDN_OK) << gdn_last_error(ctx.get());
                EXPECT_TRUE(same_bits(P, wide.P));
                EXPECT_TRUE(same_bits(M, wide.M));
            }
}

std::vector<Split> splits() {
    std::vector<Split> all;
    const std::vector<std::vector<int64_t>> cuts = {{0, 19, 40}, {0, 7, 20, 40}, {0, 1, 9, 17, 40},
                                                    {0, 5, 10, 15, 20, 25, 30, 35, 40}};
    const std::pair<const char *, gdn_type> calls[] = {{"ref", GDN_TYPE_F64}, {"ref", GDN_TYPE_F32}, {"cpu", GDN_TYPE_F32}};
    for (const auto &[backend, type] : calls)
        for (bool kda : {false, true})
            for (bool strong : {false, true})
                for (const auto &c : cuts) all.push_back({backend, type, kda, strong, c});
    return all;
}

INSTANTIATE_TEST_SUITE_P(Ranges, RangeSummary, testing::ValuesIn(splits()), [](const auto &info) {
    std::string s = label(info.param);
    for (char &ch : s)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return s;
});

}  // namespace
