// The small GEMM behind the chunked kernels, against a plain double loop, for every ISA this
// host has, every transpose, overwrite / accumulate / scaled C, and awkward sizes (edges of the 5/6-row and
// 8/16/32/64-column tiles).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/chunk_core.h"
#include "cpu/gemm.h"

namespace {

using gdn::cpu::Mat;

TEST(CpuGemm, MatchesDoubleLoopsOnEveryIsaAndTranspose) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    int tested = 0;
    for (const char *isa : {"generic", "sse2", "avx2", "avx512", "neon"}) {
        if (!gdn::cpu::gemm_force_isa(isa)) continue;
        ++tested;
        // With AVX-512, products with every side above 32 take 6 x 64 tiles (m = 37, 64, 128:
        // row edges of 1, 4, 2), the others 12 x 32. A transposed B's full panels are packed in
        // 8 x 8 blocks (AVX2, AVX-512), then 4 x 4, then row by row: k = 13 takes all three.
        for (int m : {1, 5, 6, 7, 13, 37, 64, 128})
            for (int n : {1, 3, 16, 33, 64, 130})
                for (int k : {0, 1, 7, 13, 64})
                    for (int mode = 0; mode < 12; ++mode) {
                        const bool at = mode & 1, bt = mode & 2;
                        const float c_scale = mode < 4 ? 0.0f : mode < 8 ? 1.0f : 0.75f;  // overwrite, add, scale
                        std::vector<float> a(m * k + 1), b(k * n + 1), c(m * n), pack(gdn::cpu::gemm_pack_floats(k));
                        for (float &x : a) x = u(rng);
                        for (float &x : b) x = u(rng);
                        for (float &x : c) x = u(rng);
                        const std::vector<float> c0 = c;
                        const Mat av = at ? gdn::cpu::transposed(a.data(), m) : gdn::cpu::rows(a.data(), k);
                        const Mat bv = bt ? gdn::cpu::transposed(b.data(), k) : gdn::cpu::rows(b.data(), n);
                        gdn::cpu::gemm(m, n, k, 0.5f, av, bv, c_scale, c.data(), n, pack.data());
                        for (int i = 0; i < m; ++i)
                            for (int j = 0; j < n; ++j) {
                                double want = c_scale * double(c0[i * n + j]);
                                for (int kk = 0; kk < k; ++kk)
                                    want += 0.5 * av.p[i * av.row_stride + kk * av.col_stride] *
                                            bv.p[kk * bv.row_stride + j * bv.col_stride];
                                ASSERT_NEAR(c[i * n + j], want, 1e-5 * (k + 1))
                                    << isa << " m=" << m << " n=" << n << " k=" << k << " mode=" << mode;
                            }
                    }
    }
    ASSERT_TRUE(gdn::cpu::gemm_force_isa(gdn::cpu::gemm_best_isa()));  // back to the best
#if defined(__x86_64__) || defined(__aarch64__)
    EXPECT_GE(tested, 2);  // the target's baseline and its best build (sse2 + avx2 here; generic + neon)
#else
    EXPECT_EQ(tested, 1);
#endif
}

