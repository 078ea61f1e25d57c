// The cpu backend's promises beyond matching ref: the same bits for every thread count and run,
// the in-place state update of decoding, workspace that does not grow with T * Sk * Sv, finite
// results under -inf gates, and F32 only.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "case.h"
#include "cpu/backward_schedule.h"
#include "cpu/cache_control.h"
#include "cpu/forward_schedule.h"
#include "cpu/gemm.h"
#include "metrics.h"
#include "problem_data.h"
#include "runner.h"
#include "thresholds.h"

namespace {

using namespace gdn::testkit;

Case shape_case(Op op, bool kda, Gate gate, Shape s) {
    Case c;
    c.group = "cpu";
    c.op = op;
    c.shape = s;
    c.kda = kda;
    c.strided = true;
    c.gate = gate;
    return c;
}

std::vector<std::string> output_names(const Case &c) {
    if (c.op == Op::Forward) return {"out", "states"};
    return {"dq", "dk", "dv", "dg", "dbeta", "ds0"};
}

// Every output bit for bit, as the float values read back (exact in double).
std::vector<std::vector<double>> outputs_of(const Case &c, TensorSet &inputs, int threads, int chunk = 0) {
    BackendSession cpu({"CPU", "cpu", 0}, threads, chunk);
    EXPECT_TRUE(cpu.ok()) << cpu.error();
    RunResult r = run_case(c, inputs, cpu);
    EXPECT_EQ(r.status, GDN_OK) << r.error;
    std::vector<std::vector<double>> all;
    for (const std::string &name : output_names(c)) all.push_back(r.outputs.read(name));
    return all;
}

bool bitwise_equal(const std::vector<std::vector<double>> &a, const std::vector<std::vector<double>> &b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].size() != b[i].size()) return false;
        if (std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(double)) != 0) return false;
    }
    return true;
}

TEST(CpuDeterminism, SameBitsForEveryThreadCountAndRun) {
    // 2 q/k sequences x 3 key heads = 6 groups of 2 units: 8 threads leave some idle (the forward
    // cuts every group into slices), 2 and 3 split them evenly, 4 and 5 do not (the forward cuts
    // the last 2 groups, the last 1); chunked (default) and per-token forms, GDA and KDA, both ops.
    for (bool kda : {false, true})
        for (Op op : {Op::Forward, Op::Backward})
            for (int chunk : {0, 1}) {
                const Case c = shape_case(op, kda, Gate::Mild, {32, 32, 3, 6, 150, 2, 2, 2});
                SCOPED_TRACE(c.label() + " chunk_size=" + std::to_string(chunk));
                TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
                const auto first = outputs_of(c, inputs, 1, chunk);
                for (int threads : {1, 2, 3, 4, 5, 8})
                    EXPECT_TRUE(bitwise_equal(first, outputs_of(c, inputs, threads, chunk))) << threads;
            }
}

