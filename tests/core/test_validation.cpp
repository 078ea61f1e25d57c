// Bad input (SPEC section 6): every call validates everything before it writes anything. Each
// row of the table below is one distinct bad input to gdn_forward or gdn_backward; it must give
// the exact status from both the call and its dry run (gdn_check_*), a gdn_last_error that
// names the tensor and dimension at fault, outputs still bit-identical to their poison, and
// inputs unchanged. The allowed exceptions (in-place state update, packed gradient views,
// inputs sharing memory) are tested to work and to give the same numbers.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "case.h"
#include "problem_data.h"
#include "runner.h"
#include "tensor_set.h"

namespace {

using gdn::testkit::Case;
using gdn::testkit::Op;
using gdn::testkit::TensorSet;

// Sizes chosen so that every dimension differs from the others: a message that names the wrong
// dimension, or a check that compares the wrong pair, cannot pass by coincidence.
constexpr int64_t kSk = 4, kSv = 6, kHk = 2, kHv = 4, kT = 3, kB = 2, kBq = 2;

Case base_case(Op op, bool strided = false) {
    Case c;
    c.group = "validation";
    c.op = op;
    c.shape.Sk = kSk;
    c.shape.Sv = kSv;
    c.shape.Hk = kHk;
    c.shape.Hv = kHv;
    c.shape.T = kT;
    c.shape.B = kB;
    c.shape.Bq = kBq;
    c.shape.K = 1;
    c.strided = strided;
    return c;
}

class Context {
public:
    explicit Context(const char *backend = "ref") {
        if (gdn_context_create(backend, nullptr, &ctx_) != GDN_OK) ctx_ = nullptr;
    }
    ~Context() { gdn_context_free(ctx_); }
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;
    gdn_context *get() const { return ctx_; }

private:
    gdn_context *ctx_ = nullptr;
};

// One call's arguments, pointing into freshly poisoned sets.
struct Call {
    TensorSet inputs = gdn::testkit::make_inputs(base_case(Op::Backward), GDN_TYPE_F32, 42);
    TensorSet forward_outputs = gdn::testkit::make_outputs(base_case(Op::Forward), GDN_TYPE_F32);
    TensorSet backward_outputs = gdn::testkit::make_outputs(base_case(Op::Backward), GDN_TYPE_F32);

    gdn_problem problem{};
    gdn_tensor out{}, states{}, d_out{}, d_states{};
    gdn_grads grads{};
    bool null_ctx = false, null_problem = false, null_grads = false;

    Call() {
        problem.q = inputs.host("q");
        problem.k = inputs.host("k");
        problem.v = inputs.host("v");
        problem.g = inputs.host("g");
        problem.beta = inputs.host("beta");
        problem.state = inputs.host("state");
        problem.scale = 0.0f;
        problem.head_map = GDN_HEAD_MAP_TILED;
        out = forward_outputs.host("out");
        states = forward_outputs.host("states");
        d_out = inputs.host("d_out");
        d_states = inputs.host("d_states");
        grads = {backward_outputs.host("dq"), backward_outputs.host("dk"), backward_outputs.host("dv"),
                 backward_outputs.host("dg"), backward_outputs.host("dbeta"), backward_outputs.host("ds0")};
    }

    std::vector<gdn_tensor *> all_tensors() {
        return {&problem.q, &problem.k, &problem.v, &problem.g, &problem.beta, &problem.state, &out, &states,
                &d_out,     &d_states,  &grads.q,   &grads.k,   &grads.v,      &grads.g,    &grads.beta, &grads.state};
    }