// Row factors folded in (RowScales): C = alpha diag(c_rows) A diag(b_rows) B + c_scale diag(c_in) C
// on every ISA and transpose, with C added, overwritten or scaled, over sizes with partial tiles and
// panels, k = 0, and a B that would otherwise be read in place (row-major, full panels, few row
// tiles: a B with b_rows must be packed, scaled).
// The factors are powers of two and spread far apart (2^-20 .. 2^20): a factor applied to the
// wrong row, or not at all, is off by orders of magnitude, not by rounding.
TEST(CpuGemm, FoldsRowFactorsIntoTheProduct) {
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> u(-1, 1);
    std::uniform_int_distribution<int> exponent(-20, 20);
    for (const char *isa : {"generic", "sse2", "avx2", "avx512", "neon"}) {
        if (!gdn::cpu::gemm_force_isa(isa)) continue;
        for (int m : {1, 7, 64})
            for (int n : {5, 33, 64, 130})
                for (int k : {0, 1, 6, 128})
                    for (int variant = 0; variant < 24; ++variant) {
                        const int mode = variant % 12;
                        const bool at = mode & 1, bt = mode & 2, with_in = variant >= 12;
                        const bool with_c = mode % 3 != 1, with_b = mode % 3 != 0;
                        const float c_scale = mode < 4 ? 1.0f : mode < 8 ? 0.0f : 0.75f;  // add, overwrite, scale
                        std::vector<float> a(m * k), b(k * n), c(m * n), c_rows(m), b_rows(k), c_in(m),
                            pack(gdn::cpu::gemm_pack_floats(k));
                        for (float &x : a) x = u(rng);
                        for (float &x : b) x = u(rng);
                        for (float &x : c) x = u(rng);
                        for (float &x : c_rows) x = std::ldexp(1.0f, exponent(rng));
                        for (float &x : b_rows) x = std::ldexp(1.0f, exponent(rng));
                        for (float &x : c_in) x = std::ldexp(1.0f, exponent(rng));
                        const std::vector<float> c0 = c;
                        const Mat av = at ? gdn::cpu::transposed(a.data(), m) : gdn::cpu::rows(a.data(), k);
                        const Mat bv = bt ? gdn::cpu::transposed(b.data(), k) : gdn::cpu::rows(b.data(), n);
                        gdn::cpu::gemm(m, n, k, 0.5f, av, bv, c_scale, c.data(), n, pack.data(),
                                       {with_c ? c_rows.data() : nullptr, with_b ? b_rows.data() : nullptr,
                                        with_in ? c_in.data() : nullptr});
                        for (int i = 0; i < m; ++i)
                            for (int j = 0; j < n; ++j) {
                                double sum = 0, magnitude = 0;
                                for (int kk = 0; kk < k; ++kk) {
                                    const double term = double(av.p[i * av.row_stride + kk * av.col_stride]) *
                                                        bv.p[kk * bv.row_stride + j * bv.col_stride] *
                                                        (with_b ? b_rows[kk] : 1.0f);
                                    sum += term;
                                    magnitude += std::fabs(term);
                                }
                                const double row = 0.5 * (with_c ? c_rows[i] : 1.0f);
                                const double old = c_scale * (with_in ? c_in[i] : 1.0f) * double(c0[i * n + j]);
                                const double want = old + row * sum;
                                ASSERT_NEAR(c[i * n + j], want, 1e-6 * (std::fabs(old) + row * magnitude) + 1e-30)
                                    << isa << " m=" << m << " n=" << n << " k=" << k << " variant=" << variant;
                            }
                    }
    }
    ASSERT_TRUE(gdn::cpu::gemm_force_isa(gdn::cpu::gemm_best_isa()));
}

// A row factor of 0 on the added C (c_in) multiplies the row, it does not skip it: an Inf there
// becomes NaN (0 * Inf), as a scaling pass of its own would make it, on full and partial panels
// and with k = 0; only c_scale = 0 leaves C unread.
TEST(CpuGemm, ZeroRowFactorOfTheAddedCStillReadsIt) {
    for (const char *isa : {"generic", "sse2", "avx2", "avx512", "neon"}) {
        if (!gdn::cpu::gemm_force_isa(isa)) continue;
        for (int n : {33, 64})
            for (int k : {0, 6})
                for (float c_scale : {1.0f, 0.0f}) {
                    const int m = 7;
                    std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n, 1.0f), c_in(m, 1.0f),
                        pack(gdn::cpu::gemm_pack_floats(k));
                    std::fill(c.begin() + 2 * n, c.begin() + 3 * n, INFINITY);
                    c_in[2] = 0.0f;
                    gdn::cpu::gemm(m, n, k, 1.0f, gdn::cpu::rows(a.data(), k), gdn::cpu::rows(b.data(), n), c_scale, c.data(),
                                   n, pack.data(), {nullptr, nullptr, c_in.data()});
                    for (int i = 0; i < m; ++i)
                        for (int j = 0; j < n; ++j) {
                            const float want = 0.125f * k + (c_scale != 0.0f && i != 2 ? 1.0f : 0.0f);
                            if (i == 2 && c_scale != 0.0f)
                                ASSERT_TRUE(std::isnan(c[i * n + j])) << isa << " n=" << n << " k=" << k << " j=" << j;
                            else
                                ASSERT_EQ(c[i * n + j], want) << isa << " n=" << n << " k=" << k << " i=" << i << " j=" << j;
                        }
                }
    }
    ASSERT_TRUE(gdn::cpu::gemm_force_isa(gdn::cpu::gemm_best_isa()));
}