TEST(CpuSchedule, ForwardCutsGroupsOnlyWhereWorkersWouldWait) {
    using gdn::cpu::forward_split;
    const auto cut = [](gdn::cpu::ForwardSplit s) { return std::make_pair(s.first_group, s.slices); };
    using Cut = std::pair<int64_t, int64_t>;
    EXPECT_EQ(cut(forward_split(0, 3, 4, true)), Cut(0, 1));     // nothing chunked
    EXPECT_EQ(cut(forward_split(4, 3, 8, true)), Cut(0, 2));     // fewer groups than workers: all
    EXPECT_EQ(cut(forward_split(4, 3, 8, false)), Cut(0, 2));    // ... with packed sequences too
    EXPECT_EQ(cut(forward_split(2, 3, 64, true)), Cut(0, 3));    // at most one unit a slice
    for (int workers : {1, 2, 4, 8, 16}) EXPECT_EQ(cut(forward_split(16, 3, workers, true)), Cut(16, 1)) << workers;
    EXPECT_EQ(cut(forward_split(16, 3, 3, true)), Cut(15, 3));   // the 16th group on 3 workers
    EXPECT_EQ(cut(forward_split(16, 3, 12, true)), Cut(12, 3));  // the last 4 on 12: 12 slices
    EXPECT_EQ(cut(forward_split(16, 3, 3, false)), Cut(16, 1));  // packed: lengths fill the gaps
    EXPECT_EQ(cut(forward_split(16, 1, 3, true)), Cut(16, 1));   // one unit: nothing to cut
    // 7 groups left on 9 workers: 14 or 21 slices would put two on some workers, slower than
    // one whole group; likewise 2-unit groups on 9 and 10 workers.
    EXPECT_EQ(cut(forward_split(16, 3, 9, true)), Cut(16, 1));
    EXPECT_EQ(cut(forward_split(16, 2, 9, true)), Cut(16, 1));
    EXPECT_EQ(cut(forward_split(16, 2, 10, true)), Cut(16, 1));
    // The chosen cut's last round is never longer than the whole groups'.
    for (int workers = 1; workers <= 40; ++workers)
        for (int64_t units : {1, 2, 3, 4, 6}) {
            const gdn::cpu::ForwardSplit s = forward_split(16, units, workers, true);
            if (s.first_group == 0 || s.first_group == 16) continue;
            const int64_t last = 16 - s.first_group;
            EXPECT_LT(gdn::cpu::round_span(last, units, s.slices, workers), gdn::cpu::round_span(last, units, 1, workers))
                << workers << " workers, " << units << " units";
        }
}

TEST(CpuSchedule, ForwardCutsValueColumnsOnlyWhereUnitsLeaveWorkersIdle) {
    using gdn::cpu::forward_column_blocks;
    using gdn::cpu::ForwardSplit;
    // The 27B shape at B = 1: 16 groups of 3 units, 128 value columns in quanta of 32 (AVX-512).
    const ForwardSplit every_unit{0, 3};
    for (int workers : {2, 16, 48, 64}) EXPECT_EQ(forward_column_blocks(every_unit, 16, 3, 128, 32, workers), 1) << workers;
    EXPECT_EQ(forward_column_blocks(every_unit, 16, 3, 128, 32, 96), 2);    // 96 halves in one round
    EXPECT_EQ(forward_column_blocks(every_unit, 16, 3, 128, 32, 192), 4);   // 192 quarters
    EXPECT_EQ(forward_column_blocks(every_unit, 16, 3, 128, 32, 1000), 4);  // no block narrower than a quantum
    EXPECT_EQ(forward_column_blocks(every_unit, 16, 3, 128, 16, 384), 8);   // AVX2's quanta of 16
    EXPECT_EQ(forward_column_blocks(ForwardSplit{0, 2}, 16, 3, 128, 32, 40), 1);  // slices of 2 units: not cut
    EXPECT_EQ(forward_column_blocks(ForwardSplit{16, 1}, 16, 3, 128, 32, 8), 1);
    EXPECT_EQ(forward_column_blocks(every_unit, 16, 3, 24, 32, 192), 1);    // narrower than a quantum
    // Blocks tile the columns in whole quanta, the remainder in the last.
    for (int64_t columns : {64, 96, 100, 128})
        for (int64_t blocks = 1; blocks <= columns / 32; ++blocks) {
            int64_t next = 0;
            for (int64_t i = 0; i < blocks; ++i) {
                const gdn::cpu::ColumnRange c = gdn::cpu::column_block(columns, 32, blocks, i);
                EXPECT_EQ(c.begin, next);
                EXPECT_GE(c.end - c.begin, 32);
                if (i + 1 < blocks) EXPECT_EQ(c.end % 32, 0);
                next = c.end;
            }
            EXPECT_EQ(next, columns);
        }
}

