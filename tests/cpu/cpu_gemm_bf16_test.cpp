// The bf16 GEMM (gemm_bf16.h) on each kernel this host has ("generic" always; "avx512bf16" and
// "amx" where present, skipped elsewhere): against a double-precision product of the bf16-rounded
// operands within the bound of F32 accumulation, bit for bit against a scalar model of each
// kernel's order of additions, with row factors, transposed views, odd sizes, operands stored as
// bf16, NaN / Inf, and the same bits however the product is cut or the scratch aligned.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu/gemm_bf16.h"

namespace {

using gdn::cpu::Mat;
using gdn::cpu::MatBf16;
using gdn::cpu::RowScales;

constexpr const char *kIsas[] = {"generic", "avx512bf16", "amx"};

// Forces the kernel for the test's scope and puts the best one back after it.
struct ForcedIsa {
    bool ok;
    explicit ForcedIsa(const char *isa) : ok(gdn::cpu::gemm_bf16_force_isa(isa)) {}
    ~ForcedIsa() { gdn::cpu::gemm_bf16_force_isa(gdn::cpu::gemm_bf16_best_isa()); }
};

#define SKIP_UNLESS_HOST_HAS(isa)                                                      \
    ForcedIsa forced(isa);                                                              \
    if (!forced.ok) GTEST_SKIP() << isa << " is not available on this host or build";

float bf16(float x) { return gdn::cpu::from_bf16(gdn::cpu::to_bf16(x)); }

struct Case {
    int m, n, k;
    bool at, bt;
    float alpha = 0.5f, c_scale = 1.0f;
    bool with_c_rows = false, with_b_rows = false, with_c_in = false;
};

struct Data {
    std::vector<float> a, b, c, c_rows, b_rows, c_in;
    Mat av, bv;
    RowScales scales() const {
        return {c_rows.empty() ? nullptr : c_rows.data(), b_rows.empty() ? nullptr : b_rows.data(),
                c_in.empty() ? nullptr : c_in.data()};
    }
    float a_at(int i, int kk) const { return av.p[i * av.row_stride + kk * av.col_stride]; }
    float b_at(int kk, int j) const { return bv.p[kk * bv.row_stride + j * bv.col_stride]; }
    // The operands as the kernels see them: bf16(A), bf16(b_rows B).
    float a_rounded(int i, int kk) const { return bf16(a_at(i, kk)); }
    float b_rounded(int kk, int j) const { return bf16((b_rows.empty() ? 1.0f : b_rows[kk]) * b_at(kk, j)); }
};

// Random operands (A stored m x k or k x m, B k x n or n x k), C, and power-of-two row factors
// spread far apart (2^-20 .. 2^20: a factor on the wrong row is off by orders of magnitude).
Data make(const Case &cs, std::mt19937 &rng) {
    std::uniform_real_distribution<float> u(-1, 1);
    std::uniform_int_distribution<int> exponent(-20, 20);
    Data d;
    d.a.resize(size_t(cs.m) * cs.k + 1);
    d.b.resize(size_t(cs.k) * cs.n + 1);
    d.c.resize(size_t(cs.m) * cs.n);
    for (float &x : d.a) x = u(rng);
    for (float &x : d.b) x = u(rng);
    for (float &x : d.c) x = u(rng);
    auto factors = [&](int count) {
        std::vector<float> f(count);
        for (float &x : f) x = std::ldexp(1.0f, exponent(rng));
        return f;
    };
    if (cs.with_c_rows) d.c_rows = factors(cs.m);
    if (cs.with_b_rows) d.b_rows = factors(cs.k);
    if (cs.with_c_in) d.c_in = factors(cs.m);
    d.av = cs.at ? gdn::cpu::transposed(d.a.data(), cs.m) : gdn::cpu::rows(d.a.data(), cs.k);
    d.bv = cs.bt ? gdn::cpu::transposed(d.b.data(), cs.k) : gdn::cpu::rows(d.b.data(), cs.n);
    return d;
}

std::vector<float> run(const Case &cs, const Data &d) {
    std::vector<float> c = d.c;
    std::vector<unsigned char> pack(gdn::cpu::gemm_bf16_pack_bytes(cs.m, cs.k));
    gdn::cpu::gemm_bf16(cs.m, cs.n, cs.k, cs.alpha, d.av, d.bv, cs.c_scale, c.data(), cs.n, pack.data(), d.scales());
    return c;
}

// The exact product of the rounded operands (in double) and the bound of its F32 evaluation:
// each of the k additions of an exact product rounds by at most 2^-24 of a partial sum, itself at
// most sum |a' b'|; the epilogue rounds alpha_i s and the fma once each.
void expect_near_reference(const Case &cs, const Data &d, const std::vector<float> &c, const std::string &what) {
    const double u = std::ldexp(1.0, -24);
    for (int i = 0; i < cs.m; ++i)
        for (int j = 0; j < cs.n; ++j) {
            double sum = 0, magnitude = 0;
            for (int kk = 0; kk < cs.k; ++kk) {
                const double term = double(d.a_rounded(i, kk)) * d.b_rounded(kk, j);
                sum += term;
                magnitude += std::fabs(term);
            }
            const double row_alpha = double(cs.alpha) * (d.c_rows.empty() ? 1.0f : d.c_rows[i]);
            const double row_c_scale = double(cs.c_scale) * (d.c_in.empty() ? 1.0f : d.c_in[i]);
            const double old = cs.c_scale != 0.0f ? row_c_scale * d.c[size_t(i) * cs.n + j] : 0.0;
            const double want = old + row_alpha * sum;
            const double bound =
                std::fabs(row_alpha) * magnitude * u * (cs.k + 2) + 2 * u * (std::fabs(old) + std::fabs(want)) + 1e-37;
            ASSERT_NEAR(c[size_t(i) * cs.n + j], want, bound)
                << what << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " at=" << cs.at << " bt=" << cs.bt
                << " i=" << i << " j=" << j;
        }
}

TEST(CpuGemmBf16, MatchesTheRoundedOperandsProductOnEveryKernel) {
    std::mt19937 rng(5);
    for (const char *isa : kIsas) {
        ForcedIsa forced(isa);
        if (!forced.ok) continue;
        // The chunk shapes, then edges of the 6 x 64 / 12 x 32 register tiles and the 16 x 32 AMX
        // tiles (m, n, k not multiples of them, k odd).
        std::vector<Case> cases = {{64, 128, 128, false, false}, {128, 64, 128, true, false},
                                   {64, 64, 128, false, true},   {128, 128, 64, true, false},
                                   {128, 128, 128, false, true}, {64, 128, 128, true, true}};
        for (int m : {1, 5, 17, 33})
            for (int n : {1, 16, 17, 33, 65})
                for (int k : {1, 2, 31, 33, 70})
                    for (int t = 0; t < 4; ++t) cases.push_back({m, n, k, bool(t & 1), bool(t & 2)});
        for (const Case &base : cases)
            for (int mode = 0; mode < 3; ++mode) {
                Case cs = base;
                cs.c_scale = mode == 0 ? 0.0f : mode == 1 ? 1.0f : 0.75f;  // overwrite, add, scale
                const Data d = make(cs, rng);
                expect_near_reference(cs, d, run(cs, d), isa);
                if (HasFatalFailure()) return;
            }
    }
}

TEST(CpuGemmBf16, FoldsRowFactorsLikeGemm) {
    std::mt19937 rng(6);
    for (const char *isa : kIsas) {
        ForcedIsa forced(isa);
        if (!forced.ok) continue;
        for (int m : {7, 64})
            for (int n : {33, 128})
                for (int k : {6, 65, 128})
                    for (int variant = 0; variant < 16; ++variant) {
                        Case cs{m, n, k, bool(variant & 1), bool(variant & 2)};
                        cs.with_c_rows = variant & 4;
                        cs.with_b_rows = variant & 8;
                        cs.with_c_in = variant % 3 == 0;
                        cs.c_scale = variant % 5 == 0 ? 0.0f : 1.0f;
                        const Data d = make(cs, rng);
                        expect_near_reference(cs, d, run(cs, d), isa);
                        if (HasFatalFailure()) return;
                    }
    }
}

// The bits "generic" and "avx512bf16" promise (gemm_bf16.h): per pair of k, the odd term then the
// even one, each a fused multiply-add rounded to nearest (no denormals arise from these operands),
// then r(alpha_i s) and fma(c_scale_i, C, .). AMX's order within a tile instruction is the
// hardware's own and documented by no model this matched (sequential, pairwise, tree, exact
// blocks, other rounding modes): it is held to the bound and to the same bits however the
// product is cut (SameBitsHoweverCutOrAligned).
float model_sum(const Data &d, int i, int j, int k) {
    float sum = 0.0f;
    for (int p = 0; 2 * p < k; ++p) {
        const float a1 = 2 * p + 1 < k ? d.a_rounded(i, 2 * p + 1) : 0.0f;
        const float b1 = 2 * p + 1 < k ? d.b_rounded(2 * p + 1, j) : 0.0f;
        sum = std::fma(a1, b1, sum);
        sum = std::fma(d.a_rounded(i, 2 * p), d.b_rounded(2 * p, j), sum);
    }
    return sum;
}

void expect_model_bits(const char *isa) {
    std::mt19937 rng(8);
    for (const Case &base : std::vector<Case>{{64, 128, 128, false, false},
                                              {128, 64, 128, true, true},
                                              {33, 65, 71, false, true},
                                              {5, 17, 3, true, false}})
        for (int variant = 0; variant < 4; ++variant) {
            Case cs = base;
            cs.with_c_rows = cs.with_c_in = variant & 1;
            cs.with_b_rows = variant & 2;
            cs.c_scale = variant == 2 ? 0.0f : 0.75f;
            const Data d = make(cs, rng);
            const std::vector<float> c = run(cs, d);
            for (int i = 0; i < cs.m; ++i)
                for (int j = 0; j < cs.n; ++j) {
                    const float row_alpha = cs.alpha * (d.c_rows.empty() ? 1.0f : d.c_rows[i]);
                    const float row_c_scale = cs.c_scale * (d.c_in.empty() ? 1.0f : d.c_in[i]);
                    const float scaled = row_alpha * model_sum(d, i, j, cs.k);
                    const float want =
                        cs.c_scale != 0.0f ? std::fma(row_c_scale, d.c[size_t(i) * cs.n + j], scaled) : scaled;
                    const float got = c[size_t(i) * cs.n + j];
                    ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0)
                        << isa << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " variant=" << variant
                        << " i=" << i << " j=" << j << ": " << got << " vs " << want;
                }
        }
}

