// The vectors of the per-token kernels (token_block.cpp: key-major states, token_rows.cpp:
// value-major ones): GCC's portable vectors of kTokenLanes floats, one AVX register, two SSE or
// NEON registers. Every clone adds the same lanes in the same order, so a result depends only on
// the host's FMA, never on threads. Included only by those two files: the helpers are always
// inlined into their target_clones functions, so no vector crosses a call (the ABI GCC warns
// about when vectors are passed without AVX in the baseline clone is never used).
#pragma once

#include <cstring>

#include "cpu/token_block.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace gdn::cpu::token_vec {

typedef float Vec __attribute__((vector_size(kTokenLanes * sizeof(float))));
static_assert(kTokenLanes == 8, "the sums below add eight lanes");

#define GDN_INLINE inline __attribute__((always_inline))

constexpr int64_t kCacheLine = 64;

GDN_INLINE Vec load(const float *p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
GDN_INLINE void store(float *p, Vec v) { std::memcpy(p, &v, sizeof v); }
GDN_INLINE Vec splat(float x) { return Vec{x, x, x, x, x, x, x, x}; }

// Sk floats between a state line in memory and a padded line of a scratch, a vector at a time
// (glibc's memcpy for these 512-byte pieces ran at a third of this loop's speed: its stores and
// the kernel's loads of the same bytes do not forward).
GDN_INLINE void copy_row(float *to, const float *from, int64_t n) {
    int64_t i = 0;
    for (; i + kTokenLanes <= n; i += kTokenLanes) store(to + i, load(from + i));
    for (; i < n; ++i) to[i] = from[i];
}

}  // namespace gdn::cpu::token_vec
