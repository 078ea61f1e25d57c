// State layouts by strides and state pools (SPEC sections 3 and 3.2), through the C API on every
// host backend: a value-major state gives the bits of the key-major one, and a pooled call gives
// the bits of the plain call on the gathered states, writing only the slots it names.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gdn/gdn.h"

namespace {

constexpr int64_t Sk = 5, Sv = 3, Hk = 1, Hv = 2, T = 3, B = 4;
constexpr int64_t kArea = Sk * Sv, kHeadStates = Hv * kArea;

// A host F32 buffer with tensors viewing it.
struct Buffer {
    std::vector<float> data;
    explicit Buffer(int64_t n, float fill = NAN) : data(static_cast<size_t>(n), fill) {}
};

gdn_tensor tensor(Buffer &b, std::initializer_list<int64_t> ne_list) {
    gdn_tensor t{};
    t.data = b.data.data();
    t.type = GDN_TYPE_F32;
    int d = 0;
    for (int64_t n : ne_list) t.ne[d++] = n;
    t.nb[0] = 4;
    for (int i = 1; i < 4; ++i) t.nb[i] = t.nb[i - 1] * t.ne[i - 1];
    return t;
}

// [Sk, Sv, Hv, n] states over a buffer: key-major (S[i][j] at i + j*Sk) or value-major (i*Sv + j).
gdn_tensor state_tensor(Buffer &b, int64_t n, bool value_major) {
    gdn_tensor t = tensor(b, {Sk, Sv, Hv, n});
    if (value_major) {
        t.nb[0] = 4 * Sv;
        t.nb[1] = 4;
    }
    return t;
}

float &state_at(Buffer &b, bool value_major, int64_t i, int64_t j, int64_t h, int64_t index) {
    const int64_t inner = value_major ? i * Sv + j : i + j * Sk;
    return b.data[static_cast<size_t>(index * kHeadStates + h * kArea + inner)];
}

void fill_random(Buffer &b, uint32_t seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    for (float &x : b.data) x = u(rng);
}

// Random inputs of a B-sequence (or, with `tokens`, one packed stream) problem.
struct Inputs {
    int64_t tokens, batch;
    Buffer q, k, v, g, beta;
    Inputs(int64_t tokens_, int64_t batch_)
        : tokens(tokens_), batch(batch_), q(Sk * Hk * tokens * batch), k(q.data.size()), v(Sv * Hv * tokens * batch),
          g(Hv * tokens * batch), beta(g.data.size()) {
        fill_random(q, 1, -0.5f, 0.5f);
        fill_random(k, 2, -0.5f, 0.5f);
        fill_random(v, 3, -1.0f, 1.0f);
        fill_random(g, 4, -0.3f, -0.02f);
        fill_random(beta, 5, 0.0f, 1.0f);
    }
    gdn_problem problem() {
        gdn_problem p{};
        p.q = tensor(q, {Sk, Hk, tokens, batch});
        p.k = tensor(k, {Sk, Hk, tokens, batch});
        p.v = tensor(v, {Sv, Hv, tokens, batch});
        p.g = tensor(g, {1, Hv, tokens, batch});
        p.beta = tensor(beta, {1, Hv, tokens, batch});
        p.head_map = GDN_HEAD_MAP_GROUPED;
        return p;
    }
};

gdn_tensor index_tensor(std::vector<int64_t> &values) {
    gdn_tensor t{};
    t.data = values.data();
    t.type = GDN_TYPE_I64;
    t.ne[0] = static_cast<int64_t>(values.size());
    t.ne[1] = t.ne[2] = t.ne[3] = 1;
    t.nb[0] = 8;
    t.nb[1] = t.nb[2] = t.nb[3] = 8 * t.ne[0];
    return t;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class StatePools : public ::testing::TestWithParam<const char *> {
protected:
    void SetUp() override {
        gdn_context_params params = gdn_context_default_params();
        params.n_threads = 2;
        ASSERT_EQ(gdn_context_create(GetParam(), &params, &ctx_), GDN_OK) << gdn_last_create_error();
    }
    void TearDown() override { gdn_context_free(ctx_); }
    gdn_context *ctx_ = nullptr;
};

// Forward with s0 and states in each pair of layouts, and in place: the same out and states.
TEST_P(StatePools, ForwardLayoutsGiveTheSameBits) {
    Inputs in(T, B);
    Buffer s0_keys(kHeadStates * B);
    fill_random(s0_keys, 6, -0.5f, 0.5f);
    auto run = [&](bool s0_values, bool states_values, bool in_place, Buffer &out, Buffer &final_keys) {
        Buffer s0(kHeadStates * B), states(kHeadStates * B);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hv; ++h)
                for (int64_t j = 0; j < Sv; ++j)
                    for (int64_t i = 0; i < Sk; ++i) state_at(s0, s0_values, i, j, h, b) = state_at(s0_keys, false, i, j, h, b);
        gdn_problem p = in.problem();
        p.state = state_tensor(s0, B, s0_values);
        const gdn_tensor o = tensor(out, {Sv, Hv, T, B});
        const gdn_tensor st = in_place ? p.state : state_tensor(states, B, states_values);
        ASSERT_EQ(gdn_forward(ctx_, &p, &o, &st), GDN_OK) << gdn_last_error(ctx_);
        Buffer &written = in_place ? s0 : states;
        const bool written_values = in_place ? s0_values : states_values;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hv; ++h)
                for (int64_t j = 0; j < Sv; ++j)
                    for (int64_t i = 0; i < Sk; ++i) state_at(final_keys, false, i, j, h, b) = state_at(written, written_values, i, j, h, b);
    };
    Buffer out_ref(Sv * Hv * T * B), final_ref(kHeadStates * B);
    run(false, false, false, out_ref, final_ref);
    for (int c = 1; c < 6; ++c) {
        const bool s0_values = c & 1, states_values = c & 2, in_place = c >= 4;
        Buffer out(Sv * Hv * T * B), final_state(kHeadStates * B);
        run(s0_values, states_values, in_place, out, final_state);
        EXPECT_TRUE(same_bits(out.data, out_ref.data)) << "case " << c;
        EXPECT_TRUE(same_bits(final_state.data, final_ref.data)) << "case " << c;
    }
}

