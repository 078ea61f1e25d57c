// Warp-level building blocks of the per-token kernels.
#pragma once

namespace gdn::cuda {

// Sum over the 32 lanes of a warp by an xor butterfly. Every lane ends with the same bits:
// at each level a lane adds its partner's value to its own and the partner does the same, and
// float addition is commutative, so the two sums are identical.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) x += __shfl_xor_sync(0xffffffffu, x, mask);
    return x;
}

}  // namespace gdn::cuda
