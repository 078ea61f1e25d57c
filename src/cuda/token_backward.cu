// Launches the per-token backward (token_backward_kernel.cuh) on the caller's stream.
#include "cuda/kernels.h"
#include "cuda/stream_launcher.cuh"
#include "cuda/token_backward_kernel.cuh"

namespace gdn::cuda {

TokenBackwardPlan plan_token_backward(const Sizes &n, size_t shared_limit, const SequenceTable &table) {
    return make_token_backward_plan(n, shared_limit, kWindowBudget, table);
}

cudaError_t launch_token_backward(const BackwardViews &w, const Sizes &n, const TokenBackwardPlan &plan, void *workspace,
                                  const SequenceTable &table, const LaunchTarget &target) {
    return run_token_backward(StreamLauncher{target}, w, n, plan, workspace, table);
}

}  // namespace gdn::cuda
