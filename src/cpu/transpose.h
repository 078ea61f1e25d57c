// Blocks of floats transposed in registers (GCC / clang vector extensions: SSE on x86-64,
// NEON on AArch64). A 4 x 4 block takes four loads, eight shuffles and four stores instead of 16
// loads and 16 stores; the GEMM's transposed B panels (8 x 8 blocks where vectors are 256 bits or
// wider) and the state transposes (memory holds S^T) use them.
//
// Internal linkage (static): the GEMM includes this once per ISA, compiled with different target
// flags, and one shared inline definition could be an AVX-512 build run on a host without it.
#pragma once

#include <cstdint>
#include <cstring>

namespace gdn::cpu {

typedef float vec4 __attribute__((vector_size(4 * sizeof(float))));

// Rows of the result: y[t][r] = x[r][t].
static inline void transpose4(const vec4 x[4], vec4 y[4]) {
    const vec4 lo01 = __builtin_shufflevector(x[0], x[1], 0, 4, 1, 5);
    const vec4 hi01 = __builtin_shufflevector(x[0], x[1], 2, 6, 3, 7);
    const vec4 lo23 = __builtin_shufflevector(x[2], x[3], 0, 4, 1, 5);
    const vec4 hi23 = __builtin_shufflevector(x[2], x[3], 2, 6, 3, 7);
    y[0] = __builtin_shufflevector(lo01, lo23, 0, 1, 4, 5);
    y[1] = __builtin_shufflevector(lo01, lo23, 2, 3, 6, 7);
    y[2] = __builtin_shufflevector(hi01, hi23, 0, 1, 4, 5);
    y[3] = __builtin_shufflevector(hi01, hi23, 2, 3, 6, 7);
}

// The 4 x 4 block at src (rows ld_src floats apart), transposed: y[t] holds column t.
static inline void load_transposed4(const float *src, int64_t ld_src, vec4 y[4]) {
    vec4 x[4];
    for (int r = 0; r < 4; ++r) std::memcpy(&x[r], src + r * ld_src, sizeof(vec4));
    transpose4(x, y);
}

// An 8 x 8 block at src (rows ld_src floats apart), transposed: y[t] holds column t. Rows r and
// r + 4 are loaded as the two halves of one vector (the loads do the lane crossing), and a 4 x 4
// transpose within each half does the rest: 16 shuffles for 64 floats, where four 4 x 4 blocks
// take 32 on the one shuffle port of an Intel core (the GEMM's transposed panels, whose packing
// cost a quarter of a 64 x 64 x 128 product there). For builds with 256-bit vectors or wider.
typedef float vec8 __attribute__((vector_size(8 * sizeof(float))));
static inline void load_transposed8(const float *src, int64_t ld_src, vec8 y[8]) {
    vec8 x[2][4];  // x[h][r]: floats 4h .. 4h + 3 of rows r (low half) and r + 4 (high half)
    for (int h = 0; h < 2; ++h)
        for (int r = 0; r < 4; ++r) {
            vec4 lo, hi;
            std::memcpy(&lo, src + r * ld_src + 4 * h, sizeof lo);
            std::memcpy(&hi, src + (r + 4) * ld_src + 4 * h, sizeof hi);
            x[h][r] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
        }
    for (int h = 0; h < 2; ++h) {
        const vec8 *v = x[h];
        const vec8 lo01 = __builtin_shufflevector(v[0], v[1], 0, 8, 1, 9, 4, 12, 5, 13);
        const vec8 hi01 = __builtin_shufflevector(v[0], v[1], 2, 10, 3, 11, 6, 14, 7, 15);
        const vec8 lo23 = __builtin_shufflevector(v[2], v[3], 0, 8, 1, 9, 4, 12, 5, 13);
        const vec8 hi23 = __builtin_shufflevector(v[2], v[3], 2, 10, 3, 11, 6, 14, 7, 15);
        y[4 * h + 0] = __builtin_shufflevector(lo01, lo23, 0, 1, 8, 9, 4, 5, 12, 13);
        y[4 * h + 1] = __builtin_shufflevector(lo01, lo23, 2, 3, 10, 11, 6, 7, 14, 15);
        y[4 * h + 2] = __builtin_shufflevector(hi01, hi23, 0, 1, 8, 9, 4, 5, 12, 13);
        y[4 * h + 3] = __builtin_shufflevector(hi01, hi23, 2, 3, 10, 11, 6, 7, 14, 15);
    }
}

}  // namespace gdn::cpu