TEST(CpuSchedule, ForwardTakesSeveralGroupsAnItemOnlyWhereWorkersStayBusy) {
    using gdn::cpu::forward_groups_per_item;
    using gdn::cpu::ForwardSplit;
    // The rule alone (the backend asks it only of whole groups, forward_split's {groups, 1}: 16
    // groups on 3 or 6 workers are cut into slices there first). The 27B shape at B = 1: 16
    // groups of 3 units, whose states take 192 KiB a group.
    constexpr int64_t state = 3 * 128 * 128 * 4, l2 = 1 << 20;
    const ForwardSplit whole{16, 1};
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 1, state, l2), 4);
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 2, state, l2), 4);  // 4 items of 4: 8 groups' time each
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 4, state, l2), 4);
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 3, state, l2), 2);  // 8 pairs on 3: 6 groups' time, as 16 on 3
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 8, state, l2), 2);
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 6, state, l2), 1);  // pairs: 4 groups' time, not 3
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 16, state, l2), 1);
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 2, state, 512 << 10), 2);  // 4 groups' states overflow L2
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 2, state, 256 << 10), 1);
    EXPECT_EQ(forward_groups_per_item(whole, 16, 16, 1, 2, 300 << 10, 1 << 30), 4);
    EXPECT_EQ(forward_groups_per_item({15, 3}, 16, 16, 1, 3, state, l2), 1);  // slices: none
    EXPECT_EQ(forward_groups_per_item({0, 3}, 16, 16, 2, 96, state, l2), 1);  // column blocks: none
    EXPECT_EQ(forward_groups_per_item({6, 1}, 6, 3, 1, 1, state, l2), 1);     // 3 key heads a sequence: none divides
    EXPECT_EQ(forward_groups_per_item({12, 1}, 12, 6, 1, 1, state, l2), 2);   // 6: pairs
    EXPECT_EQ(forward_groups_per_item({0, 1}, 0, 16, 1, 2, state, l2), 1);
}

// Groups per forward item, as the backend decides it, for `groups` groups of 2 units with 32 x 32
// states and 4 key heads a sequence, on `threads` workers.
int64_t groups_per_item(int64_t groups, bool single_call, int threads) {
    const gdn::cpu::ForwardSplit split = gdn::cpu::forward_split(groups, 2, threads, single_call);
    return gdn::cpu::forward_groups_per_item(split, groups, 4, 1, threads, 2 * 32 * 32 * 4, gdn::cpu::l2_cache_bytes());
}

// Every output of c, bit for bit, on each of `threads` threads as on `reference` threads.
void expect_bits_as_on(const Case &c, int reference, std::initializer_list<int> threads) {
    SCOPED_TRACE(c.label());
    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
    const auto expected = outputs_of(c, inputs, reference);
    for (int t : threads) EXPECT_TRUE(bitwise_equal(expected, outputs_of(c, inputs, t))) << t << " threads";
}

TEST(CpuDeterminism, SeveralGroupsAnItemKeepTheBits) {
    // 2 q/k sequences x 4 key heads = 8 groups of 2 units, taken 4 to an item on 1 and 2
    // threads, 2 on 4 and 5, 1 on 3 (pairs would take 4 groups' time, not 3) and 8; 6 threads cut
    // the last 2 groups into slices. The groups go chunk by chunk in turn, the one furthest
    // behind first: with KDA's strong gates every group cuts its chunks where its own gates span
    // too much, so their chunks differ. GDA and KDA, mild and strong gates, snapshots, both
    // state layouts, against single groups (8 threads).
    const std::vector<std::pair<int, int64_t>> batched = {{1, 4}, {2, 4}, {3, 1}, {4, 2}, {5, 2}, {8, 1}, {6, 1}};
    for (const auto &[threads, groups] : batched) EXPECT_EQ(groups_per_item(8, true, threads), groups) << threads;
    EXPECT_EQ(gdn::cpu::forward_split(8, 2, 6, true).slices, 2);
    for (bool kda : {false, true})
        for (Gate gate : {Gate::Mild, Gate::Strong})
            for (StateLayout layout : {StateLayout::KeyMajor, StateLayout::ValueMajor}) {
                Case c = shape_case(Op::Forward, kda, gate, {32, 32, 4, 8, 150, 2, 2, 3});
                c.state_layout = layout;
                expect_bits_as_on(c, 8, {1, 2, 3, 4, 5, 6});
            }
    // Packed sequences (cu_seqlens), all chunked: 3 sequences x 4 key heads = 12 groups, taken 4
    // to an item on 1 and 3 threads, 2 on 2 and 6, 1 on 4 and 12; no item mixes sequences.
    const std::vector<std::pair<int, int64_t>> packed = {{1, 4}, {2, 2}, {3, 4}, {4, 1}, {6, 2}, {12, 1}};
    for (const auto &[threads, groups] : packed) EXPECT_EQ(groups_per_item(12, false, threads), groups) << threads;
    for (bool kda : {false, true}) {
        Case c = shape_case(Op::Forward, kda, Gate::Strong, {32, 32, 4, 8, 200, 1, 1, 1});
        c.pack(3);
        for (size_t n = 1; n < c.cu_seqlens.size(); ++n) EXPECT_GT(c.cu_seqlens[n] - c.cu_seqlens[n - 1], 16);
        expect_bits_as_on(c, 12, {1, 2, 3, 4, 6});
    }
}

