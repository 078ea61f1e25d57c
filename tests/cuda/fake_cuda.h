// Just enough of CUDA to run this project's kernels on CPU threads, so that machines without a
// GPU (CI, development boxes) test the kernels' indexing, masking, warp reductions and
// block-level reductions against ref. Each CUDA thread of a block is a std::thread; blocks run
// one after another; __syncthreads is a barrier of the block, __shfl_xor_sync exchanges values
// through a per-warp buffer between two barriers of the warp. Floating-point results are not
// those of a GPU bit for bit (the host compiler contracts and orders differently), but every
// index, predicate and sum is the kernel's own.
//
// Include this before a kernel header (*.cuh); launch with fake_cuda::launch(grid, threads, fn).
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__

struct alignas(16) float4 {
    float x, y, z, w;
};

namespace fake_cuda {

struct Index3 {
    unsigned x = 0, y = 0, z = 0;
};

inline thread_local Index3 thread_index, block_index;
inline Index3 block_dim, grid_dim;

struct Block {
    explicit Block(int threads) : sync(threads), exchange(threads) {
        for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
    }
    std::barrier<> sync;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    std::vector<float> exchange;
};
inline thread_local Block *current_block = nullptr;

// Runs fn() once per thread of every block of the grid.
template <class Fn>
void launch(Index3 grid, int threads, Fn &&fn) {
    grid_dim = grid;
    block_dim = {static_cast<unsigned>(threads), 1, 1};
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                Block block(threads);
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
            }
}

}  // namespace fake_cuda

#define threadIdx (::fake_cuda::thread_index)
#define blockIdx (::fake_cuda::block_index)
#define blockDim (::fake_cuda::block_dim)
#define gridDim (::fake_cuda::grid_dim)

inline void __syncthreads() { ::fake_cuda::current_block->sync.arrive_and_wait(); }

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
