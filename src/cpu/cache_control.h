// How the cpu code steers the caches: prefetches of lines it reads soon, and non-temporal
// (streamed) stores for data it writes once and does not read again, so that the destination
// lines are not read from memory first (nor kept in cache).
#pragma once

#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#if defined(__unix__)
#include <unistd.h>
#endif

namespace gdn::cpu {

// The size of one core's L2 as the host reports it, 512 KiB where it does not (the smallest of
// the hosts measured: AMD Zen 3).
inline int64_t l2_cache_bytes() {
    static const int64_t bytes = [] {
        long reported = 0;
#if defined(_SC_LEVEL2_CACHE_SIZE)
        reported = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
        return reported > 0 ? int64_t(reported) : int64_t(512) << 10;
    }();
    return bytes;
}

// Every cache line of [p, p + bytes): a row that does not start on a line boundary (malloc
// aligns to 16 bytes, not 64) can span one line more than its length in lines, and reading that
// last line would wait on memory. Locality as __builtin_prefetch takes it (3: into L1, 2: L2).
template <int Locality = 3>
inline void prefetch_lines(const void *p, int64_t bytes) {
    constexpr uintptr_t line = 64;
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~(line - 1), end = reinterpret_cast<uintptr_t>(p) + bytes;
    for (uintptr_t a = first; a < end; a += line) __builtin_prefetch(reinterpret_cast<const char *>(a), 0, Locality);
}

// dst[0 .. n) = src[0 .. n), whole cache lines of dst with non-temporal stores (a partly
// streamed line would leave a write-combining buffer half full), its first and last partial
// lines as usual. Call stream_fence() after the last one.
inline void stream_row(const float *src, int64_t n, float *dst) {
#if defined(__SSE2__)
    constexpr int64_t line_floats = 16;
    int64_t i = 0;
    for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % (line_floats * sizeof(float)) != 0; ++i) dst[i] = src[i];
    for (; i + line_floats <= n; i += line_floats)
        for (int64_t part = 0; part < line_floats; part += 4) _mm_stream_ps(dst + i + part, _mm_loadu_ps(src + i + part));
    for (; i < n; ++i) dst[i] = src[i];
#else
    std::memcpy(dst, src, sizeof(float) * n);
#endif
}

// One 64-byte line from src to dst (both 64-byte aligned) with non-temporal stores.
inline void stream_line(const void *src, void *dst) {
#if defined(__SSE2__)
    for (int part = 0; part < 4; ++part)
        _mm_stream_si128(static_cast<__m128i *>(dst) + part, _mm_load_si128(static_cast<const __m128i *>(src) + part));
#else
    std::memcpy(dst, src, 64);
#endif
}

// Orders the streamed stores before anything this thread does next.
inline void stream_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

}  // namespace gdn::cpu