TEST(CpuDeterminism, ValueColumnBlocksKeepTheBits) {
    // One key head read by 2 value heads, B = 1: 2 units, so 3 threads and more cut each unit's
    // value columns into blocks (forward_column_blocks). Every output and snapshot keeps the
    // bits of one thread: GDA and KDA, both state layouts, F32 and BF16 inputs; 128 columns, and
    // 96 and 100, which the whole call keeps in other panels and tiles than its blocks do (and
    // 100 leaves a last block that is not whole quanta).
    const int quantum = static_cast<int>(gdn::cpu::gemm_panel_width());
    for (int64_t Sv : {128, 96, 100}) EXPECT_GT(gdn::cpu::forward_column_blocks({0, 2}, 1, 2, Sv, quantum, 8), 1);
    for (int64_t Sv : {128, 96, 100})
        for (bool kda : {false, true})
            for (StateLayout layout : {StateLayout::KeyMajor, StateLayout::ValueMajor})
                for (gdn_type x : {GDN_TYPE_F32, GDN_TYPE_BF16}) {
                    if (Sv != 128 && x != GDN_TYPE_F32) continue;
                    Case c = shape_case(Op::Forward, kda, Gate::Mild, {32, Sv, 1, 2, 150, 1, 1, 2});
                    c.state_layout = layout;
                    c.types = ElementTypes::of(x);
                    SCOPED_TRACE(c.label());
                    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
                    const auto first = outputs_of(c, inputs, 1);
                    for (int threads : {2, 3, 5, 8})
                        EXPECT_TRUE(bitwise_equal(first, outputs_of(c, inputs, threads))) << threads;
                }
}

TEST(CpuDeterminism, BackwardSplitOverUnitsSameBitsForEveryThreadCount) {
    // 2 q/k sequences x 2 key heads = 4 groups of 3 value heads, 12 units. 1, 2 and 5 threads run
    // whole groups per worker; 3, 8 and 13 (more threads than units) run the units split over
    // workers in rounds (cpu/backward_schedule.h). Every gradient, ds0 included, with K = 3
    // snapshots and their d_states; chunk 16 cuts T = 150 into more chunks than checkpoints
    // (segments of 2 chunks, replayed), chunk 0 into chunks of the default length. Then packed
    // sequences.
    for (int threads : {3, 8, 13}) EXPECT_TRUE(gdn::cpu::split_backward_units(4, 3, threads)) << threads;
    for (int threads : {1, 2, 5}) EXPECT_FALSE(gdn::cpu::split_backward_units(4, 3, threads)) << threads;
    for (bool kda : {false, true})
        for (int chunk : {0, 16})
            for (bool packed : {false, true}) {
                Case c = shape_case(Op::Backward, kda, Gate::Mild, {32, 32, 2, 6, 150, 2, 2, 3});
                if (packed) c.pack(5);
                SCOPED_TRACE(c.label() + " chunk_size=" + std::to_string(chunk));
                TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
                const auto first = outputs_of(c, inputs, 1, chunk);
                for (int threads : {2, 3, 5, 8, 13})
                    EXPECT_TRUE(bitwise_equal(first, outputs_of(c, inputs, threads, chunk))) << threads;
            }
}