TEST(CpuGemmBf16, GenericGivesTheModelsBits) {
    SKIP_UNLESS_HOST_HAS("generic");
    expect_model_bits("generic");
}

TEST(CpuGemmBf16, Avx512Bf16GivesTheModelsBits) {
    SKIP_UNLESS_HOST_HAS("avx512bf16");
    expect_model_bits("avx512bf16");
}

// The AMX kernel at the chunk shapes, within the bound (the loops over kernels above run it too; this
// test says by skipping where a host lacks it).
TEST(CpuGemmBf16, AmxRunsTheChunkShapes) {
    SKIP_UNLESS_HOST_HAS("amx");
    std::mt19937 rng(4);
    for (const Case &cs : std::vector<Case>{{64, 128, 128, false, false}, {128, 128, 64, true, false}, {64, 64, 128, false, true}}) {
        const Data d = make(cs, rng);
        expect_near_reference(cs, d, run(cs, d), "amx");
    }
}

// Near the bottom of the F32 range vdpbf16ps reads subnormal operands as zero and flushes
// subnormal sums to zero; the portable kernel models that, so the two agree bit for bit on
// operands whose products and sums cross into the subnormals (an F32 subnormal operand is packed
// as zero either way).
TEST(CpuGemmBf16, GenericAndAvx512Bf16AgreeOnDenormals) {
    {
        ForcedIsa probe("avx512bf16");
        if (!probe.ok) GTEST_SKIP() << "avx512bf16 is not available on this host or build";
    }
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> mantissa(1, 2);
    std::uniform_int_distribution<int> jitter(0, 3), sign(0, 1);
    const int m = 19, n = 37, k = 45;
    std::vector<float> a(m * k), b(k * n), c0(m * n, 0.0f);
    // Products near 2^(-118 - 2i) in row i: the first rows' sums normal, the last ones' denormal.
    for (int i = 0; i < m; ++i)
        for (int kk = 0; kk < k; ++kk)
            a[i * k + kk] = (sign(rng) ? -1 : 1) * std::ldexp(mantissa(rng), -50 - 2 * i - jitter(rng));
    for (float &x : b) x = (sign(rng) ? -1 : 1) * std::ldexp(mantissa(rng), -68 - jitter(rng));
    a[3] = std::ldexp(1.0f, -127);  // a denormal operand
    std::vector<unsigned char> pack(gdn::cpu::gemm_bf16_pack_bytes(m, k));
    std::vector<std::vector<float>> results;
    int nonzero = 0;
    for (const char *isa : {"generic", "avx512bf16"}) {
        ForcedIsa forced(isa);
        std::vector<float> c = c0;
        gdn::cpu::gemm_bf16(m, n, k, 1.0f, gdn::cpu::rows(a.data(), k), gdn::cpu::rows(b.data(), n), 0.0f, c.data(), n,
                            pack.data());
        for (float x : c) nonzero += x != 0.0f;
        results.push_back(c);
    }
    EXPECT_GT(nonzero, 0);  // some sums stay normal, others flush: the data does cross the boundary
    EXPECT_LT(nonzero, 2 * m * n);
    ASSERT_EQ(0, std::memcmp(results[0].data(), results[1].data(), sizeof(float) * m * n));
}

