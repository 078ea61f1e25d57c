// Both state layouts on the cuda kernels, emulated on CPU threads (fake_cuda.h): s0, states,
// d_states and ds0 value-major (nb[1] = 4, rows of Sv padded) give the same bits as key-major,
// per-token and chunked kernels, forward and backward, layouts mixed within a call. Only where
// the bytes sit differs; the padding between value-major rows is never written. And the state
// copy of an empty sequence between any two layouts.
#include "fake_cuda.h"
// The kernels, compiled by the host compiler.
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/chunk_forward_kernel.cuh"
#include "cuda/state_copy_kernel.cuh"
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

// A shape's inputs and the kernel family that runs it.
struct LayoutCase {
    Shape shape;
    bool chunked;
};

void PrintTo(const LayoutCase &c, std::ostream *os) {
    PrintTo(c.shape, os);
    *os << (c.chunked ? ",chunked" : ",per-token");
}

void run_forward(const LayoutCase &c, const Inputs &in, const HostTensor &s0, HostTensor &out, HostTensor &states) {
    const Sizes n = in.sizes();
    const ForwardViews w{in.q.view(), in.k.view(), in.v.view(), in.g.view(), in.beta.view(), s0.view(), out.view(), states.view()};
    if (!c.chunked) {
        ASSERT_EQ(run_token_forward(kLaunch, w, n), cudaSuccess);
        return;
    }
    ASSERT_TRUE(chunk_forward_eligible(n, kSharedLimit));
    const ChunkForwardPlan plan = make_chunk_forward_plan(n);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
    ASSERT_EQ(run_chunk_forward(kLaunch, w, n, plan, workspace.data()), cudaSuccess);
}

// The state tensors of a backward, in the layouts one call gives them.
struct BackwardStates {
    HostTensor s0, d_states, ds0;
};

void run_backward(const LayoutCase &c, const BackwardCase &bc, const BackwardStates &st, Grads &got) {
    const Sizes n = bc.in.sizes();
    BackwardViews w = bc.views(got);
    w.s0 = st.s0.view(), w.d_states = st.d_states.view(), w.ds0 = st.ds0.view();
    if (!c.chunked) {
        const TokenBackwardPlan plan = make_token_backward_plan(n, 16 * 1024);  // sub-segments of one token
        std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
        ASSERT_EQ(run_token_backward(kLaunch, w, n, plan, workspace.data()), cudaSuccess);
        return;
    }
    ASSERT_TRUE(chunk_backward_eligible(n, kSharedLimit));
    const ChunkBackwardPlan plan = make_chunk_backward_plan(n);
    std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
    ASSERT_EQ(run_chunk_backward(kLaunch, w, n, plan, workspace.data()), cudaSuccess);
}

class EmulatedLayouts : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(EmulatedLayouts, ForwardSameBits) {
    const LayoutCase c = GetParam();
    const Shape &s = c.shape;
    const Inputs in = make_inputs(s, 41);
    const int64_t slots = int64_t(s.B) * s.K;
    HostTensor out(s.Sv, s.Hv, s.T, s.B, -7.0f), states(s.Sk, s.Sv, s.Hv, slots, -7.0f);
    run_forward(c, in, in.s0, out, states);
    ASSERT_NE(states.data, HostTensor(s.Sk, s.Sv, s.Hv, slots, -7.0f).data) << "the kernel must write the states";

    // Both value-major; then s0 value-major and states key-major; then the reverse.
    const HostTensor s0_vm = value_major(in.s0, 3);
    HostTensor out_vm(s.Sv, s.Hv, s.T, s.B, -7.0f), states_vm = value_major(HostTensor(s.Sk, s.Sv, s.Hv, slots, -7.0f));
    run_forward(c, in, s0_vm, out_vm, states_vm);
    EXPECT_EQ(out_vm.data, out.data);
    EXPECT_EQ(states_vm.data, value_major(states).data) << "values and the padding between rows";

    HostTensor out_mixed(s.Sv, s.Hv, s.T, s.B, -7.0f), states_km(s.Sk, s.Sv, s.Hv, slots, -7.0f);
    run_forward(c, in, s0_vm, out_mixed, states_km);
    EXPECT_EQ(out_mixed.data, out.data);
    EXPECT_EQ(states_km.data, states.data);

