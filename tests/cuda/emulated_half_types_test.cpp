// BF16 and F16 tensors (SPEC 3.1) and the BF16 precision on the cuda kernels, emulated on CPU
// threads (fake_cuda.h).
//
// EXACT: the kernels convert each element as they read it and round each result once as they
// write it, so a call with BF16/F16 tensors gives exactly the bits of the all-F32 call on the
// converted inputs with its outputs rounded once (float_to_bf16 / float_to_f16): checked for the
// chunked and per-token kernels, GDA and KDA, mixed beta and gate types, packed sequences with
// pooled value-major states, and q/k/v as strided row views of one fused projection buffer.
//
// BF16 precision (Sizes::bf16_products): the chunked kernels' products take bf16 operands;
// checked against ref within a bound derived from bf16 roundoff (bf16_products_bound.h);
// the per-token kernels, which have no chunk products, give the EXACT bits.
#include "fake_cuda.h"
// The kernels, compiled by the host compiler.
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/chunk_forward_kernel.cuh"
#include "cuda/sequence_views.h"
#include "cuda/token_backward_kernel.cuh"
#include "cuda/token_forward_kernel.cuh"
#include "bf16_products_bound.h"
#include "emulation_support.h"
#include "math/elements.h"

namespace gdn::cuda {
namespace {  // the kernels' `extern __shared__ float shared[]`, in their (this file's) namespace
alignas(32) float shared[1 << 16];  // the block's dynamic shared memory (blocks run one at a time)
}  // namespace
}  // namespace gdn::cuda

namespace {

using namespace gdn::cuda;
using namespace gdn_emulation;

const EmulatedLauncher kLaunch{gdn::cuda::shared, sizeof(gdn::cuda::shared)};

const char *name_of(Element e) { return e == Element::BF16 ? "BF16" : e == Element::F16 ? "F16" : "F32"; }

uint16_t to_bits(Element e, float x) { return e == Element::BF16 ? gdn::float_to_bf16(x) : gdn::float_to_f16(x); }
float from_bits(Element e, uint16_t h) { return e == Element::BF16 ? gdn::bf16_to_float(h) : gdn::f16_to_float(h); }
float round_trip(Element e, float x) { return e == Element::F32 ? x : from_bits(e, to_bits(e, x)); }

// A tensor of one element type: its values as floats (each exactly representable in `type`),
// and for BF16/F16 its elements, in the same layout (element strides) as the values.
struct Typed {
    Element type = Element::F32;
    HostTensor values;
    std::vector<uint16_t> bits;

    Typed() = default;
    Typed(const HostTensor &x, Element e) : type(e), values(x) {
        for (float &v : values.data) v = round_trip(e, v);
        if (e != Element::F32)
            for (float v : values.data) bits.push_back(to_bits(e, v));
    }
    // What the kernels get in the typed call, and in the F32 call on the converted values.
    View view() const {
        View v = values.view();
        if (type != Element::F32 && v.present()) {
            v.data = const_cast<uint16_t *>(bits.data());
            v.type = type;
        }
        return v;
    }
    View f32_view() const { return values.view(); }
};

// The F32 call's result rounded once to the typed output's type must be the typed output's bits.
void expect_rounded_once(const Typed &typed, const HostTensor &f32, const char *what) {
    if (typed.type == Element::F32) {
        EXPECT_EQ(typed.values.data, f32.data) << what;
        return;
    }
    ASSERT_EQ(typed.bits.size(), f32.data.size()) << what;
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < f32.data.size(); ++i)
        if (typed.bits[i] != to_bits(typed.type, f32.data[i]) && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << what << " (" << name_of(typed.type) << "): " << differ << " elements differ, the first at " << first;
}

// Types of one call: q/k/v (and out, d_out, dq, dk, dv), beta, g.
struct Types {
    Element x, beta, gate;
};
void PrintTo(const Types &t, std::ostream *os) { *os << name_of(t.x) << "_beta" << name_of(t.beta) << "_g" << name_of(t.gate); }

const Types kTypes[] = {{Element::BF16, Element::BF16, Element::BF16},
                        {Element::BF16, Element::F32, Element::F32},
                        {Element::F16, Element::F16, Element::F32},
                        {Element::F16, Element::F32, Element::BF16}};

// A forward's or backward's tensors in the call's types; the states F32.
struct TypedCase {
    Shape s;
    Types types;
    Typed q, k, v, g, beta, d_out;
    HostTensor s0, d_states;

