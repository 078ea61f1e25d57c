// The per-token forward kernel. Each state column S[:, j] of one (sequence, value head) unit
// lives in the registers of a quad of four lanes (a warp holds eight columns), so that the two
// sums per token and column (p = S'^T k and o = S^T q) take two shuffles each instead of five;
// the columns of a state are independent in the forward (d_j depends on column j only), so no
// quad waits for another. A block (four warps, 32 columns of one unit) stages the inputs of a
// tile of tokens in shared memory with asynchronous copies, double-buffered, so that the next
// tile's loads overlap this tile's arithmetic.
//
// Rows of a column within its quad: lane ql holds rows i = 16 u + 4 ql + e (u < V, e < 4), so
// each lane reads its rows of k and q as V float4s and the four lanes of a quad read
// consecutive 16 bytes (no bank conflicts). Rows i >= Sk are padding: k = q = 0 in the staged
// rows and S = 0, so they add exact zeros (while d is finite) and are never stored.
//
// Device code plus its launch shape, included by token_forward.cu (nvcc) and by the host
// emulation test (tests/cuda/emulated_kernels_test.cpp), which runs it on CPU threads.
#pragma once

#if defined(__CUDACC__)
#include <cuda_pipeline.h>
#endif

#include "cuda/plans.h"
#include "cuda/sequence_views.h"
#include "cuda/token_step.cuh"

