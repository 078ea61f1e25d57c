// The chunked cuda kernels (tensor cores, fake_cuda.h's WMMA) run on CPU threads against ref.
#include "fake_cuda.h"
// The kernels, compiled by the host compiler.
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/chunk_forward_kernel.cuh"
#include "cuda/token_backward_kernel.cuh"  // the reductions of the partial rows
#include "emulation_support.h"

namespace gdn::cuda {
namespace {  // the kernels' `extern __shared__ float shared[]`, in their (this file's) namespace
alignas(32) float shared[1 << 16];  // the block's dynamic shared memory (blocks run one at a time)
}  // namespace
}  // namespace gdn::cuda

namespace {

using namespace gdn::cuda;
using namespace gdn_emulation;

// The chunked forward (tensor cores, emulated WMMA) against ref: out and the final state.
class EmulatedChunkForward : public ::testing::TestWithParam<Shape> {};

TEST_P(EmulatedChunkForward, MatchesRef) {
    const Shape s = GetParam();
    const Inputs in = make_inputs(s, 21);
    const Sizes n = in.sizes();
    ASSERT_TRUE(chunk_forward_eligible(n, 200 * 1024)) << "the shape must be one the chunked kernel takes";
    HostTensor want_out(s.Sv, s.Hv, s.T, s.B, -7.0f, 1), want_states(s.Sk, s.Sv, s.Hv, s.B, -7.0f);
    RefContext ref;
    const gdn_problem p = in.problem();
    ASSERT_EQ(gdn_forward(ref.ctx, &p, &want_out.t, &want_states.t), GDN_OK) << gdn_last_error(ref.ctx);

    HostTensor out(s.Sv, s.Hv, s.T, s.B, -7.0f, 1), states(s.Sk, s.Sv, s.Hv, s.B, -7.0f);
    ForwardViews w{in.q.view(), in.k.view(), in.v.view(), in.g.view(), in.beta.view(), in.s0.view(), out.view(), states.view()};
    const ChunkGrid g = chunk_forward_grid(n);
    ASSERT_LE(g.shared_bytes, sizeof(gdn::cuda::shared));
    fake_cuda::launch({unsigned(g.x), unsigned(g.y), unsigned(g.z)}, g.threads, [&] { chunk_forward_kernel(w, n); });
    EXPECT_LT(nmse(out.data, want_out.data), 1e-10);
    EXPECT_LT(nmse(states.data, want_states.data), 1e-10);
    for (size_t i = 0; i < out.data.size(); ++i)
        if (want_out.data[i] == -7.0f) EXPECT_EQ(out.data[i], -7.0f) << i;
}

// Sk, Sv, Hk, Hv, T, B, Bq, K, kda, grouped, s0, extremes
INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedChunkForward,
                         ::testing::Values(Shape{32, 32, 1, 2, 70, 1, 1, 1, false, false, true},     // a short last chunk
                                           Shape{16, 64, 2, 4, 40, 2, 1, 1, false, true, false},     // grouped, Bq < B, two slices, no s0
                                           Shape{64, 32, 1, 1, 33, 1, 1, 1, false, false, true, true},  // spikes, beta 0 and 1
                                           Shape{128, 32, 1, 1, 35, 1, 1, 1, false, false, true}));  // the 27B head size

// The chunked backward (tensor cores, emulated WMMA) against ref: every gradient.
class EmulatedChunkBackward : public ::testing::TestWithParam<Shape> {};

