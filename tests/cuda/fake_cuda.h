// Just enough of CUDA to run this project's kernels on the CPU, so that machines without a GPU
// (CI, development boxes) test the kernels' indexing, masking, warp reductions and block-level
// reductions against ref. Blocks run one after another; __syncthreads is a barrier of the block,
// __shfl_xor_sync exchanges values through a per-warp buffer between two barriers of the warp.
// Floating-point results are not those of a GPU bit for bit (the host compiler contracts and
// orders differently), but every index, predicate and sum is the kernel's own.
//
// A block's CUDA threads are fibers on the launching thread (fake_cuda_fibers.h), switched at
// the barriers: a shuffle costs two user-space switches per lane instead of waking 31 OS threads
// twice, which made the emulated tests most of the test suite's time on two cores. Under
// ThreadSanitizer (and AddressSanitizer, which does not follow stack switches) each CUDA thread
// is a std::thread instead, so that TSan reports a shared-memory access no barrier orders: a
// race check without a GPU.
//
// Include this before a kernel header (*.cuh); launch with fake_cuda::launch(grid, threads, fn).
#pragma once

#include <cmath>
#include <cstring>
#include <cstdint>
#include <memory>
#include <vector>

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define FAKE_CUDA_OS_THREADS 1
#include <barrier>
#include <thread>
#else
#define FAKE_CUDA_OS_THREADS 0
#include "fake_cuda_fibers.h"
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct alignas(16) float4 {
    float x, y, z, w;
};

inline unsigned __float_as_uint(float x) {
    unsigned bits;
    std::memcpy(&bits, &x, sizeof bits);
    return bits;
}
inline float __uint_as_float(unsigned bits) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

// The launch sequences (run_* in the kernel headers) return the runtime's status.
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };

namespace fake_cuda {

struct Index3 {
    unsigned x = 0, y = 0, z = 0;
};

inline thread_local Index3 thread_index, block_index;
inline Index3 block_dim, grid_dim;

#if FAKE_CUDA_OS_THREADS
using Barrier = std::barrier<>;
#else
using Barrier = FiberBarrier;
#endif

struct Block {
    explicit Block(int threads) : sync(threads), exchange(threads), mma_exchange(threads * kMmaWords) {
        for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<Barrier>(32));
    }
    Barrier sync;
    std::vector<std::unique_ptr<Barrier>> warps;
    std::vector<float> exchange;
    static constexpr int kMmaWords = 10;  // a lane's registers of one mma: a[4], b[2], c[4]
    std::vector<uint32_t> mma_exchange;
};
inline thread_local Block *current_block = nullptr;

// Runs fn() once per thread of every block of the grid.
template <class Fn>
void launch(Index3 grid, int threads, Fn &&fn) {
    grid_dim = grid;
    block_dim = {static_cast<unsigned>(threads), 1, 1};
#if !FAKE_CUDA_OS_THREADS
    FiberTeam team(threads);
#endif
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                Block block(threads);
#if FAKE_CUDA_OS_THREADS
                std::vector<std::thread> pool;
                pool.reserve(threads);
                for (int t = 0; t < threads; ++t)
                    pool.emplace_back([&, t] {
                        thread_index = {static_cast<unsigned>(t), 0, 0};
                        block_index = {x, y, z};
                        current_block = &block;
                        fn();
                    });
                for (auto &th : pool) th.join();
#else
                block_index = {x, y, z};
                current_block = &block;
                auto body = [&] { fn(); };
                team.run(body, [](int t) { thread_index = {static_cast<unsigned>(t), 0, 0}; });
                current_block = nullptr;
#endif
            }
}

}  // namespace fake_cuda

#define threadIdx (::fake_cuda::thread_index)
#define blockIdx (::fake_cuda::block_index)
#define blockDim (::fake_cuda::block_dim)
#define gridDim (::fake_cuda::grid_dim)

inline void __syncthreads() { ::fake_cuda::current_block->sync.arrive_and_wait(); }

