// Very long sequences (issue 5.3): T = 1,000,000 tokens at Sk = Sv = 2 run forward and backward
// in bounded memory (the library's workspace, and the rise of the process's peak resident set
// during the call, stay under half the bytes of the caller's own inputs q, k, v, g, beta: ref
// needs ~64 KiB here, a chunked backend O(T / chunk) states), and correctly: the one-shot call equals the same
// sequence cut into pieces chained through the state (forward: states -> s0; backward: ds0 of
// the later piece -> d_states of the earlier one). On ref in F64 the two are the same
// arithmetic, so they agree bit for bit; a chunked backend (cpu, F32) agrees to rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "dense_problem.h"

namespace gdn::reliability {
namespace {

constexpr int64_t kTokens = 1000000;

// Peak resident set since the last reset, in bytes; -1 when /proc does not tell.
int64_t peak_resident() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
    return -1;
}

// Resets VmHWM to the current resident set (Linux >= 4.0); false when not allowed.
bool reset_peak() {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    return static_cast<bool>(clear.flush());
}

// Bytes of the caller's inputs q, k, v, g, beta.
int64_t input_bytes(const DenseProblem &p) {
    const int64_t elem = p.type == GDN_TYPE_F64 ? 8 : 4;
    return elem * (p.q.count() + p.k.count() + p.v.count() + p.g.count() + p.beta.count());
}

Sizes long_shape(int64_t T) {
    Sizes s;
    s.Sk = s.Sv = 2;
    s.Hk = s.Hv = 1;
    s.B = s.Bq = 1;
    s.T = T;
    return s;
}

// Tokens [t0, t1) of p as a problem of their own (Hk = Hv = B = 1).
DenseProblem slice(const DenseProblem &p, int64_t t0, int64_t t1) {
    DenseProblem part(long_shape(t1 - t0), p.type, 0);
    const auto copy = [&](const Buffer &from, Buffer &to) {
        const int64_t row = from.ne[0];
        for (int64_t i = 0; i < row * (t1 - t0); ++i) to.set(i, from.get(t0 * row + i));
    };
    copy(p.q, part.q);
    copy(p.k, part.k);
    copy(p.v, part.v);
    copy(p.g, part.g);
    copy(p.beta, part.beta);
    copy(p.d_out, part.d_out);
    for (int64_t i = 0; i < part.d_states.count(); ++i) part.d_states.set(i, 0.0);
    return part;
}

// `got` holds tokens [t0, t0 + part.T) of `whole`.
void expect_rows(const Buffer &whole, const Buffer &part, int64_t t0, bool exact, const char *what) {
    const int64_t row = whole.ne[0];
    int64_t mismatches = 0;
    double worst = 0;
    for (int64_t i = 0; i < part.count(); ++i) {
        const double a = part.get(i), b = whole.get(t0 * row + i);
        if (exact ? a != b : std::fabs(a - b) > 1e-4 * (1 + std::fabs(b))) ++mismatches;
        worst = std::fmax(worst, std::fabs(a - b));
    }
    EXPECT_EQ(mismatches, 0) << what << " at offset " << t0 << ": worst difference " << worst;
}

void expect_same(const Buffer &a, const Buffer &b, bool exact, const char *what) {
    for (int64_t i = 0; i < a.count(); ++i) {
        if (exact) EXPECT_EQ(a.get(i), b.get(i)) << what << "[" << i << "]";
        else EXPECT_NEAR(a.get(i), b.get(i), 1e-4 * (1 + std::fabs(b.get(i)))) << what << "[" << i << "]";
    }
}

class LongSequence : public ::testing::TestWithParam<const char *> {
protected:
    bool ref() const { return std::string(GetParam()) == "ref"; }
    gdn_type type() const { return ref() ? GDN_TYPE_F64 : GDN_TYPE_F32; }

