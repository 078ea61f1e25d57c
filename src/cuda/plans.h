// Host-side shapes of the kernels' work that the launchers and the host emulation test share.
// No CUDA headers here, so that code built without the toolkit can include it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gdn::cuda {

// One kernel launch: blocks (x, y, z), threads per block, dynamic shared memory.
struct LaunchShape {
    int x = 1, y = 1, z = 1, threads = 32;
    size_t shared_bytes = 0;
};

// Largest key and value head sizes the kernels take (registers hold a state column of Sk
// floats per warp, at most 8 per lane).
constexpr int kMaxHeadSize = 256;

// The per-token backward's work: checkpoints every `segment` tokens (workspace), inside a
// segment sub-checkpoints every `sub_segment` tokens (workspace), and inside a sub-segment the
// replayed states in shared memory; plus the per-column-slice partial gradient rows of one
// window of segments (partial_rows.cuh) and the carry dL/dS between windows.
struct TokenBackwardPlan {
    int64_t segment = 1;        // tokens between checkpoints
    int64_t segments = 1;       // ceil(T / segment)
    int64_t sub_segment = 1;    // tokens between sub-checkpoints: the states one block replays into shared memory
    int64_t sub_segments = 1;   // ceil(segment / sub_segment)
    int slices = 1;             // column slices per (sequence, value head): blocks per unit
    int64_t partial_width = 0;  // floats per token in the partial rows: dq | dk | dg | dbeta
    int64_t window_segments = 1;  // segments per window (the last window may be shorter)
    int64_t windows = 1;        // launches of the column kernel, last window first
    size_t shared_bytes = 0;    // dynamic shared memory of the column kernel
    // Byte offsets inside the workspace and its total size (SIZE_MAX: too large to allocate).
    size_t checkpoints_offset = 0, sub_checkpoints_offset = 0, carry_offset = 0, partials_offset = 0, bytes = 0;
};

// The chunked backward's workspace: the state before each chunk of 32 tokens (written by the
// chunked forward's walk), the chunk factors M, A, P, the per-slice partial gradient rows of
// one window of chunks (the per-token backward's layout, finished by the same reductions), and
// the carry between windows.
struct ChunkBackwardPlan {
    int64_t chunks = 1;         // ceil(T / 32)
    int slices = 1;             // Sv / 32
    int64_t partial_width = 0;  // 2 Sk + 2: dq | dk | dg | dbeta
    int64_t window_chunks = 1;  // chunks per window (the last window may be shorter)
    int64_t windows = 1;        // launches of the chunk kernel, last window first
    size_t shared_bytes = 0;    // dynamic shared memory of the chunk kernel
    size_t checkpoints_offset = 0, factors_offset = 0, carry_offset = 0, partials_offset = 0;
    size_t bytes = 0;  // SIZE_MAX: too large
};

}  // namespace gdn::cuda
