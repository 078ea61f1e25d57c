// Launches the per-token forward (token_forward_kernel.cuh) on the caller's stream.
#include "cuda/kernels.h"
#include "cuda/stream_launcher.cuh"
#include "cuda/token_forward_kernel.cuh"

namespace gdn::cuda {

cudaError_t launch_token_forward(const ForwardViews &w, const Sizes &n, const SequenceTable &table, const LaunchTarget &target) {
    return run_token_forward(StreamLauncher{target}, w, n, table);
}

}  // namespace gdn::cuda
