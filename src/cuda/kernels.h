// Host-side entry points of the kernels: each enqueues its work on `stream` and returns the
// launch status (cudaGetLastError after the launch); nothing here synchronises with the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_views.h"

namespace gdn::cuda {

// Largest key and value head sizes the kernels take (registers hold a state column of Sk
// floats per warp, at most 8 per lane).
constexpr int kMaxHeadSize = 256;

// Per-token forward (token_forward.cu): one warp per state column, the column in registers,
// every token in order. Serves decoding (T = 1) and any T.
cudaError_t launch_token_forward(const ForwardViews &views, const Sizes &sizes, cudaStream_t stream);

// Per-token backward (token_backward.cu): a replayed forward with checkpoints, then the tokens
// in reverse, then a fixed-order reduction of the per-column partial gradients.
struct TokenBackwardPlan {
    int64_t segment = 1;    // tokens between checkpoints
    int64_t segments = 1;   // ceil(T / segment)
    int slices = 1;         // column slices per (sequence, value head): blocks per unit
    int64_t partial_width = 0;  // floats per token in the partial rows: dq | dk | dg | dbeta
    // Byte offsets inside the workspace and its total size.
    size_t checkpoints_offset = 0, replay_offset = 0, partials_offset = 0, bytes = 0;
};
TokenBackwardPlan plan_token_backward(const Sizes &sizes);
cudaError_t launch_token_backward(const BackwardViews &views, const Sizes &sizes, const TokenBackwardPlan &plan,
                                  void *workspace, cudaStream_t stream);

}  // namespace gdn::cuda