// Each element is one sum in a fixed order whoever computes it: the product equals, bit for bit,
// the same product taken three rows or 17 columns at a time, with the scratch at any alignment.
TEST(CpuGemmBf16, SameBitsHoweverCutOrAligned) {
    std::mt19937 rng(9);
    for (const char *isa : kIsas) {
        ForcedIsa forced(isa);
        if (!forced.ok) continue;
        for (const Case &cs : std::vector<Case>{{64, 128, 128, false, false}, {128, 64, 64, true, true}}) {
            const Data d = make(cs, rng);
            const std::vector<float> whole = run(cs, d);
            std::vector<unsigned char> pack(gdn::cpu::gemm_bf16_pack_bytes(cs.m, cs.k) + 64);
            for (int offset : {1, 2, 4, 60}) {
                std::vector<float> c = d.c;
                gdn::cpu::gemm_bf16(cs.m, cs.n, cs.k, cs.alpha, d.av, d.bv, cs.c_scale, c.data(), cs.n,
                                    pack.data() + offset);
                ASSERT_EQ(0, std::memcmp(c.data(), whole.data(), sizeof(float) * c.size())) << isa << " offset " << offset;
            }
            std::vector<float> by_rows = d.c, by_cols = d.c;
            for (int r0 = 0; r0 < cs.m; r0 += 3) {
                const Mat a{d.av.p + r0 * d.av.row_stride, d.av.row_stride, d.av.col_stride};
                gdn::cpu::gemm_bf16(std::min(3, cs.m - r0), cs.n, cs.k, cs.alpha, a, d.bv, cs.c_scale,
                                    by_rows.data() + r0 * cs.n, cs.n, pack.data());
            }
            for (int j0 = 0; j0 < cs.n; j0 += 17) {
                const Mat b{d.bv.p + j0 * d.bv.col_stride, d.bv.row_stride, d.bv.col_stride};
                gdn::cpu::gemm_bf16(cs.m, std::min(17, cs.n - j0), cs.k, cs.alpha, d.av, b, cs.c_scale,
                                    by_cols.data() + j0, cs.n, pack.data());
            }
            ASSERT_EQ(0, std::memcmp(by_rows.data(), whole.data(), sizeof(float) * whole.size())) << isa;
            ASSERT_EQ(0, std::memcmp(by_cols.data(), whole.data(), sizeof(float) * whole.size())) << isa;
        }
    }
}