TEST(CpuSchedule, BackwardSplitsPanelsOnlyWhereUnitsLeaveWorkersIdle) {
    using gdn::cpu::backward_items;
    using Items = gdn::cpu::BackwardItems;
    // The 27B shape at B = 1: 16 groups of 3 units, 2 panels of 64 columns each.
    EXPECT_EQ(backward_items(16, 3, 2, 2), Items::Groups);
    EXPECT_EQ(backward_items(16, 3, 2, 32), Items::Units);
    EXPECT_EQ(backward_items(16, 3, 2, 64), Items::Units);  // 96 panels would take two rounds of half a unit
    EXPECT_EQ(backward_items(16, 3, 2, 96), Items::Panels);
    EXPECT_EQ(backward_items(16, 3, 2, 192), Items::Panels);
    EXPECT_EQ(backward_items(16, 3, 1, 192), Items::Units);  // one panel: nothing to cut
    EXPECT_EQ(backward_items(1, 1, 2, 2), Items::Panels);    // one unit on two cores
    EXPECT_EQ(gdn::cpu::BackwardPanels::of(128).count, 2);
    EXPECT_EQ(gdn::cpu::BackwardPanels::of(192).count, 3);
    EXPECT_EQ(gdn::cpu::BackwardPanels::of(64).count, 1);
    EXPECT_EQ(gdn::cpu::BackwardPanels::of(96).count, 1);  // 64 does not divide it: one panel
}

TEST(CpuDeterminism, BackwardSplitOverPanelsSameBitsForEveryThreadCount) {
    // One key head read by 2 value heads, B = 1: 1 thread runs the group whole, 2 threads its 2
    // units split, 4 and more each unit's panels of 64 value columns (Sv = 128: 2 panels; 192:
    // 3; and 3 threads split 192 into panels, 128 into units), finished from their sums in a
    // step of their own. Every gradient, ds0 included, with
    // K = 3 snapshots and their d_states; chunk 16 keeps Z and replays segments of 2 chunks.
    for (int64_t Sv : {128, 192})
        for (bool kda : {false, true})
            for (int chunk : {0, 16})
                for (StateLayout layout : {StateLayout::KeyMajor, StateLayout::ValueMajor}) {
                    if (layout == StateLayout::ValueMajor && (chunk != 0 || Sv != 128)) continue;
                    Case c = shape_case(Op::Backward, kda, Gate::Mild, {32, Sv, 1, 2, 150, 1, 1, 3});
                    c.state_layout = layout;
                    SCOPED_TRACE(c.label() + " chunk_size=" + std::to_string(chunk));
                    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
                    const auto first = outputs_of(c, inputs, 1, chunk);
                    for (int threads : {2, 3, 4, 6, 7})
                        EXPECT_TRUE(bitwise_equal(first, outputs_of(c, inputs, threads, chunk))) << threads;
                }
}

TEST(CpuDeterminism, BackwardTailSameBitsForEveryThreadCount) {
    // 7 key heads = 7 groups of 2 value heads: 2, 3 and 4 threads do not divide them, so the last
    // 2, 3, 4 groups run as a tail (forward passes unit by unit, then the reverse walks); 7 threads
    // run one group each. K = 3 snapshots; chunk 16 replays segments of 2 chunks.
    for (int threads : {2, 3, 4}) {
        EXPECT_FALSE(gdn::cpu::split_backward_units(7, 2, threads)) << threads;
        EXPECT_EQ(gdn::cpu::backward_tail_groups(7, threads), threads) << threads;
    }
    for (int threads : {1, 7, 8}) EXPECT_EQ(gdn::cpu::backward_tail_groups(7, threads), 0) << threads;
    EXPECT_EQ(gdn::cpu::backward_tail_groups(16, 2), 0);  // the workers divide the groups
    EXPECT_EQ(gdn::cpu::backward_tail_groups(16, 6), 6);
    for (bool kda : {false, true})
        for (int chunk : {0, 16}) {
            const Case c = shape_case(Op::Backward, kda, Gate::Mild, {32, 32, 7, 14, 150, 1, 1, 3});
            SCOPED_TRACE(c.label() + " chunk_size=" + std::to_string(chunk));
            TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
            const auto first = outputs_of(c, inputs, 1, chunk);
            for (int threads : {2, 3, 4, 7})
                EXPECT_TRUE(bitwise_equal(first, outputs_of(c, inputs, threads, chunk))) << threads;
        }
}

