// Where the chunked kernels cut T (cpu/chunk_plan.h), checked against the rules rather than
// against the planner's own code: every chunk is at most max_len tokens, ends at every snapshot
// slot, keeps each KDA channel's prefix sums within kda_span_limit (a lone token excepted) and
// is cut no earlier than a rule requires; and the prefix sums ChunkPlanner keeps for the forward
// are exactly the running double sums of the clamped gates from the chunk's start.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "core/problem.h"
#include "cpu/chunk_plan.h"

namespace {

using gdn::Dims;
using gdn::cpu::clamp_gate;
using gdn::cpu::kda_span_limit;

struct Gates {
    Dims d;
    std::vector<float> values;  // [B][T][Hv][gate_width]
    gdn_tensor tensor{};

    const float *row(int64_t b, int64_t t, int64_t h) const {
        return values.data() + ((b * d.T + t) * d.Hv + h) * d.gate_width;
    }
};

// Mostly mild gates with heavy ones mixed in (a -25 in a 3-wide window of tokens cuts a chunk
// after a few tokens), the floor, and in some channels a NaN.
Gates make_gates(const Dims &d, uint64_t seed, bool with_nan) {
    Gates g;
    g.d = d;
    g.values.resize(d.B * d.T * d.Hv * d.gate_width);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> mild(-0.5f, 0.0f), heavy(-30.0f, -5.0f);
    std::uniform_int_distribution<int> pick(0, 99);
    for (float &x : g.values) {
        const int p = pick(rng);
        x = p < 80 ? mild(rng) : p < 98 ? heavy(rng) : p < 99 ? -1e30f : (with_nan ? std::numeric_limits<float>::quiet_NaN() : -3.0f);
    }
    g.tensor.data = g.values.data();
    g.tensor.type = GDN_TYPE_F32;
    const int64_t ne[4] = {d.gate_width, d.Hv, d.T, d.B};
    int64_t stride = sizeof(float);
    for (int i = 0; i < 4; ++i) {
        g.tensor.ne[i] = ne[i];
        g.tensor.nb[i] = stride;
        stride *= ne[i];
    }
    return g;
}

// Unit u's value head and sequence, in the planner's unit order.
struct UnitRef {
    int64_t b, h;
};
UnitRef unit_of(const Dims &d, int64_t bq, int64_t kh, int64_t u) {
    const int64_t per_kh = d.value_heads_per_key_head();
    return {bq * d.sequences_per_qk_sequence() + u / per_kh, d.value_head_of(kh, u % per_kh)};
}

// Would tokens [start, end) of every unit keep each channel's sums (from 0) within the limit?
bool within_span(const Gates &g, int64_t bq, int64_t kh, int64_t start, int64_t end) {
    const Dims &d = g.d;
    const int64_t units = d.value_heads_per_key_head() * d.sequences_per_qk_sequence();
    for (int64_t u = 0; u < units; ++u) {
        const UnitRef ur = unit_of(d, bq, kh, u);
        for (int64_t i = 0; i < d.gate_width; ++i) {
            double sum = 0.0, lo = 0.0, hi = 0.0;
            for (int64_t t = start; t < end; ++t) {
                sum += clamp_gate(g.row(ur.b, t, ur.h)[i]);
                lo = std::min(lo, sum);
                hi = std::max(hi, sum);
                // A NaN gate leaves lo and hi as they were (std::min and std::max keep their first
                // argument), here as in the planner: it never forces a cut.
                if (!(hi - lo <= kda_span_limit)) return false;
            }
        }
    }
    return true;
}

void check_plan(const Dims &d, int64_t max_len, uint64_t seed, bool with_nan) {
    const Gates g = make_gates(d, seed, with_nan);
    const bool kda = d.gate_width != 1;
    const int64_t units = d.value_heads_per_key_head() * d.sequences_per_qk_sequence();
    const int64_t first_snapshot_end = d.T - d.written_slots() + 1;
    for (int64_t bq = 0; bq < d.Bq; ++bq)
        for (int64_t kh = 0; kh < d.Hk; ++kh) {
            SCOPED_TRACE(testing::Message() << "bq " << bq << " kh " << kh);
            const gdn::cpu::GroupRef group{&g.tensor, &d, bq, kh};
            std::vector<int64_t> ends;
            gdn::cpu::plan_chunks(group, max_len, ends);
            gdn::cpu::ChunkPlanner planner;
            planner.resize(d);
            planner.reset(group, max_len);
            std::vector<double> sums(units * max_len * d.gate_width, -7.0);
            int64_t start = 0;
            for (const int64_t end : ends) {
                ASSERT_GT(end, start);
                ASSERT_LE(end - start, max_len);
                // The forward's call (plan_chunks is built on it; this is for the sums it keeps).
                ASSERT_EQ(planner.next_end(start, kda ? sums.data() : nullptr), end);
                // Within the span, and cut no earlier than the length, a snapshot slot or (KDA)
                // the span requires.
                const bool by_length_or_slot = end == std::min(d.T, start + max_len) || end >= first_snapshot_end;
                if (kda && end - start > 1) EXPECT_TRUE(within_span(g, bq, kh, start, end)) << "chunk at " << start;
                if (!by_length_or_slot) {
                    EXPECT_TRUE(kda) << "scalar gates cut at " << end;
                    EXPECT_FALSE(within_span(g, bq, kh, start, end + 1)) << "cut early at " << end;
                }
                // The kept sums: row r of unit u is the sum of its clamped gates over tokens start .. start + r.
                for (int64_t u = 0; kda && u < units; ++u) {
                    const UnitRef ur = unit_of(d, bq, kh, u);
                    for (int64_t i = 0; i < d.gate_width; ++i) {
                        double sum = 0.0;
                        for (int64_t t = start; t < end; ++t) {
                            sum += clamp_gate(g.row(ur.b, t, ur.h)[i]);
                            const double kept = sums[(u * max_len + t - start) * d.gate_width + i];
                            if (sum != sum) EXPECT_NE(kept, kept);
                            else EXPECT_EQ(kept, sum) << "unit " << u << " token " << t << " channel " << i;
                        }
                    }
                }
                start = end;
            }
            EXPECT_EQ(start, d.T);
            // A chunk ends at every slot: after token T-1-s for each written snapshot s.
            for (int64_t t = std::max<int64_t>(1, first_snapshot_end); t <= d.T; ++t)
                EXPECT_TRUE(std::find(ends.begin(), ends.end(), t) != ends.end()) << "no end at slot " << t;
        }
}

Dims dims(int64_t gate_width, int64_t T, int64_t K) {
    Dims d;
    d.Sk = d.Sv = 16;
    d.Hk = 2;
    d.Hv = 6;
    d.T = T;
    d.B = 2;
    d.Bq = 1;
    d.K = K;
    d.gate_width = gate_width;
    return d;
}

TEST(CpuPlan, KdaChunksFollowEveryRuleAndTheForwardKeepsTheirExactPrefixSums) {
    for (int64_t T : {1, 2, 17, 64, 200})
        for (int64_t K : {1, 3})
            for (int64_t max_len : {16, 64}) {
                SCOPED_TRACE(testing::Message() << "T " << T << " K " << K << " max_len " << max_len);
                check_plan(dims(16, T, K), std::min(max_len, T), 11 + T + K, false);
                check_plan(dims(16, T, K), std::min(max_len, T), 29 + T + K, true);
            }
}

TEST(CpuPlan, ScalarGatesCutOnlyAtTheLengthAndTheSnapshots) {
    for (int64_t T : {1, 5, 130})
        for (int64_t K : {1, 4}) {
            SCOPED_TRACE(testing::Message() << "T " << T << " K " << K);
            check_plan(dims(1, T, K), std::min<int64_t>(64, T), 5 + T, true);
        }
}

}  // namespace
