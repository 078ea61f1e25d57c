// Empty problems (SPEC sections 2 and 3): T = 0, B = 0, N = 0 and zero-length packed sequences
// compute nothing and pass each initial state through to its final state (forward) and the
// final state's gradient through to the initial state's (backward), on every host backend and
// type; the sequences that have tokens give the bits they give without the empty ones. And the
// scale (SPEC section 2): a double used as given when scale_is_explicit, 0 included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dense_problem.h"

namespace {

using gdn::reliability::Buffer;
using gdn::reliability::DenseProblem;
using gdn::reliability::make_context;
using gdn::reliability::Sizes;

struct Target {
    const char *backend;
    gdn_type type;
};

std::vector<Target> targets() {
    std::vector<Target> t = {{"ref", GDN_TYPE_F64}, {"ref", GDN_TYPE_F32}};
    if (gdn_backend_available("cpu")) t.push_back({"cpu", GDN_TYPE_F32});
    return t;
}

std::string label(const Target &t) { return std::string(t.backend) + (t.type == GDN_TYPE_F64 ? " F64" : " F32"); }

// A bit pattern no computation produces here: outputs that must stay untouched are filled with it.
constexpr double kUntouched = -1234.5;

void fill(Buffer &b, double value) {
    for (int64_t i = 0; i < b.count(); ++i) b.set(i, value);
}

// State n of a [Sk, Sv, Hv, sequences] buffer, as its elements in order.
std::vector<double> state_of(const Buffer &b, int64_t n) {
    const int64_t area = b.ne[0] * b.ne[1] * b.ne[2];
    std::vector<double> r(static_cast<size_t>(area));
    for (int64_t i = 0; i < area; ++i) r[i] = b.get(n * area + i);
    return r;
}

std::vector<double> constant(int64_t count, double value) { return std::vector<double>(static_cast<size_t>(count), value); }

class EmptyProblems : public ::testing::TestWithParam<Target> {
protected:
    gdn_context *ctx_ = nullptr;
    void SetUp() override { ctx_ = make_context(GetParam().backend, 2); }
    void TearDown() override { gdn_context_free(ctx_); }
};

TEST_P(EmptyProblems, NoTokensPassesTheInitialStateThrough) {
    Sizes s;
    s.T = 0, s.B = 2, s.Bq = 2, s.K = 3;
    for (bool with_s0 : {true, false}) {
        SCOPED_TRACE(with_s0 ? "with s0" : "zero initial state");
        DenseProblem p(s, GetParam().type, 7);
        p.with_s0 = with_s0;
        fill(p.states, kUntouched);
        ASSERT_EQ(p.forward(ctx_), GDN_OK) << gdn_last_error(ctx_);
        const int64_t area = s.Sk * s.Sv * s.Hv;
        for (int64_t b = 0; b < s.B; ++b) {
            EXPECT_EQ(state_of(p.states, b), with_s0 ? state_of(p.s0, b) : constant(area, 0.0)) << "final state of sequence " << b;
            for (int64_t slot = 1; slot < s.K; ++slot)  // no token, so no earlier state: left as it was
                EXPECT_EQ(state_of(p.states, slot * s.B + b), constant(area, kUntouched)) << "slot " << slot;
        }

        fill(p.ds0, kUntouched);
        ASSERT_EQ(p.backward(ctx_), GDN_OK) << gdn_last_error(ctx_);
        for (int64_t b = 0; b < s.B; ++b) EXPECT_EQ(state_of(p.ds0, b), state_of(p.d_states, b)) << "ds0 of sequence " << b;
    }
}

TEST_P(EmptyProblems, NoTokensInPlaceAndWithoutStateGradients) {
    Sizes s;
    s.T = 0;
    DenseProblem p(s, GetParam().type, 8);
    const Buffer before = p.s0;
    gdn_problem prob = p.problem();
    const gdn_tensor state = prob.state;
    ASSERT_EQ(gdn_forward(ctx_, &prob, nullptr, &state), GDN_OK) << gdn_last_error(ctx_);
    EXPECT_TRUE(p.s0.same_bits(before));

    fill(p.ds0, kUntouched);
    const gdn_grads grads = p.grads();
    ASSERT_EQ(gdn_backward(ctx_, &prob, nullptr, nullptr, &grads), GDN_OK) << gdn_last_error(ctx_);
    EXPECT_EQ(state_of(p.ds0, 0), constant(s.Sk * s.Sv * s.Hv, 0.0)) << "no state gradient given: ds0 = 0";
}

TEST_P(EmptyProblems, NoSequencesWritesNothing) {
    Sizes s;
    s.B = 0, s.Bq = 0, s.T = 5;
    DenseProblem p(s, GetParam().type, 9);
    EXPECT_EQ(p.states.count(), 0);
    EXPECT_EQ(p.forward(ctx_), GDN_OK) << gdn_last_error(ctx_);
    EXPECT_EQ(p.backward(ctx_), GDN_OK) << gdn_last_error(ctx_);
    // Packed: N = 0 sequences, cu_seqlens = {0}, no tokens.
    Sizes none;
    none.T = 0;
    DenseProblem packed(none, GetParam().type, 10);
    const int32_t offsets[1] = {0};
    gdn_problem prob = packed.problem();
    prob.state = {};
    prob.state.type = GetParam().type;
    prob.cu_seqlens = {const_cast<int32_t *>(offsets), GDN_TYPE_I32, {1, 1, 1, 1}, {4, 4, 4, 4}};
    Buffer states(GetParam().type, s.Sk, s.Sv, s.Hv, 0);
    const gdn_tensor st = states.tensor();
    EXPECT_EQ(gdn_forward(ctx_, &prob, nullptr, &st), GDN_OK) << gdn_last_error(ctx_);
}

// Offsets {0, 0, 5, 5, 12, 12}: sequences 0, 2 and 4 are empty (first, inner, last), 1 and 3
// are tokens [0, 5) and [5, 12). The same tokens packed as {0, 5, 12} are the reference.
TEST_P(EmptyProblems, PackedEmptySequences) {
    const gdn_type type = GetParam().type;
    Sizes s;
    s.T = 12, s.K = 2;
    DenseProblem p(s, type, 11);
    const int64_t with_empty[] = {0, 0, 5, 5, 12, 12}, without[] = {0, 5, 12};
    const int64_t N = 5, full[] = {1, 3};  // the sequences with tokens, in order
    const int64_t area = s.Sk * s.Sv * s.Hv;

    auto offsets_tensor = [](const int64_t *o, int64_t count) {
        return gdn_tensor{const_cast<int64_t *>(o), GDN_TYPE_I64, {count, 1, 1, 1}, {8, 8 * count, 8 * count, 8 * count}};
    };
    // Initial states and state gradients per sequence: the reference's are those of 1 and 3.
    Buffer s0(type, s.Sk, s.Sv, s.Hv, N), d_states(type, s.Sk, s.Sv, s.Hv, N * s.K);
    for (int64_t i = 0; i < s0.count(); ++i) s0.set(i, std::sin(0.37 * static_cast<double>(i)));
    for (int64_t i = 0; i < d_states.count(); ++i) d_states.set(i, std::cos(0.11 * static_cast<double>(i)));
    Buffer s0_ref(type, s.Sk, s.Sv, s.Hv, 2), d_states_ref(type, s.Sk, s.Sv, s.Hv, 2 * s.K);
    for (int64_t j = 0; j < 2; ++j) {
        for (int64_t i = 0; i < area; ++i) s0_ref.set(j * area + i, s0.get(full[j] * area + i));
        for (int64_t slot = 0; slot < s.K; ++slot)
            for (int64_t i = 0; i < area; ++i) d_states_ref.set((slot * 2 + j) * area + i, d_states.get((slot * N + full[j]) * area + i));
    }

    gdn_problem prob = p.problem(), ref = p.problem();
    prob.state = s0.tensor();
    prob.cu_seqlens = offsets_tensor(with_empty, N + 1);
    ref.state = s0_ref.tensor();
    ref.cu_seqlens = offsets_tensor(without, 3);

    // Forward.
    Buffer out(type, s.Sv, s.Hv, s.T, 1), out_ref = out, states(type, s.Sk, s.Sv, s.Hv, N * s.K), states_ref(type, s.Sk, s.Sv, s.Hv, 2 * s.K);
    fill(states, kUntouched);
    gdn_tensor o = out.tensor(), st = states.tensor(), o_ref = out_ref.tensor(), st_ref = states_ref.tensor();
    ASSERT_EQ(gdn_forward(ctx_, &prob, &o, &st), GDN_OK) << gdn_last_error(ctx_);
    ASSERT_EQ(gdn_forward(ctx_, &ref, &o_ref, &st_ref), GDN_OK) << gdn_last_error(ctx_);
    EXPECT_TRUE(out.same_bits(out_ref));
    for (int64_t n : {0, 2, 4}) {
        EXPECT_EQ(state_of(states, n), state_of(s0, n)) << "final state of empty sequence " << n;
        EXPECT_EQ(state_of(states, N + n), constant(area, kUntouched)) << "slot 1 of empty sequence " << n;
    }
    for (int64_t j = 0; j < 2; ++j)
        for (int64_t slot = 0; slot < s.K; ++slot)
            EXPECT_EQ(state_of(states, slot * N + full[j]), state_of(states_ref, slot * 2 + j)) << "sequence " << full[j] << " slot " << slot;

    // Backward.
    DenseProblem g(s, type, 12), g_ref(s, type, 12);
    g.ds0 = Buffer(type, s.Sk, s.Sv, s.Hv, N);
    g_ref.ds0 = Buffer(type, s.Sk, s.Sv, s.Hv, 2);
    fill(g.ds0, kUntouched);
    const gdn_tensor d_o = p.d_out.tensor(), d_s = d_states.tensor(), d_s_ref = d_states_ref.tensor();
    const gdn_grads grads = g.grads(), grads_ref = g_ref.grads();
    ASSERT_EQ(gdn_backward(ctx_, &prob, &d_o, &d_s, &grads), GDN_OK) << gdn_last_error(ctx_);
    ASSERT_EQ(gdn_backward(ctx_, &ref, &d_o, &d_s_ref, &grads_ref), GDN_OK) << gdn_last_error(ctx_);
    EXPECT_TRUE(g.dq.same_bits(g_ref.dq));
    EXPECT_TRUE(g.dk.same_bits(g_ref.dk));
    EXPECT_TRUE(g.dv.same_bits(g_ref.dv));
    EXPECT_TRUE(g.dg.same_bits(g_ref.dg));
    EXPECT_TRUE(g.dbeta.same_bits(g_ref.dbeta));
    for (int64_t n : {0, 2, 4}) EXPECT_EQ(state_of(g.ds0, n), state_of(d_states, n)) << "ds0 of empty sequence " << n;
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(state_of(g.ds0, full[j]), state_of(g_ref.ds0, j)) << "ds0 of sequence " << full[j];
}

TEST_P(EmptyProblems, EmptyButInvalidIsStillRefused) {
    Sizes s;
    s.T = 0;
    DenseProblem p(s, GetParam().type, 13);
    struct Bad {
        const char *what;
        void (*poke)(gdn_problem &);
        gdn_status status;
        const char *message;
    };
    const Bad cases[] = {
        {"negative tokens", [](gdn_problem &q) { q.q.ne[2] = q.k.ne[2] = -1; }, GDN_ERROR_SHAPE, "q.ne[2] = -1"},
        {"no key channels", [](gdn_problem &q) { q.q.ne[0] = q.k.ne[0] = 0; }, GDN_ERROR_SHAPE, "head sizes and head counts"},
        {"no value heads", [](gdn_problem &q) { q.v.ne[1] = 0; }, GDN_ERROR_SHAPE, "v.ne[1] = 0"},
        {"q/k sequences without sequences", [](gdn_problem &q) { q.v.ne[3] = q.g.ne[3] = q.beta.ne[3] = 0; }, GDN_ERROR_SHAPE,
         "with no sequences there are no q/k sequences"},
    };
    for (const Bad &b : cases) {
        SCOPED_TRACE(b.what);
        gdn_problem prob = p.problem();
        b.poke(prob);
        fill(p.states, kUntouched);
        const gdn_tensor st = p.states.tensor();
        EXPECT_EQ(gdn_forward(ctx_, &prob, nullptr, &st), b.status);
        EXPECT_NE(std::string(gdn_last_error(ctx_)).find(b.message), std::string::npos) << gdn_last_error(ctx_);
        EXPECT_EQ(state_of(p.states, 0), constant(s.Sk * s.Sv * s.Hv, kUntouched)) << "a refused call writes nothing";
    }
    // A NULL pointer is fine for an input with no elements (torch's empty tensors have one), not
    // for one with elements.
    gdn_problem prob = p.problem();
    ASSERT_EQ(prob.v.data, nullptr);
    EXPECT_EQ(gdn_check_forward(ctx_, &prob, nullptr, nullptr), GDN_OK) << gdn_last_error(ctx_);
    Sizes some;
    some.T = 3;
    DenseProblem with_tokens(some, GetParam().type, 14);
    prob = with_tokens.problem();
    prob.v.data = nullptr;
    EXPECT_EQ(gdn_check_forward(ctx_, &prob, nullptr, nullptr), GDN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(gdn_last_error(ctx_)).find("v.data is NULL"), std::string::npos) << gdn_last_error(ctx_);
}

INSTANTIATE_TEST_SUITE_P(Backends, EmptyProblems, ::testing::ValuesIn(targets()),
                         [](const auto &info) { return std::string(info.param.backend) + (info.param.type == GDN_TYPE_F64 ? "_F64" : "_F32"); });

// The output is linear in the scale: out(c) = c * out(1) element by element. In F64 on ref this
// holds to the last bits only if the scale reaches the arithmetic as a double: a scale rounded
// to float on the way (0.1 -> 0.100000001490116) is off by 1.5e-8 relative.
TEST(Scale, IsADoubleUsedAsGiven) {
    Sizes s;
    s.T = 9;
    gdn_context *ctx = make_context("ref");
    DenseProblem p(s, GDN_TYPE_F64, 21);
    auto output = [&](double scale, bool explicit_scale) {
        gdn_problem prob = p.problem();
        prob.scale = scale;
        prob.scale_is_explicit = explicit_scale ? 1 : 0;
        Buffer out(GDN_TYPE_F64, s.Sv, s.Hv, s.T, s.B), states(GDN_TYPE_F64, s.Sk, s.Sv, s.Hv, s.B);
        const gdn_tensor o = out.tensor(), st = states.tensor();
        EXPECT_EQ(gdn_forward(ctx, &prob, &o, &st), GDN_OK) << gdn_last_error(ctx);
        return std::make_pair(out, states);
    };
    const auto [unit, unit_states] = output(1.0, false);
    const auto [tenth, tenth_states] = output(0.1, false);
    double worst = 0;
    for (int64_t i = 0; i < unit.count(); ++i)
        if (unit.get(i) != 0) worst = std::max(worst, std::abs(tenth.get(i) / (0.1 * unit.get(i)) - 1));
    EXPECT_LT(worst, 1e-13) << "scale 0.1 did not reach the F64 arithmetic as a double";

    // 0 with scale_is_explicit: a zero output and the states of any other scale.
    const auto [zero, zero_states] = output(0.0, true);
    for (int64_t i = 0; i < zero.count(); ++i) ASSERT_EQ(zero.get(i), 0.0) << "element " << i;
    EXPECT_TRUE(zero_states.same_bits(unit_states));
    // 0 without it: the default 1/sqrt(Sk), the same bits as passing that value.
    const auto [by_default, by_default_states] = output(0.0, false);
    const auto [given, given_states] = output(1.0 / std::sqrt(static_cast<double>(s.Sk)), true);
    EXPECT_TRUE(by_default.same_bits(given));
    EXPECT_FALSE(by_default.same_bits(zero));
    gdn_context_free(ctx);
}

// An F32 call computes with a float scale (cpu, cuda): a double past FLT_MAX is refused by name
// rather than turned into inf by one backend and not by another; F64 takes it.
TEST(Scale, PastFloatIsRefusedForF32) {
    Sizes s;
    gdn_context *ctx = make_context("ref");
    for (gdn_type type : {GDN_TYPE_F32, GDN_TYPE_F64}) {
        DenseProblem p(s, type, 22);
        gdn_problem prob = p.problem();
        prob.scale = 1e39;
        const gdn_status status = gdn_check_forward(ctx, &prob, nullptr, nullptr);
        if (type == GDN_TYPE_F64) {
            EXPECT_EQ(status, GDN_OK) << gdn_last_error(ctx);
        } else {
            EXPECT_EQ(status, GDN_ERROR_INVALID_ARGUMENT);
            EXPECT_NE(std::string(gdn_last_error(ctx)).find("scale = 1e+39"), std::string::npos) << gdn_last_error(ctx);
        }
    }
    gdn_context_free(ctx);
}

}  // namespace
