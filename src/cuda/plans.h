// Host-side shapes of the kernels' work that the launchers and the host emulation test share.
// No CUDA headers here, so that code built without the toolkit can include it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace gdn::cuda {

// One kernel launch: blocks (x, y, z), threads per block, dynamic shared memory.
struct LaunchShape {
    int x = 1, y = 1, z = 1, threads = 32;
    size_t shared_bytes = 0;
};

// Long inputs are walked in windows of whole steps (chunks of 32 tokens, or the per-token
// backward's segments), so that what a walk keeps per step (partial gradient rows, chunk
// factors) takes a fixed budget whatever T is. What passes from one window to the next (the
// state, or dL/dS) goes through the workspace.
constexpr size_t kWindowBudget = size_t(128) << 20;

// The most workspace one launch chain over a group of packed sequences takes (the per-token
// backward's checkpoints and partial rows of all its sequences at once); a call with more
// short sequences than that holds is walked in several groups. 64 requests of 4 tokens at the
// 27B shape (Hv = 48, Sk = Sv = 128) take 0.63 GB (tests/cuda/workspace_plan_test.cpp).
constexpr size_t kGroupBudget = size_t(1) << 30;

struct Windows {
    int64_t steps = 1;        // steps of T
    int64_t step_tokens = 1;  // tokens per step
    int64_t per_window = 1;   // steps per window
    int64_t count = 1;        // windows

    // The most steps of bytes_per_step each that fit `budget`, at least one, at most all.
    static Windows fit(int64_t T, int64_t step_tokens, double bytes_per_step, size_t budget) {
        Windows w;
        w.step_tokens = step_tokens;
        w.steps = (T + step_tokens - 1) / step_tokens;
        const double fit = static_cast<double>(budget) / bytes_per_step;
        w.per_window = fit >= static_cast<double>(w.steps) ? w.steps : std::max<int64_t>(1, static_cast<int64_t>(fit));
        w.count = (w.steps + w.per_window - 1) / w.per_window;
        return w;
    }

    // Window i: steps [begin, end) and tokens [t_begin, t_begin + tokens). Only the window at
    // the end of the sequence may be shorter.
    struct Range {
        int64_t begin, end, t_begin, tokens;
    };
    Range range(int64_t i, int64_t T) const {
        Range r;
        r.begin = i * per_window;
        r.end = std::min(r.begin + per_window, steps);
        r.t_begin = r.begin * step_tokens;
        r.tokens = std::min(r.end * step_tokens, T) - r.t_begin;
        return r;
    }
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
    Windows windows;            // of segments, walked last first
    int64_t row_tokens = 0;     // partial rows per slice and unit: a window's tokens, or a packed group's
    size_t shared_bytes = 0;    // dynamic shared memory of the column kernel
    // Byte offsets inside the workspace and its total size (SIZE_MAX: too large to allocate).
    size_t checkpoints_offset = 0, sub_checkpoints_offset = 0, carry_offset = 0, partials_offset = 0, bytes = 0;
};

// The chunked forward's workspace: the chunk factors A, P of one window of chunks, and the
// state between windows.
struct ChunkForwardPlan {
    Windows windows;  // of chunks, walked in order
    size_t factors_offset = 0, carry_offset = 0;
    size_t bytes = 0;  // SIZE_MAX: too large
};

// The chunked backward's workspace: the state before each chunk of 32 tokens (written by the
// chunked forward's walk), and for one window of chunks the factors M, A, P and the per-slice
// partial gradient rows (the per-token backward's layout, finished by the same reductions),
// and the carry between windows (the state in the forward's walk, then dL/dS).
struct ChunkBackwardPlan {
    int slices = 1;             // Sv / 32
    int64_t partial_width = 0;  // 2 Sk + 2: dq | dk | dg | dbeta
    Windows windows;            // of chunks, walked last first (the checkpoint pass: in order)
    size_t shared_bytes = 0;    // dynamic shared memory of the chunk kernel
    size_t checkpoints_offset = 0, factors_offset = 0, carry_offset = 0, partials_offset = 0;
    size_t bytes = 0;  // SIZE_MAX: too large
};

// Byte offsets of workspace regions: each starts on 256 bytes.
inline size_t align_up(double bytes) { return (static_cast<size_t>(bytes) + 255) / 256 * 256; }

}  // namespace gdn::cuda