// Backward with s0, d_states and ds0 value-major: the key-major call's bits, transposed.
TEST_P(StatePools, BackwardLayoutsGiveTheSameBits) {
    Inputs in(T, B);
    Buffer s0(kHeadStates * B), d_states(kHeadStates * B), d_out(Sv * Hv * T * B);
    fill_random(s0, 6, -0.5f, 0.5f);
    fill_random(d_states, 7, -1.0f, 1.0f);
    fill_random(d_out, 8, -1.0f, 1.0f);
    Buffer s0_values(s0.data.size()), d_states_values(s0.data.size());
    for (int64_t x = 0; x < B; ++x)
        for (int64_t h = 0; h < Hv; ++h)
            for (int64_t j = 0; j < Sv; ++j)
                for (int64_t i = 0; i < Sk; ++i) {
                    state_at(s0_values, true, i, j, h, x) = state_at(s0, false, i, j, h, x);
                    state_at(d_states_values, true, i, j, h, x) = state_at(d_states, false, i, j, h, x);
                }
    auto run = [&](bool values, Buffer &dq, Buffer &dk, Buffer &dv, Buffer &ds0) {
        gdn_problem p = in.problem();
        p.state = state_tensor(values ? s0_values : s0, B, values);
        const gdn_tensor dO = tensor(d_out, {Sv, Hv, T, B});
        const gdn_tensor dS = state_tensor(values ? d_states_values : d_states, B, values);
        gdn_grads grads{};
        grads.q = tensor(dq, {Sk, Hk, T, B});
        grads.k = tensor(dk, {Sk, Hk, T, B});
        grads.v = tensor(dv, {Sv, Hv, T, B});
        grads.state = state_tensor(ds0, B, values);
        ASSERT_EQ(gdn_backward(ctx_, &p, &dO, &dS, &grads), GDN_OK) << gdn_last_error(ctx_);
    };
    const int64_t nq = Sk * Hk * T * B, nv = Sv * Hv * T * B;
    Buffer dq0(nq), dk0(nq), dv0(nv), ds00(kHeadStates * B), dq1(nq), dk1(nq), dv1(nv), ds01(kHeadStates * B);
    run(false, dq0, dk0, dv0, ds00);
    run(true, dq1, dk1, dv1, ds01);
    EXPECT_TRUE(same_bits(dq0.data, dq1.data));
    EXPECT_TRUE(same_bits(dk0.data, dk1.data));
    EXPECT_TRUE(same_bits(dv0.data, dv1.data));
    for (int64_t x = 0; x < B; ++x)
        for (int64_t h = 0; h < Hv; ++h)
            for (int64_t j = 0; j < Sv; ++j)
                for (int64_t i = 0; i < Sk; ++i)
                    ASSERT_EQ(state_at(ds01, true, i, j, h, x), state_at(ds00, false, i, j, h, x)) << i << "," << j << "," << h << "," << x;
}

