// Launches the per-token forward (token_forward_kernel.cuh) on the caller's stream.
#include "cuda/kernels.h"
#include "cuda/token_forward_kernel.cuh"

namespace gdn::cuda {
namespace {

template <int V>
cudaError_t launch(const ForwardViews &w, const Sizes &n, cudaStream_t stream) {
    const ForwardGrid g = token_forward_grid<V>(n);
    if (g.shared_bytes > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(token_forward_kernel<V>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(g.shared_bytes));
        if (e != cudaSuccess) return e;
    }
    token_forward_kernel<V><<<dim3(g.x, g.y, g.z), g.threads, g.shared_bytes, stream>>>(w, n);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_token_forward(const ForwardViews &w, const Sizes &n, cudaStream_t stream) {
    switch (forward_groups(n.Sk)) {
        case 1: return launch<1>(w, n, stream);
        case 2: return launch<2>(w, n, stream);
        case 4: return launch<4>(w, n, stream);
        case 8: return launch<8>(w, n, stream);
        default: return launch<16>(w, n, stream);
    }
}

}  // namespace gdn::cuda
