// Launches the chunked forward (chunk_forward_kernel.cuh) on the caller's stream.
#include "cuda/chunk_forward_kernel.cuh"
#include "cuda/kernels.h"

namespace gdn::cuda {

bool chunk_forward_takes(const Sizes &n, size_t shared_limit) { return chunk_forward_eligible(n, shared_limit); }

cudaError_t launch_chunk_forward(const ForwardViews &w, const Sizes &n, cudaStream_t stream) {
    const ChunkGrid g = chunk_forward_grid(n);
    if (g.shared_bytes > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(chunk_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(g.shared_bytes));
        if (e != cudaSuccess) return e;
    }
    chunk_forward_kernel<<<dim3(g.x, g.y, g.z), g.threads, g.shared_bytes, stream>>>(w, n);
    return cudaGetLastError();
}

}  // namespace gdn::cuda