// A pool of 7 value-major slots, updated in place at indices with gaps and a negative entry:
// the plain call on the gathered states (zero for the negative one), and nothing else written.
TEST_P(StatePools, ForwardPoolInPlaceMatchesTheGatheredCall) {
    constexpr int64_t kSlots = 7;
    std::vector<int64_t> indices = {5, -1, 0, 3};
    Inputs in(T, B);
    Buffer pool(kHeadStates * kSlots);
    fill_random(pool, 9, -0.5f, 0.5f);
    const std::vector<float> before = pool.data;

    Buffer gathered(kHeadStates * B, 0.0f), out_plain(Sv * Hv * T * B), final_plain(kHeadStates * B);
    for (int64_t b = 0; b < B; ++b)
        if (indices[b] >= 0)
            std::memcpy(&gathered.data[b * kHeadStates], &pool.data[indices[b] * kHeadStates], sizeof(float) * kHeadStates);
    {  // the pool is value-major: gather as value-major too
        gdn_problem p = in.problem();
        p.state = state_tensor(gathered, B, true);
        const gdn_tensor o = tensor(out_plain, {Sv, Hv, T, B});
        const gdn_tensor st = state_tensor(final_plain, B, true);
        ASSERT_EQ(gdn_forward(ctx_, &p, &o, &st), GDN_OK) << gdn_last_error(ctx_);
    }
    gdn_problem p = in.problem();
    p.state = state_tensor(pool, kSlots, true);
    p.state_indices = index_tensor(indices);
    Buffer out(Sv * Hv * T * B);
    const gdn_tensor o = tensor(out, {Sv, Hv, T, B});
    ASSERT_EQ(gdn_forward(ctx_, &p, &o, &p.state), GDN_OK) << gdn_last_error(ctx_);
    EXPECT_TRUE(same_bits(out.data, out_plain.data));
    for (int64_t slot = 0; slot < kSlots; ++slot) {
        int64_t sequence = -1;
        for (int64_t b = 0; b < B; ++b)
            if (indices[b] == slot) sequence = b;
        const float *got = &pool.data[slot * kHeadStates];
        const float *want = sequence >= 0 ? &final_plain.data[sequence * kHeadStates] : &before[slot * kHeadStates];
        EXPECT_EQ(std::memcmp(got, want, sizeof(float) * kHeadStates), 0) << "slot " << slot << " (sequence " << sequence << ")";
    }
}