    gdn_status run(gdn_context *ctx, Op op, bool compute) const {
        gdn_context *c = null_ctx ? nullptr : ctx;
        const gdn_problem *p = null_problem ? nullptr : &problem;
        if (op == Op::Forward) return compute ? gdn_forward(c, p, &out, &states) : gdn_check_forward(c, p, &out, &states);
        const gdn_grads *g = null_grads ? nullptr : &grads;
        return compute ? gdn_backward(c, p, &d_out, &d_states, g) : gdn_check_backward(c, p, &d_out, &d_states, g);
    }
};

// Whole storage (guards included) of every buffer of a set.
std::vector<std::vector<uint8_t>> snapshot(TensorSet &set) {
    std::vector<std::vector<uint8_t>> out;
    for (size_t b = 0; b < set.buffer_count(); ++b) {
        const uint8_t *p = set.storage(static_cast<int>(b));
        out.emplace_back(p, p + set.storage_bytes(static_cast<int>(b)));
    }
    return out;
}

// "" when every byte of every buffer of the set (guards included) is still poison.
std::string poison_damage(TensorSet &set, const char *what) {
    for (size_t b = 0; b < set.buffer_count(); ++b) {
        const uint8_t *p = set.storage(static_cast<int>(b));
        for (size_t i = 0; i < set.storage_bytes(static_cast<int>(b)); ++i)
            if (p[i] != TensorSet::kPoison)
                return std::string(what) + ": byte " + std::to_string(i) + " of buffer " + std::to_string(b) + " was written";
    }
    return "";
}

void set_type(gdn_tensor &t, gdn_type type, int64_t element_bytes) {
    t.type = type;
    t.nb[0] = element_bytes;
}

// Every tensor of the call BF16 or F16, but the states F32 and g BF16 (a valid call of SPEC 3.1; rows then
// mutate one tensor into an invalid combination). The strides stay those of the F32 buffers.
void as_half_call(Call &c, gdn_type half) {
    for (gdn_tensor *t : c.all_tensors()) set_type(*t, half, 2);
    for (gdn_tensor *t : {&c.problem.state, &c.states, &c.d_states, &c.grads.state}) set_type(*t, GDN_TYPE_F32, 4);
    for (gdn_tensor *t : {&c.problem.g, &c.grads.g}) set_type(*t, GDN_TYPE_BF16, 2);
}

char *bytes(void *p) { return static_cast<char *>(p); }

struct BadInput {
    const char *name;
    Op op;
    std::function<void(Call &)> mutate;
    gdn_status status;
    std::vector<std::string> message;  // substrings of gdn_last_error
};

// What gtest prints for a row (and CTest shows in the test's name): its name, not its bytes.
void PrintTo(const BadInput &row, std::ostream *os) { *os << row.name; }

const std::vector<BadInput> &bad_inputs() {
    static const std::vector<BadInput> table = {
        // ---- NULL where something is required, values outside an enum -------------------
        {"null_ctx_forward", Op::Forward, [](Call &c) { c.null_ctx = true; }, GDN_ERROR_INVALID_ARGUMENT, {}},
        {"null_ctx_backward", Op::Backward, [](Call &c) { c.null_ctx = true; }, GDN_ERROR_INVALID_ARGUMENT, {}},
        {"null_problem_forward", Op::Forward, [](Call &c) { c.null_problem = true; }, GDN_ERROR_INVALID_ARGUMENT, {"problem is NULL"}},
        {"null_problem_backward", Op::Backward, [](Call &c) { c.null_problem = true; }, GDN_ERROR_INVALID_ARGUMENT, {"problem is NULL"}},
        {"null_grads", Op::Backward, [](Call &c) { c.null_grads = true; }, GDN_ERROR_INVALID_ARGUMENT, {"grads is NULL"}},
        {"null_q", Op::Forward, [](Call &c) { c.problem.q.data = nullptr; }, GDN_ERROR_INVALID_ARGUMENT, {"q.data is NULL"}},
        {"null_k", Op::Forward, [](Call &c) { c.problem.k.data = nullptr; }, GDN_ERROR_INVALID_ARGUMENT, {"k.data is NULL"}},
        {"null_v", Op::Backward, [](Call &c) { c.problem.v.data = nullptr; }, GDN_ERROR_INVALID_ARGUMENT, {"v.data is NULL"}},
        {"null_g", Op::Forward, [](Call &c) { c.problem.g.data = nullptr; }, GDN_ERROR_INVALID_ARGUMENT, {"g.data is NULL"}},
        {"null_beta", Op::Backward, [](Call &c) { c.problem.beta.data = nullptr; }, GDN_ERROR_INVALID_ARGUMENT, {"beta.data is NULL"}},
        {"q_type_not_enum", Op::Forward, [](Call &c) { c.problem.q.type = static_cast<gdn_type>(7); }, GDN_ERROR_INVALID_ARGUMENT, {"q.type = 7"}},
        {"out_type_not_enum", Op::Forward, [](Call &c) { c.out.type = static_cast<gdn_type>(-1); }, GDN_ERROR_INVALID_ARGUMENT, {"out.type = -1"}},
        {"head_map_not_enum", Op::Forward, [](Call &c) { c.problem.head_map = static_cast<gdn_head_map>(2); }, GDN_ERROR_INVALID_ARGUMENT, {"head_map = 2"}},
        {"scale_nan", Op::Forward, [](Call &c) { c.problem.scale = std::numeric_limits<float>::quiet_NaN(); }, GDN_ERROR_INVALID_ARGUMENT, {"scale"}},
        {"scale_inf", Op::Backward, [](Call &c) { c.problem.scale = -std::numeric_limits<float>::infinity(); }, GDN_ERROR_INVALID_ARGUMENT, {"scale"}},

        // ---- element types ----------------------------------------------------------------
        {"v_f64_among_f32", Op::Forward, [](Call &c) { set_type(c.problem.v, GDN_TYPE_F64, 8); }, GDN_ERROR_TYPE, {"v.type = F64", "F32"}},
        {"state_f64_among_f32", Op::Forward, [](Call &c) { set_type(c.problem.state, GDN_TYPE_F64, 8); }, GDN_ERROR_TYPE, {"state.type = F64"}},
        {"out_f64_among_f32", Op::Forward, [](Call &c) { set_type(c.out, GDN_TYPE_F64, 8); }, GDN_ERROR_TYPE, {"out.type = F64"}},
        {"d_out_f64_among_f32", Op::Backward, [](Call &c) { set_type(c.d_out, GDN_TYPE_F64, 8); }, GDN_ERROR_TYPE, {"d_out.type = F64"}},
        {"dq_f64_among_f32", Op::Backward, [](Call &c) { set_type(c.grads.q, GDN_TYPE_F64, 8); }, GDN_ERROR_TYPE, {"grads.q.type = F64"}},
        {"k_bf16_among_f32", Op::Forward, [](Call &c) { set_type(c.problem.k, GDN_TYPE_BF16, 2); }, GDN_ERROR_TYPE, {"k.type = BF16 but q.type = F32"}},
        {"beta_bf16_with_f32_q", Op::Forward, [](Call &c) { set_type(c.problem.beta, GDN_TYPE_BF16, 2); }, GDN_ERROR_TYPE,
         {"beta.type = BF16", "F32 or the type of q (F32)"}},
        {"beta_f16_with_bf16_q", Op::Forward,
         [](Call &c) {
             as_half_call(c, GDN_TYPE_BF16);
             set_type(c.problem.beta, GDN_TYPE_F16, 2);
         },
         GDN_ERROR_TYPE, {"beta.type = F16", "(BF16)"}},
        {"g_f16_with_f16_q", Op::Backward,
         [](Call &c) {
             as_half_call(c, GDN_TYPE_F16);
             set_type(c.problem.g, GDN_TYPE_F16, 2);
         },
         GDN_ERROR_TYPE, {"g.type = F16", "F32 or BF16"}},
        {"state_bf16_with_bf16_q", Op::Forward,
         [](Call &c) {
             as_half_call(c, GDN_TYPE_BF16);
             set_type(c.problem.state, GDN_TYPE_BF16, 2);
         },
         GDN_ERROR_TYPE, {"state.type = BF16", "F32"}},
        {"d_states_f64_with_f16_q", Op::Backward,
         [](Call &c) {
             as_half_call(c, GDN_TYPE_F16);
             set_type(c.d_states, GDN_TYPE_F64, 8);
         },
         GDN_ERROR_TYPE, {"d_states.type = F64"}},
        {"out_f32_with_bf16_q", Op::Forward,
         [](Call &c) {
             as_half_call(c, GDN_TYPE_BF16);
             set_type(c.out, GDN_TYPE_F32, 4);
         },
         GDN_ERROR_TYPE, {"out.type = F32 but q.type = BF16"}},
        {"dbeta_not_beta_type", Op::Backward,
         [](Call &c) {
             as_half_call(c, GDN_TYPE_BF16);
             set_type(c.problem.beta, GDN_TYPE_F32, 4);  // allowed: F32 beta with BF16 q, but then its gradient is F32 too
         },
         GDN_ERROR_TYPE, {"grads.beta.type = BF16 but beta.type = F32"}},
        {"dg_not_g_type", Op::Backward, [](Call &c) { set_type(c.grads.g, GDN_TYPE_BF16, 2); }, GDN_ERROR_TYPE,
         {"grads.g.type = BF16 but g.type = F32"}},
        {"q_f64_among_f32", Op::Forward, [](Call &c) { set_type(c.problem.q, GDN_TYPE_F64, 8); }, GDN_ERROR_TYPE,
         {"k.type = F32 but q.type = F64", "F64 throughout"}},
        {"precision_not_enum", Op::Forward, [](Call &c) { c.problem.precision = static_cast<gdn_precision>(2); }, GDN_ERROR_INVALID_ARGUMENT,
         {"precision = 2"}},

        // ---- counts and strides of one tensor -------------------------------------------
        {"q_ne0_zero", Op::Forward, [](Call &c) { c.problem.q.ne[0] = 0; }, GDN_ERROR_SHAPE, {"q.ne[0] = 0"}},
        {"k_ne2_negative", Op::Forward, [](Call &c) { c.problem.k.ne[2] = -3; }, GDN_ERROR_SHAPE, {"k.ne[2] = -3"}},
        {"states_ne3_zero", Op::Forward, [](Call &c) { c.states.ne[3] = 0; }, GDN_ERROR_SHAPE, {"states.ne[3] = 0"}},
        {"g_nb0_wrong", Op::Forward, [](Call &c) { c.problem.g.nb[0] = 8; }, GDN_ERROR_LAYOUT, {"g.nb[0] = 8"}},
        {"dv_nb0_wrong", Op::Backward, [](Call &c) { c.grads.v.nb[0] = 2; }, GDN_ERROR_LAYOUT, {"grads.v.nb[0] = 2"}},
        {"beta_nb2_zero", Op::Forward, [](Call &c) { c.problem.beta.nb[2] = 0; }, GDN_ERROR_LAYOUT, {"beta.nb[2] = 0"}},
        {"v_nb3_negative", Op::Backward, [](Call &c) { c.problem.v.nb[3] = -24; }, GDN_ERROR_LAYOUT, {"v.nb[3] = -24"}},
        {"out_nb1_zero", Op::Forward, [](Call &c) { c.out.nb[1] = 0; }, GDN_ERROR_LAYOUT, {"out.nb[1] = 0"}},
        {"q_byte_span_overflows", Op::Forward,
         [](Call &c) {
             c.problem.q.ne[2] = int64_t{1} << 40;
             c.problem.q.nb[2] = int64_t{1} << 30;
         },
         GDN_ERROR_LAYOUT, {"q:", "overflows"}},
        {"k_element_count_overflows", Op::Forward,
         [](Call &c) {
             c.problem.k.ne[0] = int64_t{1} << 32;
             c.problem.k.ne[2] = int64_t{1} << 32;
         },
         GDN_ERROR_SHAPE, {"k:", "more elements"}},
        {"v_address_wraps", Op::Forward,
         [](Call &c) { c.problem.v.data = reinterpret_cast<void *>(std::numeric_limits<uintptr_t>::max() - 63); },
         GDN_ERROR_LAYOUT, {"v:", "overflows"}},

        // ---- sizes that contradict each other ---------------------------------------------
        {"k_ne0_differs_from_q", Op::Forward, [](Call &c) { c.problem.k.ne[0] = 2; }, GDN_ERROR_SHAPE, {"k.ne[0] = 2"}},
        {"k_ne1_differs_from_q", Op::Forward, [](Call &c) { c.problem.k.ne[1] = 1; }, GDN_ERROR_SHAPE, {"k.ne[1] = 1"}},
        {"k_ne3_differs_from_q", Op::Backward, [](Call &c) { c.problem.k.ne[3] = 1; }, GDN_ERROR_SHAPE, {"k.ne[3] = 1"}},
        {"v_tokens_differ", Op::Forward, [](Call &c) { c.problem.v.ne[2] = kT + 1; }, GDN_ERROR_SHAPE, {"v.ne[2] = 4", "q.ne[2] = 3"}},
        {"hk_does_not_divide_hv", Op::Forward,
         [](Call &c) { c.problem.q.ne[1] = c.problem.k.ne[1] = 3; },
         GDN_ERROR_SHAPE, {"q.ne[1] = 3", "v.ne[1] = 4"}},
        {"bq_does_not_divide_b", Op::Backward,
         [](Call &c) { c.problem.q.ne[3] = c.problem.k.ne[3] = 3; },
         GDN_ERROR_SHAPE, {"q.ne[3] = 3", "v.ne[3] = 2"}},
        {"g_width_neither_1_nor_sk", Op::Forward, [](Call &c) { c.problem.g.ne[0] = 2; }, GDN_ERROR_SHAPE, {"g.ne[0] = 2"}},
        {"g_heads_wrong", Op::Forward, [](Call &c) { c.problem.g.ne[1] = kHk; }, GDN_ERROR_SHAPE, {"g.ne[1] = 2"}},
        {"g_sequences_wrong", Op::Backward, [](Call &c) { c.problem.g.ne[3] = 1; }, GDN_ERROR_SHAPE, {"g.ne[3] = 1"}},
        {"beta_width_not_1", Op::Forward, [](Call &c) { c.problem.beta.ne[0] = kSk; }, GDN_ERROR_SHAPE, {"beta.ne[0] = 4"}},
        {"beta_tokens_wrong", Op::Forward, [](Call &c) { c.problem.beta.ne[2] = 2; }, GDN_ERROR_SHAPE, {"beta.ne[2] = 2"}},
        {"state_sv_wrong", Op::Forward, [](Call &c) { c.problem.state.ne[1] = kSk; }, GDN_ERROR_SHAPE, {"state.ne[1] = 4"}},
        {"state_sequences_wrong", Op::Backward, [](Call &c) { c.problem.state.ne[3] = 1; }, GDN_ERROR_SHAPE, {"state.ne[3] = 1"}},
        {"out_sv_wrong", Op::Forward, [](Call &c) { c.out.ne[0] = kSk; }, GDN_ERROR_SHAPE, {"out.ne[0] = 4"}},
        {"out_tokens_wrong", Op::Forward, [](Call &c) { c.out.ne[2] = 1; }, GDN_ERROR_SHAPE, {"out.ne[2] = 1"}},
        {"states_ne3_not_multiple_of_b", Op::Forward, [](Call &c) { c.states.ne[3] = 3; }, GDN_ERROR_SHAPE, {"states.ne[3] = 3", "multiple"}},
        {"states_heads_wrong", Op::Forward, [](Call &c) { c.states.ne[2] = 3; }, GDN_ERROR_SHAPE, {"states.ne[2] = 3"}},
        {"d_out_tokens_wrong", Op::Backward, [](Call &c) { c.d_out.ne[2] = 4; }, GDN_ERROR_SHAPE, {"d_out.ne[2] = 4"}},
        {"d_states_ne3_not_multiple_of_b", Op::Backward, [](Call &c) { c.d_states.ne[3] = 5; }, GDN_ERROR_SHAPE, {"d_states.ne[3] = 5"}},
        {"d_states_sk_wrong", Op::Backward, [](Call &c) { c.d_states.ne[0] = kSv; }, GDN_ERROR_SHAPE, {"d_states.ne[0] = 6"}},
        {"dq_shape_wrong", Op::Backward, [](Call &c) { c.grads.q.ne[1] = 1; }, GDN_ERROR_SHAPE, {"grads.q.ne[1] = 1"}},
        {"dk_tokens_wrong", Op::Backward, [](Call &c) { c.grads.k.ne[2] = 2; }, GDN_ERROR_SHAPE, {"grads.k.ne[2] = 2"}},
        {"dg_width_differs_from_g", Op::Backward, [](Call &c) { c.grads.g.ne[0] = kSk; }, GDN_ERROR_SHAPE, {"grads.g.ne[0] = 4"}},
        {"dbeta_shape_wrong", Op::Backward, [](Call &c) { c.grads.beta.ne[1] = 1; }, GDN_ERROR_SHAPE, {"grads.beta.ne[1] = 1"}},
        {"ds0_has_slots", Op::Backward, [](Call &c) { c.grads.state.ne[3] = 2 * kB; }, GDN_ERROR_SHAPE, {"grads.state.ne[3] = 4"}},

        // ---- outputs overlapping themselves, inputs, or each other --------------------------
        {"out_self_overlaps", Op::Forward, [](Call &c) { c.out.nb[1] = 8; }, GDN_ERROR_LAYOUT, {"out:", "overlap"}},
        {"dg_self_overlaps", Op::Backward, [](Call &c) { c.grads.g.nb[2] = c.grads.g.nb[1]; }, GDN_ERROR_LAYOUT, {"grads.g:", "overlap"}},
        {"out_overlaps_v", Op::Forward, [](Call &c) { c.out.data = c.problem.v.data; }, GDN_ERROR_ALIAS, {"output out overlaps input v"}},
        {"states_overlap_q", Op::Forward, [](Call &c) { c.states.data = c.problem.q.data; }, GDN_ERROR_ALIAS, {"output states overlaps input q"}},
        {"states_shifted_over_state", Op::Forward,
         [](Call &c) { c.states.data = bytes(c.problem.state.data) + 4; },
         GDN_ERROR_ALIAS, {"output states overlaps input state"}},
        {"states_over_state_other_strides", Op::Forward,
         [](Call &c) {
             // Same pointer as the input state but a different view of it: not the in-place update.
             c.states.data = c.problem.state.data;
             c.states.nb[3] = c.states.nb[2];
             c.states.nb[2] = c.problem.state.nb[3];
         },
         GDN_ERROR_ALIAS, {"output states overlaps input state"}},
        {"out_overlaps_states", Op::Forward, [](Call &c) { c.out.data = c.states.data; }, GDN_ERROR_ALIAS, {"output states overlaps output out"}},
        {"dk_overlaps_k", Op::Backward, [](Call &c) { c.grads.k.data = c.problem.k.data; }, GDN_ERROR_ALIAS, {"output grads.k overlaps input k"}},
        {"dv_overlaps_d_out", Op::Backward, [](Call &c) { c.grads.v.data = c.d_out.data; }, GDN_ERROR_ALIAS, {"output grads.v overlaps input d_out"}},
        {"ds0_overlaps_d_states", Op::Backward, [](Call &c) { c.grads.state.data = c.d_states.data; }, GDN_ERROR_ALIAS, {"output grads.state overlaps input d_states"}},
        {"ds0_is_state", Op::Backward,
         [](Call &c) { c.grads.state = c.problem.state; },  // no in-place exception in the backward
         GDN_ERROR_ALIAS, {"output grads.state overlaps input state"}},
        {"dk_overlaps_dq", Op::Backward, [](Call &c) { c.grads.k.data = bytes(c.grads.q.data) + 8; }, GDN_ERROR_ALIAS, {"output grads.k overlaps output grads.q"}},
        {"dbeta_overlaps_dg", Op::Backward, [](Call &c) { c.grads.beta.data = c.grads.g.data; }, GDN_ERROR_ALIAS, {"output grads.beta overlaps output grads.g"}},
    };
    return table;
}

class BadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputTest, RefusedWithExactStatusNamedCauseAndUntouchedOutputs) {
    const BadInput &row = GetParam();
    Context ctx;
    ASSERT_NE(ctx.get(), nullptr);
    for (bool compute : {false, true}) {
        SCOPED_TRACE(compute ? "gdn_forward/gdn_backward" : "gdn_check_forward/gdn_check_backward");
        Call call;
        row.mutate(call);
        const auto inputs_before = snapshot(call.inputs);
        const gdn_status status = call.run(ctx.get(), row.op, compute);
        EXPECT_EQ(status, row.status) << gdn_status_string(status) << " instead of " << gdn_status_string(row.status)
                                      << "; message: " << gdn_last_error(ctx.get());
        const std::string message = call.null_ctx ? gdn_last_error(nullptr) : gdn_last_error(ctx.get());
        EXPECT_FALSE(message.empty());
        for (const std::string &part : row.message)
            EXPECT_NE(message.find(part), std::string::npos) << "\"" << message << "\" does not contain \"" << part << "\"";
        EXPECT_EQ(poison_damage(call.forward_outputs, "forward outputs"), "");
        EXPECT_EQ(poison_damage(call.backward_outputs, "backward outputs"), "");
        EXPECT_TRUE(snapshot(call.inputs) == inputs_before) << "an input buffer changed";
    }
}

