// The cpu backend's bf16 product mode (gdn_problem.precision = GDN_PRECISION_BF16, SPEC 3.1):
// on a host whose bf16 GEMM kernel is AMX the chunk products round their operands to bf16 and sum
// in F32 (cpu/chunk_core.h, bf16_products); on any other host the call computes as EXACT.
//
// - Against ref (computing in double on F32 tensors holding the same bf16 values: its results are
//   within 2^-24 of exact), forward (out, states) and all six gradients, GDA and KDA, grouped
//   heads, batched sequences with snapshots, packed sequences on an in-place pool: within the
//   limits derived below from bf16's unit roundoff.
// - The same bits on 1 and 2 threads, on repeated calls and in the caller's threads (shares).
// - With the AMX kernel switched off (gemm_bf16_force_isa), the bits of precision = EXACT.
//
// The limits (the definition of gdn-ops test's narrow cases, docs/RELIABILITY.md "Limits of
// narrow types"): F32 arithmetic's limits e (NMSE 1e-10 forward, 1e-9 backward, worst element 1e-4
// of |b| + rms(b)) plus the products' bf16 operands, plus one rounding of a BF16 output (u_T =
// 2^-8; 0 for the F32 states and ds0). Each rounded operand perturbs a result by a relative delta
// within u_b = 2^-8, to first order independent and uniform (variance u_b^2 / 3); the longest
// chain of products into a forward output has R = 10 rounded operands (q, S, k^T, V', W, S, T,
// beta k, and the gram's two k), the backward R = 20 (that forward again and each product's
// adjoint). Estimates: NMSE R u_b^2 / 3, worst element sqrt(R / 3) u_b; limits: 3x (forward) or
// 30x (backward) the NMSE estimate, 20x the worst-element estimate, the margins F32's limits take
// over the same kind of estimate. So, with e_n = sqrt(F32 NMSE limit) + sqrt(products' NMSE limit)
// and e_r = 1e-4 + the products' worst-element limit: NMSE <= (u_T + (1 + u_T) e_n)^2 and
// worst element <= u_T + (1 + u_T) e_r.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "cpu/chunk_core.h"
#include "cpu/gemm_bf16.h"
#include "half_call.h"

