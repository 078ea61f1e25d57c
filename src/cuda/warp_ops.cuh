// Warp-level building blocks: sums, prefix and suffix sums over the lanes.
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

// Prefix sums over the lanes (Hillis-Steele, five shuffles): lane l gets x_0 + ... + x_l.
__device__ __forceinline__ float warp_inclusive_scan(float x) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const float before = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += before;
    }
    return x;
}

// Lane l gets x_0 + ... + x_{l-1} (0 in lane 0).
__device__ __forceinline__ float warp_exclusive_scan(float x) {
    const float inclusive = warp_inclusive_scan(x);
    const float before = __shfl_up_sync(0xffffffffu, inclusive, 1);
    return threadIdx.x % 32 == 0 ? 0.0f : before;
}

// Suffix sums: lane l gets x_l + ... + x_31.
__device__ __forceinline__ float warp_suffix_sum(float x) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const float after = __shfl_down_sync(0xffffffffu, x, d);
        if (lane + d < 32) x += after;
    }
    return x;
}

}  // namespace gdn::cuda

namespace gdn::cuda {

// Reduce-scatter of N sums over the warp: at each level a lane keeps half of its values and
// sends the other half to the lane `mask` apart, so N sums cost N-1 + log2(32/N) shuffles
// instead of 5 N. On return the partial of sum c lives, complete, in lanes c * (32/N) ...
template <int N>
__device__ __forceinline__ float scatter_sum(const float (&part)[N], int lane, int mask) {
    if constexpr (N == 1) {
        float total = part[0];
#pragma unroll
        for (int m = mask; m >= 1; m >>= 1) total += __shfl_xor_sync(0xffffffffu, total, m);
        return total;
    } else {
        constexpr int H = N / 2;
        const bool upper = (lane & mask) != 0;
        float next[H];
#pragma unroll
        for (int k = 0; k < H; ++k) {
            const float keep = upper ? part[H + k] : part[k];
            const float send = upper ? part[k] : part[H + k];
            next[k] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
        }
        return scatter_sum<H>(next, lane, mask >> 1);
    }
}

// x[c] <- the sum of x[c] over the warp's 32 lanes, for N (a power of two <= 32) values at once.
// Every lane gets the same bits: each sum is finished in one group of lanes (a butterfly,
// identical across the group) and broadcast from one lane of it.
template <int N>
__device__ __forceinline__ void warp_sums(float (&x)[N]) {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "N must be a power of two up to 32");
    const int lane = threadIdx.x % 32;
    const float total = scatter_sum<N>(x, lane, 16);
    if constexpr (N == 1) {
        x[0] = total;
    } else {
#pragma unroll
        for (int c = 0; c < N; ++c) x[c] = __shfl_sync(0xffffffffu, total, c * (32 / N));
    }
}

}  // namespace gdn::cuda
