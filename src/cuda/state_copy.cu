// Launches the state copy of an empty sequence (state_copy_kernel.cuh) on the caller's stream.
#include "cuda/kernels.h"
#include "cuda/state_copy_kernel.cuh"
#include "cuda/stream_launcher.cuh"

namespace gdn::cuda {

cudaError_t launch_copy_state(const View &src, const View &dst, int Sk, int Sv, int Hv, const LaunchTarget &target) {
    return run_copy_state(StreamLauncher{target}, src, dst, Sk, Sv, Hv);
}

}  // namespace gdn::cuda