// Calls on several threads at once (each with its own scratch; AMX: each thread's own tile state)
// give the bits of a call alone.
TEST(CpuGemmBf16, ConcurrentCallsGiveTheSameBits) {
    std::mt19937 rng(14);
    for (const char *isa : kIsas) {
        ForcedIsa forced(isa);
        if (!forced.ok) continue;
        const Case cs{64, 128, 128, false, true};
        const Data d = make(cs, rng);
        const std::vector<float> alone = run(cs, d);
        std::vector<std::vector<float>> results(4);
        std::vector<std::thread> threads;
        for (auto &r : results)
            threads.emplace_back([&] {
                for (int repeat = 0; repeat < 20; ++repeat) r = run(cs, d);
            });
        for (auto &t : threads) t.join();
        for (const auto &r : results) ASSERT_EQ(0, std::memcmp(r.data(), alone.data(), sizeof(float) * r.size())) << isa;
    }
}

// Operands stored as bf16 (both, or either one) give the bits of the same values in F32 (then
// rounding is exact), with and without a row factor on B.
TEST(CpuGemmBf16, StoredBf16OperandsGiveTheF32EntrysBits) {
    std::mt19937 rng(10);
    for (const char *isa : kIsas) {
        ForcedIsa forced(isa);
        if (!forced.ok) continue;
        for (int variant = 0; variant < 8; ++variant) {
            Case cs{variant & 4 ? 33 : 64, 128, variant & 4 ? 71 : 128, bool(variant & 1), bool(variant & 2)};
            cs.with_b_rows = cs.with_c_rows = cs.with_c_in = variant & 4;
            Data d = make(cs, rng);
            for (float &x : d.a) x = bf16(x);
            for (float &x : d.b) x = bf16(x);
            std::vector<uint16_t> a16(d.a.size()), b16(d.b.size());
            gdn::cpu::round_to_bf16(d.a.data(), a16.data(), int64_t(a16.size()));
            gdn::cpu::round_to_bf16(d.b.data(), b16.data(), int64_t(b16.size()));
            const MatBf16 a{a16.data(), d.av.row_stride, d.av.col_stride}, b{b16.data(), d.bv.row_stride, d.bv.col_stride};
            std::vector<float> c = d.c, c_a16 = d.c, c_b16 = d.c;
            std::vector<unsigned char> pack(gdn::cpu::gemm_bf16_pack_bytes(cs.m, cs.k));
            gdn::cpu::gemm_bf16(cs.m, cs.n, cs.k, cs.alpha, a, b, cs.c_scale, c.data(), cs.n, pack.data(), d.scales());
            // One operand stored, the other F32 (the chunk math's bf16 q / k rows times a state).
            gdn::cpu::gemm_bf16(cs.m, cs.n, cs.k, cs.alpha, a, d.bv, cs.c_scale, c_a16.data(), cs.n, pack.data(), d.scales());
            gdn::cpu::gemm_bf16(cs.m, cs.n, cs.k, cs.alpha, d.av, b, cs.c_scale, c_b16.data(), cs.n, pack.data(), d.scales());
            const std::vector<float> want = run(cs, d);
            ASSERT_EQ(0, std::memcmp(c.data(), want.data(), sizeof(float) * c.size())) << isa << " variant " << variant;
            ASSERT_EQ(0, std::memcmp(c_a16.data(), want.data(), sizeof(float) * c.size())) << isa << " variant " << variant;
            ASSERT_EQ(0, std::memcmp(c_b16.data(), want.data(), sizeof(float) * c.size())) << isa << " variant " << variant;
        }
    }
}