// Packed sequences (one of them empty) read from one key-major pool in reversed order and write
// to another pool: each named slot gets its sequence's final state, the others stay as they were.
TEST_P(StatePools, PackedSequencesWriteTheirSlotsOfAnotherPool) {
    constexpr int64_t kSlots = 5;
    std::vector<int64_t> offsets = {0, 2, 2, 5, 6}, indices = {4, 2, 1, 0};
    const int64_t tokens = offsets.back(), N = 4;
    Inputs in(tokens, 1);
    Buffer pool(kHeadStates * kSlots), next(kHeadStates * kSlots);
    fill_random(pool, 10, -0.5f, 0.5f);
    fill_random(next, 11, 5.0f, 6.0f);
    const std::vector<float> next_before = next.data;

    Buffer gathered(kHeadStates * N), final_plain(kHeadStates * N), out_plain(Sv * Hv * tokens);
    for (int64_t n = 0; n < N; ++n)
        std::memcpy(&gathered.data[n * kHeadStates], &pool.data[indices[n] * kHeadStates], sizeof(float) * kHeadStates);
    gdn_problem p = in.problem();
    p.cu_seqlens = index_tensor(offsets);
    p.state = state_tensor(gathered, N, false);
    gdn_tensor o = tensor(out_plain, {Sv, Hv, tokens, 1});
    gdn_tensor st = state_tensor(final_plain, N, false);
    ASSERT_EQ(gdn_forward(ctx_, &p, &o, &st), GDN_OK) << gdn_last_error(ctx_);

    Buffer out(Sv * Hv * tokens);
    p.state = state_tensor(pool, kSlots, false);
    p.state_indices = index_tensor(indices);
    o = tensor(out, {Sv, Hv, tokens, 1});
    st = state_tensor(next, kSlots, false);
    ASSERT_EQ(gdn_forward(ctx_, &p, &o, &st), GDN_OK) << gdn_last_error(ctx_);
    EXPECT_TRUE(same_bits(out.data, out_plain.data));
    for (int64_t n = 0; n < N; ++n)
        EXPECT_EQ(std::memcmp(&next.data[indices[n] * kHeadStates], &final_plain.data[n * kHeadStates], sizeof(float) * kHeadStates), 0)
            << "sequence " << n;
    EXPECT_EQ(std::memcmp(&next.data[3 * kHeadStates], &next_before[3 * kHeadStates], sizeof(float) * kHeadStates), 0)
        << "slot 3 is no sequence's";
}

