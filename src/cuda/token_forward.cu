// Launches the per-token forward (token_forward_kernel.cuh) on the caller's stream.
#include "cuda/kernels.h"
#include "cuda/token_forward_kernel.cuh"

namespace gdn::cuda {
namespace {

template <int R>
cudaError_t launch(const ForwardViews &w, const Sizes &n, cudaStream_t stream) {
    const ForwardGrid g = token_forward_grid(n);
    token_forward_kernel<R><<<dim3(g.x, g.y, g.z), g.threads, 0, stream>>>(w, n);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_token_forward(const ForwardViews &w, const Sizes &n, cudaStream_t stream) {
    switch (rows_per_lane(n.Sk)) {
        case 1: return launch<1>(w, n, stream);
        case 2: return launch<2>(w, n, stream);
        case 4: return launch<4>(w, n, stream);
        default: return launch<8>(w, n, stream);
    }
}

}  // namespace gdn::cuda
