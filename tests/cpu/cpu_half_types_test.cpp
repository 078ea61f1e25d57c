// The cpu backend with BF16 and F16 tensors (SPEC 3.1), precision EXACT: a call with half tensors
// gives exactly the bits of the all-F32 call on the converted inputs, each output then rounded
// once to its tensor's type (states and ds0 are F32 in both: the same bits). Conversion happens
// where rows are gathered, so the arithmetic is the F32 call's, in the same order.
//
// Each case runs the forward and the backward (all six gradients) on the chunked form (T = 200,
// chunk 64) or the per-token form (chunk_size 1, T <= 16), GDA and KDA, grouped heads Hk < Hv,
// and the layouts of SPEC 3 (K > 1 snapshots, packed sequences, in-place pools with
// state_indices, value-major states, q/k/v as views of one half projection buffer), with 1 and 2
// threads (the same bits). Last, a model-like shape against ref.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "half_call.h"

namespace gdn::halftest {
namespace {

struct Case {
    std::string name;
    Spec spec;
    Types types;
    int chunk = 64;  // cpu chunk_size (1: per-token)
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

constexpr Types kBf16{GDN_TYPE_BF16, GDN_TYPE_BF16, GDN_TYPE_BF16};
constexpr Types kBf16F32Gates{GDN_TYPE_BF16, GDN_TYPE_F32, GDN_TYPE_F32};
constexpr Types kF16{GDN_TYPE_F16, GDN_TYPE_F16, GDN_TYPE_F32};
constexpr Types kF16Bf16G{GDN_TYPE_F16, GDN_TYPE_F32, GDN_TYPE_BF16};
constexpr Types kF32Bf16G{GDN_TYPE_F32, GDN_TYPE_F32, GDN_TYPE_BF16};
constexpr Types kF32{GDN_TYPE_F32, GDN_TYPE_F32, GDN_TYPE_F32};

Spec spec(bool kda, int64_t T = 200) {
    Spec s;
    s.kda = kda;
    s.T = T;
    return s;
}
Spec batched(bool kda, int64_t T) {  // B = 2 over Bq = 2, K = 3 snapshots
    Spec s = spec(kda, T);
    s.B = s.Bq = 2;
    s.K = 3;
    return s;
}
Spec serving(bool kda, int64_t T, bool value_major) {  // packed sequences on an in-place pool
    Spec s = spec(kda, T);
    s.cu_seqlens = {0, T / 3, T / 3 + 1, T};
    s.state_indices = {4, -1, 1};
    s.slots = 6;
    s.value_major = value_major;
    return s;
}
Spec projected(bool kda, int64_t T) {  // q/k/v views of one projection buffer, value-major states
    Spec s = spec(kda, T);
    s.projection = true;
    s.value_major = true;
    s.K = 2;
    return s;
}

std::vector<Case> cases() {
    std::vector<Case> out;
    for (bool kda : {false, true}) {
        const char *g = kda ? "kda" : "gda";
        auto add = [&](std::string name, Spec s, Types t, int chunk) {
            out.push_back({name + "_" + g, s, t, chunk});
        };
        add("chunked_bf16_batched", batched(kda, 200), kBf16, 64);
        add("chunked_bf16_f32_gates", spec(kda), kBf16F32Gates, 64);
        add("chunked_f16", batched(kda, 200), kF16, 64);
        add("chunked_f16_bf16_g", spec(kda), kF16Bf16G, 64);
        add("chunked_f32_bf16_g", spec(kda), kF32Bf16G, 64);
        add("chunked_bf16_packed_pool", serving(kda, 200, false), kBf16, 64);
        add("chunked_bf16_packed_pool_value_major", serving(kda, 200, true), kBf16F32Gates, 64);
        add("chunked_bf16_projection", projected(kda, 200), kBf16, 64);
        add("chunked_f16_projection", projected(kda, 200), kF16, 64);
        add("token_bf16_batched", batched(kda, 13), kBf16, 1);
        add("token_f16", spec(kda, 16), kF16, 1);
        add("token_f32_bf16_g", spec(kda, 9), kF32Bf16G, 1);
        add("token_bf16_packed_pool", serving(kda, 15, true), kBf16, 1);
        add("token_bf16_projection", projected(kda, 12), kBf16F32Gates, 1);
        // The default choice of form: the per-token forward at T <= 16 (the chunked backward).
        add("default_bf16_short", batched(kda, 7), kBf16, 0);
    }
    return out;
}

gdn_context *cpu_context(int threads, int chunk) {
    gdn_context_params p = gdn_context_default_params();
    p.n_threads = threads;
    p.chunk_size = chunk;
    gdn_context *ctx = nullptr;
    EXPECT_EQ(gdn_context_create("cpu", &p, &ctx), GDN_OK) << gdn_last_create_error();
    return ctx;
}

struct Context {
    gdn_context *ctx;
    Context(int threads, int chunk) : ctx(cpu_context(threads, chunk)) {}
    ~Context() { gdn_context_free(ctx); }
};

void run_forward(gdn_context *ctx, const Call &c) {
    const gdn_problem p = c.problem();
    ASSERT_EQ(gdn_forward(ctx, &p, &c.out.t, &c.states.t), GDN_OK) << gdn_last_error(ctx);
}

void run_backward(gdn_context *ctx, const Call &c) {
    const gdn_problem p = c.problem();
    const gdn_grads grads = c.grads();
    ASSERT_EQ(gdn_backward(ctx, &p, &c.d_out.t, &c.d_states.t, &grads), GDN_OK) << gdn_last_error(ctx);
}

// The comparison means something only where the calls wrote: every element (a pool: some; the
// slots no sequence names keep their NaN poison).
void expect_written(const Tensor &t, const char *what, bool pool = false) {
    const int64_t nans = nan_count(t), count = t.t.ne[0] * t.t.ne[1] * t.t.ne[2] * t.t.ne[3];
    if (pool) EXPECT_LT(nans, count) << what << " not written";
    else EXPECT_EQ(nans, 0) << what << " not fully written";
}

class CpuHalfTypes : public ::testing::TestWithParam<Case> {};

TEST_P(CpuHalfTypes, ForwardIsTheF32CallOnConvertedInputsRoundedOnce) {
    const Case &k = GetParam();
    Context one(1, k.chunk), two(2, k.chunk);
    const Call half = build(k.spec, k.types, k.types, 3), f32 = build(k.spec, kF32, k.types, 3);
    run_forward(one.ctx, half);
    run_forward(one.ctx, f32);
    EXPECT_EQ(mismatches_rounded_once(half.out, f32.out, "out"), 0);
    EXPECT_EQ(mismatches_rounded_once(half.states, f32.states, "states"), 0);
    expect_written(f32.out, "out");
    expect_written(f32.states, "states", !k.spec.state_indices.empty());
    // Two threads: the same bits.
    const Call again = build(k.spec, k.types, k.types, 3);
    run_forward(two.ctx, again);
    EXPECT_TRUE(same_bits(again.out, half.out)) << "out differs between 1 and 2 threads";
    EXPECT_TRUE(same_bits(again.states, half.states)) << "states differ between 1 and 2 threads";
}

TEST_P(CpuHalfTypes, BackwardIsTheF32CallOnConvertedInputsRoundedOnce) {
    const Case &k = GetParam();
    Context one(1, k.chunk), two(2, k.chunk);
    const Call half = build(k.spec, k.types, k.types, 5), f32 = build(k.spec, kF32, k.types, 5);
    run_backward(one.ctx, half);
    run_backward(one.ctx, f32);
    EXPECT_EQ(mismatches_rounded_once(half.dq, f32.dq, "dq"), 0);
    EXPECT_EQ(mismatches_rounded_once(half.dk, f32.dk, "dk"), 0);
    EXPECT_EQ(mismatches_rounded_once(half.dv, f32.dv, "dv"), 0);
    EXPECT_EQ(mismatches_rounded_once(half.dg, f32.dg, "dg"), 0);
    EXPECT_EQ(mismatches_rounded_once(half.dbeta, f32.dbeta, "dbeta"), 0);
    EXPECT_EQ(mismatches_rounded_once(half.ds0, f32.ds0, "ds0"), 0);
    for (auto [t, what] : {std::pair{&f32.dq, "dq"}, {&f32.dk, "dk"}, {&f32.dv, "dv"}, {&f32.dg, "dg"}, {&f32.dbeta, "dbeta"}})
        expect_written(*t, what);
    expect_written(f32.ds0, "ds0", !k.spec.state_indices.empty());
    const Call again = build(k.spec, k.types, k.types, 5);
    run_backward(two.ctx, again);
    for (auto [a, b, what] : {std::tuple{&again.dq, &half.dq, "dq"}, {&again.dk, &half.dk, "dk"}, {&again.dv, &half.dv, "dv"},
                              {&again.dg, &half.dg, "dg"}, {&again.dbeta, &half.dbeta, "dbeta"}, {&again.ds0, &half.ds0, "ds0"}})
        EXPECT_TRUE(same_bits(*a, *b)) << what << " differs between 1 and 2 threads";
}

INSTANTIATE_TEST_SUITE_P(Cpu, CpuHalfTypes, ::testing::ValuesIn(cases()), [](const auto &info) { return info.param.name; });

// The caller's threads (gdn_forward_share / gdn_backward_share, ggml's way in): the bits of the
// pooled call, half tensors included.
TEST(CpuHalfTypesShares, SharesGiveThePooledCallsBits) {
    for (bool kda : {false, true})
        for (int chunk : {0, 1}) {
            Spec s = batched(kda, chunk == 1 ? 12 : 200);
            Context pooled(2, chunk), shares(1, chunk);
            const Call whole = build(s, kBf16, kBf16, 31), parts = build(s, kBf16, kBf16, 31);
            run_forward(pooled.ctx, whole);
            const gdn_problem p = parts.problem();
            for (int ith = 0; ith < 3; ++ith)
                ASSERT_EQ(gdn_forward_share(shares.ctx, &p, &parts.out.t, &parts.states.t, ith, 3), GDN_OK) << gdn_last_error(shares.ctx);
            EXPECT_TRUE(same_bits(whole.out, parts.out));
            EXPECT_TRUE(same_bits(whole.states, parts.states));
            const Call whole_b = build(s, kBf16, kBf16, 32), parts_b = build(s, kBf16, kBf16, 32);
            run_backward(pooled.ctx, whole_b);
            const gdn_problem pb = parts_b.problem();
            const gdn_grads grads = parts_b.grads();
            for (int ith = 0; ith < 3; ++ith)
                ASSERT_EQ(gdn_backward_share(shares.ctx, &pb, &parts_b.d_out.t, &parts_b.d_states.t, &grads, ith, 3), GDN_OK)
                    << gdn_last_error(shares.ctx);
            for (auto [a, b] : {std::pair{&whole_b.dq, &parts_b.dq}, {&whole_b.dk, &parts_b.dk}, {&whole_b.dv, &parts_b.dv},
                                {&whole_b.dg, &parts_b.dg}, {&whole_b.dbeta, &parts_b.dbeta}, {&whole_b.ds0, &parts_b.ds0}})
                EXPECT_TRUE(same_bits(*a, *b));
        }
}

// A model-like shape (head size 128, Hv = 3 Hk, grouped) in BF16 against ref on the same BF16
// tensors. Both round a result once to BF16 from a value that is exact (ref: double) or within
// the F32 path's own error (cpu), so they differ by at most one BF16 step where that error does
// not straddle a rounding boundary: each element within 2^-7 |ref| (one BF16 step at |ref|'s
// binade, at most) plus 1e-3 rms(ref) (the F32 parity tests' worst-element allowance).
double worst_excess(const Tensor &cpu, const Tensor &ref) {
    double sum_sq = 0;
    int64_t n = 0;
    const Extents ne{cpu.t.ne[0], cpu.t.ne[1], cpu.t.ne[2], cpu.t.ne[3]};
    for (int64_t i3 = 0; i3 < ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < ne[0]; ++i0, ++n) sum_sq += ref.get(i0, i1, i2, i3) * ref.get(i0, i1, i2, i3);
    const double rms = std::sqrt(sum_sq / std::max<int64_t>(n, 1));
    double worst = 0;  // max over elements of |cpu - ref| / allowance
    for (int64_t i3 = 0; i3 < ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < ne[0]; ++i0) {
                    const double r = ref.get(i0, i1, i2, i3), c = cpu.get(i0, i1, i2, i3);
                    const double allowed = std::ldexp(std::fabs(r), -7) + 1e-3 * rms;
                    worst = std::max(worst, std::isfinite(c) ? std::fabs(c - r) / allowed : INFINITY);
                }
    return worst;
}

TEST(CpuHalfTypesAgainstRef, ModelShapeBf16WithinOneBf16Step) {
    for (bool kda : {false, true}) {
        Spec s;
        s.Sk = s.Sv = 128;
        s.Hk = 2;
        s.Hv = 6;
        s.T = 150;
        s.kda = kda;
        s.K = 1;
        Context cpu(2, 0);
        gdn_context *ref = nullptr;
        ASSERT_EQ(gdn_context_create("ref", nullptr, &ref), GDN_OK);
        const Call a = build(s, kBf16, kBf16, 9), b = build(s, kBf16, kBf16, 9);
        run_forward(cpu.ctx, a);
        run_forward(ref, b);
        EXPECT_LE(worst_excess(a.out, b.out), 1.0) << (kda ? "kda" : "gda") << " out";
        EXPECT_LE(worst_excess(a.states, b.states), 1.0) << (kda ? "kda" : "gda") << " states";
        const Call c = build(s, kBf16, kBf16, 10), d = build(s, kBf16, kBf16, 10);
        run_backward(cpu.ctx, c);
        run_backward(ref, d);
        for (auto [x, y, what] : {std::tuple{&c.dq, &d.dq, "dq"}, {&c.dk, &d.dk, "dk"}, {&c.dv, &d.dv, "dv"},
                                  {&c.dg, &d.dg, "dg"}, {&c.dbeta, &d.dbeta, "dbeta"}, {&c.ds0, &d.ds0, "ds0"}})
            EXPECT_LE(worst_excess(*x, *y), 1.0) << (kda ? "kda " : "gda ") << what;
        gdn_context_free(ref);
    }
}

}  // namespace
}  // namespace gdn::halftest