// The backward of a pooled call: s0 and d_states read at the indices, ds0 written there only (a
// negative index: s0 zero, ds0 nowhere). Every thread count from 1 to 5 and a T of one chunk and of several: the cpu backend's schedules
// for one call (its groups split over units or run as a tail) must not take the first of a pooled
// call's sequences for the whole call.
void expect_pooled_backward_matches_gathered(const char *backend, int threads, int64_t tokens) {
    SCOPED_TRACE(std::string(backend) + ", " + std::to_string(threads) + " threads, T = " + std::to_string(tokens));
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = threads;
    gdn_context *ctx = nullptr;
    ASSERT_EQ(gdn_context_create(backend, &params, &ctx), GDN_OK) << gdn_last_create_error();
    constexpr int64_t kSlots = 6, kSequences = 5;
    std::vector<int64_t> indices = {2, 5, -3, 1, 4};
    Inputs in(tokens, kSequences);
    Buffer pool(kHeadStates * kSlots), d_pool(kHeadStates * kSlots), d_out(Sv * Hv * tokens * kSequences);
    fill_random(pool, 12, -0.5f, 0.5f);
    fill_random(d_pool, 13, -1.0f, 1.0f);
    fill_random(d_out, 14, -1.0f, 1.0f);
    Buffer s0(kHeadStates * kSequences, 0.0f), d_states(kHeadStates * kSequences, 0.0f);
    for (int64_t b = 0; b < kSequences; ++b)
        if (indices[b] >= 0) {
            std::memcpy(&s0.data[b * kHeadStates], &pool.data[indices[b] * kHeadStates], sizeof(float) * kHeadStates);
            std::memcpy(&d_states.data[b * kHeadStates], &d_pool.data[indices[b] * kHeadStates], sizeof(float) * kHeadStates);
        }
    const int64_t nq = Sk * Hk * tokens * kSequences, nv = Sv * Hv * tokens * kSequences, ng = Hv * tokens * kSequences;
    Buffer dv_plain(nv), dq_plain(nq), dg_plain(ng), ds0_plain(kHeadStates * kSequences);
    gdn_problem p = in.problem();
    p.state = state_tensor(s0, kSequences, true);
    const gdn_tensor dO = tensor(d_out, {Sv, Hv, tokens, kSequences});
    gdn_tensor dS = state_tensor(d_states, kSequences, true);
    gdn_grads grads{};
    grads.q = tensor(dq_plain, {Sk, Hk, tokens, kSequences});
    grads.v = tensor(dv_plain, {Sv, Hv, tokens, kSequences});
    grads.g = tensor(dg_plain, {1, Hv, tokens, kSequences});
    grads.state = state_tensor(ds0_plain, kSequences, true);
    ASSERT_EQ(gdn_backward(ctx, &p, &dO, &dS, &grads), GDN_OK) << gdn_last_error(ctx);

    Buffer dv(nv), dq(nq), dg(ng), ds0_pool(kHeadStates * kSlots, 7.0f);
    p.state = state_tensor(pool, kSlots, true);
    p.state_indices = index_tensor(indices);
    dS = state_tensor(d_pool, kSlots, true);
    grads.q = tensor(dq, {Sk, Hk, tokens, kSequences});
    grads.v = tensor(dv, {Sv, Hv, tokens, kSequences});
    grads.g = tensor(dg, {1, Hv, tokens, kSequences});
    grads.state = state_tensor(ds0_pool, kSlots, true);
    ASSERT_EQ(gdn_backward(ctx, &p, &dO, &dS, &grads), GDN_OK) << gdn_last_error(ctx);
    gdn_context_free(ctx);
    EXPECT_TRUE(same_bits(dv.data, dv_plain.data));
    EXPECT_TRUE(same_bits(dq.data, dq_plain.data));
    EXPECT_TRUE(same_bits(dg.data, dg_plain.data));
    for (int64_t slot = 0; slot < kSlots; ++slot) {
        int64_t sequence = -1;
        for (int64_t b = 0; b < kSequences; ++b)
            if (indices[b] == slot) sequence = b;
        for (int64_t e = 0; e < kHeadStates; ++e) {
            const float got = ds0_pool.data[slot * kHeadStates + e];
            const float want = sequence >= 0 ? ds0_plain.data[sequence * kHeadStates + e] : 7.0f;
            ASSERT_EQ(got, want) << "slot " << slot << " element " << e;
        }
    }
}

TEST_P(StatePools, BackwardPoolMatchesTheGatheredCall) {
    for (int64_t tokens : {T, int64_t(150)})
        for (int threads = 1; threads <= 5; ++threads) expect_pooled_backward_matches_gathered(GetParam(), threads, tokens);
}

struct BadPool {
    const char *name;
    gdn_status status;
    const char *message;
    std::vector<int64_t> indices;
    int64_t states_slots;  // slots of the output pool (the input pool has 4)
    bool no_contiguous_dimension = false;
};