// NaN and Inf as gemm gives them: a NaN in A spoils its row of C, an Inf in B its column (times
// nonzero values: Inf, or NaN where the signs meet); a c_in factor of 0 still reads its row of C
// (0 times Inf is NaN); c_scale 0 never reads C. k = 0 leaves c_scale diag(c_in) C.
TEST(CpuGemmBf16, PropagatesNanAndInfLikeGemm) {
    for (const char *isa : kIsas) {
        ForcedIsa forced(isa);
        if (!forced.ok) continue;
        const int m = 20, n = 40, k = 37;
        for (float c_scale : {1.0f, 0.0f}) {
            std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n, 1.0f), c_in(m, 1.0f);
            std::vector<unsigned char> pack(gdn::cpu::gemm_bf16_pack_bytes(m, k));
            a[3 * k + 5] = NAN;       // row 3
            b[7 * n + 11] = INFINITY;  // column 11
            std::fill(c.begin() + 9 * n, c.begin() + 10 * n, INFINITY);
            c[15 * n + 2] = NAN;
            c_in[9] = 0.0f;
            gdn::cpu::gemm_bf16(m, n, k, 1.0f, gdn::cpu::rows(a.data(), k), gdn::cpu::rows(b.data(), n), c_scale,
                                c.data(), n, pack.data(), {nullptr, nullptr, c_in.data()});
            for (int i = 0; i < m; ++i)
                for (int j = 0; j < n; ++j) {
                    const float got = c[i * n + j];
                    const std::string where = std::string(isa) + " c_scale=" + std::to_string(c_scale) +
                                              " i=" + std::to_string(i) + " j=" + std::to_string(j);
                    if (i == 3 || (c_scale != 0.0f && (i == 9 || (i == 15 && j == 2)))) {
                        ASSERT_TRUE(std::isnan(got)) << where;
                    } else if (j == 11) {
                        ASSERT_EQ(got, INFINITY) << where;
                    } else {
                        ASSERT_EQ(got, 0.125f * k + (c_scale != 0.0f ? 1.0f : 0.0f)) << where;
                    }
                }
        }
        std::vector<float> c(6, 2.0f), c_in = {1, 2, 0};
        gdn::cpu::gemm_bf16(3, 2, 0, 1.0f, gdn::cpu::rows(c.data(), 0), gdn::cpu::rows(c.data(), 2), 0.5f, c.data(), 2,
                            nullptr, {nullptr, nullptr, c_in.data()});
        EXPECT_EQ(c, (std::vector<float>{1, 1, 2, 2, 0, 0})) << isa;
    }
}