    HostTensor states_vm2 = value_major(HostTensor(s.Sk, s.Sv, s.Hv, slots, -7.0f), 0);
    run_forward(c, in, in.s0, out_mixed, states_vm2);
    EXPECT_EQ(key_major(states_vm2).data, states.data);
}

TEST_P(EmulatedLayouts, BackwardSameBits) {
    const LayoutCase c = GetParam();
    const Shape &s = c.shape;
    const BackwardCase bc(s, 42);
    Grads got(s);
    BackwardStates km{bc.in.s0, bc.d_states, got.ds0};
    run_backward(c, bc, km, got);
    got.ds0 = km.ds0;
    expect_near(got, bc.want);

    Grads vm(s);
    BackwardStates st{value_major(bc.in.s0, 2), value_major(bc.d_states), value_major(vm.ds0)};
    run_backward(c, bc, st, vm);
    EXPECT_EQ(st.ds0.data, value_major(got.ds0).data) << "values and the padding between rows";
    vm.ds0 = key_major(st.ds0);
    expect_same_bits(vm, got);

    Grads mixed(s);  // s0 key-major, d_states value-major, ds0 key-major
    BackwardStates mixed_states{bc.in.s0, value_major(bc.d_states, 0), mixed.ds0};
    run_backward(c, bc, mixed_states, mixed);
    mixed.ds0 = mixed_states.ds0;
    expect_same_bits(mixed, got);
}

// An empty sequence's state from and to either layout: every value in place, the padding
// untouched; no source: zeros.
TEST(EmulatedStateCopy, AnyLayoutToAny) {
    const Shape s{40, 24, 1, 3, 1, 1, 1, 1, false, false, true};
    const Inputs in = make_inputs(s, 43);  // s0: [40, 24, 3, 1]
    for (bool from_vm : {false, true})
        for (bool to_vm : {false, true}) {
            SCOPED_TRACE(std::string(from_vm ? "value-major" : "key-major") + " to " + (to_vm ? "value-major" : "key-major"));
            const HostTensor src = from_vm ? value_major(in.s0, 2) : in.s0;
            HostTensor dst = to_vm ? value_major(HostTensor(s.Sk, s.Sv, s.Hv, 1, -7.0f)) : HostTensor(s.Sk, s.Sv, s.Hv, 1, -7.0f);
            ASSERT_EQ(run_copy_state(kLaunch, src.view(), dst.view(), s.Sk, s.Sv, s.Hv), cudaSuccess);
            EXPECT_EQ(dst.data, (to_vm ? value_major(in.s0) : in.s0).data) << "values and the padding between rows";
        }
    HostTensor zeroed = value_major(HostTensor(s.Sk, s.Sv, s.Hv, 1, -7.0f));
    ASSERT_EQ(run_copy_state(kLaunch, View{}, zeroed.view(), s.Sk, s.Sv, s.Hv), cudaSuccess);
    EXPECT_EQ(zeroed.data, value_major(HostTensor(s.Sk, s.Sv, s.Hv, 1, 0.0f)).data);
}

// Sk, Sv, Hk, Hv, T, B, Bq, K, kda, grouped, s0
INSTANTIATE_TEST_SUITE_P(
    Cases, EmulatedLayouts,
    ::testing::Values(LayoutCase{{16, 16, 1, 2, 5, 1, 1, 1, false, false, true}, false},    // padding lanes
                      LayoutCase{{40, 24, 1, 2, 7, 2, 1, 3, true, true, true}, false},     // KDA, Bq < B, snapshots
                      LayoutCase{{96, 20, 2, 2, 1, 3, 3, 1, false, false, true}, false},   // decoding: T = 1, four rows per lane
                      LayoutCase{{32, 32, 1, 2, 40, 1, 1, 1, false, false, true}, true},   // chunked, a short last chunk
                      LayoutCase{{16, 64, 1, 2, 33, 2, 1, 1, false, true, true}, true}));  // chunked, two slices, Bq < B

}  // namespace
