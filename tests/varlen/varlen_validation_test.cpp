// Bad offsets (docs/VARLEN.md, "Errors"): each row is one bad cu_seqlens or one shape that
// contradicts it. Every one must give its status from the call and from its dry run, a message
// naming the tensor and the values, and outputs still poison; on ref and on cpu.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "problem_data.h"
#include "sequence_calls.h"
#include "tensor_set.h"

namespace {

using gdn::testkit::Case;
using gdn::testkit::Op;
using gdn::testkit::TensorSet;

constexpr int64_t kT = 10, kN = 3;

// A packed call of kN sequences over kT tokens, with its offsets in storage the rows can edit.
struct PackedCall {
    Case fwd = gdn::varlentest::packed_case(Op::Forward, 4, 2, 4, kT, kN);
    Case bwd = gdn::varlentest::packed_case(Op::Backward, 4, 2, 4, kT, kN);
    TensorSet inputs = gdn::testkit::make_inputs(bwd, GDN_TYPE_F32, 7);
    TensorSet forward_outputs = gdn::testkit::make_outputs(fwd, GDN_TYPE_F32);
    TensorSet backward_outputs = gdn::testkit::make_outputs(bwd, GDN_TYPE_F32);
    std::vector<int64_t> offsets64;
    std::vector<int32_t> offsets32;
    gdn_problem problem{};
    gdn_tensor out{}, states{}, d_out{}, d_states{};
    gdn_grads grads{};

    PackedCall() {
        offsets64 = fwd.cu_seqlens;
        offsets32.assign(offsets64.begin(), offsets64.end());
        problem.q = inputs.host("q");
        problem.k = inputs.host("k");
        problem.v = inputs.host("v");
        problem.g = inputs.host("g");
        problem.beta = inputs.host("beta");
        problem.state = inputs.host("state");
        use_i32(false);
        out = forward_outputs.host("out");
        states = forward_outputs.host("states");
        d_out = inputs.host("d_out");
        d_states = inputs.host("d_states");
        grads = {backward_outputs.host("dq"), backward_outputs.host("dk"), backward_outputs.host("dv"),
                 backward_outputs.host("dg"), backward_outputs.host("dbeta"), backward_outputs.host("ds0")};
    }

    void use_i32(bool i32) {
        gdn_tensor &t = problem.cu_seqlens;
        t.data = i32 ? static_cast<void *>(offsets32.data()) : static_cast<void *>(offsets64.data());
        t.type = i32 ? GDN_TYPE_I32 : GDN_TYPE_I64;
        const int64_t es = i32 ? 4 : 8;
        t.ne[0] = kN + 1;
        t.ne[1] = t.ne[2] = t.ne[3] = 1;
        t.nb[0] = es;
        t.nb[1] = t.nb[2] = t.nb[3] = es * (kN + 1);
    }

