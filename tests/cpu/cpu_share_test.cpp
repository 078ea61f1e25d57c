// gdn_forward_share / gdn_backward_share: a call split into nth shares run on the caller's
// threads gives the same bits as the whole call, for every nth and every way the shares are
// scheduled (concurrently, one after another, in reverse), and bad shares are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "case.h"
#include "problem_data.h"
#include "runner.h"

namespace {

using namespace gdn::testkit;

std::vector<std::string> output_names(const Case &c) {
    if (c.op == Op::Forward) return {"out", "states"};
    return {"dq", "dk", "dv", "dg", "dbeta", "ds0"};
}

enum class Schedule { Concurrent, InOrder, Reverse };

// Runs case c on a cpu context: whole (nth = 0) or as nth shares scheduled as asked.
std::vector<std::vector<double>> run(const Case &c, TensorSet &inputs, int nth, Schedule schedule, int chunk = 0) {
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = 1;
    params.chunk_size = chunk;
    gdn_context *ctx = nullptr;
    EXPECT_EQ(gdn_context_create("cpu", &params, &ctx), GDN_OK);
    TensorSet outputs = make_outputs(c, GDN_TYPE_F32);
    Mirror in(inputs, host_memory()), out(outputs, host_memory());
    const gdn_problem p = problem_of(c, in);
    const gdn_tensor o = out.tensor("out"), states = out.tensor("states");
    const gdn_tensor d_out = in.tensor("d_out"), d_states = in.tensor("d_states");
    const gdn_grads grads = grads_of(out);
    auto share = [&](int ith) {
        const gdn_status s = c.op == Op::Forward ? gdn_forward_share(ctx, &p, &o, &states, ith, nth)
                                                 : gdn_backward_share(ctx, &p, &d_out, &d_states, &grads, ith, nth);
        EXPECT_EQ(s, GDN_OK) << gdn_last_error(ctx);
    };
    if (nth == 0) {
        const gdn_status s = c.op == Op::Forward ? gdn_forward(ctx, &p, &o, &states)
                                                 : gdn_backward(ctx, &p, &d_out, &d_states, &grads);
        EXPECT_EQ(s, GDN_OK) << gdn_last_error(ctx);
    } else if (schedule == Schedule::Concurrent) {
        std::vector<std::thread> threads;
        for (int ith = 0; ith < nth; ++ith) threads.emplace_back(share, ith);
        for (auto &t : threads) t.join();
    } else {
        for (int i = 0; i < nth; ++i) share(schedule == Schedule::InOrder ? i : nth - 1 - i);
    }
    gdn_context_free(ctx);
    EXPECT_EQ(outputs.changed_outside_views(), "");
    std::vector<std::vector<double>> all;
    for (const std::string &name : output_names(c)) all.push_back(outputs.read(name));
    return all;
}

bool bitwise_equal(const std::vector<std::vector<double>> &a, const std::vector<std::vector<double>> &b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(double)) != 0) return false;
    return true;
}

Case make_case(Op op, bool kda, Shape s) {
    Case c;
    c.group = "share";
    c.op = op;
    c.shape = s;
    c.kda = kda;
    c.strided = true;
    return c;
}

TEST(CpuShares, SameBitsAsTheWholeCallForEveryNth) {
    // 2 q/k sequences x 3 key heads = 6 groups (7 shares leave one idle; the forward slices groups
    // when nth > 6); T = 150 is chunked, T = 3 runs the per-token forward; K = 2 snapshots.
    for (int64_t T : {150, 3})
        for (bool kda : {false, true})
            for (Op op : {Op::Forward, Op::Backward}) {
                const Case c = make_case(op, kda, {32, 32, 3, 6, T, 4, 2, 2});
                SCOPED_TRACE(c.label());
                TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
                const auto whole = run(c, inputs, 0, Schedule::InOrder);
                for (int nth : {1, 2, 3, 7, 13})
                    for (Schedule s : {Schedule::Concurrent, Schedule::Reverse})
                        EXPECT_TRUE(bitwise_equal(whole, run(c, inputs, nth, s))) << "nth = " << nth;
            }
}