namespace gdn::halftest {
namespace {

constexpr Types kBf16{GDN_TYPE_BF16, GDN_TYPE_BF16, GDN_TYPE_BF16};
constexpr Types kF32{GDN_TYPE_F32, GDN_TYPE_F32, GDN_TYPE_F32};

bool host_has_amx() { return std::strcmp(cpu::gemm_bf16_best_isa(), "amx") == 0; }

gdn_context *make_context(const char *backend, int threads, int chunk) {
    gdn_context_params p = gdn_context_default_params();
    p.n_threads = threads;
    p.chunk_size = chunk;
    gdn_context *ctx = nullptr;
    EXPECT_EQ(gdn_context_create(backend, &p, &ctx), GDN_OK) << gdn_last_create_error();
    return ctx;
}

struct Context {
    gdn_context *ctx;
    Context(const char *backend, int threads, int chunk = 0) : ctx(make_context(backend, threads, chunk)) {}
    ~Context() { gdn_context_free(ctx); }
};

void run_forward(gdn_context *ctx, const Call &c, gdn_precision precision) {
    gdn_problem p = c.problem();
    p.precision = precision;
    ASSERT_EQ(gdn_forward(ctx, &p, &c.out.t, &c.states.t), GDN_OK) << gdn_last_error(ctx);
}

void run_backward(gdn_context *ctx, const Call &c, gdn_precision precision) {
    gdn_problem p = c.problem();
    p.precision = precision;
    const gdn_grads grads = c.grads();
    ASSERT_EQ(gdn_backward(ctx, &p, &c.d_out.t, &c.d_states.t, &grads), GDN_OK) << gdn_last_error(ctx);
}

Spec model_like(bool kda) {  // head size 128, Hv = 3 Hk, two sequences of 200 tokens, 2 snapshots
    Spec s;
    s.Sk = s.Sv = 128;
    s.Hk = 1;
    s.Hv = 3;
    s.T = 200;
    s.B = s.Bq = 2;
    s.K = 2;
    s.kda = kda;
    return s;
}
Spec serving(bool kda) {  // packed sequences (3 of them, one a single token) on an in-place pool
    Spec s;
    s.kda = kda;
    s.T = 200;
    s.cu_seqlens = {0, 70, 71, 200};
    s.state_indices = {4, -1, 1};
    s.slots = 6;
    return s;
}

// NMSE and worst |a - b| / (|b| + rms(b)) over the elements ref wrote (a pool's unnamed slots
// keep their NaN poison in both).
struct Error {
    double nmse = 0, max_rel = 0;
};
Error error_of(const Tensor &a, const Tensor &b) {
    const auto &ne = b.t.ne;
    double diff2 = 0, ref2 = 0, worst = 0;
    int64_t n = 0;
    auto each = [&](auto &&f) {
        for (int64_t i3 = 0; i3 < ne[3]; ++i3)
            for (int64_t i2 = 0; i2 < ne[2]; ++i2)
                for (int64_t i1 = 0; i1 < ne[1]; ++i1)
                    for (int64_t i0 = 0; i0 < ne[0]; ++i0)
                        if (!std::isnan(b.get(i0, i1, i2, i3))) f(a.get(i0, i1, i2, i3), b.get(i0, i1, i2, i3));
    };
    each([&](double, double y) { ref2 += y * y, ++n; });
    const double rms = std::sqrt(ref2 / std::max<int64_t>(n, 1));
    each([&](double x, double y) {
        diff2 += (x - y) * (x - y);
        worst = std::max(worst, std::isfinite(x) ? std::fabs(x - y) / (std::fabs(y) + rms) : INFINITY);
    });
    return {ref2 > 0 ? diff2 / ref2 : diff2, worst};
}

// The limits of the header comment for one output: rounded_output says whether it is BF16.
Error limit(bool forward, bool rounded_output) {
    const double u_b = std::ldexp(1.0, -8), u = rounded_output ? u_b : 0.0;
    const double R = forward ? 10 : 20;
    const double products_nmse = (forward ? 3.0 : 30.0) * R * u_b * u_b / 3.0;
    const double products_rel = 20.0 * std::sqrt(R / 3.0) * u_b;
    const double e_n = std::sqrt(forward ? 1e-10 : 1e-9) + std::sqrt(products_nmse);
    const double e_r = 1e-4 + products_rel;
    const double norm = u + (1 + u) * e_n;
    return {norm * norm, u + (1 + u) * e_r};
}

void expect_within(const Tensor &cpu, const Tensor &ref, bool forward, const std::string &what) {
    const Error e = error_of(cpu, ref), l = limit(forward, cpu.t.type == GDN_TYPE_BF16);
    EXPECT_LE(e.nmse, l.nmse) << what << " NMSE";
    EXPECT_LE(e.max_rel, l.max_rel) << what << " worst element";
    // What a product mode may reach is far above EXACT's, so a measured error is worth seeing.
    std::printf("  %-22s NMSE %.2e (limit %.1e)  worst %.2e (limit %.1e)\n", what.c_str(), e.nmse, l.nmse, e.max_rel,
                l.max_rel);
}

// The kernel in use for the scope's life, the host's best restored after.
struct ForcedIsa {
    bool ok;
    explicit ForcedIsa(const char *isa) : ok(cpu::gemm_bf16_force_isa(isa)) {}
    ~ForcedIsa() { cpu::gemm_bf16_force_isa(cpu::gemm_bf16_best_isa()); }
};

TEST(CpuBf16Products, ActiveExactlyWhereTheKernelIsAmx) {
    EXPECT_FALSE(cpu::bf16_products(GDN_PRECISION_EXACT));
    EXPECT_EQ(cpu::bf16_products(GDN_PRECISION_BF16), host_has_amx());
    for (const char *isa : {"avx512bf16", "generic"}) {
        ForcedIsa forced(isa);
        if (forced.ok) EXPECT_FALSE(cpu::bf16_products(GDN_PRECISION_BF16)) << isa;
    }
}

class CpuBf16ProductsAgainstRef : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(CpuBf16ProductsAgainstRef, WithinTheBf16Limits) {
    if (!host_has_amx()) GTEST_SKIP() << "no AMX-BF16 here (or the tile state was refused): precision BF16 is EXACT";
    const auto [kda, packed] = GetParam();
    ASSERT_TRUE(cpu::bf16_products(GDN_PRECISION_BF16));
    const Spec s = packed ? serving(kda) : model_like(kda);
    Context cpu("cpu", 2), ref("ref", 1);
    const Call a = build(s, kBf16, kBf16, 41), oracle = build(s, kF32, kBf16, 41), exact = build(s, kBf16, kBf16, 41);
    run_forward(cpu.ctx, a, GDN_PRECISION_BF16);
    run_forward(ref.ctx, oracle, GDN_PRECISION_EXACT);
    run_forward(cpu.ctx, exact, GDN_PRECISION_EXACT);
    // The mode ran: the products' roundings change the bits (EXACT's would be the same).
    EXPECT_FALSE(same_bits(a.out, exact.out));
    expect_within(a.out, oracle.out, true, "out");
    expect_within(a.states, oracle.states, true, "states");
    const Call b = build(s, kBf16, kBf16, 42), oracle_b = build(s, kF32, kBf16, 42), exact_b = build(s, kBf16, kBf16, 42);
    run_backward(cpu.ctx, b, GDN_PRECISION_BF16);
    run_backward(ref.ctx, oracle_b, GDN_PRECISION_EXACT);
    run_backward(cpu.ctx, exact_b, GDN_PRECISION_EXACT);
    EXPECT_FALSE(same_bits(b.dq, exact_b.dq));
    EXPECT_FALSE(same_bits(b.ds0, exact_b.ds0));
    for (auto [x, y, what] : {std::tuple{&b.dq, &oracle_b.dq, "dq"}, {&b.dk, &oracle_b.dk, "dk"}, {&b.dv, &oracle_b.dv, "dv"},
                              {&b.dg, &oracle_b.dg, "dg"}, {&b.dbeta, &oracle_b.dbeta, "dbeta"}, {&b.ds0, &oracle_b.ds0, "ds0"}})
        expect_within(*x, *y, false, what);
}

INSTANTIATE_TEST_SUITE_P(Cpu, CpuBf16ProductsAgainstRef, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto &info) {
                             return std::string(std::get<0>(info.param) ? "kda" : "gda") +
                                    (std::get<1>(info.param) ? "_packed_pool" : "_batched");
                         });

// The same bits on 1 and 2 threads and on a repeated call (the AMX kernel is deterministic per
// call, and the work is split the same way whatever the thread count), on every backward
// schedule: two groups (whole groups), one group (its units split over 2 threads, whole on 1),
// three groups (a tail on 2 threads), packed sequences.
TEST(CpuBf16Products, SameBitsOnEveryThreadCountAndRun) {
    for (bool kda : {false, true})
        for (int shape = 0; shape < 4; ++shape) {
            const bool packed = shape == 3;
            Spec s = packed ? serving(kda) : model_like(kda);
            if (shape == 1) s.B = s.Bq = 1;
            if (shape == 2) s.B = s.Bq = 1, s.Hk = 3, s.Hv = 6;
            Context one("cpu", 1), two("cpu", 2);
            const Call a = build(s, kBf16, kBf16, 51), b = build(s, kBf16, kBf16, 51), c = build(s, kBf16, kBf16, 51);
            run_forward(one.ctx, a, GDN_PRECISION_BF16);
            run_forward(two.ctx, b, GDN_PRECISION_BF16);
            run_forward(two.ctx, c, GDN_PRECISION_BF16);
            EXPECT_TRUE(same_bits(a.out, b.out) && same_bits(b.out, c.out)) << kda << shape;
            EXPECT_TRUE(same_bits(a.states, b.states) && same_bits(b.states, c.states)) << kda << shape;
            const Call d = build(s, kBf16, kBf16, 52), e = build(s, kBf16, kBf16, 52), f = build(s, kBf16, kBf16, 52);
            run_backward(one.ctx, d, GDN_PRECISION_BF16);
            run_backward(two.ctx, e, GDN_PRECISION_BF16);
            run_backward(two.ctx, f, GDN_PRECISION_BF16);
            for (auto m : {&Call::dq, &Call::dk, &Call::dv, &Call::dg, &Call::dbeta, &Call::ds0})
                EXPECT_TRUE(same_bits(d.*m, e.*m) && same_bits(e.*m, f.*m)) << kda << shape;
        }
}

// The caller's threads (gdn_forward_share / gdn_backward_share) give the pooled call's bits.
TEST(CpuBf16Products, SharesGiveThePooledCallsBits) {
    for (bool kda : {false, true}) {
        const Spec s = model_like(kda);
        Context pooled("cpu", 2), shares("cpu", 1);
        const Call whole = build(s, kBf16, kBf16, 61), parts = build(s, kBf16, kBf16, 61);
        run_forward(pooled.ctx, whole, GDN_PRECISION_BF16);
        gdn_problem p = parts.problem();
        p.precision = GDN_PRECISION_BF16;
        for (int ith = 0; ith < 3; ++ith)
            ASSERT_EQ(gdn_forward_share(shares.ctx, &p, &parts.out.t, &parts.states.t, ith, 3), GDN_OK) << gdn_last_error(shares.ctx);
        EXPECT_TRUE(same_bits(whole.out, parts.out));
        EXPECT_TRUE(same_bits(whole.states, parts.states));
        const Call whole_b = build(s, kBf16, kBf16, 62), parts_b = build(s, kBf16, kBf16, 62);
        run_backward(pooled.ctx, whole_b, GDN_PRECISION_BF16);
        gdn_problem pb = parts_b.problem();
        pb.precision = GDN_PRECISION_BF16;
        const gdn_grads grads = parts_b.grads();
        for (int ith = 0; ith < 3; ++ith)
            ASSERT_EQ(gdn_backward_share(shares.ctx, &pb, &parts_b.d_out.t, &parts_b.d_states.t, &grads, ith, 3), GDN_OK)
                << gdn_last_error(shares.ctx);
        for (auto m : {&Call::dq, &Call::dk, &Call::dv, &Call::dg, &Call::dbeta, &Call::ds0})
            EXPECT_TRUE(same_bits(whole_b.*m, parts_b.*m)) << kda;
    }
}

// Without AMX (another kernel forced), precision = BF16 gives EXACT's bits.
TEST(CpuBf16Products, ElsewhereTheExactBits) {
    for (const char *isa : {"avx512bf16", "generic"}) {
        ForcedIsa forced(isa);
        if (!forced.ok) continue;
        for (bool kda : {false, true}) {
            const Spec s = model_like(kda);
            Context ctx("cpu", 2);
            const Call exact = build(s, kBf16, kBf16, 21), bf16 = build(s, kBf16, kBf16, 21);
            run_forward(ctx.ctx, exact, GDN_PRECISION_EXACT);
            run_forward(ctx.ctx, bf16, GDN_PRECISION_BF16);
            EXPECT_TRUE(same_bits(exact.out, bf16.out)) << isa;
            EXPECT_TRUE(same_bits(exact.states, bf16.states)) << isa;
            const Call exact_b = build(s, kBf16, kBf16, 22), bf16_b = build(s, kBf16, kBf16, 22);
            run_backward(ctx.ctx, exact_b, GDN_PRECISION_EXACT);
            run_backward(ctx.ctx, bf16_b, GDN_PRECISION_BF16);
            for (auto m : {&Call::dq, &Call::dk, &Call::dv, &Call::dg, &Call::dbeta, &Call::ds0})
                EXPECT_TRUE(same_bits(exact_b.*m, bf16_b.*m)) << isa;
        }
    }
}

}  // namespace
}  // namespace gdn::halftest