INSTANTIATE_TEST_SUITE_P(Validation, BadInputTest, ::testing::ValuesIn(bad_inputs()),
                         [](const ::testing::TestParamInfo<BadInput> &info) { return std::string(info.param.name); });

TEST(Validation, TableCoversEnoughDistinctInputsAndEveryValidationStatus) {
    EXPECT_GE(bad_inputs().size(), 30u);
    std::vector<std::string> names;
    bool seen[16] = {};
    for (const BadInput &row : bad_inputs()) {
        for (const std::string &n : names) EXPECT_NE(n, row.name) << "duplicate row name";
        names.push_back(row.name);
        seen[row.status] = true;
    }
    for (gdn_status s : {GDN_ERROR_INVALID_ARGUMENT, GDN_ERROR_SHAPE, GDN_ERROR_LAYOUT, GDN_ERROR_TYPE, GDN_ERROR_ALIAS})
        EXPECT_TRUE(seen[s]) << gdn_status_string(s);
}

// The unmodified call is accepted: every row above fails because of its one change.
TEST(Validation, BaselineCallsSucceedAndClearTheLastError) {
    Context ctx;
    Call bad;
    bad.problem.q.ne[0] = 0;
    ASSERT_EQ(bad.run(ctx.get(), Op::Forward, false), GDN_ERROR_SHAPE);
    ASSERT_STRNE(gdn_last_error(ctx.get()), "");
    for (Op op : {Op::Forward, Op::Backward})
        for (bool compute : {false, true}) {
            Call call;
            EXPECT_EQ(call.run(ctx.get(), op, compute), GDN_OK) << gdn_last_error(ctx.get());
            EXPECT_STREQ(gdn_last_error(ctx.get()), "");
            // A dry run writes nothing; a real run writes the outputs and nothing between them.
            TensorSet &outputs = op == Op::Forward ? call.forward_outputs : call.backward_outputs;
            if (!compute) EXPECT_EQ(poison_damage(outputs, "outputs of a dry run"), "");
            else EXPECT_EQ(outputs.changed_outside_views(), "");
        }
}