namespace gdn::cuda {
// Internal to the one translation unit that includes this (a launcher, or the emulation test,
// whose host-compiled copies must not meet the launcher's symbols at link time).
namespace {

constexpr int kForwardWarps = 4;
constexpr int kQuadColumns = 8;                                // columns per warp
constexpr int kForwardColumns = kForwardWarps * kQuadColumns;  // columns per block

// Padded row length of staged k and q (16 V floats) and tokens staged per tile (the two
// buffers stay near 48 KiB of shared memory; KDA gates at V >= 8 need the opt-in above it).
template <int V>
struct ForwardTile {
    static constexpr int rows = 16 * V;
    static constexpr int tokens = V <= 8 ? 16 : 8;
};

// Layout of one staging buffer (floats): q rows, k rows, gates (1 or padded rows per token),
// beta, v (the block's 32 columns).
template <int V>
struct StageLayout {
    int gate_stride;  // 1 (GDA) or padded rows (KDA)
    __host__ __device__ int q(int tt) const { return tt * ForwardTile<V>::rows; }
    __host__ __device__ int k(int tt) const { return (ForwardTile<V>::tokens + tt) * ForwardTile<V>::rows; }
    __host__ __device__ int gate(int tt) const { return 2 * ForwardTile<V>::tokens * ForwardTile<V>::rows + tt * gate_stride; }
    __host__ __device__ int beta(int tt) const { return gate(ForwardTile<V>::tokens) + tt; }
    __host__ __device__ int v(int tt) const { return beta(ForwardTile<V>::tokens) + tt * kForwardColumns; }
    __host__ __device__ int floats() const { return (v(ForwardTile<V>::tokens) + 3) / 4 * 4; }  // float4-aligned buffers
};

template <int V>
__host__ __device__ inline StageLayout<V> stage_layout(const Sizes &n) {
    return StageLayout<V>{n.gate_width == 1 ? 1 : ForwardTile<V>::rows};
}

// Global -> shared copy of one float, asynchronous where the hardware has it.
__device__ __forceinline__ void copy_async(float *dst, const float *src) {
#if defined(__CUDACC__) && __CUDA_ARCH__ >= 800
    __pipeline_memcpy_async(dst, src, sizeof(float));
#else
    *dst = *src;
#endif
}
__device__ __forceinline__ void copy_commit() {
#if defined(__CUDACC__) && __CUDA_ARCH__ >= 800
    __pipeline_commit();
#endif
}
__device__ __forceinline__ void copy_wait_all() {
#if defined(__CUDACC__) && __CUDA_ARCH__ >= 800
    __pipeline_wait_prior(0);
#endif
}

// Element (i0, i1, i2, i3) of x into the staging buffer: an F32 element by an asynchronous
// copy; a BF16 or F16 one converted by the thread as it is read (a synchronous load: the copy
// engine moves bytes, and the tile must hold floats). Either lands before the barrier that
// follows copy_wait_all(), the stores because this buffer is not read before that barrier.
__device__ __forceinline__ void stage_element(float *dst, const View &x, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    if (x.is_f32()) copy_async(dst, x.at(i0, i1, i2, i3));
    else *dst = x.load(i0, i1, i2, i3);
}

// Queues the copies of tokens [t0, t0 + count) into one staging buffer (every thread a share).
template <int V>
__device__ void stage_tile(const ForwardViews &w, const Sizes &n, const StageLayout<V> &L, int kh, int bq, int h, int b,
                           int j0, int64_t t0, int count, float *buf) {
    const int columns = n.Sv - j0 < kForwardColumns ? n.Sv - j0 : kForwardColumns;
    for (int tt = 0; tt < count; ++tt) {
        const int64_t t = t0 + tt;
        for (int i = threadIdx.x; i < n.Sk; i += blockDim.x) {
            stage_element(buf + L.q(tt) + i, w.q, i, kh, t, bq);
            stage_element(buf + L.k(tt) + i, w.k, i, kh, t, bq);
        }
        for (int i = threadIdx.x; i < n.gate_width; i += blockDim.x) stage_element(buf + L.gate(tt) + i, w.g, i, h, t, b);
        for (int c = threadIdx.x; c < columns; c += blockDim.x) stage_element(buf + L.v(tt) + c, w.v, j0 + c, h, t, b);
        if (threadIdx.x == 0) stage_element(buf + L.beta(tt), w.beta, 0, h, t, b);
    }
    copy_commit();
}

// Sum over the four lanes of a quad (every lane of the quad gets the same bits).
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

__device__ __forceinline__ float4 load4(const float *p) { return *reinterpret_cast<const float4 *>(p); }

// Blocks (column group, value head h, sequence z of the table): the sequence walked as a call
// of its own (sequence_views.h), b = bq = 0 in its views.
template <int V>
__global__ void __launch_bounds__(kForwardWarps * 32) token_forward_kernel(ForwardViews call, Sizes call_sizes, SequenceTable table) {
    extern __shared__ float shared[];  // two staging buffers
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int quad_lane = lane % 4;
    const SequenceEntry entry = sequence_entry(table, call_sizes, blockIdx.z);
    const ForwardViews w = sequence_views(call, entry, snapshot_step(table, call_sizes));
    const Sizes n = sequence_sizes(call_sizes, entry);
    const int h = blockIdx.y, b = 0, bq = 0;
    const int kh = n.key_head(h);
    const int64_t unit = static_cast<int64_t>(blockIdx.z) * n.Hv + h;  // of the checkpoints
    const int j0 = blockIdx.x * kForwardColumns;
    const int column = warp * kQuadColumns + lane / 4;  // within the block
    const int j = j0 + column;
    const bool column_in = j < n.Sv;
    const bool per_channel = n.gate_width != 1;
    const StageLayout<V> L = stage_layout<V>(n);
    constexpr int kTile = ForwardTile<V>::tokens;

    // Zero both buffers once: the padding rows of q, k (and KDA gates) are never copied into.
    for (int i = threadIdx.x; i < 2 * L.floats(); i += blockDim.x) shared[i] = 0.0f;
    __syncthreads();

    // The column in registers: s[4u + e] = S[16u + 4 quad_lane + e][j].
    float s[4 * V];
#pragma unroll
    for (int u = 0; u < V; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = 16 * u + 4 * quad_lane + e;
            s[4 * u + e] = (column_in && w.s0.present() && i < n.Sk) ? *w.s0.at(i, j, h, b) : 0.0f;
        }

    const int64_t tiles = (n.T + kTile - 1) / kTile;
    auto tile_count = [&](int64_t tile) { return static_cast<int>(n.T - tile * kTile < kTile ? n.T - tile * kTile : kTile); };
    stage_tile<V>(w, n, L, kh, bq, h, b, j0, 0, tile_count(0), shared);
    for (int64_t tile = 0; tile < tiles; ++tile) {
        float *buf = shared + (tile % 2) * L.floats();
        const int count = tile_count(tile);
        copy_wait_all();
        __syncthreads();  // this tile has landed; every thread is done with the previous one
        // Gates to decays, in place: exp(g) once per block instead of once per lane.
        const int gates = count * (per_channel ? n.Sk : 1);
        for (int x = threadIdx.x; x < gates; x += blockDim.x) {
            const int tt = per_channel ? x / n.Sk : x, i = per_channel ? x % n.Sk : 0;
            buf[L.gate(tt) + i] = expf(buf[L.gate(tt) + i]);
        }
        __syncthreads();
        if (tile + 1 < tiles)
            stage_tile<V>(w, n, L, kh, bq, h, b, j0, (tile + 1) * kTile, tile_count(tile + 1), shared + ((tile + 1) % 2) * L.floats());

        for (int tt = 0; tt < count; ++tt) {
            const int64_t t = tile * kTile + tt;
            const float *q_row = buf + L.q(tt) + 4 * quad_lane;
            const float *k_row = buf + L.k(tt) + 4 * quad_lane;
            const float beta = buf[L.beta(tt)];
            const float v = buf[L.v(tt) + column];  // 0 for a column past Sv (never copied; zeroed)
            if (column_in && w.checkpoints != nullptr && t % w.checkpoint_every == 0) {
                float *dst = w.checkpoints + (unit * w.checkpoint_count + t / w.checkpoint_every) * n.Sv * n.Sk +
                             static_cast<int64_t>(j) * n.Sk;
#pragma unroll
                for (int u = 0; u < V; ++u)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int i = 16 * u + 4 * quad_lane + e;
                        if (i < n.Sk) dst[i] = s[4 * u + e];
                    }
            }

            // p = S'^T k with S' = diag(a) S. GDA: a is one number, p = a (S^T k).
            // Four partial sums per lane (one per float4 component) keep the dependent chains short.
            float p4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (per_channel) {
                const float *a_row = buf + L.gate(tt) + 4 * quad_lane;
#pragma unroll
                for (int u = 0; u < V; ++u) {
                    const float4 k4 = load4(k_row + 16 * u), a4 = load4(a_row + 16 * u);
                    s[4 * u + 0] *= a4.x, s[4 * u + 1] *= a4.y, s[4 * u + 2] *= a4.z, s[4 * u + 3] *= a4.w;
                    p4[0] += s[4 * u + 0] * k4.x, p4[1] += s[4 * u + 1] * k4.y;
                    p4[2] += s[4 * u + 2] * k4.z, p4[3] += s[4 * u + 3] * k4.w;
                }
            } else {
                const float a = buf[L.gate(tt)];
#pragma unroll
                for (int u = 0; u < V; ++u) {
                    const float4 k4 = load4(k_row + 16 * u);
                    s[4 * u + 0] *= a, s[4 * u + 1] *= a, s[4 * u + 2] *= a, s[4 * u + 3] *= a;
                    p4[0] += s[4 * u + 0] * k4.x, p4[1] += s[4 * u + 1] * k4.y;
                    p4[2] += s[4 * u + 2] * k4.z, p4[3] += s[4 * u + 3] * k4.w;
                }
            }
            const float p = quad_sum((p4[0] + p4[1]) + (p4[2] + p4[3]));
            const float d = beta * (v - p);

            // S = S' + k d; o = scale S^T q.
            float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int u = 0; u < V; ++u) {
                const float4 k4 = load4(k_row + 16 * u), q4 = load4(q_row + 16 * u);
                s[4 * u + 0] += k4.x * d, s[4 * u + 1] += k4.y * d, s[4 * u + 2] += k4.z * d, s[4 * u + 3] += k4.w * d;
                o4[0] += s[4 * u + 0] * q4.x, o4[1] += s[4 * u + 1] * q4.y;
                o4[2] += s[4 * u + 2] * q4.z, o4[3] += s[4 * u + 3] * q4.w;
            }
            const float o = quad_sum((o4[0] + o4[1]) + (o4[2] + o4[3]));
            if (column_in && quad_lane == 0 && w.out.present()) w.out.store(j, h, t, b, n.scale * o);

            const int64_t slot = n.T - 1 - t;
            if (column_in && w.states.present() && slot < n.K) {
#pragma unroll
                for (int u = 0; u < V; ++u)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int i = 16 * u + 4 * quad_lane + e;
                        if (i < n.Sk) *w.states.at(i, j, h, slot) = s[4 * u + e];  // the view steps between slots
                    }
            }
        }
    }
}

