// The ref backend with BF16 and F16 tensors (SPEC 3.1): it converts each element to double as it
// reads it and rounds each result once to its tensor's type, so a call on half-precision tensors
// gives exactly the bits of the F64 call on the same (converted) values, each result then rounded
// once: outputs to their tensor's type, states to F32.
#include <gtest/gtest.h>

#include <string>

#include "host_problem.h"

namespace gdn::reftest {
namespace {

struct Mix {
    const char *name;
    gdn_type data, beta, gate;  // q/k/v/out and their gradients; beta; g
};

const Mix kMixes[] = {
    {"bf16", GDN_TYPE_BF16, GDN_TYPE_BF16, GDN_TYPE_BF16},
    {"bf16_f32_gates", GDN_TYPE_BF16, GDN_TYPE_F32, GDN_TYPE_F32},
    {"f16", GDN_TYPE_F16, GDN_TYPE_F16, GDN_TYPE_F32},
    {"f16_bf16_g", GDN_TYPE_F16, GDN_TYPE_F32, GDN_TYPE_BF16},
    {"f32_bf16_g", GDN_TYPE_F32, GDN_TYPE_F32, GDN_TYPE_BF16},
};

HostProblem with_types(const HostProblem &p, const Mix &m) {
    HostProblem r = p;
    r.q = retyped(p.q, m.data);
    r.k = retyped(p.k, m.data);
    r.v = retyped(p.v, m.data);
    r.beta = retyped(p.beta, m.beta);
    r.g = retyped(p.g, m.gate);
    r.state = retyped(p.state, GDN_TYPE_F32);
    return r;
}

HostProblem as_f64(const HostProblem &p) {
    HostProblem r = p;
    for (HostTensor *t : {&r.q, &r.k, &r.v, &r.beta, &r.g, &r.state}) *t = retyped(*t, GDN_TYPE_F64);
    return r;
}

void expect_rounded_once(const HostTensor &half, const HostTensor &exact, const char *what) {
    EXPECT_TRUE(same_bits(half, retyped(exact, half.type()))) << what << ": not the F64 result rounded once";
}

class RefHalfTypes : public ::testing::TestWithParam<std::tuple<Mix, bool>> {};

TEST_P(RefHalfTypes, EqualTheF64CallOnTheSameValuesRoundedOnce) {
    const auto [mix, kda] = GetParam();
    Sizes s;
    s.Sk = 8, s.Sv = 6, s.Hk = 2, s.Hv = 4, s.T = 11, s.B = 2, s.Bq = 2, s.kda = kda, s.heads = GDN_HEAD_MAP_GROUPED;
    const HostProblem half = with_types(random_problem(s, GDN_TYPE_F64, 7), mix);
    const HostProblem exact = as_f64(half);
    RefContext ctx;

    const int64_t K = 3;
    const ForwardResult fh = forward(ctx.get(), half, K), fe = forward(ctx.get(), exact, K);
    expect_rounded_once(fh.out, fe.out, "out");
    expect_rounded_once(fh.states, fe.states, "states");

    const HostTensor d_out = retyped(random_tensor(GDN_TYPE_F64, {s.Sv, s.Hv, s.T, s.B}, 11), mix.data);
    const HostTensor d_states = retyped(random_tensor(GDN_TYPE_F64, {s.Sk, s.Sv, s.Hv, s.B}, 12), GDN_TYPE_F32);
    const Gradients gh = backward(ctx.get(), half, d_out, d_states);
    const Gradients ge = backward(ctx.get(), exact, retyped(d_out, GDN_TYPE_F64), retyped(d_states, GDN_TYPE_F64));
    expect_rounded_once(gh.dq, ge.dq, "dq");
    expect_rounded_once(gh.dk, ge.dk, "dk");
    expect_rounded_once(gh.dv, ge.dv, "dv");
    expect_rounded_once(gh.dg, ge.dg, "dg");
    expect_rounded_once(gh.dbeta, ge.dbeta, "dbeta");
    expect_rounded_once(gh.ds0, ge.ds0, "ds0");
    // The rounding is visible (the test would pass trivially if everything were F32 underneath).
    if (mix.data != GDN_TYPE_F32) EXPECT_FALSE(same_bits(retyped(fh.out, GDN_TYPE_F64), fe.out));
}

INSTANTIATE_TEST_SUITE_P(Ref, RefHalfTypes, ::testing::Combine(::testing::ValuesIn(kMixes), ::testing::Bool()),
                         [](const auto &info) {
                             return std::string(std::get<0>(info.param).name) + (std::get<1>(info.param) ? "_kda" : "_gda");
                         });

}  // namespace
}  // namespace gdn::reftest
