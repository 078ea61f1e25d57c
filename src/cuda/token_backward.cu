// Launches the per-token backward (token_backward_kernel.cuh) on the caller's stream.
#include "cuda/kernels.h"
#include "cuda/token_backward_kernel.cuh"

namespace gdn::cuda {

TokenBackwardPlan plan_token_backward(const Sizes &n, size_t shared_limit) { return make_token_backward_plan(n, shared_limit); }

namespace {

template <int R>
cudaError_t launch_backward(const BackwardViews &w, const Sizes &n, const TokenBackwardPlan &plan, const BackwardWorkspace &ws,
                            cudaStream_t stream) {
    const size_t shared = plan.shared_bytes;
    if (shared > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(token_backward_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(shared));
        if (e != cudaSuccess) return e;
    }
    const dim3 grid(plan.slices, n.Hv, n.B);
    token_backward_kernel<R><<<grid, BackwardShape<R>::warps * 32, shared, stream>>>(w, n, ws);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_token_backward(const BackwardViews &w, const Sizes &n, const TokenBackwardPlan &plan, void *workspace,
                                  cudaStream_t stream) {
    const BackwardWorkspace ws = workspace_of(plan, workspace);
    cudaError_t e = launch_token_forward(checkpoint_views(w, ws), n, stream);
    if (e != cudaSuccess) return e;
    switch (rows_per_lane(n.Sk)) {
        case 1: e = launch_backward<1>(w, n, plan, ws, stream); break;
        case 2: e = launch_backward<2>(w, n, plan, ws, stream); break;
        case 4: e = launch_backward<4>(w, n, plan, ws, stream); break;
        default: e = launch_backward<8>(w, n, plan, ws, stream); break;
    }
    if (e != cudaSuccess) return e;
    if (w.dq.present() || w.dk.present()) {
        reduce_key_grads_kernel<<<reduce_blocks(key_grad_count(n)), 256, 0, stream>>>(w, n, ws, plan.slices);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (w.dg.present() || w.dbeta.present()) {
        reduce_gate_grads_kernel<<<reduce_blocks(gate_grad_count(n)), 256, 0, stream>>>(w, n, ws, plan.slices);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

}  // namespace gdn::cuda