// Each entry of C is the same sum in the same order whoever computes it, so a product equals,
// bit for bit, the same product taken a few rows at a time: tall products pack B's panels (many
// row tiles read them), short ones read B in place, over a B whose rows are a power of two apart
// as the chunk math's are; with AVX-512 the whole product takes 6 x 64 tiles (k > 32) and the
// three-row pieces 12 x 32 tiles (both full panels here, n = 128: a partial panel's epilogue
// may round alpha * sum + C differently).
TEST(CpuGemm, PackedAndInPlacePanelsGiveTheSameBits) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1, 1);
    for (const char *isa : {"generic", "sse2", "avx2", "avx512", "neon"}) {
        if (!gdn::cpu::gemm_force_isa(isa)) continue;
        for (int k : {1, 64, 128}) {
            const int m = 128, n = 128, ldb = 128;
            std::vector<float> a(m * k), b(k * ldb), c0(m * n), whole, rows_at_a_time, pack(gdn::cpu::gemm_pack_floats(k));
            for (float &x : a) x = u(rng);
            for (float &x : b) x = u(rng);
            for (float &x : c0) x = u(rng);
            whole = rows_at_a_time = c0;
            gdn::cpu::gemm(m, n, k, 0.5f, gdn::cpu::rows(a.data(), k), gdn::cpu::rows(b.data(), ldb), 1.0f,
                           whole.data(), n, pack.data());
            for (int r0 = 0; r0 < m; r0 += 3)
                gdn::cpu::gemm(std::min(3, m - r0), n, k, 0.5f, gdn::cpu::rows(a.data() + r0 * k, k),
                               gdn::cpu::rows(b.data(), ldb), 1.0f, rows_at_a_time.data() + r0 * n, n, pack.data());
            ASSERT_EQ(0, std::memcmp(whole.data(), rows_at_a_time.data(), sizeof(float) * whole.size()))
                << isa << " k=" << k;
            ASSERT_NE(0, std::memcmp(whole.data(), c0.data(), sizeof(float) * whole.size()));
        }
    }
    ASSERT_TRUE(gdn::cpu::gemm_force_isa(gdn::cpu::gemm_best_isa()));
}

// A state kept in column panels of the kernel's widest tile (the forward's running states,
// StatePanels in chunk_core.h), a product per panel, gives the bits of the row-major state's
// products on every ISA: read as B (panels read in place, [Qg; Kg] S0: m = 64, k = 128) and
// updated as C (C = c_scale C + A B, the update S = gL S + Kl^T Dm: m = 128, k = 32).
TEST(CpuGemm, StateInPanelsGivesTheRowMajorProductsBits) {
    std::mt19937 rng(12);
    std::uniform_real_distribution<float> u(-1, 1);
    auto random_floats = [&](int64_t n) {
        std::vector<float> v(n);
        for (float &x : v) x = u(rng);
        return v;
    };
    for (const char *isa : {"generic", "sse2", "avx2", "avx512", "neon"}) {
        if (!gdn::cpu::gemm_force_isa(isa)) continue;
        const int64_t Sk = 128, Sv = 128, panel = gdn::cpu::forward_state_panel(Sv, false);
        ASSERT_EQ(panel, gdn::cpu::gemm_wide_panel_width()) << isa;
        ASSERT_LT(panel, Sv) << isa;
        const gdn::cpu::StatePanels layout{Sk, panel};
        const std::vector<float> state = random_floats(Sk * Sv);
        std::vector<float> state_panels(Sk * Sv), pack(gdn::cpu::gemm_pack_floats(Sk));
        for (int64_t i = 0; i < Sk; ++i)
            for (int64_t j = 0; j < Sv; ++j) state_panels[layout.at(i, j)] = state[i * Sv + j];

        // As B: out (64 x Sv) += a (64 x Sk) S.
        {
            const int64_t m = 64;
            const std::vector<float> a = random_floats(m * Sk), c0 = random_floats(m * Sv);
            std::vector<float> row_major = c0, in_panels = c0;
            gdn::cpu::gemm(m, Sv, Sk, 0.5f, gdn::cpu::rows(a.data(), Sk), gdn::cpu::rows(state.data(), Sv), 1.0f,
                           row_major.data(), Sv, pack.data());
            for (int64_t j0 = 0; j0 < Sv; j0 += panel)
                gdn::cpu::gemm(m, panel, Sk, 0.5f, gdn::cpu::rows(a.data(), Sk),
                               gdn::cpu::rows(state_panels.data() + layout.first_of(j0), panel), 1.0f,
                               in_panels.data() + j0, Sv, pack.data());
            ASSERT_EQ(0, std::memcmp(row_major.data(), in_panels.data(), sizeof(float) * row_major.size())) << isa;
            ASSERT_NE(0, std::memcmp(row_major.data(), c0.data(), sizeof(float) * row_major.size()));
        }
        // As C: S = 0.75 S + a^T d for a (k x Sk, read transposed) and d (k x Sv).
        {
            const int64_t k = 32;
            const std::vector<float> a = random_floats(k * Sk), d = random_floats(k * Sv);
            std::vector<float> row_major = state, in_panels = state_panels;
            gdn::cpu::gemm(Sk, Sv, k, 1.0f, gdn::cpu::transposed(a.data(), Sk), gdn::cpu::rows(d.data(), Sv), 0.75f,
                           row_major.data(), Sv, pack.data());
            for (int64_t j0 = 0; j0 < Sv; j0 += panel)
                gdn::cpu::gemm(Sk, panel, k, 1.0f, gdn::cpu::transposed(a.data(), Sk), gdn::cpu::rows(d.data() + j0, Sv),
                               0.75f, in_panels.data() + layout.first_of(j0), panel, pack.data());
            for (int64_t i = 0; i < Sk; ++i)
                for (int64_t j = 0; j < Sv; ++j)
                    ASSERT_EQ(row_major[i * Sv + j], in_panels[layout.at(i, j)]) << isa << " S(" << i << ", " << j << ")";
            ASSERT_NE(0, std::memcmp(row_major.data(), state.data(), sizeof(float) * row_major.size()));
        }
    }
    ASSERT_TRUE(gdn::cpu::gemm_force_isa(gdn::cpu::gemm_best_isa()));
}