// Only for code where the whole warp calls it (as here): a barrier of the warp's 32 threads.
inline void __syncwarp(unsigned = 0xffffffffu) {
    ::fake_cuda::current_block->warps[threadIdx.x / 32]->arrive_and_wait();
}

inline float __shfl_xor_sync(unsigned, float value, int lane_mask) {
    auto &block = *::fake_cuda::current_block;
    const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
    float *slots = block.exchange.data() + warp * 32;
    slots[lane] = value;
    block.warps[warp]->arrive_and_wait();
    const float other = slots[lane ^ lane_mask];
    block.warps[warp]->arrive_and_wait();
    return other;
}

inline float __shfl_sync(unsigned, float value, int source_lane) {
    auto &block = *::fake_cuda::current_block;
    const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
    float *slots = block.exchange.data() + warp * 32;
    slots[lane] = value;
    block.warps[warp]->arrive_and_wait();
    const float other = slots[source_lane % 32];
    block.warps[warp]->arrive_and_wait();
    return other;
}

// Lanes whose source lies outside the warp get their own value, as on the GPU.
inline float __shfl_up_sync(unsigned mask, float value, unsigned delta) {
    const int lane = static_cast<int>(threadIdx.x % 32), source = lane - static_cast<int>(delta);
    return __shfl_sync(mask, value, source < 0 ? lane : source);
}

inline float __shfl_down_sync(unsigned mask, float value, unsigned delta) {
    const int lane = static_cast<int>(threadIdx.x % 32), source = lane + static_cast<int>(delta);
    return __shfl_sync(mask, value, source > 31 ? lane : source);
}

// nvcuda::wmma for TF32 tiles (m16n16k8), enough for src/cuda/tile_ops.cuh. Every lane holds a
// whole tile (the real fragments spread it over the warp in an unspecified layout, so code may
// only transform elements uniformly, which is what a whole copy per lane reproduces).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static constexpr int rows = std::is_same<Use, matrix_a>::value ? M : std::is_same<Use, matrix_b>::value ? K : M;
    static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
    static constexpr int num_elements = rows * cols;
    float x[num_elements];  // row-major copy of the tile
};

// Round to nearest TF32 (10 mantissa bits), ties away from zero, as cvt.rna.tf32.f32.
inline float __float_to_tf32(float in) {
    uint32_t bits;
    std::memcpy(&bits, &in, 4);
    if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & ~0x1fffu;
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}

// WMMA's rules, which the GPU enforces by undefined behaviour: tile pointers 256-bit aligned,
// leading dimensions multiples of 4 floats (16 bytes).
inline void check_tile_address(const float *p, unsigned ld, const char *what) {
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || ld % 4 != 0) {
        std::fprintf(stderr, "fake_cuda: %s at %p with ld %u breaks WMMA's alignment rules\n", what, static_cast<const void *>(p), ld);
        std::abort();
    }
}

template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f, const float *p, unsigned ld) {
    using F = fragment<Use, M, N, K, T, Layout>;
    check_tile_address(p, ld, "load_matrix_sync");
    for (int r = 0; r < F::rows; ++r)
        for (int c = 0; c < F::cols; ++c)
            f.x[r * F::cols + c] = std::is_same<Layout, col_major>::value ? p[c * ld + r] : p[r * ld + c];
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float, void> &f, const float *p, unsigned ld, layout_t layout) {
    check_tile_address(p, ld, "load_matrix_sync (accumulator)");
    for (int r = 0; r < M; ++r)
        for (int c = 0; c < N; ++c) f.x[r * N + c] = layout == mem_row_major ? p[r * ld + c] : p[c * ld + r];
}

template <int M, int N, int K>
void fill_fragment(fragment<accumulator, M, N, K, float, void> &f, float v) {
    for (float &x : f.x) x = v;
}