// Float4 groups per lane for a key head size: Sk <= 16 V.
inline int forward_groups(int Sk) { return Sk <= 16 ? 1 : Sk <= 32 ? 2 : Sk <= 64 ? 4 : Sk <= 128 ? 8 : 16; }

// Blocks: (column groups of 32, value heads, sequences); dynamic shared memory: two buffers.
template <int V>
inline LaunchShape token_forward_shape(const Sizes &n, const SequenceTable &table) {
    return {(n.Sv + kForwardColumns - 1) / kForwardColumns, n.Hv, sequence_count(table, n), kForwardWarps * 32,
            2 * sizeof(float) * static_cast<size_t>(stage_layout<V>(n).floats())};
}

// Enqueues the per-token forward of every sequence of `table` (none: the unpacked call's B) in
// one launch (launch: a StreamLauncher, or the emulation's launcher).
template <class Launch>
cudaError_t run_token_forward(const Launch &launch, const ForwardViews &w, const Sizes &n, const SequenceTable &table = {}) {
    switch (forward_groups(n.Sk)) {
        case 1: return launch(token_forward_kernel<1>, token_forward_shape<1>(n, table), w, n, table);
        case 2: return launch(token_forward_kernel<2>, token_forward_shape<2>(n, table), w, n, table);
        case 4: return launch(token_forward_kernel<4>, token_forward_shape<4>(n, table), w, n, table);
        case 8: return launch(token_forward_kernel<8>, token_forward_shape<8>(n, table), w, n, table);
        default: return launch(token_forward_kernel<16>, token_forward_shape<16>(n, table), w, n, table);
    }
}

}  // namespace
}  // namespace gdn::cuda