    TypedCase(const Shape &shape, const Types &t, uint32_t seed) : s(shape), types(t) {
        const Inputs in = make_inputs(s, seed);
        q = Typed(in.q, t.x), k = Typed(in.k, t.x), v = Typed(in.v, t.x);
        g = Typed(in.g, t.gate), beta = Typed(in.beta, t.beta);
        s0 = in.s0;
        HostTensor dout(s.Sv, s.Hv, s.T, s.B, 0.0f, 2);
        d_states = HostTensor(s.Sk, s.Sv, s.Hv, int64_t(s.B) * s.K);
        std::mt19937 rng(seed + 1);
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        for (float &x : dout.data) x = unit(rng);
        for (float &x : d_states.data) x = unit(rng);
        d_out = Typed(dout, t.x);
    }
    Sizes sizes() const {
        Inputs in;
        in.s = s;
        return in.sizes();
    }
};

// Outputs of one forward: out in the call's type X (padded rows), states F32.
struct ForwardOut {
    Typed out;
    HostTensor states;
    ForwardOut(const Shape &s, Element x, int64_t state_count)
        : out(HostTensor(s.Sv, s.Hv, s.T, s.B, -7.0f, 1), x), states(s.Sk, s.Sv, s.Hv, state_count, -7.0f) {}
};

ForwardViews forward_views(const TypedCase &c, ForwardOut &o, bool typed) {
    const auto pick = [&](const Typed &t) { return typed ? t.view() : t.f32_view(); };
    return {pick(c.q), pick(c.k), pick(c.v), pick(c.g), pick(c.beta), c.s0.view(), pick(o.out), o.states.view()};
}

// Gradients: dq, dk, dv in X (dk with padded rows), dg in g's type, dbeta in beta's, ds0 F32.
struct BackwardOut {
    Typed dq, dk, dv, dg, dbeta;
    HostTensor ds0;
    BackwardOut(const Shape &s, const Types &t, int64_t state_count)
        : dq(HostTensor(s.Sk, s.Hk, s.T, s.Bq, -7.0f), t.x),
          dk(HostTensor(s.Sk, s.Hk, s.T, s.Bq, -7.0f, 2), t.x),
          dv(HostTensor(s.Sv, s.Hv, s.T, s.B, -7.0f), t.x),
          dg(HostTensor(s.kda ? s.Sk : 1, s.Hv, s.T, s.B, -7.0f), t.gate),
          dbeta(HostTensor(1, s.Hv, s.T, s.B, -7.0f), t.beta),
          ds0(s.Sk, s.Sv, s.Hv, state_count, -7.0f) {}
};

BackwardViews backward_views(const TypedCase &c, BackwardOut &o, bool typed) {
    const auto pick = [&](const Typed &t) { return typed ? t.view() : t.f32_view(); };
    return {pick(c.q),  pick(c.k),  pick(c.v),  pick(c.g),  pick(c.beta),  c.s0.view(),      pick(c.d_out),
            c.d_states.view(), pick(o.dq), pick(o.dk), pick(o.dv), pick(o.dg), pick(o.dbeta), o.ds0.view()};
}

void expect_identity(const ForwardOut &typed, const ForwardOut &f32) {
    expect_rounded_once(typed.out, f32.out.values, "out");
    EXPECT_EQ(typed.states.data, f32.states.data) << "states (F32)";
}

void expect_identity(const BackwardOut &typed, const BackwardOut &f32) {
    expect_rounded_once(typed.dq, f32.dq.values, "dq");
    expect_rounded_once(typed.dk, f32.dk.values, "dk");
    expect_rounded_once(typed.dv, f32.dv.values, "dv");
    expect_rounded_once(typed.dg, f32.dg.values, "dg");
    expect_rounded_once(typed.dbeta, f32.dbeta.values, "dbeta");
    EXPECT_EQ(typed.ds0.data, f32.ds0.data) << "ds0 (F32)";
}

// The launch sequences of one unpacked call, as the backend enqueues them.
void chunk_forward(const ForwardViews &w, const Sizes &n) {
    const ChunkForwardPlan plan = make_chunk_forward_plan(n);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
    ASSERT_EQ(run_chunk_forward(kLaunch, w, n, plan, workspace.data()), cudaSuccess);
}
void chunk_backward(const BackwardViews &w, const Sizes &n) {
    const ChunkBackwardPlan plan = make_chunk_backward_plan(n);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
    ASSERT_EQ(run_chunk_backward(kLaunch, w, n, plan, workspace.data()), cudaSuccess);
}
void token_forward(const ForwardViews &w, const Sizes &n, const SequenceTable &table = {}) {
    ASSERT_EQ(run_token_forward(kLaunch, w, n, table), cudaSuccess);
}
void token_backward(const BackwardViews &w, const Sizes &n, const SequenceTable &table = {}) {
    const TokenBackwardPlan plan = make_token_backward_plan(n, 16 * 1024, kWindowBudget, table);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
    ASSERT_EQ(run_token_backward(kLaunch, w, n, plan, workspace.data(), table), cudaSuccess);
}

// ---- EXACT: the identity, unpacked calls ---------------------------------------------------

struct IdentityCase {
    Shape s;
    bool chunked;
    Types types;
};

void PrintTo(const IdentityCase &c, std::ostream *os) {
    PrintTo(c.s, os);
    *os << (c.chunked ? ",chunked," : ",per-token,");
    PrintTo(c.types, os);
}

class EmulatedHalfIdentity : public ::testing::TestWithParam<IdentityCase> {};

TEST_P(EmulatedHalfIdentity, ForwardAndBackward) {
    const IdentityCase ic = GetParam();
    const TypedCase c(ic.s, ic.types, 31);
    const Sizes n = c.sizes();
    if (ic.chunked) ASSERT_TRUE(chunk_forward_eligible(n, sizeof(gdn::cuda::shared)) && chunk_backward_eligible(n, sizeof(gdn::cuda::shared)));
    const int64_t state_count = int64_t(c.s.B) * c.s.K;

    ForwardOut typed(c.s, c.types.x, state_count), f32(c.s, Element::F32, state_count);
    if (ic.chunked) {
        chunk_forward(forward_views(c, typed, true), n);
        chunk_forward(forward_views(c, f32, false), n);
    } else {
        token_forward(forward_views(c, typed, true), n);
        token_forward(forward_views(c, f32, false), n);
    }
    expect_identity(typed, f32);

    BackwardOut typed_grads(c.s, c.types, c.s.B), f32_grads(c.s, Types{Element::F32, Element::F32, Element::F32}, c.s.B);
    if (ic.chunked) {
        chunk_backward(backward_views(c, typed_grads, true), n);
        chunk_backward(backward_views(c, f32_grads, false), n);
    } else {
        token_backward(backward_views(c, typed_grads, true), n);
        token_backward(backward_views(c, f32_grads, false), n);
    }
    expect_identity(typed_grads, f32_grads);
}

// Every type combination on both kernel families (each case an OS thread per CUDA thread: kept
// small). Sk, Sv, Hk, Hv, T, B, Bq, K, kda, grouped, s0
INSTANTIATE_TEST_SUITE_P(
    Shapes, EmulatedHalfIdentity,
    ::testing::Values(IdentityCase{Shape{32, 32, 1, 2, 70, 1, 1, 1, false, false, true}, true, kTypes[0]},    // chunked, a short last chunk
                      IdentityCase{Shape{16, 64, 2, 4, 40, 2, 1, 1, false, true, false}, true, kTypes[3]},    // chunked, grouped, Bq < B
                      IdentityCase{Shape{32, 16, 1, 2, 9, 1, 1, 3, true, false, true}, false, kTypes[2]},     // per-token, KDA, K = 3
                      IdentityCase{Shape{24, 40, 2, 2, 7, 2, 2, 1, false, false, true}, false, kTypes[1]},    // per-token, GDA, odd sizes
                      IdentityCase{Shape{32, 16, 1, 1, 6, 1, 1, 1, true, false, true, true}, false, kTypes[0]}));  // KDA, spikes, beta 0 and 1

// ---- EXACT: packed sequences, pooled value-major states ------------------------------------

// Packed tokens (B = Bq = 1), sequences of 5, 0, 70 and 8 tokens; a pool of 3 value-major state
// slots, sequence i reading and writing slot {2, 1, 0, -1}[i] (the empty one is the C API's
// business; -1: a zero initial state, no final state). The 70-token sequence goes by the chunked
// kernels on its own views (sequence_call), the others in one per-token launch chain over a
// sequence table, as the backend walks them.
TEST(EmulatedHalfTypes, PackedSequencesPooledValueMajorStates) {
    for (const Types &t : {kTypes[0], kTypes[2]}) {
        SCOPED_TRACE(::testing::PrintToString(t));
        const Shape s{32, 32, 1, 1, 83, 1, 1, 1, false, false, false};
        TypedCase c(s, t, 41);
        const std::vector<int64_t> offsets = {0, 5, 5, 75, 83}, slots = {2, 1, 0, -1};
        const int64_t pool = 3, N = 4;
        c.s0 = value_major(HostTensor(s.Sk, s.Sv, s.Hv, pool, 0.25f));
        for (size_t i = 0; i < c.s0.data.size(); ++i) c.s0.data[i] = c.s0.data[i] == -7.0f ? -7.0f : 0.001f * float(i % 97) - 0.05f;
        c.d_states = value_major(HostTensor(s.Sk, s.Sv, s.Hv, pool, 0.5f));
        const Sizes n = c.sizes();
        std::vector<SequenceEntry> entries = sequence_entries(n, offsets, slots);
        std::vector<SequenceEntry> alone, grouped;
        for (const SequenceEntry &e : entries) (e.length >= 64 ? alone : grouped).push_back(e);
        ASSERT_EQ(alone.size(), 1u);
        const std::vector<SequenceGroup> groups = sequence_groups(grouped, true, N, 65535, [](const SequenceTable &) { return true; });
        ASSERT_EQ(groups.size(), 1u);
        SequenceTable table = groups[0].table;
        table.entries = grouped.data();

        const auto forward = [&](ForwardOut &o, bool typed) {
            o.states = value_major(HostTensor(s.Sk, s.Sv, s.Hv, pool, -7.0f));
            const ForwardViews w = forward_views(c, o, typed);
            const SequenceCall<ForwardViews> call = sequence_call(w, n, alone[0], N);
            chunk_forward(call.views, call.sizes);
            token_forward(w, n, table);
        };
        ForwardOut typed(s, t.x, pool), f32(s, Element::F32, pool);
        forward(typed, true);
        forward(f32, false);
        expect_identity(typed, f32);

        const auto backward = [&](BackwardOut &o, bool typed_call) {
            o.ds0 = value_major(HostTensor(s.Sk, s.Sv, s.Hv, pool, -7.0f));
            const BackwardViews w = backward_views(c, o, typed_call);
            const SequenceCall<BackwardViews> call = sequence_call(w, n, alone[0], N);
            chunk_backward(call.views, call.sizes);
            token_backward(w, n, table);
        };
        BackwardOut typed_grads(s, t, pool), f32_grads(s, Types{Element::F32, Element::F32, Element::F32}, pool);
        backward(typed_grads, true);
        backward(f32_grads, false);
        expect_identity(typed_grads, f32_grads);
    }
}

// ---- EXACT: q, k, v as row views of one fused projection buffer ----------------------------

// One BF16 buffer per token [q (Sk) | k (Sk) | v (Sv) | 1 spare], as a model's fused QKV
// projection leaves it: three views with the buffer's row stride (an odd number of 2-byte
// elements, so rows start at addresses that are not multiples of 4 bytes).
TEST(EmulatedHalfTypes, FusedProjectionRowViews) {
    const Shape s{32, 32, 1, 1, 70, 1, 1, 1, false, false, true};
    const TypedCase c(s, Types{Element::BF16, Element::F32, Element::F32}, 51);
    const int64_t row = 2 * s.Sk + s.Sv + 1;
    std::vector<uint16_t> fused(static_cast<size_t>(row * s.T), 0x7fc0u);  // NaN in the spare: never read
    for (int64_t t = 0; t < s.T; ++t)
        for (int i = 0; i < s.Sk; ++i) {
            fused[t * row + i] = to_bits(Element::BF16, c.q.values.data[t * s.Sk + i]);
            fused[t * row + s.Sk + i] = to_bits(Element::BF16, c.k.values.data[t * (s.Sk + 3) + i]);  // k has padded rows
        }
    for (int64_t t = 0; t < s.T; ++t)
        for (int j = 0; j < s.Sv; ++j) fused[t * row + 2 * s.Sk + j] = to_bits(Element::BF16, c.v.values.data[t * s.Sv + j]);
    const auto row_view = [&](int64_t first) { return View{fused.data() + first, row, row, row * s.T, 1, Element::BF16}; };
    const Sizes n = c.sizes();

    ForwardOut typed(s, Element::BF16, 1), f32(s, Element::F32, 1);
    ForwardViews w = forward_views(c, typed, true);
    w.q = row_view(0), w.k = row_view(s.Sk), w.v = row_view(2 * s.Sk);
    chunk_forward(w, n);
    chunk_forward(forward_views(c, f32, false), n);
    expect_identity(typed, f32);

    BackwardOut typed_grads(s, c.types, 1), f32_grads(s, Types{Element::F32, Element::F32, Element::F32}, 1);
    BackwardViews bw = backward_views(c, typed_grads, true);
    bw.q = row_view(0), bw.k = row_view(s.Sk), bw.v = row_view(2 * s.Sk);
    chunk_backward(bw, n);
    chunk_backward(backward_views(c, f32_grads, false), n);
    expect_identity(typed_grads, f32_grads);
}

// ---- BF16 precision ------------------------------------------------------------------------

// The bound and its derivation: bf16_products_bound.h (NMSE < 8 u^2, u = 2^-8).
constexpr double kBf16NmseBound = gdn_bf16_bound::kBf16ProductsNmse;

double nmse_of(const HostTensor &got, const HostTensor &want) { return nmse(got.data, want.data); }

class EmulatedBf16Precision : public ::testing::TestWithParam<Shape> {};

TEST_P(EmulatedBf16Precision, WithinBf16BoundOfRef) {
    const Shape s = GetParam();
    const TypedCase c(s, Types{Element::BF16, Element::F32, Element::F32}, 61);
    Sizes exact = c.sizes(), bf16 = exact;
    bf16.bf16_products = 1;
    ASSERT_TRUE(chunk_forward_eligible(exact, sizeof(gdn::cuda::shared)) && chunk_backward_eligible(exact, sizeof(gdn::cuda::shared)));
    const int64_t states = int64_t(s.B) * s.K;

    // ref on the same (bf16-valued) inputs, in F32 tensors.
    HostTensor want_out(s.Sv, s.Hv, s.T, s.B, -7.0f, 1), want_states(s.Sk, s.Sv, s.Hv, states, -7.0f);
    Grads want(s);
    {
        RefContext ref;
        gdn_problem p{};
        p.q = c.q.values.t, p.k = c.k.values.t, p.v = c.v.values.t, p.g = c.g.values.t, p.beta = c.beta.values.t;
        if (s.s0) p.state = c.s0.t;
        p.head_map = s.grouped ? GDN_HEAD_MAP_GROUPED : GDN_HEAD_MAP_TILED;
        ASSERT_EQ(gdn_forward(ref.ctx, &p, &want_out.t, &want_states.t), GDN_OK) << gdn_last_error(ref.ctx);
        gdn_grads grads{want.dq.t, want.dk.t, want.dv.t, want.dg.t, want.dbeta.t, want.ds0.t};
        ASSERT_EQ(gdn_backward(ref.ctx, &p, &c.d_out.values.t, &c.d_states.t, &grads), GDN_OK) << gdn_last_error(ref.ctx);
    }

    ForwardOut fwd_exact(s, Element::F32, states), fwd_bf16(s, Element::F32, states);
    chunk_forward(forward_views(c, fwd_exact, false), exact);
    chunk_forward(forward_views(c, fwd_bf16, false), bf16);
    EXPECT_LT(nmse_of(fwd_exact.out.values, want_out), 1e-10);
    const double out_err = nmse_of(fwd_bf16.out.values, want_out), states_err = nmse_of(fwd_bf16.states, want_states);
    EXPECT_LT(out_err, kBf16NmseBound) << "out";
    EXPECT_LT(states_err, kBf16NmseBound) << "states";
    EXPECT_GT(out_err, 1e-9) << "the bf16 products must differ from EXACT's";
    for (size_t i = 0; i < want_out.data.size(); ++i)
        if (want_out.data[i] == -7.0f) EXPECT_EQ(fwd_bf16.out.values.data[i], -7.0f) << i;

    const Types f32{Element::F32, Element::F32, Element::F32};
    BackwardOut bwd_exact(s, f32, s.B), bwd_bf16(s, f32, s.B);
    chunk_backward(backward_views(c, bwd_exact, false), exact);
    chunk_backward(backward_views(c, bwd_bf16, false), bf16);
    const std::pair<const HostTensor *, const HostTensor *> grads[] = {
        {&bwd_bf16.dq.values, &want.dq}, {&bwd_bf16.dk.values, &want.dk},     {&bwd_bf16.dv.values, &want.dv},
        {&bwd_bf16.dg.values, &want.dg}, {&bwd_bf16.dbeta.values, &want.dbeta}, {&bwd_bf16.ds0, &want.ds0}};
    const char *names[] = {"dq", "dk", "dv", "dg", "dbeta", "ds0"};
    for (int i = 0; i < 6; ++i) {
        const double err = nmse_of(*grads[i].first, *grads[i].second);
        EXPECT_LT(err, kBf16NmseBound) << names[i];
        std::printf("  bf16 products, %s: NMSE %.3g (bound %.3g)\n", names[i], err, kBf16NmseBound);
    }
    std::printf("  bf16 products, out: NMSE %.3g, states: %.3g (bound %.3g)\n", out_err, states_err, kBf16NmseBound);
    EXPECT_LT(nmse_of(bwd_exact.dk.values, want.dk), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedBf16Precision,
                         ::testing::Values(Shape{32, 32, 1, 2, 70, 1, 1, 1, false, false, true},   // a short last chunk
                                           Shape{128, 32, 1, 1, 96, 1, 1, 1, false, false, true},  // the 27B head size, 3 chunks
                                           Shape{16, 64, 2, 4, 40, 2, 1, 1, false, true, false}));  // grouped, Bq < B, no s0

// The per-token kernels have no chunk products: BF16 precision gives EXACT's bits (KDA here,
// which only they take).
TEST(EmulatedHalfTypes, PerTokenKernelsIgnoreBf16Precision) {
    const Shape s{32, 16, 1, 2, 9, 1, 1, 1, true, false, true};
    const TypedCase c(s, Types{Element::BF16, Element::BF16, Element::BF16}, 71);
    Sizes exact = c.sizes(), bf16 = exact;
    bf16.bf16_products = 1;
    ForwardOut a(s, Element::BF16, s.B), b(s, Element::BF16, s.B);
    token_forward(forward_views(c, a, true), exact);
    token_forward(forward_views(c, b, true), bf16);
    EXPECT_EQ(a.out.bits, b.out.bits);
    EXPECT_EQ(a.states.data, b.states.data);
}

}  // namespace