// Bad pools are refused with a message naming the index, and nothing is written.
TEST_P(StatePools, BadPoolsAreRefusedAndWriteNothing) {
    const BadPool cases[] = {
        {"duplicate", GDN_ERROR_ALIAS, "state_indices[0] = state_indices[2] = 3", {3, 1, 3, -1}, 4},
        {"out_of_range", GDN_ERROR_SHAPE, "state_indices[1] = 4 but the pool has 4 slots", {0, 4, 1, 2}, 4},
        {"too_few_indices", GDN_ERROR_SHAPE, "state_indices.ne[0] = 3 but there are 4 sequences", {0, 1, 2}, 4},
        {"pools_of_two_sizes", GDN_ERROR_SHAPE, "states.ne[3] = 5", {0, 1, 2, 3}, 5},
        {"snapshots", GDN_ERROR_SHAPE, "states.ne[3] = 8", {0, 1, 2, 3}, 8},
        {"no_contiguous_dimension", GDN_ERROR_LAYOUT, "states.nb = [", {0, 1, 2, 3}, 4, true},
    };
    for (const BadPool &c : cases) {
        SCOPED_TRACE(c.name);
        Inputs in(T, B);
        Buffer pool(kHeadStates * 4), next(kHeadStates * c.states_slots, 3.0f), out(Sv * Hv * T * B, 3.0f);
        fill_random(pool, 15, -0.5f, 0.5f);
        std::vector<int64_t> indices = c.indices;
        gdn_problem p = in.problem();
        p.state = state_tensor(pool, 4, true);
        p.state_indices = index_tensor(indices);
        const gdn_tensor o = tensor(out, {Sv, Hv, T, B});
        gdn_tensor st = state_tensor(next, c.states_slots, true);
        if (c.no_contiguous_dimension) {  // every other float of the buffer: nb[1] = 8
            st.nb[1] = 8;
            st.nb[0] = 8 * Sv;
        }
        EXPECT_EQ(gdn_forward(ctx_, &p, &o, &st), c.status);
        EXPECT_NE(std::string(gdn_last_error(ctx_)).find(c.message), std::string::npos) << gdn_last_error(ctx_);
        for (float x : out.data) ASSERT_EQ(x, 3.0f);
        for (float x : next.data) ASSERT_EQ(x, 3.0f);
    }
    // Indices are integers.
    Inputs in(T, B);
    Buffer pool(kHeadStates * 4), as_floats(B, 0.0f);
    gdn_problem p = in.problem();
    p.state = state_tensor(pool, 4, true);
    p.state_indices = tensor(as_floats, {B, 1, 1, 1});
    EXPECT_EQ(gdn_check_forward(ctx_, &p, nullptr, &p.state), GDN_ERROR_TYPE);
    EXPECT_NE(std::string(gdn_last_error(ctx_)).find("state_indices.type = F32"), std::string::npos) << gdn_last_error(ctx_);
}

// T = 0 with a pool: the named slots of the output pool receive their initial states.
TEST_P(StatePools, NoTokensMovesTheNamedSlots) {
    std::vector<int64_t> indices = {1, -1, 0, 2};
    Inputs in(0, B);
    Buffer pool(kHeadStates * 3), next(kHeadStates * 3, 9.0f);
    fill_random(pool, 16, -0.5f, 0.5f);
    gdn_problem p = in.problem();
    p.state = state_tensor(pool, 3, true);
    p.state_indices = index_tensor(indices);
    const gdn_tensor st = state_tensor(next, 3, false);  // a key-major output pool: the layouts differ
    ASSERT_EQ(gdn_forward(ctx_, &p, nullptr, &st), GDN_OK) << gdn_last_error(ctx_);
    for (int64_t slot = 0; slot < 3; ++slot)
        for (int64_t h = 0; h < Hv; ++h)
            for (int64_t j = 0; j < Sv; ++j)
                for (int64_t i = 0; i < Sk; ++i) ASSERT_EQ(state_at(next, false, i, j, h, slot), state_at(pool, true, i, j, h, slot));
}

INSTANTIATE_TEST_SUITE_P(HostBackends, StatePools, ::testing::Values("ref", "cpu"),
                         [](const ::testing::TestParamInfo<const char *> &info) { return std::string(info.param); });

}  // namespace
