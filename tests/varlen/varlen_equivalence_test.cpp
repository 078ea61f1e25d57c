// Packed sequences (cu_seqlens, docs/VARLEN.md) on ref and cpu: a packed call gives, bit for
// bit, what the per-sequence calls on the same tokens give (the cpu's chunks start at every
// sequence start, so its chunk boundaries fall as in the per-sequence calls), for both ops and
// every output, across snapshots, KDA, head maps, strided views, s0 on/off, chunk lengths and
// the per-token paths; the cpu's results are the same bits for every thread count; and the
// packed cpu call matches ref to the harness thresholds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "metrics.h"
#include "sequence_calls.h"
#include "thresholds.h"

namespace {

using gdn::testkit::Case;
using gdn::testkit::Op;
using namespace gdn::varlentest;

struct Variant {
    std::string name;
    Case c;
};

std::vector<Variant> variants() {
    std::vector<Variant> out;
    for (Op op : {Op::Forward, Op::Backward}) {
        const std::string o = op == Op::Forward ? "fwd_" : "bwd_";
        out.push_back({o + "mixed_lengths", packed_case(op, 16, 2, 4, 300, 9)});
        Case kda = packed_case(op, 8, 1, 2, 200, 13);
        kda.kda = true;
        kda.gate = gdn::testkit::Gate::Strong;
        out.push_back({o + "kda_strong_gates", kda});
        Case snaps = packed_case(op, 16, 2, 6, 150, 11);
        snaps.shape.K = 3;
        snaps.heads = GDN_HEAD_MAP_GROUPED;
        out.push_back({o + "snapshots_grouped", snaps});
        Case strided = packed_case(op, 32, 2, 4, 260, 5);
        strided.strided = true;
        strided.s0 = false;
        out.push_back({o + "strided_no_s0", strided});
        out.push_back({o + "one_token_each", packed_case(op, 16, 1, 2, 40, 40)});
        out.push_back({o + "model_head_size", packed_case(op, 128, 2, 4, 400, 6)});
    }
    return out;
}

class PackedEqualsPerSequence : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PackedEqualsPerSequence, BitForBit) {
    const auto &[backend, chunk] = GetParam();
    for (const Variant &v : variants()) {
        SCOPED_TRACE(v.name + " " + v.c.label());
        const Outcome r = run_both(v.c, backend.c_str(), 2, chunk);
        for (const std::string &name : output_names(v.c))
            EXPECT_EQ(first_difference(r.packed, r.per_sequence, name), -1) << name << " differs from the per-sequence calls";
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, PackedEqualsPerSequence,
                         ::testing::Values(std::make_tuple(std::string("ref"), 0), std::make_tuple(std::string("cpu"), 0),
                                           std::make_tuple(std::string("cpu"), 1), std::make_tuple(std::string("cpu"), 16)),
                         [](const auto &info) {
                             return std::get<0>(info.param) + "_chunk" + std::to_string(std::get<1>(info.param));
                         });

// Items go to whichever worker is free (ThreadPool::run_weighted), so which worker runs which
// item changes from run to run: each thread count runs several times, so that state carried in a
// worker's scratch from one item to the next would show as bits that change between runs.
TEST(PackedCpu, SameBitsForEveryThreadCount) {
    for (const Variant &v : variants()) {
        SCOPED_TRACE(v.name);
        const gdn::testkit::TensorSet one = run_packed(v.c, "cpu", 1, 0);
        for (int threads : {2, 3, 7})
            for (int run = 0; run < 4; ++run) {
                const gdn::testkit::TensorSet many = run_packed(v.c, "cpu", threads, 0);
                for (const std::string &name : output_names(v.c))
                    EXPECT_EQ(first_difference(one, many, name), -1) << name << " with " << threads << " threads, run " << run;
            }
    }
}

TEST(PackedCpu, MatchesRefToTheHarnessThresholds) {
    for (const Variant &v : variants()) {
        SCOPED_TRACE(v.name);
        const gdn::testkit::TensorSet want = run_packed(v.c, "ref", 1, 0), got = run_packed(v.c, "cpu", 2, 0);
        for (const std::string &name : output_names(v.c)) {
            const gdn::testkit::Threshold limit = gdn::testkit::test_threshold(v.c, name);
            const gdn::testkit::Comparison cmp = gdn::testkit::compare(got.read(name), want.read(name));
            EXPECT_LE(cmp.nmse, limit.nmse) << name;
            EXPECT_LE(cmp.max_rel, limit.max_rel) << name;
        }
    }
}

// The boundary is real: the same tokens as one sequence give different outputs after the first
// boundary (the recurrence restarts there), and the same outputs before it.
TEST(PackedRef, RecurrenceRestartsAtEveryBoundary) {
    Case packed = packed_case(Op::Forward, 8, 1, 2, 60, 3);
    packed.s0 = false;
    Case whole = packed;
    whole.cu_seqlens.clear();
    const uint64_t seed = packed.seed(1);  // the same tokens in both calls
    const gdn::testkit::TensorSet a = run_packed(packed, "ref", 1, 0, GDN_TYPE_F32, seed),
                                  b = run_packed(whole, "ref", 1, 0, GDN_TYPE_F32, seed);
    const std::vector<double> oa = a.read("out"), ob = b.read("out");
    const size_t row = 8 * 2, first_end = static_cast<size_t>(packed.cu_seqlens[1]);
    ASSERT_GT(first_end, 0u);
    for (size_t i = 0; i < first_end * row; ++i) ASSERT_EQ(oa[i], ob[i]) << i;
    bool differs = false;
    for (size_t i = first_end * row; i < oa.size(); ++i) differs |= oa[i] != ob[i];
    EXPECT_TRUE(differs);
}

}  // namespace