// ---- contexts -------------------------------------------------------------------------------

TEST(Validation, UnknownBackendName) {
    gdn_context *ctx = reinterpret_cast<gdn_context *>(&ctx);  // must be reset to NULL
    EXPECT_EQ(gdn_context_create("tpu", nullptr, &ctx), GDN_ERROR_UNKNOWN_BACKEND);
    EXPECT_EQ(ctx, nullptr);
    EXPECT_NE(std::string(gdn_last_create_error()).find("tpu"), std::string::npos) << gdn_last_create_error();
    EXPECT_EQ(gdn_context_create("", nullptr, &ctx), GDN_ERROR_UNKNOWN_BACKEND);
    EXPECT_EQ(gdn_backend_available("tpu"), 0);
}

TEST(Validation, BackendNamesAreCaseInsensitive) {
    for (const char *name : {"ref", "REF", "Ref"}) {
        gdn_context *ctx = nullptr;
        ASSERT_EQ(gdn_context_create(name, nullptr, &ctx), GDN_OK) << name;
        EXPECT_STREQ(gdn_context_backend(ctx), "ref");
        gdn_context_free(ctx);
    }
}

TEST(Validation, NegativeContextParameters) {
    struct Row {
        const char *what;
        void (*mutate)(gdn_context_params &);
    };
    const Row rows[] = {{"n_threads", [](gdn_context_params &p) { p.n_threads = -1; }},
                        {"chunk_size", [](gdn_context_params &p) { p.chunk_size = -64; }},
                        {"device", [](gdn_context_params &p) { p.device = -2; }}};
    for (const Row &row : rows) {
        gdn_context_params params = gdn_context_default_params();
        row.mutate(params);
        gdn_context *ctx = reinterpret_cast<gdn_context *>(&params);
        EXPECT_EQ(gdn_context_create("ref", &params, &ctx), GDN_ERROR_INVALID_ARGUMENT) << row.what;
        EXPECT_EQ(ctx, nullptr) << row.what;
        EXPECT_NE(std::string(gdn_last_create_error()).find(row.what), std::string::npos) << gdn_last_create_error();
    }
    EXPECT_EQ(gdn_context_create("ref", nullptr, nullptr), GDN_ERROR_INVALID_ARGUMENT);
}