// Plain contiguous F32 tensor over a vector.
gdn_tensor tensor(std::vector<float> &data, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    gdn_tensor t{};
    data.resize(n0 * n1 * n2 * n3);
    t.data = data.data();
    t.type = GDN_TYPE_F32;
    const int64_t ne[4] = {n0, n1, n2, n3};
    int64_t stride = sizeof(float);
    for (int d = 0; d < 4; ++d) {
        t.ne[d] = ne[d];
        t.nb[d] = stride;
        stride *= ne[d];
    }
    return t;
}

void fill(std::vector<float> &v, float lo, float hi, unsigned seed) {
    for (size_t i = 0; i < v.size(); ++i) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = lo + (hi - lo) * static_cast<float>(seed >> 8) / static_cast<float>(1u << 24);
    }
}

TEST(CpuInPlace, StatesMayBeTheInitialState) {
    // Decoding (T = 1) and short inputs (T = 5; T = 20 with chunk_size = 1: two blocks of the
    // per-token form) at head sizes 16 and 128, and prefill (T = 100, chunked): the in-place
    // update gives exactly the out-of-place result.
    for (auto [T, S] : {std::pair<int64_t, int64_t>{1, 16}, {1, 128}, {5, 16}, {5, 128}, {20, 128}, {100, 16}}) {
        const int64_t Hk = 2, Hv = 4, B = 2;
        std::vector<float> q, k, v, g, beta, s0, out_a, out_b, states, inplace;
        gdn_problem p{};
        p.q = tensor(q, S, Hk, T, B);
        p.k = tensor(k, S, Hk, T, B);
        p.v = tensor(v, S, Hv, T, B);
        p.g = tensor(g, 1, Hv, T, B);
        p.beta = tensor(beta, 1, Hv, T, B);
        p.state = tensor(s0, S, S, Hv, B);
        fill(q, -0.25f, 0.25f, 1);
        fill(k, -0.25f, 0.25f, 2);
        fill(v, -1, 1, 3);
        fill(g, -0.3f, -0.02f, 4);
        fill(beta, 0, 1, 5);
        fill(s0, -1, 1, 6);
        const gdn_tensor o1 = tensor(out_a, S, Hv, T, B), o2 = tensor(out_b, S, Hv, T, B);
        const gdn_tensor st = tensor(states, S, S, Hv, B);
        inplace = s0;
        gdn_context *ctx = nullptr;
        gdn_context_params params = gdn_context_default_params();
        params.chunk_size = T == 20 ? 1 : 0;
        ASSERT_EQ(gdn_context_create("cpu", &params, &ctx), GDN_OK);
        ASSERT_EQ(gdn_forward(ctx, &p, &o1, &st), GDN_OK) << gdn_last_error(ctx);
        p.state.data = inplace.data();
        ASSERT_EQ(gdn_forward(ctx, &p, &o2, &p.state), GDN_OK) << gdn_last_error(ctx);
        gdn_context_free(ctx);
        EXPECT_EQ(out_a, out_b) << "T=" << T << " S=" << S;
        EXPECT_EQ(states, inplace) << "T=" << T << " S=" << S;
    }
}

uint64_t workspace_after(const Case &c, int chunk) {
    BackendSession cpu({"CPU", "cpu", 0}, 1, chunk);
    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
    EXPECT_EQ(run_case(c, inputs, cpu).status, GDN_OK);
    return gdn_context_workspace_bytes(cpu.context());
}