TEST(CpuShares, ValueColumnBlocksToo) {
    // One key head read by 2 value heads, B = 1: 3 and 8 shares cut each unit's 128 value columns
    // into blocks (cpu/value_columns.h); the bits stay the whole call's.
    for (bool kda : {false, true}) {
        const Case c = make_case(Op::Forward, kda, {32, 128, 1, 2, 150, 1, 1, 2});
        SCOPED_TRACE(c.label());
        TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
        const auto whole = run(c, inputs, 0, Schedule::InOrder);
        for (int nth : {3, 8})
            for (Schedule s : {Schedule::Concurrent, Schedule::Reverse})
                EXPECT_TRUE(bitwise_equal(whole, run(c, inputs, nth, s))) << "nth = " << nth;
    }
}

TEST(CpuShares, PerTokenBackwardToo) {
    const Case c = make_case(Op::Backward, false, {16, 16, 2, 4, 40, 2, 1, 1});
    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
    const auto whole = run(c, inputs, 0, Schedule::InOrder, 1);
    for (int nth : {2, 3}) EXPECT_TRUE(bitwise_equal(whole, run(c, inputs, nth, Schedule::Concurrent, 1))) << nth;
}

TEST(CpuShares, ConcurrentCallsOnOneContext) {
    // Two different calls, each split into 3 shares, all six on their own threads at once.
    const Case a = make_case(Op::Forward, false, {32, 32, 2, 4, 100, 2, 1, 1});
    const Case b = make_case(Op::Backward, true, {16, 16, 2, 2, 70, 1, 1, 1});
    TensorSet in_a = make_inputs(a, GDN_TYPE_F32, 1), in_b = make_inputs(b, GDN_TYPE_F32, 2);
    const auto want_a = run(a, in_a, 0, Schedule::InOrder), want_b = run(b, in_b, 0, Schedule::InOrder);
    gdn_context *ctx = nullptr;
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = 1;
    ASSERT_EQ(gdn_context_create("cpu", &params, &ctx), GDN_OK);
    TensorSet out_a = make_outputs(a, GDN_TYPE_F32), out_b = make_outputs(b, GDN_TYPE_F32);
    Mirror ia(in_a, host_memory()), oa(out_a, host_memory()), ib(in_b, host_memory()), ob(out_b, host_memory());
    const gdn_problem pa = problem_of(a, ia), pb = problem_of(b, ib);
    const gdn_tensor o = oa.tensor("out"), st = oa.tensor("states"), d_out = ib.tensor("d_out"), d_st = ib.tensor("d_states");
    const gdn_grads grads = grads_of(ob);
    std::vector<std::thread> threads;
    for (int ith = 0; ith < 3; ++ith) {
        threads.emplace_back([&, ith] { EXPECT_EQ(gdn_forward_share(ctx, &pa, &o, &st, ith, 3), GDN_OK); });
        threads.emplace_back([&, ith] { EXPECT_EQ(gdn_backward_share(ctx, &pb, &d_out, &d_st, &grads, ith, 3), GDN_OK); });
    }
    for (auto &t : threads) t.join();
    gdn_context_free(ctx);
    EXPECT_TRUE(bitwise_equal(want_a, {out_a.read("out"), out_a.read("states")}));
    std::vector<std::vector<double>> got_b;
    for (const std::string &name : output_names(b)) got_b.push_back(out_b.read(name));
    EXPECT_TRUE(bitwise_equal(want_b, got_b));
}

