// The cpu backend against ref on every feature the contract has: head sizes 1..256, Sk != Sv,
// GDA/KDA, tiled/grouped maps, Bq < B (Bq = 1 and Bq = 2), s0 on/off, K snapshots (K > T too), token counts around
// the chunk length, packed q/k/v views, every gate regime and beta extreme; both ops, every
// output tensor, with the chunked form at its default and odd chunk lengths and the per-token
// form (chunk_size = 1).
//
// Thresholds: the shared ones of gdn-ops test (tools/testkit/thresholds.cpp: NMSE 1e-10 forward,
// 1e-9 backward, worst element 1e-4 of |ref| + rms(ref); 100x NMSE room for mixed-sign KDA gates,
// where the problem itself amplifies errors). F32 accumulation over n ~ 1e3..1e4 roundings gives
// an expected NMSE of ~1e-12..1e-10; the cpu backend measures 1e-15..1e-12 on these cases.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "case.h"
#include "cpu/gemm.h"
#include "metrics.h"
#include "problem_data.h"
#include "runner.h"
#include "thresholds.h"

namespace {

using namespace gdn::testkit;

struct ParityCase {
    Case c;
    int chunk;  // cpu chunk_size: 0 default, 1 per-token, else the chunk length
};

Case make(Op op, Shape s, bool kda, gdn_head_map heads, bool strided, bool s0, Gate gate, BetaFill beta) {
    Case c;
    c.group = "cpu";
    c.op = op;
    c.shape = s;
    c.kda = kda;
    c.heads = heads;
    c.strided = strided;
    c.s0 = s0;
    c.gate = gate;
    c.beta = beta;
    return c;
}

std::vector<ParityCase> parity_cases() {
    std::vector<ParityCase> out;
    auto both = [&](Shape s, bool kda, gdn_head_map heads, bool strided, bool s0, Gate gate, BetaFill beta, int chunk) {
        for (Op op : {Op::Forward, Op::Backward}) out.push_back({make(op, s, kda, heads, strided, s0, gate, beta), chunk});
    };
    const auto T = GDN_HEAD_MAP_TILED, G = GDN_HEAD_MAP_GROUPED;
    // Head sizes, square and not.
    for (int64_t hs : {1, 2, 4, 16, 32, 64, 128, 256})
        for (bool kda : {false, true})
            both({hs, hs, 1, 2, hs >= 128 ? 70 : 130, 1, 1, 1}, kda, T, true, true, Gate::Mild, BetaFill::Random, 0);
    for (auto [sk, sv] : {std::pair<int64_t, int64_t>{16, 48}, {48, 16}, {128, 32}, {3, 5}})
        for (bool kda : {false, true}) both({sk, sv, 2, 4, 77, 2, 2, 1}, kda, T, true, true, Gate::Mild, BetaFill::Random, 0);
    // Chunked, with head sizes off the kernels' widths: Sk not a multiple of 4 (the leftover rows
    // of load_state / store_state's 4 x 4 transposes) with Sv filling several state panels (128)
    // or ending in a partial one (72, 100: above 64 and not a multiple of 16); s0 on and off,
    // snapshots stored through the same paths.
    for (auto [sk, sv] : {std::pair<int64_t, int64_t>{67, 128}, {45, 72}, {50, 100}})
        for (bool kda : {false, true})
            for (bool s0 : {true, false})
                both({sk, sv, 1, 2, sv == 72 ? 130 : 70, 1, 1, 2}, kda, T, true, s0, Gate::Mild, BetaFill::Random, 0);
    // Token counts around the chunk length, snapshots (K > T included), Bq < B, grouped heads.
    for (int64_t t : {1, 9, 33, 64, 65, 130})
        for (int64_t K : {1, 2, 4})
            for (bool kda : {false, true})
                both({16, 16, 2, 6, t, 2, 1, K}, kda, G, false, true, Gate::Mild, BetaFill::Random, 0);
    both({16, 16, 2, 4, 3, 2, 2, 4}, false, T, true, true, Gate::Mild, BetaFill::Random, 0);
    // Bq > 1: B = 4 sequences on Bq = 2 q/k sequences (sequences 0, 1 read q/k sequence 0 and
    // 2, 3 read 1). With Bq = 1 every sequence reads the same q/k, so a wrong q/k sequence index
    // gives the same numbers; here it does not. Both gate kinds and head maps, the per-token
    // forward (T = 3), the chunked forms (default and 16) and the per-token backward (chunk 1).
    for (bool kda : {false, true})
        for (gdn_head_map heads : {T, G})
            for (int chunk : {0, 1, 16})
                for (int64_t t : {3, 70}) both({16, 16, 2, 4, t, 4, 2, 2}, kda, heads, false, true, Gate::Mild, BetaFill::Random, chunk);
    // Gate regimes x beta extremes, both gate kinds; with and without s0.
    for (Gate gate : {Gate::Zero, Gate::Mild, Gate::Strong, Gate::Spike, Gate::Mixed})
        for (BetaFill beta : {BetaFill::Random, BetaFill::Zero, BetaFill::One})
            for (bool kda : {false, true}) {
                if (gate == Gate::Mixed && !kda) continue;  // mixed signs are a KDA regime
                both({32, 32, 2, 4, 130, 1, 1, 2}, kda, T, true, beta != BetaFill::Zero, gate, beta, 0);
            }
    // The per-token forward's groups of four state columns (a group's first pass runs inside
    // another's second): Sv not a multiple of four (a partial group alone or in a pair), a lone
    // full group, Sk padded to whole vectors or not, one token, several, and more than one block
    // of 16; with and without s0. Sv = 18 ends in a lone partial group (five groups), Sv = 30 in
    // a pair's partial second group (eight), both over several pairs. Unpadded states (strided = false) of 64 and 128 floats per
    // column take the loops with the column stride known at compile time and, with several
    // tokens and Sv >= 16, the prefetch of the next pair's columns.
    for (auto [sk, sv] : {std::pair<int64_t, int64_t>{8, 5}, {16, 12}, {128, 12}, {64, 20}, {128, 24}, {3, 7}, {32, 18}, {45, 30}})
        for (int64_t t : {1, 5, 20})
            for (bool s0 : {true, false})
                for (bool strided : {true, false})
                    for (bool kda : {false, true})
                        both({sk, sv, 1, 2, t, 1, 1, 2}, kda, T, strided, s0, Gate::Mild, BetaFill::Random, 1);
    // Other chunk lengths and the per-token form on a mixed shape.
    for (int chunk : {1, 2, 7, 16, 100})
        for (bool kda : {false, true})
            for (Gate gate : {Gate::Mild, Gate::Strong, Gate::Spike})
                both({16, 24, 2, 4, 97, 2, 1, 3}, kda, G, false, true, gate, BetaFill::Random, chunk);
    return out;
}

class Parity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(Parity, MatchesRef) {
    const ParityCase &pc = GetParam();
    const Case &c = pc.c;
    SCOPED_TRACE(c.label() + " chunk_size=" + std::to_string(pc.chunk));
    BackendSession ref({"REF", "ref", 0}, 1), cpu({"CPU", "cpu", 0}, 2, pc.chunk);
    ASSERT_TRUE(ref.ok()) << ref.error();
    ASSERT_TRUE(cpu.ok()) << cpu.error();
    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
    RunResult expected = run_case(c, inputs, ref);
    RunResult actual = run_case(c, inputs, cpu);
    ASSERT_EQ(expected.status, GDN_OK) << expected.error;
    ASSERT_EQ(actual.status, GDN_OK) << actual.error;
    EXPECT_EQ(actual.stray_write, "");
    const std::vector<std::string> names = c.op == Op::Forward ? std::vector<std::string>{"out", "states"}
                                                               : std::vector<std::string>{"dq", "dk", "dv", "dg", "dbeta", "ds0"};
    for (const std::string &name : names) {
        const Comparison cmp = compare(actual.outputs.read(name), expected.outputs.read(name));
        const Threshold t = test_threshold(c, name);
        EXPECT_TRUE(cmp.finite) << name;
        EXPECT_LE(cmp.nmse, t.nmse) << name << ": " << cmp.describe();
        EXPECT_LE(cmp.max_rel, t.max_rel) << name << ": " << cmp.describe();
    }
}

// The same check with each GEMM kernel this host has (the suite above runs the best one only):
// the forward keeps its states in panels of the kernel's widest tile (8 columns for SSE2 and
// generic, 16 for AVX2 and NEON, 64 for AVX-512), read and written by load_state, store_state
// and the per-panel products. Sv = 128 and 96 (several panels; 96 is not a multiple of 64, so
// AVX-512 keeps row-major states there), s0 and snapshots, both gate kinds and ops; Sk = 64, and
// 67 and 45 (not multiples of 4: the transposes' leftover rows, which must use the panels too),
// with Sv = 72 (a partial last panel for the 16- and 64-column kernels).
TEST(ParityKernels, MatchesRefWithEveryKernel) {
    int kernels = 0;
    for (const char *isa : {"generic", "sse2", "avx2", "avx512", "neon"}) {
        if (!gdn::cpu::gemm_force_isa(isa)) continue;
        ++kernels;
        for (auto [sk, sv] : {std::pair<int64_t, int64_t>{64, 128}, {64, 96}, {67, 128}, {45, 72}})
            for (bool kda : {false, true})
                for (Op op : {Op::Forward, Op::Backward}) {
                    const Case c = make(op, {sk, sv, 1, 2, 70, 1, 1, 3}, kda, GDN_HEAD_MAP_TILED, true, true, Gate::Mild,
                                        BetaFill::Random);
                    SCOPED_TRACE(std::string(isa) + " " + c.label());
                    BackendSession ref({"REF", "ref", 0}, 1), cpu({"CPU", "cpu", 0}, 2);
                    ASSERT_TRUE(ref.ok() && cpu.ok());
                    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
                    RunResult expected = run_case(c, inputs, ref), actual = run_case(c, inputs, cpu);
                    ASSERT_EQ(actual.status, GDN_OK) << actual.error;
                    const std::vector<std::string> names = op == Op::Forward
                                                               ? std::vector<std::string>{"out", "states"}
                                                               : std::vector<std::string>{"dq", "dk", "dv", "dg", "dbeta", "ds0"};
                    for (const std::string &name : names) {
                        const Comparison cmp = compare(actual.outputs.read(name), expected.outputs.read(name));
                        const Threshold t = test_threshold(c, name);
                        EXPECT_LE(cmp.nmse, t.nmse) << name << ": " << cmp.describe();
                        EXPECT_LE(cmp.max_rel, t.max_rel) << name << ": " << cmp.describe();
                    }
                }
    }
    EXPECT_GE(kernels, 2);  // the target's baseline and at least one more (x86-64: generic is not built)
    ASSERT_TRUE(gdn::cpu::gemm_force_isa(gdn::cpu::gemm_best_isa()));
}

INSTANTIATE_TEST_SUITE_P(Cases, Parity, ::testing::ValuesIn(parity_cases()),
                         [](const ::testing::TestParamInfo<ParityCase> &info) {
                             return std::to_string(info.index) + (info.param.c.op == Op::Forward ? "_fwd" : "_bwd") +
                                    (info.param.c.kda ? "_kda" : "_gda") + "_chunk" + std::to_string(info.param.chunk) +
                                    (info.param.c.shape.Bq > 1 && info.param.c.shape.Bq < info.param.c.shape.B ? "_bq" + std::to_string(info.param.c.shape.Bq) : "");
                         });

}  // namespace