TEST(CpuWorkspace, GrowsWithTokensOverChunkNotTokensTimesState) {
    // One unit, Sk = Sv = 64, chunks of 32, 64 and 128 tokens and the backend's default (0: at
    // least 32), scalar and per-channel (KDA) gates. Doubling T from 1024 to 2048 may add, per
    // extra token, one chunk-plan entry (8 bytes) and, in the backward, one row of kept prediction
    // errors Z (Sv floats) and for KDA one row of kept gate factors e (Sk floats; both kept only
    // where a chunk's Z is at most a state, C <= Sk, so not at 128), and per extra chunk one
    // checkpointed state (backward only): nothing that scales with T * Sk * Sv. Storing every
    // state at T = 2048 would take 32 MiB; the whole workspace must stay under 1/16 of that, 1/12
    // for KDA (at C = 32 a token's kept share is 1/32 of a state in checkpoints and 1/64 each in
    // Z and e: 1/16 before the chunk's buffers).
    const uint64_t state_bytes = 64 * 64 * sizeof(float), z_row_bytes = 64 * sizeof(float);
    const uint64_t e_row_bytes = 64 * sizeof(float);
    for (bool kda : {false, true})
        for (int chunk : {32, 64, 128, 0})
            for (Op op : {Op::Forward, Op::Backward}) {
                SCOPED_TRACE((op == Op::Forward ? "forward, chunk " : "backward, chunk ") + std::to_string(chunk) +
                             (kda ? ", KDA" : ""));
                auto workspace_at = [&](int64_t T) {
                    return workspace_after(shape_case(op, kda, Gate::Mild, {64, 64, 1, 1, T, 1, 1, 1}), chunk);
                };
                const uint64_t small = workspace_at(1024), large = workspace_at(2048);
                const bool backward = op == Op::Backward, kept = backward && chunk <= 64;  // default: 64 at most
                const uint64_t extra_chunks = 1024 / (chunk > 0 ? chunk : 32);
                const uint64_t row_bytes = kept ? z_row_bytes + (kda ? e_row_bytes : 0) : 0;
                const uint64_t allowed =
                    1024 * (sizeof(int64_t) + row_bytes) + (backward ? extra_chunks * state_bytes : 0);
                EXPECT_GT(small, 0u);
                EXPECT_LE(large - small, allowed);
                EXPECT_LE(large, 2048 * state_bytes / (kda ? 12 : 16));
            }
}

TEST(CpuNumerics, MinusInfinityGatesStayFinite) {
    // g = -inf wipes the state (exp(-inf) = 0): ref stays finite, and so must every chunked term,
    // whose prefix sums would otherwise form -inf - -inf.
    for (bool kda : {false, true})
        for (Op op : {Op::Forward, Op::Backward}) {
            const Case c = shape_case(op, kda, Gate::Mild, {16, 16, 2, 4, 100, 1, 1, 1});
            SCOPED_TRACE(c.label());
            TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
            std::vector<double> g = inputs.read("g");
            const size_t per_token = g.size() / 100;
            for (size_t t = 5; t < 100; t += 11)
                for (size_t n = 0; n < per_token; ++n) g[t * per_token + n] = -INFINITY;
            inputs.write("g", g);
            BackendSession ref({"REF", "ref", 0}, 1), cpu({"CPU", "cpu", 0}, 2);
            RunResult expected = run_case(c, inputs, ref), actual = run_case(c, inputs, cpu);
            ASSERT_EQ(actual.status, GDN_OK) << actual.error;
            for (const std::string &name : output_names(c)) {
                const Comparison cmp = compare(actual.outputs.read(name), expected.outputs.read(name));
                EXPECT_TRUE(cmp.finite) << name;
                EXPECT_LE(cmp.nmse, test_threshold(c, name).nmse) << name << ": " << cmp.describe();
            }
        }
}

TEST(CpuTypes, RefusesF64) {
    Case c = shape_case(Op::Forward, false, Gate::Mild, {4, 4, 1, 1, 3, 1, 1, 1});
    BackendSession cpu({"CPU", "cpu", 0}, 1);
    std::string why;
    TensorSet inputs = make_inputs(c, GDN_TYPE_F64, c.seed(0));
    EXPECT_EQ(check_case(c, inputs, cpu, why), GDN_ERROR_TYPE);
    EXPECT_NE(why.find("F32"), std::string::npos) << why;
}

}  // namespace