TEST(CpuShares, BadSharesAreRefusedAndWriteNothing) {
    const Case c = make_case(Op::Forward, false, {16, 16, 1, 2, 10, 1, 1, 1});
    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, 3);
    TensorSet outputs = make_outputs(c, GDN_TYPE_F32);
    outputs.poison();
    Mirror in(inputs, host_memory()), out(outputs, host_memory());
    const gdn_problem p = problem_of(c, in);
    const gdn_tensor o = out.tensor("out"), states = out.tensor("states");
    gdn_context *ctx = nullptr;
    ASSERT_EQ(gdn_context_create("cpu", nullptr, &ctx), GDN_OK);
    const int bad[][2] = {{-1, 2}, {2, 2}, {0, 0}, {0, -3}};
    for (const auto &b : bad) {
        EXPECT_EQ(gdn_forward_share(ctx, &p, &o, &states, b[0], b[1]), GDN_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(gdn_last_error(ctx)).find("nth = " + std::to_string(b[1])), std::string::npos) << gdn_last_error(ctx);
        EXPECT_EQ(gdn_backward_share(ctx, &p, nullptr, nullptr, nullptr, b[0], b[1]), GDN_ERROR_INVALID_ARGUMENT);
    }
    // A bad tensor fails every share alike.
    gdn_problem wrong = p;
    wrong.k.ne[0] = 8;
    for (int ith = 0; ith < 2; ++ith) EXPECT_EQ(gdn_forward_share(ctx, &wrong, &o, &states, ith, 2), GDN_ERROR_SHAPE);
    for (double x : outputs.read("out")) EXPECT_TRUE(std::isnan(x));
    gdn_context_free(ctx);
}

// Shares finish in any order: one that succeeds after one that failed leaves the failure's
// message for the caller to read once all have returned (a whole call's success clears it).
TEST(CpuShares, ASucceedingShareLeavesTheMessageOfOneThatFailed) {
    const Case c = make_case(Op::Forward, false, {16, 16, 1, 2, 10, 1, 1, 1});
    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, 3);
    TensorSet outputs = make_outputs(c, GDN_TYPE_F32);
    Mirror in(inputs, host_memory()), out(outputs, host_memory());
    const gdn_problem p = problem_of(c, in);
    const gdn_tensor o = out.tensor("out"), states = out.tensor("states");
    gdn_context *ctx = nullptr;
    ASSERT_EQ(gdn_context_create("cpu", nullptr, &ctx), GDN_OK);
    gdn_problem wrong = p;
    wrong.k.ne[0] = 8;
    ASSERT_EQ(gdn_forward_share(ctx, &wrong, &o, &states, 0, 2), GDN_ERROR_SHAPE);
    const std::string failure = gdn_last_error(ctx);
    ASSERT_NE(failure.find("k.ne"), std::string::npos) << failure;
    EXPECT_EQ(gdn_forward_share(ctx, &p, &o, &states, 1, 2), GDN_OK);
    EXPECT_EQ(gdn_last_error(ctx), failure);
    EXPECT_EQ(gdn_forward(ctx, &p, &o, &states), GDN_OK);
    EXPECT_STREQ(gdn_last_error(ctx), "");
    gdn_context_free(ctx);
}

TEST(CpuShares, RefRunsTheWholeCallInShareZero) {
    const Case c = make_case(Op::Forward, false, {16, 16, 1, 2, 10, 1, 1, 1});
    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, 4);
    BackendSession ref({"REF", "ref", 0}, 1);
    RunResult want = run_case(c, inputs, ref);
    TensorSet outputs = make_outputs(c, GDN_TYPE_F32);
    Mirror in(inputs, host_memory()), out(outputs, host_memory());
    const gdn_problem p = problem_of(c, in);
    const gdn_tensor o = out.tensor("out"), states = out.tensor("states");
    for (int ith = 2; ith >= 0; --ith) EXPECT_EQ(gdn_forward_share(ref.context(), &p, &o, &states, ith, 3), GDN_OK);
    EXPECT_EQ(outputs.read("out"), want.outputs.read("out"));
}

}  // namespace
