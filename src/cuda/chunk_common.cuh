// What the chunked (WY) kernels share: the chunk and slice sizes, shared-memory carving, the
// loads of a chunk's key rows and gates, and the per-chunk factors that chunk_prepare_kernel
// computes once for the forward and the backward.
//
// Device code, included by the chunk kernel headers (nvcc, and the host emulation tests).
#pragma once

#include <cstdint>

#include "cuda/device_views.h"
#include "cuda/plans.h"
#include "cuda/warp_ops.cuh"

namespace gdn::cuda {
// Internal to the one translation unit that includes this.
namespace {

constexpr int kChunk = 32;          // tokens per chunk
constexpr int kSlice = 32;          // value columns per block of the walking kernels
constexpr int kChunkThreads = 128;          // four warps: the prepare and forward kernels
constexpr int kChunkBackwardThreads = 256;  // eight: one backward block fills an SM's shared memory
constexpr float kGateFloor = -1.0e4f;
static_assert(kChunk == 32, "a chunk's tokens map to the lanes of one warp");

// Carves a block's shared memory into regions that start on 32-byte boundaries (8 floats),
// for the WMMA tile loads; offsets and the total are in floats.
struct SharedCarver {
    int at = 0;
    __host__ __device__ int take(int count) {
        const int region = at;
        at += (count + 7) / 8 * 8;
        return region;
    }
};

// The chunked kernels take scalar gates, K <= 1 snapshot, Sk a multiple of 16 up to 128 and
// Sv a multiple of 32 (each kernel adds its shared-memory limit).
inline bool chunk_shape_eligible(const Sizes &n) {
    return n.gate_width == 1 && n.K <= 1 && n.Sk % 16 == 0 && n.Sk <= 128 && n.Sv % kSlice == 0;
}

// Calls fn(i, c) for every element (row i < Sk, column c < kSlice) of a state slice of the
// [Sk, Sv, Hv, *] tensor t, the block's threads spread so that neighbouring threads take
// neighbouring floats of t: rows fastest when t is key-major, columns when value-major.
template <class Fn>
__device__ inline void for_each_slice_element(const View &t, int Sk, Fn fn) {
    const bool rows_contiguous = t.rows_contiguous();
    for (int idx = threadIdx.x; idx < Sk * kSlice; idx += blockDim.x) {
        if (rows_contiguous) fn(idx % Sk, idx / Sk);
        else fn(idx / kSlice, idx % kSlice);
    }
}

// The slice of columns j0 .. j0 + kSlice - 1 of state tensor t at (h, index) into shared memory
// (S[i ld + c]), zero when t is absent; and back.
__device__ inline void load_state_slice(const View &t, int Sk, int j0, int h, int64_t index, float *S, int ld) {
    for_each_slice_element(t, Sk, [&](int i, int c) { S[i * ld + c] = t.present() ? *t.at(i, j0 + c, h, index) : 0.0f; });
}
__device__ inline void store_state_slice(const View &t, int Sk, int j0, int h, int64_t index, const float *S, int ld) {
    for_each_slice_element(t, Sk, [&](int i, int c) { *t.at(i, j0 + c, h, index) = S[i * ld + c]; });
}

// beta and gam (the prefix sums inside the chunk of the clamped gates; padded rows add 0) of
// the chunk of `len` tokens at t0, into shared memory by warp 0. The caller's next barrier
// publishes them.
__device__ inline void load_chunk_gates(const View &g, const View &beta_in, int h, int b, int64_t t0, int len, float *gam,
                                        float *beta) {
    if (threadIdx.x >= kChunk) return;
    const int r = threadIdx.x;
    beta[r] = r < len ? beta_in.load(0, h, t0 + r, b) : 0.0f;
    const float gate = r < len ? g.load(0, h, t0 + r, b) : 0.0f;
    gam[r] = warp_inclusive_scan(gate < kGateFloor ? kGateFloor : gate);  // NaN stays NaN
}

// Rows t0 .. t0 + kChunk - 1 of one (key head, q/k sequence) of a [Sk, Hk, T, Bq] tensor into
// shared memory (row r at rows + r * ld); rows past len are zero.
__device__ inline void load_chunk_rows(const View &x, int Sk, int kh, int bq, int64_t t0, int len, float *rows, int ld) {
    for (int idx = threadIdx.x; idx < kChunk * Sk; idx += blockDim.x) {
        const int r = idx / Sk, i = idx % Sk;
        rows[r * ld + i] = r < len ? x.load(i, kh, t0 + r, bq) : 0.0f;
    }
}

// The state-independent factors of a window's chunks, for every unit, C x C row-major each
// (C = kChunk):
//   A = (I + diag(beta) M)^-1 (unit lower triangular, zeros above),
//   P_rs = exp(gam_r - gam_s) q_r.k_s for s <= r, else 0,
//   M_rs = exp(gam_r - gam_s) k_r.k_s for s < r, else 0 (the backward's only).
// Written by chunk_prepare_kernel, read by the walking kernels instead of recomputing them
// per column slice inside their sequential loop over chunks.
enum ChunkFactor { kFactorA = 0, kFactorP = 1, kFactorM = 2 };
constexpr int kForwardFactors = 2;   // A, P
constexpr int kBackwardFactors = 3;  // A, P, M

struct ChunkFactors {
    float *data = nullptr;    // [unit][chunk - chunk_begin][count][C][C]
    int64_t capacity = 0;     // chunks per window
    int64_t chunk_begin = 0;  // the window's first chunk
    int count = kForwardFactors;

    __host__ __device__ float *at(int64_t unit, int64_t chunk, ChunkFactor which) const {
        return data + ((unit * capacity + (chunk - chunk_begin)) * count + which) * (kChunk * kChunk);
    }
};

// Bytes of the factors of one chunk, for every unit.
inline double chunk_factor_bytes(const Sizes &n, int count) { return 4.0 * count * kChunk * kChunk * n.B * n.Hv; }

// One launch of a walk over the chunks [chunk_begin, chunk_end) of a window.
struct ChunkWalk {
    ChunkFactors factors;    // of the window's chunks
    float *carry = nullptr;  // [unit][Sv][Sk]: what passes between windows (the state, or dL/dS)
    int64_t chunks = 0;      // all chunks of T
    int64_t chunk_begin = 0, chunk_end = 0;
};

// The walk's window i of `windows`, and the factors' window to match.
inline ChunkWalk chunk_walk(const Windows &windows, int64_t i, int64_t T, ChunkFactors factors, float *carry) {
    const Windows::Range r = windows.range(i, T);
    factors.chunk_begin = r.begin;
    factors.capacity = windows.per_window;
    return ChunkWalk{factors, carry, windows.steps, r.begin, r.end};
}

// One C x C factor from global into shared memory (leading dimension ld).
__device__ inline void load_factor(const float *factor, float *dst, int ld) {
    for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += blockDim.x) dst[(idx / kChunk) * ld + idx % kChunk] = factor[idx];
}

}  // namespace
}  // namespace gdn::cuda
