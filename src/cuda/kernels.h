// Host-side entry points of the kernels: each enqueues its work on the target's stream and
// returns the first launch's failure; nothing here synchronises with the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_views.h"
#include "cuda/plans.h"
#include "cuda/sequence_views.h"

namespace gdn::cuda {

// Where kernels go: the context's stream, and its device's largest opt-in dynamic shared
// memory per block.
struct LaunchTarget {
    cudaStream_t stream = nullptr;
    size_t shared_limit = 48 * 1024;
};

// Per-token forward (token_forward.cu): a quad of lanes per state column, the column in
// registers, every token in order. Serves decoding (T = 1) and any T; every sequence of `table`
// (none: the call's B) in one launch.
cudaError_t launch_token_forward(const ForwardViews &views, const Sizes &sizes, const SequenceTable &table,
                                 const LaunchTarget &target);

// Chunked forward on tensor cores (chunk_forward.cu): scalar gates, K <= 1, Sk a multiple of
// 16 up to 128, Sv a multiple of 32, and its shared memory within shared_limit. Its workspace
// (plan.bytes) holds one window's chunk factors and the state between windows.
bool chunk_forward_takes(const Sizes &sizes, size_t shared_limit);
ChunkForwardPlan plan_chunk_forward(const Sizes &sizes);
cudaError_t launch_chunk_forward(const ForwardViews &views, const Sizes &sizes, const ChunkForwardPlan &plan, void *workspace,
                                 const LaunchTarget &target);

// Chunked backward on tensor cores (chunk_backward.cu): where the chunked forward applies and
// its larger shared memory fits.
bool chunk_backward_takes(const Sizes &sizes, size_t shared_limit);
ChunkBackwardPlan plan_chunk_backward(const Sizes &sizes);
cudaError_t launch_chunk_backward(const BackwardViews &views, const Sizes &sizes, const ChunkBackwardPlan &plan, void *workspace,
                                  const LaunchTarget &target);

// Per-token backward (token_backward.cu): a replayed forward with checkpoints, then the tokens
// in reverse, then a fixed-order reduction of the per-column partial gradients.
// shared_limit: the device's largest dynamic shared memory per block (opt-in). Every sequence
// of `table` (none: the call's B) in one launch chain.
TokenBackwardPlan plan_token_backward(const Sizes &sizes, size_t shared_limit, const SequenceTable &table);
cudaError_t launch_token_backward(const BackwardViews &views, const Sizes &sizes, const TokenBackwardPlan &plan,
                                  void *workspace, const SequenceTable &table, const LaunchTarget &target);

// One [Sk, Sv, Hv] state from src to dst, either layout each (src absent: zeros).
cudaError_t launch_copy_state(const View &src, const View &dst, int Sk, int Sv, int Hv, const LaunchTarget &target);

}  // namespace gdn::cuda