TEST(Validation, BackendThatCannotStartHereSaysWhy) {
    if (gdn_backend_available("cuda")) GTEST_SKIP() << "this build runs CUDA here";
    gdn_context *ctx = nullptr;
    EXPECT_EQ(gdn_context_create("cuda", nullptr, &ctx), GDN_ERROR_BACKEND);
    EXPECT_EQ(ctx, nullptr);
    EXPECT_STRNE(gdn_last_create_error(), "");
}

TEST(Validation, StatusStringsAreDistinctNames) {
    std::vector<std::string> seen;
    for (int s = GDN_OK; s <= GDN_ERROR_UNKNOWN_BACKEND; ++s) {
        const std::string name = gdn_status_string(static_cast<gdn_status>(s));
        EXPECT_EQ(name.rfind("GDN_", 0), 0u) << name;
        for (const std::string &other : seen) EXPECT_NE(name, other);
        seen.push_back(name);
    }
}

// ---- a valid problem whose workspace cannot exist -------------------------------------------

TEST(Validation, WorkspaceThatCannotExistIsUnsupportedBeforeAnyAllocation) {
    // Sk = Sv = 2^24: the ref forward's state scratch is 2^48 doubles (2 PiB), more than any
    // address space. The backend refuses it in supports() (the dry run says so too) instead of
    // attempting the allocation (issue 5: no allocation attempt; ASan would abort on it). The
    // tensors live in a reserved, inaccessible region: validation reads no data, so any access
    // would crash the test rather than pass it.
    const int64_t n = int64_t{1} << 24, row = 4 * n;
    const size_t region = static_cast<size_t>(8 * row);
    void *reserved = mmap(nullptr, region, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ASSERT_NE(reserved, MAP_FAILED);
    auto tensor = [&](int slot, int64_t ne0) {
        gdn_tensor t{};
        t.data = bytes(reserved) + slot * row;
        t.type = GDN_TYPE_F32;
        t.ne[0] = ne0;
        t.ne[1] = t.ne[2] = t.ne[3] = 1;
        t.nb[0] = 4;
        t.nb[1] = t.nb[2] = t.nb[3] = 4 * ne0;
        return t;
    };
    gdn_problem p{};
    p.q = tensor(0, n);
    p.k = tensor(1, n);
    p.v = tensor(2, n);
    p.g = tensor(3, 1);
    p.beta = tensor(4, 1);
    const gdn_tensor out = tensor(5, n);
    Context ctx;
    EXPECT_EQ(gdn_check_forward(ctx.get(), &p, &out, nullptr), GDN_ERROR_UNSUPPORTED) << gdn_last_error(ctx.get());
    EXPECT_EQ(gdn_forward(ctx.get(), &p, &out, nullptr), GDN_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(gdn_last_error(ctx.get())).find("workspace"), std::string::npos) << gdn_last_error(ctx.get());
    munmap(reserved, region);
}

TEST(Validation, TokenCountsBeyond32BitsAreAcceptedOrRefusedCleanly) {
    // SPEC section 6: sizes up to 2^31 tokens are handled or refused with UNSUPPORTED, never an
    // overflowed index. T = 2^31 + 3 one-element tokens, in reserved inaccessible memory (only
    // the dry runs are called: they validate without reading data).
    const int64_t T = (int64_t{1} << 31) + 3;
    const size_t slot = static_cast<size_t>(4 * T + 4096);
    void *reserved = mmap(nullptr, 8 * slot, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ASSERT_NE(reserved, MAP_FAILED);
    auto tensor = [&](int index) {
        gdn_tensor t{};
        t.data = bytes(reserved) + index * slot;
        t.type = GDN_TYPE_F32;
        t.ne[0] = t.ne[1] = t.ne[3] = 1;
        t.ne[2] = T;
        t.nb[0] = t.nb[1] = t.nb[2] = 4;
        t.nb[3] = 4 * T;
        return t;
    };
    gdn_problem p{};
    p.q = tensor(0);
    p.k = tensor(1);
    p.v = tensor(2);
    p.g = tensor(3);
    p.beta = tensor(4);
    const gdn_tensor out = tensor(5), d_out = tensor(6);
    const gdn_grads grads{tensor(7), {}, {}, {}, {}, {}};
    Context ctx;
    const gdn_status f = gdn_check_forward(ctx.get(), &p, &out, nullptr);
    EXPECT_TRUE(f == GDN_OK || f == GDN_ERROR_UNSUPPORTED) << gdn_status_string(f) << ": " << gdn_last_error(ctx.get());
    const gdn_status b = gdn_check_backward(ctx.get(), &p, &d_out, nullptr, &grads);
    EXPECT_TRUE(b == GDN_OK || b == GDN_ERROR_UNSUPPORTED) << gdn_status_string(b) << ": " << gdn_last_error(ctx.get());
    munmap(reserved, 8 * slot);
}

// ---- what is allowed --------------------------------------------------------------------------

bool same_bits(const std::vector<double> &a, const std::vector<double> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(Validation, InPlaceStateUpdateEqualsOutOfPlace) {
    for (bool strided : {false, true})
        for (gdn_type type : {GDN_TYPE_F32, GDN_TYPE_F64}) {
            SCOPED_TRACE(std::string(strided ? "padded" : "contiguous") + (type == GDN_TYPE_F32 ? " F32" : " F64"));
            const Case c = base_case(Op::Forward, strided);
            Context ctx;
            TensorSet inputs = gdn::testkit::make_inputs(c, type, 7);
            TensorSet separate = gdn::testkit::make_outputs(c, type);
            TensorSet in_place = gdn::testkit::make_outputs(c, type);
            gdn_problem p{};
            p.q = inputs.host("q");
            p.k = inputs.host("k");
            p.v = inputs.host("v");
            p.g = inputs.host("g");
            p.beta = inputs.host("beta");
            p.state = inputs.host("state");
            const gdn_tensor out_a = separate.host("out"), states_a = separate.host("states");
            ASSERT_EQ(gdn_forward(ctx.get(), &p, &out_a, &states_a), GDN_OK) << gdn_last_error(ctx.get());
            const std::vector<double> s0 = inputs.read("state");

            const gdn_tensor out_b = in_place.host("out");
            const gdn_tensor states_b = p.state;  // exactly the input state: the recurrent cache update
            ASSERT_EQ(gdn_check_forward(ctx.get(), &p, &out_b, &states_b), GDN_OK) << gdn_last_error(ctx.get());
            ASSERT_EQ(gdn_forward(ctx.get(), &p, &out_b, &states_b), GDN_OK) << gdn_last_error(ctx.get());
            EXPECT_TRUE(same_bits(inputs.read("state"), separate.read("states")));
            EXPECT_FALSE(same_bits(inputs.read("state"), s0)) << "the state was not updated";
            EXPECT_TRUE(same_bits(in_place.read("out"), separate.read("out")));
            EXPECT_EQ(inputs.changed_outside_views(), "");
        }
}

TEST(Validation, InPlaceExceptionIsOnlyForTheInputState) {
    // With Sv = Hk, Hv = T and B = Bq, q has the shape of the state. Inputs may share memory, so
    // q may be the very same view as the state; but then writing the states in place would
    // overwrite q while later units still read it: that output overlaps input q.
    Case c = base_case(Op::Forward);
    c.shape = {2, 2, 2, 2, 2, 1, 1, 1};  // Sk, Sv, Hk, Hv, T, B, Bq, K
    TensorSet inputs = gdn::testkit::make_inputs(c, GDN_TYPE_F32, 3);
    gdn_problem p{};
    p.state = inputs.host("state");
    p.q = p.state;
    p.k = inputs.host("k");
    p.v = inputs.host("v");
    p.g = inputs.host("g");
    p.beta = inputs.host("beta");
    Context ctx;
    const auto before = snapshot(inputs);
    EXPECT_EQ(gdn_check_forward(ctx.get(), &p, nullptr, &p.state), GDN_ERROR_ALIAS) << gdn_last_error(ctx.get());
    EXPECT_EQ(gdn_forward(ctx.get(), &p, nullptr, &p.state), GDN_ERROR_ALIAS) << gdn_last_error(ctx.get());
    EXPECT_NE(std::string(gdn_last_error(ctx.get())).find("output states overlaps input q"), std::string::npos)
        << gdn_last_error(ctx.get());
    EXPECT_TRUE(snapshot(inputs) == before) << "an input changed";
}

TEST(Validation, PackedGradientViewsAreAcceptedAndEqualContiguous) {
    // dq, dk, dv as row views interleaved in one packed [conv_dim, T, B] buffer: their byte
    // ranges interleave but no element is shared.
    Case packed = base_case(Op::Backward, true);
    Case plain = base_case(Op::Backward, false);
    packed.shape.T = plain.shape.T = 5;
    gdn::testkit::BackendSession session({"REF", "ref", 0}, 1);
    ASSERT_TRUE(session.ok()) << session.error();
    for (gdn_type type : {GDN_TYPE_F32, GDN_TYPE_F64}) {
        TensorSet probe = gdn::testkit::make_outputs(packed, type);
        const gdn_tensor dq = probe.host("dq"), dv = probe.host("dv");
        ASSERT_EQ(dq.data, bytes(dv.data) - 2 * kHk * kSk * probe.element_size()) << "dq and dv share one buffer";
        TensorSet in_packed = gdn::testkit::make_inputs(packed, type, 99);
        std::string why;
        ASSERT_EQ(gdn::testkit::check_case(packed, in_packed, session, why), GDN_OK) << why;
        TensorSet in_plain = gdn::testkit::make_inputs(plain, type, 99);
        gdn::testkit::RunResult a = gdn::testkit::run_case(packed, in_packed, session);
        gdn::testkit::RunResult b = gdn::testkit::run_case(plain, in_plain, session);
        ASSERT_EQ(a.status, GDN_OK) << a.error;
        ASSERT_EQ(b.status, GDN_OK) << b.error;
        EXPECT_EQ(a.stray_write, "");
        for (const char *name : {"dq", "dk", "dv", "dg", "dbeta", "ds0"})
            EXPECT_TRUE(same_bits(a.outputs.read(name), b.outputs.read(name))) << name;
    }
}

TEST(Validation, InputsMayShareMemory) {
    // Only outputs are checked for overlap: q and k may be one tensor, d_out may be v's memory.
    Context ctx;
    Call call;
    call.problem.k = call.problem.q;
    call.d_out.data = call.problem.v.data;
    EXPECT_EQ(call.run(ctx.get(), Op::Forward, true), GDN_OK) << gdn_last_error(ctx.get());
    EXPECT_EQ(call.run(ctx.get(), Op::Backward, true), GDN_OK) << gdn_last_error(ctx.get());
    EXPECT_EQ(call.backward_outputs.changed_outside_views(), "");
}

TEST(Validation, AbsentOptionalTensorsAreAccepted) {
    Context ctx;
    Call call;
    call.problem.state.data = nullptr;  // zero initial state
    call.out.data = nullptr;            // only the final state
    call.d_out.data = nullptr;          // zero output gradient
    call.d_states.data = nullptr;       // zero state gradient, K = 1
    call.grads.q.data = call.grads.beta.data = nullptr;
    EXPECT_EQ(call.run(ctx.get(), Op::Forward, true), GDN_OK) << gdn_last_error(ctx.get());
    EXPECT_EQ(call.run(ctx.get(), Op::Backward, true), GDN_OK) << gdn_last_error(ctx.get());
    // Unwanted gradients are not written; with both loss gradients zero, the others are zero.
    for (const char *name : {"dk", "dv", "dg", "ds0"})
        for (double x : call.backward_outputs.read(name)) ASSERT_EQ(x, 0.0) << name;
    for (const char *name : {"dq", "dbeta"})
        for (double x : call.backward_outputs.read(name)) ASSERT_TRUE(std::isnan(x)) << name << " was written";

    // An absent tensor's other fields are not looked at.
    Call garbage;
    for (gdn_tensor *t : {&garbage.problem.state, &garbage.out, &garbage.d_states, &garbage.grads.q}) {
        t->data = nullptr;
        t->type = static_cast<gdn_type>(99);
        for (int d = 0; d < 4; ++d) t->ne[d] = t->nb[d] = -1;
    }
    EXPECT_EQ(garbage.run(ctx.get(), Op::Forward, true), GDN_OK) << gdn_last_error(ctx.get());
    EXPECT_EQ(garbage.run(ctx.get(), Op::Backward, true), GDN_OK) << gdn_last_error(ctx.get());

    // Nothing asked for at all: accepted, nothing written.
    Call none;
    none.out.data = none.states.data = nullptr;
    for (gdn_tensor *g : {&none.grads.q, &none.grads.k, &none.grads.v, &none.grads.g, &none.grads.beta, &none.grads.state})
        g->data = nullptr;
    EXPECT_EQ(none.run(ctx.get(), Op::Forward, true), GDN_OK) << gdn_last_error(ctx.get());
    EXPECT_EQ(none.run(ctx.get(), Op::Backward, true), GDN_OK) << gdn_last_error(ctx.get());
    EXPECT_EQ(poison_damage(none.forward_outputs, "forward outputs"), "");
    EXPECT_EQ(poison_damage(none.backward_outputs, "backward outputs"), "");
}

}  // namespace
