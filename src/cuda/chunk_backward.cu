// Launches the chunked backward on the caller's stream: the chunked forward writing the
// chunk-start states, the chunk kernel (chunks in reverse), then the fixed-order reductions of
// the partial rows (shared with the per-token backward).
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/kernels.h"
#include "cuda/token_backward_kernel.cuh"

namespace gdn::cuda {

bool chunk_backward_takes(const Sizes &n, size_t shared_limit) { return chunk_backward_eligible(n, shared_limit); }

ChunkBackwardPlan plan_chunk_backward(const Sizes &n) { return make_chunk_backward_plan(n); }

cudaError_t launch_chunk_backward(const BackwardViews &w, const Sizes &n, const ChunkBackwardPlan &plan, void *workspace,
                                  cudaStream_t stream) {
    char *base = static_cast<char *>(workspace);
    float *checkpoints = reinterpret_cast<float *>(base + plan.checkpoints_offset);
    float *partials = reinterpret_cast<float *>(base + plan.partials_offset);

    cudaError_t e = launch_chunk_forward(chunk_checkpoint_views(w, checkpoints, plan.chunks), n, stream);
    if (e != cudaSuccess) return e;
    if (plan.shared_bytes > 48 * 1024) {
        e = cudaFuncSetAttribute(chunk_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.shared_bytes));
        if (e != cudaSuccess) return e;
    }
    const ChunkBackwardWork work{checkpoints, partials, plan.chunks, plan.partial_width};
    chunk_backward_kernel<<<dim3(plan.slices, n.Hv, n.B), kChunkThreads, plan.shared_bytes, stream>>>(w, n, work);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;

    BackwardWorkspace reduce{};
    reduce.partials = partials;
    reduce.partial_width = plan.partial_width;
    if (w.dq.present() || w.dk.present()) {
        reduce_key_grads_kernel<<<reduce_blocks(key_grad_count(n)), 256, 0, stream>>>(w, n, reduce, plan.slices);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (w.dg.present() || w.dbeta.present()) {
        reduce_gate_grads_kernel<<<reduce_blocks(gate_grad_count(n)), 256, 0, stream>>>(w, n, reduce, plan.slices);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

}  // namespace gdn::cuda
