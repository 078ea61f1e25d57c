// Packed sequences (cu_seqlens) on the cuda kernels, emulated on CPU threads (fake_cuda.h):
// each sequence walked by launches of its own on the views of src/cuda/sequence_views.h (the
// chunked kernels for sequences of at least 64 tokens where they apply, the per-token ones
// otherwise), against ref's packed call: out, the states (snapshot slots s*N + n) and every
// gradient. (emulated_batch_test.cpp: the short ones in one launch chain, as the backend runs them.)
#include "fake_cuda.h"
// The kernels, compiled by the host compiler.
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/chunk_forward_kernel.cuh"
#include "cuda/sequence_views.h"
#include "cuda/token_backward_kernel.cuh"
#include "cuda/token_forward_kernel.cuh"
#include "emulation_support.h"

namespace gdn::cuda {
namespace {  // the kernels' `extern __shared__ float shared[]`, in their (this file's) namespace
alignas(32) float shared[1 << 16];  // the block's dynamic shared memory (blocks run one at a time)
}  // namespace
}  // namespace gdn::cuda

namespace {

using namespace gdn::cuda;
using namespace gdn_emulation;

const EmulatedLauncher kLaunch{gdn::cuda::shared, sizeof(gdn::cuda::shared)};
constexpr size_t kSharedLimit = sizeof(gdn::cuda::shared);
constexpr int64_t kChunkedFrom = 64;  // cuda_backend.cu's kChunkedFromTokens

struct Packed {
    Shape s;                       // B = Bq = 1, T = total tokens
    std::vector<int64_t> offsets;  // N + 1
    int64_t N() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

void PrintTo(const Packed &p, std::ostream *os) {
    PrintTo(p.s, os);
    *os << ",cu_seqlens=";
    for (size_t i = 0; i < p.offsets.size(); ++i) *os << (i ? "_" : "") << p.offsets[i];
}

gdn_tensor offsets_tensor(const std::vector<int64_t> &offsets) {
    gdn_tensor t{};
    t.data = const_cast<int64_t *>(offsets.data());
    t.type = GDN_TYPE_I64;
    t.ne[0] = static_cast<int64_t>(offsets.size());
    t.ne[1] = t.ne[2] = t.ne[3] = 1;
    t.nb[0] = 8;
    t.nb[1] = t.nb[2] = t.nb[3] = 8 * t.ne[0];
    return t;
}

// Inputs of the packed call: the shape's tensors, with s0 per sequence.
Inputs packed_inputs(const Packed &p, uint32_t seed) {
    Inputs in = make_inputs(p.s, seed);
    if (p.s.s0) {
        in.s0 = HostTensor(p.s.Sk, p.s.Sv, p.s.Hv, p.N());
        std::mt19937 rng(seed + 7);
        std::uniform_real_distribution<float> unit(-0.5f, 0.5f);
        for (float &x : in.s0.data) x = unit(rng);
    }
    return in;
}

gdn_problem packed_problem(const Inputs &in, const Packed &p) {
    gdn_problem prob = in.problem();
    prob.cu_seqlens = offsets_tensor(p.offsets);
    return prob;
}

// Every sequence with tokens as a call of its own.
template <class Views>
std::vector<SequenceCall<Views>> sequence_calls(const Views &w, const Sizes &n, const std::vector<int64_t> &offsets) {
    std::vector<SequenceCall<Views>> calls;
    const auto step = static_cast<int64_t>(offsets.size()) - 1;
    for (const SequenceEntry &e : sequence_entries(n, offsets, {})) calls.push_back(sequence_call(w, n, e, step));
    return calls;
}

bool chunked(const Sizes &n, bool backward) {
    return n.T >= kChunkedFrom && (backward ? chunk_backward_eligible(n, kSharedLimit) : chunk_forward_eligible(n, kSharedLimit));
}

class EmulatedVarlen : public ::testing::TestWithParam<Packed> {};

TEST_P(EmulatedVarlen, ForwardMatchesRef) {
    const Packed p = GetParam();
    const Shape &s = p.s;
    const Inputs in = packed_inputs(p, 31);
    const int64_t slots = p.N() * s.K;
    HostTensor want_out(s.Sv, s.Hv, s.T, 1, -7.0f, 1), want_states(s.Sk, s.Sv, s.Hv, slots, -7.0f);
    RefContext ref;
    const gdn_problem prob = packed_problem(in, p);
    ASSERT_EQ(gdn_forward(ref.ctx, &prob, &want_out.t, &want_states.t), GDN_OK) << gdn_last_error(ref.ctx);

    HostTensor out(s.Sv, s.Hv, s.T, 1, -7.0f, 1), states(s.Sk, s.Sv, s.Hv, slots, -7.0f);
    const ForwardViews w{in.q.view(), in.k.view(), in.v.view(), in.g.view(), in.beta.view(), in.s0.view(), out.view(), states.view()};
    int chunked_sequences = 0;
    for (const auto &call : sequence_calls(w, in.sizes(), p.offsets)) {
        if (chunked(call.sizes, false)) {
            ++chunked_sequences;
            const ChunkForwardPlan plan = make_chunk_forward_plan(call.sizes);
            std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
            ASSERT_EQ(run_chunk_forward(kLaunch, call.views, call.sizes, plan, workspace.data()), cudaSuccess);
        } else {
            ASSERT_EQ(run_token_forward(kLaunch, call.views, call.sizes), cudaSuccess);
        }
    }
    if (s.K == 1) EXPECT_GT(chunked_sequences, 0) << "the case must walk a sequence with the chunked kernel";
    EXPECT_LT(nmse(out.data, want_out.data), 1e-10);
    EXPECT_LT(nmse(states.data, want_states.data), 1e-10);
    for (size_t i = 0; i < states.data.size(); ++i)  // slots a short sequence does not write keep their fill
        if (want_states.data[i] == -7.0f) EXPECT_EQ(states.data[i], -7.0f) << i;
    for (size_t i = 0; i < out.data.size(); ++i)
        if (want_out.data[i] == -7.0f) EXPECT_EQ(out.data[i], -7.0f) << i;
}

TEST_P(EmulatedVarlen, BackwardMatchesRef) {
    const Packed p = GetParam();
    const Shape &s = p.s;
    const Inputs in = packed_inputs(p, 32);
    const int64_t slots = p.N() * s.K;
    HostTensor d_out(s.Sv, s.Hv, s.T, 1), d_states(s.Sk, s.Sv, s.Hv, slots);
    std::mt19937 rng(33);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (float &x : d_out.data) x = unit(rng);
    for (float &x : d_states.data) x = unit(rng);
    Grads want(s), got(s);  // ds0 is [Sk, Sv, Hv, N]:
    want.ds0 = HostTensor(s.Sk, s.Sv, s.Hv, p.N(), -7.0f);
    got.ds0 = want.ds0;
    RefContext ref;
    const gdn_problem prob = packed_problem(in, p);
    const gdn_grads grads{want.dq.t, want.dk.t, want.dv.t, want.dg.t, want.dbeta.t, want.ds0.t};
    ASSERT_EQ(gdn_backward(ref.ctx, &prob, &d_out.t, &d_states.t, &grads), GDN_OK) << gdn_last_error(ref.ctx);

    const BackwardViews w{in.q.view(),   in.k.view(),  in.v.view(),     in.g.view(),   in.beta.view(),
                          in.s0.view(),  d_out.view(), d_states.view(), got.dq.view(), got.dk.view(),
                          got.dv.view(), got.dg.view(), got.dbeta.view(), got.ds0.view()};
    for (const auto &call : sequence_calls(w, in.sizes(), p.offsets)) {
        if (chunked(call.sizes, true)) {
            const ChunkBackwardPlan plan = make_chunk_backward_plan(call.sizes);
            std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
            ASSERT_EQ(run_chunk_backward(kLaunch, call.views, call.sizes, plan, workspace.data()), cudaSuccess);
        } else {
            const TokenBackwardPlan plan = make_token_backward_plan(call.sizes, kSharedLimit);
            std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
            ASSERT_EQ(run_token_backward(kLaunch, call.views, call.sizes, plan, workspace.data()), cudaSuccess);
        }
    }
    expect_near(got, want);
}

Packed packed(Shape s, std::vector<int64_t> lengths) {
    Packed p{s, {0}};
    for (int64_t len : lengths) p.offsets.push_back(p.offsets.back() + len);
    p.s.T = p.offsets.back();
    p.s.B = p.s.Bq = 1;
    return p;
}

// Sk, Sv, Hk, Hv, T (from the lengths), B, Bq, K, kda, grouped, s0
INSTANTIATE_TEST_SUITE_P(
    Shapes, EmulatedVarlen,
    ::testing::Values(packed({16, 32, 1, 2, 0, 1, 1, 1, false, false, true}, {1, 70, 3, 9}),     // chunked (70) and per-token
                      packed({16, 32, 2, 4, 0, 1, 1, 1, false, true, false}, {65, 2, 1}),     // grouped, no s0
                      packed({16, 16, 1, 2, 0, 1, 1, 2, true, false, true}, {1, 5, 2, 7})));  // KDA, K = 2: slots s*N + n, unwritten ones

}  // namespace
