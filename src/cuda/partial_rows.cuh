// The backwards' partial gradient rows and their fixed-order reductions.
//
// Every gradient but dv sums over value columns, and dq/dk also over the value heads (and
// sequences) that read a key head. A backward block owns one column slice of one unit
// (sequence b, value head h), so it writes its part per token as a partial row
// [dq | dk | dg | dbeta]; the two reduction kernels here then sum the rows of every slice and
// every reading unit in a fixed order. No atomics: the same bits on every run.
//
// The rows of all T tokens would take T (2 Sk + 2) Sv/32 floats per unit (about 0.8 GB at the
// 27B shape, T = 4096). So the backwards walk the tokens in reverse window by window
// (plans.h, Windows): a launch covers one window, the reductions finish its rows, and the next
// (earlier) window reuses them, stream-ordered. The carry dL/dS passes between windows
// through the workspace. The rows then take a fixed budget, whatever T is.
//
// Device code plus host-side sizing, included by the backward launchers (nvcc) and by the
// host emulation tests.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/device_views.h"
#include "cuda/plans.h"
#include "cuda/sequence_views.h"

namespace gdn::cuda {
namespace {

// The rows of one window, [slice][unit][token - t_begin][width].
struct PartialRows {
    float *data = nullptr;
    int64_t width = 0;     // floats per row: dq | dk | dg (gate_width) | dbeta
    int slices = 1;        // column slices per unit
    int64_t capacity = 0;  // tokens per window (rows per slice and unit)
    int64_t t_begin = 0;   // first token of the window being walked
    int64_t tokens = 0;    // tokens of that window (<= capacity)

    __host__ __device__ float *row(int slice, int64_t unit, int64_t units, int64_t t) const {
        return data + ((slice * units + unit) * capacity + (t - t_begin)) * width;
    }
};

// The tokens a block reduces: the window's (tokens t_begin + tl, their rows t), or in a packed
// group (SequenceTable::packed) those of entry blockIdx.y (tokens begin + tl, rows rows + tl).
struct ReducedTokens {
    int64_t t_begin, row_begin, tokens;
};
__device__ __forceinline__ ReducedTokens reduced_tokens(const PartialRows &rows, const SequenceTable &table) {
    if (!table.packed) return {rows.t_begin, rows.t_begin, rows.tokens};
    const SequenceEntry &e = table.entries[blockIdx.y];
    return {e.begin, e.rows, e.length};
}

// dq, dk: element (i, kh, t, bq) of the window sums, in a fixed order, the partial rows of every
// unit that reads key head kh of q/k sequence bq (sequences ascending, then value heads
// ascending) and of every column slice.
__global__ void reduce_key_grads_kernel(BackwardViews w, Sizes n, PartialRows rows, SequenceTable table) {
    const ReducedTokens span = reduced_tokens(rows, table);
    const int64_t total = static_cast<int64_t>(n.Bq) * n.Hk * span.tokens * n.Sk;
    const int64_t units = static_cast<int64_t>(n.B) * n.Hv;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int i = static_cast<int>(idx % n.Sk);
        int64_t rest = idx / n.Sk;
        const int64_t tl = rest % span.tokens, t = span.t_begin + tl, r = span.row_begin + tl;
        rest /= span.tokens;
        const int kh = static_cast<int>(rest % n.Hk);
        const int bq = static_cast<int>(rest / n.Hk);
        float dq = 0.0f, dk = 0.0f;
        for (int sb = 0; sb < n.sequences_per_qk_sequence(); ++sb) {
            const int b = bq * n.sequences_per_qk_sequence() + sb;
            for (int jv = 0; jv < n.value_heads_per_key_head(); ++jv) {
                const int64_t unit = static_cast<int64_t>(b) * n.Hv + n.value_head_of(kh, jv);
                for (int slice = 0; slice < rows.slices; ++slice) {
                    const float *row = rows.row(slice, unit, units, r);
                    dq += row[i];
                    dk += row[n.Sk + i];
                }
            }
        }
        if (w.dq.present()) w.dq.store(i, kh, t, bq, dq);
        if (w.dk.present()) w.dk.store(i, kh, t, bq, dk);
    }
}

// dg, dbeta: element (c, h, t, b) of the window sums the partial rows of the unit's column
// slices in order.
__global__ void reduce_gate_grads_kernel(BackwardViews w, Sizes n, PartialRows rows, SequenceTable table) {
    const ReducedTokens span = reduced_tokens(rows, table);
    const int width = n.gate_width + 1;  // dg channels, then dbeta
    const int64_t units = static_cast<int64_t>(n.B) * n.Hv;
    const int64_t total = units * span.tokens * width;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(idx % width);
        const int64_t rest = idx / width;
        const int64_t tl = rest % span.tokens, t = span.t_begin + tl, r = span.row_begin + tl;
        const int64_t unit = rest / span.tokens;
        const int h = static_cast<int>(unit % n.Hv), b = static_cast<int>(unit / n.Hv);
        float sum = 0.0f;
        for (int slice = 0; slice < rows.slices; ++slice) sum += rows.row(slice, unit, units, r)[2 * n.Sk + c];
        if (c < n.gate_width) {
            if (w.dg.present()) w.dg.store(c, h, t, b, sum);
        } else if (w.dbeta.present()) {
            w.dbeta.store(0, h, t, b, sum);
        }
    }
}

// Launch shapes of the reductions: grid-stride loops of 256 threads.
inline int reduce_blocks(int64_t total) { return static_cast<int>(std::min<int64_t>((total + 255) / 256, 65536)); }

// Enqueues the reductions of the window `rows` describes, or of a packed group's entries (a row
// of blocks each; launch: see stream_launcher.cuh).
template <class Launch>
cudaError_t run_reductions(const Launch &launch, const BackwardViews &w, const Sizes &n, const PartialRows &rows,
                           const SequenceTable &table = {}) {
    const int64_t tokens = table.packed ? table.longest : rows.tokens;  // per row of blocks, at most
    const int block_rows = table.packed ? table.count : 1;
    if (w.dq.present() || w.dk.present()) {
        const int64_t count = static_cast<int64_t>(n.Bq) * n.Hk * tokens * n.Sk;
        const cudaError_t e =
            launch(reduce_key_grads_kernel, LaunchShape{reduce_blocks(count), block_rows, 1, 256, 0}, w, n, rows, table);
        if (e != cudaSuccess) return e;
    }
    if (w.dg.present() || w.dbeta.present()) {
        const int64_t count = static_cast<int64_t>(n.B) * n.Hv * tokens * (n.gate_width + 1);
        const cudaError_t e =
            launch(reduce_gate_grads_kernel, LaunchShape{reduce_blocks(count), block_rows, 1, 256, 0}, w, n, rows, table);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

}  // namespace
}  // namespace gdn::cuda
