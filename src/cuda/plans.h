// Host-side shapes of the kernels' work that the launchers and the host emulation test share.
// No CUDA headers here, so that code built without the toolkit can include it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gdn::cuda {

// Largest key and value head sizes the kernels take (registers hold a state column of Sk
// floats per warp, at most 8 per lane).
constexpr int kMaxHeadSize = 256;

// The per-token backward's workspace: checkpoints, the replay buffer of one segment, and the
// per-column-slice partial gradient rows.
struct TokenBackwardPlan {
    int64_t segment = 1;        // tokens between checkpoints
    int64_t segments = 1;       // ceil(T / segment)
    int slices = 1;             // column slices per (sequence, value head): blocks per unit
    int64_t partial_width = 0;  // floats per token in the partial rows: dq | dk | dg | dbeta
    // Byte offsets inside the workspace and its total size (SIZE_MAX: too large to allocate).
    size_t checkpoints_offset = 0, replay_offset = 0, partials_offset = 0, bytes = 0;
};

}  // namespace gdn::cuda