TEST(CpuGemmBf16, RoundsToNearestEven) {
    using gdn::cpu::to_bf16;
    EXPECT_EQ(to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // a tie, to the even 1
    EXPECT_EQ(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // a tie, to the even 1 + 2^-6
    EXPECT_EQ(to_bf16(1.0f + 5 * std::ldexp(1.0f, -10)), 0x3f81);  // above the tie
    EXPECT_EQ(to_bf16(-0.0f), 0x8000);
    EXPECT_EQ(to_bf16(INFINITY), 0x7f80);
    EXPECT_EQ(to_bf16(-3.4e38f), 0xff80);  // past the largest bf16: Inf
    // Subnormals are kept (SPEC 3.1's element conversion), one just below the smallest normal
    // rounding up to it.
    EXPECT_EQ(to_bf16(std::ldexp(1.0f, -130)), 0x0008);
    EXPECT_EQ(to_bf16(-std::nextafter(std::ldexp(1.0f, -126), 0.0f)), 0x8080);
    EXPECT_EQ(to_bf16(std::ldexp(1.0f, -126)), 0x0080);
    EXPECT_TRUE(std::isnan(gdn::cpu::from_bf16(to_bf16(NAN))));
    uint32_t signalling_bits = 0x7f800001u;  // payload only in the low bits: rounding would read as Inf
    float signalling;
    std::memcpy(&signalling, &signalling_bits, sizeof signalling);
    EXPECT_TRUE(std::isnan(gdn::cpu::from_bf16(to_bf16(signalling))));
    EXPECT_EQ(gdn::cpu::from_bf16(0x4049), 3.140625f);
}

// round_to_bf16 (vectorised where the host has AVX512_BF16) gives to_bf16's bits on every kind of
// value: normals, ties, denormals, zeros, Inf, quiet and signalling NaNs; at lengths with a tail.
TEST(CpuGemmBf16, RoundingManyGivesToBf16sBits) {
    std::mt19937 rng(15);
    for (int64_t n : {1, 31, 32, 33, 1000}) {
        std::vector<uint32_t> bits(n);
        for (uint32_t &u : bits) {
            u = rng();
            switch (rng() % 5) {
                case 0: u &= 0x807fffffu; break;               // denormal or zero
                case 1: u |= 0x7f800000u; break;               // Inf or NaN
                case 2: u = (u & 0xffff0000u) | 0x8000u; break;  // a tie
                default: break;
            }
        }
        std::vector<float> src(n);
        std::memcpy(src.data(), bits.data(), sizeof(float) * n);
        std::vector<uint16_t> dst(n + 1, 0xabcd);
        gdn::cpu::round_to_bf16(src.data(), dst.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], gdn::cpu::to_bf16(src[i])) << std::hex << bits[i];
        EXPECT_EQ(dst[n], 0xabcd);  // nothing past the end
    }
}

// An F32 operand is packed as vcvtne2ps2bf16 rounds it: a subnormal, even one just below the
// smallest normal that to_bf16 rounds up to it, counts as zero; the smallest normal counts.
TEST(CpuGemmBf16, SubnormalF32OperandsCountAsZero) {
    for (const char *isa : kIsas) {
        ForcedIsa forced(isa);
        if (!forced.ok) continue;
        const float below = std::nextafter(std::ldexp(1.0f, -126), 0.0f), smallest = std::ldexp(1.0f, -126);
        std::vector<float> a = {below, smallest}, b = {std::ldexp(1.0f, 100), std::ldexp(1.0f, 100)}, c(2);
        std::vector<unsigned char> pack(gdn::cpu::gemm_bf16_pack_bytes(2, 1));
        gdn::cpu::gemm_bf16(2, 1, 1, 1.0f, gdn::cpu::rows(a.data(), 1), gdn::cpu::rows(b.data(), 1), 0.0f, c.data(), 1,
                            pack.data());
        EXPECT_EQ(c[0], 0.0f) << isa;
        EXPECT_EQ(c[1], std::ldexp(1.0f, -26)) << isa;
    }
}

TEST(CpuGemmBf16, ChoosesANativeKernelWhereTheHostHasOne) {
    const std::string best = gdn::cpu::gemm_bf16_best_isa();
    EXPECT_EQ(best, gdn::cpu::gemm_bf16_isa());
    EXPECT_EQ(gdn::cpu::gemm_bf16_native(), best != "generic");
    EXPECT_TRUE(gdn::cpu::gemm_bf16_force_isa("generic"));
    EXPECT_FALSE(gdn::cpu::gemm_bf16_force_isa("sse2"));
    EXPECT_TRUE(gdn::cpu::gemm_bf16_force_isa(best.c_str()));
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bf16")) EXPECT_NE(best, "generic");
#endif
}

}  // namespace