TEST_P(EmulatedChunkBackward, MatchesRef) {
    const Shape s = GetParam();
    const Inputs in = make_inputs(s, 22);
    const Sizes n = in.sizes();
    ASSERT_TRUE(chunk_backward_eligible(n, 200 * 1024)) << "the shape must be one the chunked kernel takes";
    HostTensor d_out(s.Sv, s.Hv, s.T, s.B), d_states(s.Sk, s.Sv, s.Hv, s.B);
    std::mt19937 rng(23);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (float &x : d_out.data) x = unit(rng);
    for (float &x : d_states.data) x = unit(rng);
    struct Grads {
        HostTensor dq, dk, dv, dg, dbeta, ds0;
    };
    auto make = [&] {
        return Grads{HostTensor(s.Sk, s.Hk, s.T, s.Bq, -7.0f), HostTensor(s.Sk, s.Hk, s.T, s.Bq, -7.0f, 2),
                     HostTensor(s.Sv, s.Hv, s.T, s.B, -7.0f),   HostTensor(1, s.Hv, s.T, s.B, -7.0f),
                     HostTensor(1, s.Hv, s.T, s.B, -7.0f),      HostTensor(s.Sk, s.Sv, s.Hv, s.B, -7.0f)};
    };
    Grads want = make(), got = make();
    RefContext ref;
    const gdn_problem p = in.problem();
    gdn_grads grads{want.dq.t, want.dk.t, want.dv.t, want.dg.t, want.dbeta.t, want.ds0.t};
    ASSERT_EQ(gdn_backward(ref.ctx, &p, &d_out.t, &d_states.t, &grads), GDN_OK) << gdn_last_error(ref.ctx);

    BackwardViews w{in.q.view(),   in.k.view(),    in.v.view(),      in.g.view(),   in.beta.view(),
                    in.s0.view(),  d_out.view(),   d_states.view(),  got.dq.view(), got.dk.view(),
                    got.dv.view(), got.dg.view(),  got.dbeta.view(), got.ds0.view()};
    // As chunk_backward.cu launches them: checkpoints, the chunk kernel, the reductions.
    const ChunkBackwardPlan plan = make_chunk_backward_plan(n);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
    float *checkpoints = workspace.data() + plan.checkpoints_offset / sizeof(float);
    float *partials = workspace.data() + plan.partials_offset / sizeof(float);
    const ForwardViews f = chunk_checkpoint_views(w, checkpoints, plan.chunks);
    const ChunkGrid g = chunk_forward_grid(n);
    fake_cuda::launch({unsigned(g.x), unsigned(g.y), unsigned(g.z)}, g.threads, [&] { chunk_forward_kernel(f, n); });
    ASSERT_LE(plan.shared_bytes, sizeof(gdn::cuda::shared));
    const ChunkBackwardWork work{checkpoints, partials, plan.chunks, plan.partial_width};
    fake_cuda::launch({unsigned(plan.slices), unsigned(n.Hv), unsigned(n.B)}, kChunkThreads, [&] { chunk_backward_kernel(w, n, work); });
    BackwardWorkspace reduce{};
    reduce.partials = partials;
    reduce.partial_width = plan.partial_width;
    fake_cuda::launch({unsigned(reduce_blocks(key_grad_count(n))), 1, 1}, 256, [&] { reduce_key_grads_kernel(w, n, reduce, plan.slices); });
    fake_cuda::launch({unsigned(reduce_blocks(gate_grad_count(n))), 1, 1}, 256, [&] { reduce_gate_grads_kernel(w, n, reduce, plan.slices); });

    EXPECT_LT(nmse(got.dq.data, want.dq.data), 1e-9) << "dq";
    EXPECT_LT(nmse(got.dk.data, want.dk.data), 1e-9) << "dk";
    EXPECT_LT(nmse(got.dv.data, want.dv.data), 1e-9) << "dv";
    EXPECT_LT(nmse(got.dg.data, want.dg.data), 1e-9) << "dg";
    EXPECT_LT(nmse(got.dbeta.data, want.dbeta.data), 1e-9) << "dbeta";
    if (s.s0) EXPECT_LT(nmse(got.ds0.data, want.ds0.data), 1e-9) << "ds0";
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedChunkBackward,
                         ::testing::Values(Shape{32, 32, 1, 2, 70, 1, 1, 1, false, false, true},     // a short last chunk
                                           Shape{16, 64, 2, 4, 40, 2, 1, 1, false, true, false},     // grouped, Bq < B, two slices, no s0
                                           Shape{64, 32, 1, 1, 33, 1, 1, 1, false, false, true, true},  // spikes, beta 0 and 1
                                           Shape{128, 32, 1, 1, 35, 1, 1, 1, false, false, true}));  // the 27B head size

}  // namespace