    // Runs `call` and returns how far the peak resident set rose above the resident set before.
    template <class Call>
    int64_t peak_growth(Call &&call) {
        if (!reset_peak()) return -1;
        const int64_t before = peak_resident();
        call();
        return peak_resident() - before;
    }
};

TEST_P(LongSequence, ForwardOfAMillionTokensMatchesChainedPiecesInBoundedMemory) {
    DenseProblem whole(long_shape(kTokens), type(), 5);
    gdn_context *ctx = make_context(GetParam());
    const int64_t growth = peak_growth([&] { ASSERT_EQ(whole.forward(ctx), GDN_OK) << gdn_last_error(ctx); });
    const int64_t bound = input_bytes(whole) / 2;
    if (growth >= 0) EXPECT_LT(growth, bound) << "the forward's peak memory grew by " << growth << " bytes";
    EXPECT_LT(static_cast<int64_t>(gdn_context_workspace_bytes(ctx)), bound);
    RecordProperty("forward_peak_growth_bytes", std::to_string(growth));
    RecordProperty("forward_workspace_bytes", std::to_string(gdn_context_workspace_bytes(ctx)));

    // The same tokens in four pieces, the state carried from one to the next.
    const int64_t piece = kTokens / 4;
    Buffer state = whole.s0;
    for (int64_t t0 = 0; t0 < kTokens; t0 += piece) {
        DenseProblem part = slice(whole, t0, t0 + piece);
        part.s0 = state;
        ASSERT_EQ(part.forward(ctx), GDN_OK) << gdn_last_error(ctx);
        expect_rows(whole.out, part.out, t0, ref(), "out");
        state = part.states;
    }
    expect_same(state, whole.states, ref(), "final state");
    gdn_context_free(ctx);
}

TEST_P(LongSequence, BackwardOfAMillionTokensMatchesChainedHalvesInBoundedMemory) {
    DenseProblem whole(long_shape(kTokens), type(), 6);
    gdn_context *ctx = make_context(GetParam());
    const int64_t growth = peak_growth([&] { ASSERT_EQ(whole.backward(ctx), GDN_OK) << gdn_last_error(ctx); });
    const int64_t bound = input_bytes(whole) / 2;
    if (growth >= 0) EXPECT_LT(growth, bound) << "the backward's peak memory grew by " << growth << " bytes";
    EXPECT_LT(static_cast<int64_t>(gdn_context_workspace_bytes(ctx)), bound);
    RecordProperty("backward_peak_growth_bytes", std::to_string(growth));
    RecordProperty("backward_workspace_bytes", std::to_string(gdn_context_workspace_bytes(ctx)));

    // Halves: the later half first (its ds0 is dL/dS at the cut), then the earlier half with
    // that as its d_states. The forward of the earlier half gives the later half's s0.
    const int64_t cut = kTokens / 2;
    DenseProblem first = slice(whole, 0, cut), second = slice(whole, cut, kTokens);
    first.s0 = whole.s0;
    ASSERT_EQ(first.forward(ctx), GDN_OK) << gdn_last_error(ctx);
    second.s0 = first.states;
    second.d_states = whole.d_states;
    ASSERT_EQ(second.backward(ctx), GDN_OK) << gdn_last_error(ctx);
    first.d_states = second.ds0;
    ASSERT_EQ(first.backward(ctx), GDN_OK) << gdn_last_error(ctx);
    gdn_context_free(ctx);

    for (const auto &[part, t0] : {std::pair<const DenseProblem *, int64_t>{&first, 0}, {&second, cut}}) {
        expect_rows(whole.dq, part->dq, t0, ref(), "dq");
        expect_rows(whole.dk, part->dk, t0, ref(), "dk");
        expect_rows(whole.dv, part->dv, t0, ref(), "dv");
        expect_rows(whole.dg, part->dg, t0, ref(), "dg");
        expect_rows(whole.dbeta, part->dbeta, t0, ref(), "dbeta");
    }
    expect_same(first.ds0, whole.ds0, ref(), "ds0");
}

std::vector<const char *> backends() {
    std::vector<const char *> out = {"ref"};
    if (gdn_backend_available("cpu")) out.push_back("cpu");
    return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, LongSequence, ::testing::ValuesIn(backends()),
                         [](const testing::TestParamInfo<const char *> &i) { return std::string(i.param); });

}  // namespace
}  // namespace gdn::reliability