// lower_product is the full A B^T on and below the diagonal, bit for bit (each entry the same sum
// in the same order), and writes nothing above the diagonal outside its diagonal blocks.
TEST(CpuGemm, LowerProductIsTheFullProductsLowerTriangle) {
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> u(-1, 1);
    const float sentinel = 1234.5f;
    for (const char *isa : {"generic", "sse2", "avx2", "avx512", "neon"}) {
        if (!gdn::cpu::gemm_force_isa(isa)) continue;
        const int64_t block = std::max<int64_t>(32, gdn::cpu::gemm_panel_width());
        for (int64_t L : {1, 17, 33, 64})
            for (int64_t n : {7, 128}) {
                std::vector<float> a(L * n), b(L * n), full(L * L), lower(L * L, sentinel), pack(gdn::cpu::gemm_pack_floats(n));
                for (float &x : a) x = u(rng);
                for (float &x : b) x = u(rng);
                gdn::cpu::gemm(L, L, n, 1.0f, gdn::cpu::rows(a.data(), n), gdn::cpu::transposed(b.data(), n), 0.0f,
                               full.data(), L, pack.data());
                gdn::cpu::ChunkScratch scratch;  // F32 products (not the bf16 mode), on this pack
                scratch.pack.assign(pack.begin(), pack.end());
                gdn::cpu::lower_product(L, n, a.data(), b.data(), lower.data(), scratch);
                for (int64_t r = 0; r < L; ++r)
                    for (int64_t s = 0; s < L; ++s) {
                        if (s <= r) {
                            ASSERT_EQ(lower[r * L + s], full[r * L + s]) << isa << " L " << L << " r " << r << " s " << s;
                        } else if (r < s / block * block) {
                            ASSERT_EQ(lower[r * L + s], sentinel) << isa << " L " << L << " r " << r << " s " << s;
                        }
                    }
            }
    }
    ASSERT_TRUE(gdn::cpu::gemm_force_isa(gdn::cpu::gemm_best_isa()));
}

// The kernel chosen at start-up is the best this host has, and only the target's own kernels can
// be forced.
TEST(CpuGemm, ChoosesTheHostsBestKernel) {
    const std::string best = gdn::cpu::gemm_best_isa();
    EXPECT_EQ(std::string(gdn::cpu::gemm_isa()), best);
#if defined(__x86_64__)
    __builtin_cpu_init();
    const bool fma = __builtin_cpu_supports("fma");
    const char *want = __builtin_cpu_supports("avx512f") && fma ? "avx512"
                       : __builtin_cpu_supports("avx2") && fma ? "avx2"
                                                                : "sse2";
    EXPECT_EQ(best, want);
    EXPECT_TRUE(gdn::cpu::gemm_force_isa("sse2"));
    EXPECT_FALSE(gdn::cpu::gemm_force_isa("neon"));
    EXPECT_FALSE(gdn::cpu::gemm_force_isa("generic"));
#elif defined(__aarch64__)
    EXPECT_EQ(best, "neon");
    EXPECT_TRUE(gdn::cpu::gemm_force_isa("generic"));
    EXPECT_FALSE(gdn::cpu::gemm_force_isa("sse2"));
    EXPECT_FALSE(gdn::cpu::gemm_force_isa("avx2"));
#else
    EXPECT_EQ(best, "generic");
#endif
    EXPECT_FALSE(gdn::cpu::gemm_force_isa("no-such-isa"));
    EXPECT_FALSE(gdn::cpu::gemm_force_isa(nullptr));
    ASSERT_TRUE(gdn::cpu::gemm_force_isa(best.c_str()));
    EXPECT_EQ(std::string(gdn::cpu::gemm_isa()), best);
}

}  // namespace
