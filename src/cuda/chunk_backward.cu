// Launches the chunked backward (chunk_backward_kernel.cuh) on the caller's stream.
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/kernels.h"
#include "cuda/stream_launcher.cuh"

namespace gdn::cuda {

bool chunk_backward_takes(const Sizes &n, size_t shared_limit) { return chunk_backward_eligible(n, shared_limit); }

ChunkBackwardPlan plan_chunk_backward(const Sizes &n) { return make_chunk_backward_plan(n); }

cudaError_t launch_chunk_backward(const BackwardViews &w, const Sizes &n, const ChunkBackwardPlan &plan, void *workspace,
                                  const LaunchTarget &target) {
    return run_chunk_backward(StreamLauncher{target}, w, n, plan, workspace);
}

}  // namespace gdn::cuda
