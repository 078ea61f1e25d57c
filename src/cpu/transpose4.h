// A 4 x 4 block of floats transposed in registers (GCC / clang vector extensions: SSE on x86-64,
// NEON on AArch64): four loads, eight shuffles and four stores instead of 16 loads and 16 stores.
// The GEMM's transposed B panels and the state transposes (memory holds S^T) use it.
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

}  // namespace gdn::cpu