    gdn_status run(gdn_context *ctx, Op op, bool compute) const {
        if (op == Op::Forward) return compute ? gdn_forward(ctx, &problem, &out, &states) : gdn_check_forward(ctx, &problem, &out, &states);
        return compute ? gdn_backward(ctx, &problem, &d_out, &d_states, &grads)
                       : gdn_check_backward(ctx, &problem, &d_out, &d_states, &grads);
    }
};

struct BadInput {
    const char *name;
    Op op;
    gdn_status status;
    const char *message;  // a substring gdn_last_error must contain
    std::function<void(PackedCall &)> spoil;
};

std::vector<BadInput> bad_inputs() {
    const Op F = Op::Forward, B = Op::Backward;
    std::vector<BadInput> rows = {
        {"float_offsets", F, GDN_ERROR_TYPE, "cu_seqlens.type = F32", [](PackedCall &c) { c.problem.cu_seqlens.type = GDN_TYPE_F32; c.problem.cu_seqlens.nb[0] = 4; }},
        {"not_a_type", F, GDN_ERROR_INVALID_ARGUMENT, "cu_seqlens.type = 9", [](PackedCall &c) {
             const int bogus = 9;
             std::memcpy(&c.problem.cu_seqlens.type, &bogus, sizeof bogus);
         }},
        {"integer_q", F, GDN_ERROR_TYPE, "integer types are only for cu_seqlens", [](PackedCall &c) { c.problem.q.type = GDN_TYPE_I32; }},
        {"integer_v", B, GDN_ERROR_TYPE, "v.type = I32", [](PackedCall &c) { c.problem.v.type = GDN_TYPE_I32; }},
        {"two_dimensional", F, GDN_ERROR_SHAPE, "cu_seqlens.ne = [4, 2, 1, 1]", [](PackedCall &c) { c.problem.cu_seqlens.ne[1] = 2; }},
        // One offset is N = 0 sequences (valid with T = 0): here 10 tokens and 3 states contradict it.
        {"one_offset", F, GDN_ERROR_SHAPE, "state.ne[3] = 3 but state.ne must be [4, 4, 4, 0]", [](PackedCall &c) { c.problem.cu_seqlens.ne[0] = 1; }},
        {"offsets_not_contiguous", F, GDN_ERROR_LAYOUT, "cu_seqlens.nb[0] = 16", [](PackedCall &c) { c.problem.cu_seqlens.nb[0] = 16; }},
        {"offsets_misaligned", F, GDN_ERROR_LAYOUT, "cu_seqlens.data", [](PackedCall &c) {
             c.problem.cu_seqlens.data = static_cast<char *>(c.problem.cu_seqlens.data) + 4;
         }},
        {"wrong_count_vs_state", F, GDN_ERROR_SHAPE, "state.ne[3] = 3", [](PackedCall &c) { c.problem.cu_seqlens.ne[0] = kN; }},
        {"wrong_count_vs_states", F, GDN_ERROR_SHAPE, "states.ne[3] = 3 is not a multiple of N = 4", [](PackedCall &c) {
             c.offsets64.push_back(kT);
             c.problem.cu_seqlens.data = c.offsets64.data();
             c.problem.cu_seqlens.ne[0] = kN + 2;
             c.problem.state.data = nullptr;
         }},
        {"wrong_count_vs_tokens", F, GDN_ERROR_SHAPE, "cu_seqlens[2]", [](PackedCall &c) {
             c.problem.cu_seqlens.ne[0] = kN;
             c.problem.state.data = nullptr;
             c.states.data = nullptr;
         }},
        {"first_not_zero", F, GDN_ERROR_SHAPE, "cu_seqlens[0] = 1", [](PackedCall &c) { c.offsets64[0] = 1; }},
        {"negative_first", B, GDN_ERROR_SHAPE, "cu_seqlens[0] = -1", [](PackedCall &c) {
             c.offsets32[0] = -1;
             c.use_i32(true);
         }},
        {"unsorted", F, GDN_ERROR_SHAPE, "offsets must not decrease", [](PackedCall &c) { std::swap(c.offsets64[1], c.offsets64[2]); }},
        {"past_the_tokens", F, GDN_ERROR_SHAPE, "exceeds q.ne[2] = 10", [](PackedCall &c) { c.offsets64 = {0, 1, kT + 5, kT + 6}; c.problem.cu_seqlens.data = c.offsets64.data(); }},
        {"last_short_of_tokens", B, GDN_ERROR_SHAPE, "the last offset must be q.ne[2] = 10", [](PackedCall &c) { c.offsets64 = {0, 1, 2, kT - 1}; c.problem.cu_seqlens.data = c.offsets64.data(); }},
        {"int32_past_the_tokens", F, GDN_ERROR_SHAPE, "cu_seqlens[3] = 11 exceeds", [](PackedCall &c) {
             c.offsets32[3] = kT + 1;
             c.use_i32(true);
         }},
        {"two_streams", F, GDN_ERROR_SHAPE, "one packed stream", [](PackedCall &c) {
             for (gdn_tensor *t : {&c.problem.v, &c.problem.g, &c.problem.beta}) t->ne[3] = 2, t->ne[2] = kT / 2;
             for (gdn_tensor *t : {&c.problem.q, &c.problem.k}) t->ne[3] = 2, t->ne[2] = kT / 2;
         }},
        {"ds0_per_token_stream", B, GDN_ERROR_SHAPE, "grads.state.ne[3] = 1 but", [](PackedCall &c) { c.grads.state.ne[3] = 1; }},
        {"output_over_offsets", F, GDN_ERROR_ALIAS, "output out overlaps input cu_seqlens", [](PackedCall &c) {
             c.problem.cu_seqlens.data = c.out.data;  // values never read: refused before
             c.problem.cu_seqlens.type = GDN_TYPE_I32;
             c.problem.cu_seqlens.nb[0] = 4;
         }},
    };
    return rows;
}

std::vector<std::vector<uint8_t>> snapshot(TensorSet &set) {
    std::vector<std::vector<uint8_t>> out;
    for (size_t b = 0; b < set.buffer_count(); ++b) {
        const uint8_t *p = set.storage(static_cast<int>(b));
        out.emplace_back(p, p + set.storage_bytes(static_cast<int>(b)));
    }
    return out;
}

class BadOffsets : public ::testing::TestWithParam<std::string> {};

TEST_P(BadOffsets, RefusedBeforeAnythingIsWritten) {
    gdn_context *ctx = nullptr;
    ASSERT_EQ(gdn_context_create(GetParam().c_str(), nullptr, &ctx), GDN_OK);
    for (const BadInput &row : bad_inputs())
        for (bool compute : {false, true}) {
            SCOPED_TRACE(std::string(row.name) + (compute ? " (call)" : " (dry run)"));
            PackedCall call;
            row.spoil(call);
            const auto fwd_before = snapshot(call.forward_outputs), bwd_before = snapshot(call.backward_outputs);
            const auto in_before = snapshot(call.inputs);
            EXPECT_EQ(call.run(ctx, row.op, compute), row.status) << gdn_last_error(ctx);
            EXPECT_NE(std::string(gdn_last_error(ctx)).find(row.message), std::string::npos) << gdn_last_error(ctx);
            EXPECT_TRUE(snapshot(call.forward_outputs) == fwd_before);
            EXPECT_TRUE(snapshot(call.backward_outputs) == bwd_before);
            EXPECT_TRUE(snapshot(call.inputs) == in_before);
        }
    gdn_context_free(ctx);
}

INSTANTIATE_TEST_SUITE_P(Backends, BadOffsets, ::testing::Values("ref", "cpu"));

// The ends of the offsets and their last pair, each in a row of its own (the rows above spoil
// the middle pairs; a check that stopped one pair short would be seen only here), through the
// call and its dry run, forward and backward, I64 and I32: GDN_ERROR_SHAPE, a message naming
// cu_seqlens at the offending index with the values, nothing written.
struct BadEnds {
    const char *name;
    std::vector<int64_t> offsets;
    std::vector<std::string> mentions;  // substrings gdn_last_error must contain
};

class BadOffsetEnds : public ::testing::TestWithParam<std::string> {};

TEST_P(BadOffsetEnds, RefusedWithTheIndexAndValues) {
    static_assert(kN == 3, "the rows below hold kN + 1 offsets");
    const BadEnds rows[] = {
        {"last_pair_decreasing", {0, 3, kT, kT - 1}, {"cu_seqlens[3] = 9", "cu_seqlens[2] = 10"}},
        {"last_short_of_tokens", {0, 3, 7, kT - 1}, {"cu_seqlens[3] = 9", "q.ne[2] = 10"}},
        {"last_past_the_tokens", {0, 3, 7, kT + 1}, {"cu_seqlens[3] = 11", "q.ne[2] = 10"}},
        {"first_not_zero", {2, 3, 7, kT}, {"cu_seqlens[0] = 2"}},
    };
    gdn_context *ctx = nullptr;
    ASSERT_EQ(gdn_context_create(GetParam().c_str(), nullptr, &ctx), GDN_OK);
    for (const BadEnds &row : rows)
        for (Op op : {Op::Forward, Op::Backward})
            for (bool i32 : {false, true})
                for (bool compute : {false, true}) {
                    SCOPED_TRACE(std::string(row.name) + (op == Op::Forward ? " forward" : " backward") + (i32 ? " I32" : " I64") +
                                 (compute ? " (call)" : " (dry run)"));
                    PackedCall call;
                    call.offsets64 = row.offsets;
                    call.offsets32.assign(row.offsets.begin(), row.offsets.end());
                    call.use_i32(i32);
                    const auto fwd_before = snapshot(call.forward_outputs), bwd_before = snapshot(call.backward_outputs);
                    EXPECT_EQ(call.run(ctx, op, compute), GDN_ERROR_SHAPE) << gdn_last_error(ctx);
                    const std::string message = gdn_last_error(ctx);
                    for (const std::string &m : row.mentions) EXPECT_NE(message.find(m), std::string::npos) << message;
                    EXPECT_TRUE(snapshot(call.forward_outputs) == fwd_before);
                    EXPECT_TRUE(snapshot(call.backward_outputs) == bwd_before);
                }
    gdn_context_free(ctx);
}

INSTANTIATE_TEST_SUITE_P(Backends, BadOffsetEnds, ::testing::Values("ref", "cpu"));

// The valid call works with I64 and with I32 offsets, and both give the same bits.
TEST(GoodOffsets, I32AndI64GiveTheSameResult) {
    gdn_context *ctx = nullptr;
    ASSERT_EQ(gdn_context_create("cpu", nullptr, &ctx), GDN_OK);
    for (Op op : {Op::Forward, Op::Backward}) {
        PackedCall a, b;
        b.use_i32(true);
        ASSERT_EQ(a.run(ctx, op, true), GDN_OK) << gdn_last_error(ctx);
        ASSERT_EQ(b.run(ctx, op, true), GDN_OK) << gdn_last_error(ctx);
        EXPECT_TRUE(snapshot(a.forward_outputs) == snapshot(b.forward_outputs));
        EXPECT_TRUE(snapshot(a.backward_outputs) == snapshot(b.backward_outputs));
    }
    gdn_context_free(ctx);
}

}  // namespace