// Lane 0 writes the tile, then the warp meets: every lane sees it afterwards, as after a real
// store_matrix_sync.
inline void warp_barrier();
template <int M, int N, int K>
void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float, void> &f, unsigned ld, layout_t layout) {
    check_tile_address(p, ld, "store_matrix_sync");
    warp_barrier();  // every lane has read whatever this store overwrites
    if (threadIdx.x % 32 == 0)
        for (int r = 0; r < M; ++r)
            for (int c = 0; c < N; ++c) (layout == mem_row_major ? p[r * ld + c] : p[c * ld + r]) = f.x[r * N + c];
    warp_barrier();
}

template <int M, int N, int K, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float, void> &d, const fragment<matrix_a, M, N, K, precision::tf32, LA> &a,
              const fragment<matrix_b, M, N, K, precision::tf32, LB> &b, const fragment<accumulator, M, N, K, float, void> &c) {
    fragment<accumulator, M, N, K, float, void> out;
    for (int r = 0; r < M; ++r)
        for (int n = 0; n < N; ++n) {
            float acc = c.x[r * N + n];
            for (int k = 0; k < K; ++k) acc += a.x[r * K + k] * b.x[k * N + n];
            out.x[r * N + n] = acc;
        }
    d = out;
}

inline void warp_barrier() {
    auto &block = *::fake_cuda::current_block;
    block.warps[threadIdx.x / 32]->arrive_and_wait();
}

}  // namespace nvcuda::wmma

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for one warp, lane by lane as the GPU
// holds it: every lane hands in its fragment registers (PTX's documented layouts, which
// tile_ops.cuh builds; so its indexing is what this checks), the warp meets, and each lane
// assembles the whole A (16x16), B (16x8) and C and computes its own four elements of D.
// Arithmetic: a product of two bf16 values is exact in F32; the sum is taken in F32, rounded
// after each addition, starting from C and in increasing k. PTX leaves the order and internal
// precision of the tensor core's sum unspecified, so a GPU may differ from this in the last bits
// of F32 (never by more than F32 roundoff of the 16-term sum); tests of the BF16 precision use
// bounds derived from bf16 and F32 roundoff, not bit equality with a GPU.
namespace gdn::cuda::ptx {
inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    auto &block = *::fake_cuda::current_block;
    constexpr int kWords = ::fake_cuda::Block::kMmaWords;
    const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
    uint32_t *slots = block.mma_exchange.data() + warp * 32 * kWords;
    uint32_t *mine = slots + lane * kWords;
    for (int i = 0; i < 4; ++i) mine[i] = a[i];
    for (int i = 0; i < 2; ++i) mine[4 + i] = b[i];
    for (int i = 0; i < 4; ++i) mine[6 + i] = __float_as_uint(d[i]);
    block.warps[warp]->arrive_and_wait();
    const auto bf16 = [](uint32_t pair, int which) { return __uint_as_float((which == 0 ? pair << 16 : pair & 0xffff0000u)); };
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; ++l) {
        const uint32_t *r = slots + l * kWords;
        const int g = l / 4, q = l % 4;
        for (int e = 0; e < 2; ++e) {
            A[g][2 * q + e] = bf16(r[0], e);
            A[g + 8][2 * q + e] = bf16(r[1], e);
            A[g][2 * q + 8 + e] = bf16(r[2], e);
            A[g + 8][2 * q + 8 + e] = bf16(r[3], e);
            B[2 * q + e][g] = bf16(r[4], e);
            B[2 * q + 8 + e][g] = bf16(r[5], e);
            C[g][2 * q + e] = __uint_as_float(r[6 + e]);
            C[g + 8][2 * q + e] = __uint_as_float(r[8 + e]);
        }
    }
    block.warps[warp]->arrive_and_wait();  // every lane has read the slots before any lane's next mma writes them
    const int g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; ++i) {
        const int m = g + 8 * (i / 2), n = 2 * q + i % 2;
        float sum = C[m][n];
        for (int k = 0; k < 16; ++k) {
            const volatile float product = A[m][k] * B[k][n];  // exact; volatile: no contraction, one rounding per addition
            sum += product;
        }
        d[i] = sum;
    }
}
}  // namespace gdn::cuda::ptx
