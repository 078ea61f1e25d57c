// Launches the chunked forward (chunk_forward_kernel.cuh) on the caller's stream.
#include "cuda/chunk_forward_kernel.cuh"
#include "cuda/kernels.h"
#include "cuda/stream_launcher.cuh"

namespace gdn::cuda {

bool chunk_forward_takes(const Sizes &n, size_t shared_limit) { return chunk_forward_eligible(n, shared_limit); }

ChunkForwardPlan plan_chunk_forward(const Sizes &n) { return make_chunk_forward_plan(n); }

cudaError_t launch_chunk_forward(const ForwardViews &w, const Sizes &n, const ChunkForwardPlan &plan, void *workspace,
                                 const LaunchTarget &target) {
    return run_chunk_forward(StreamLauncher{target}, w, n, plan, workspace);
}

}  // namespace gdn::cuda
