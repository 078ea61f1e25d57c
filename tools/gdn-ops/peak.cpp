// The two ceilings perf measures against. Peak: independent FMA chains, enough of them to cover
// the FMA latency on both pipes, in the widest vectors the processor has; loads and stores are
// absent on purpose: this is the arithmetic ceiling. Copy bandwidth: memcpy between two buffers
// of a given size, over and over, so that they sit in whichever cache level holds that many
// bytes, as a decoding step's states do when calls follow each other.
#include "peak.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace gdn::ops {
namespace {

constexpr int kChains = 12;
constexpr long kSteps = 1 << 16;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) double fma_avx512(long steps) {
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + c * 1e-3f);
    const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
    for (long s = 0; s < steps; ++s)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
    __m512 sum = acc[0];
    for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    volatile float sink = lanes[0];
    (void)sink;
    return 2.0 * 16 * kChains * static_cast<double>(steps);
}

// vdpbf16ps: each of the 16 F32 lanes adds the products of two bf16 pairs, 64 FLOP an
// instruction. The operands are all 1.0 (bf16 0x3F80) and the accumulators start near 1: the
// sums grow linearly and stay finite for any run length here.
__attribute__((target("avx512f,avx512bf16"))) double dpbf16_avx512(long steps) {
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + c * 1e-3f);
    const __m512bh ones = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80));
    for (long s = 0; s < steps; ++s)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], ones, ones);
    __m512 sum = acc[0];
    for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    volatile float sink = lanes[0];
    (void)sink;
    return 4.0 * 16 * kChains * static_cast<double>(steps);
}

__attribute__((target("avx2,fma"))) double fma_avx2(long steps) {
    __m256 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + c * 1e-3f);
    const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
    for (long s = 0; s < steps; ++s)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], mul, add);
    __m256 sum = acc[0];
    for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, sum);
    volatile float sink = lanes[0];
    (void)sink;
    return 2.0 * 8 * kChains * static_cast<double>(steps);
}
#endif

#if defined(__aarch64__)
// NEON, the vectors the cpu backend's AArch64 kernel uses: 16 chains, since the wide cores
// (Neoverse V1/V2, Apple's) have 4 FMA pipes of 4-cycle latency; 18 of the 32 registers.
double fma_neon(long steps) {
    constexpr int chains = 16;
    float32x4_t acc[chains];
    for (int c = 0; c < chains; ++c) acc[c] = vdupq_n_f32(1.0f + c * 1e-3f);
    const float32x4_t mul = vdupq_n_f32(0.999999f), add = vdupq_n_f32(1e-7f);
    for (long s = 0; s < steps; ++s)
        for (int c = 0; c < chains; ++c) acc[c] = vfmaq_f32(add, acc[c], mul);
    float32x4_t sum = acc[0];
    for (int c = 1; c < chains; ++c) sum = vaddq_f32(sum, acc[c]);
    volatile float sink = vgetq_lane_f32(sum, 0);
    (void)sink;
    return 2.0 * 4 * chains * static_cast<double>(steps);
}
#endif

double fma_scalar(long steps) {
    float acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = 1.0f + c * 1e-3f;
    for (long s = 0; s < steps; ++s)
        for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
    volatile float sink = acc[0];
    (void)sink;
    return 2.0 * kChains * static_cast<double>(steps);
}

using Kernel = double (*)(long);

// Runs work(thread) on every thread for about `seconds`; the sum of the threads' rates of what
// work returns (FLOPs, bytes) per second.
double run_threads(const std::function<double(int)> &work, int threads, double seconds) {
    std::atomic<bool> go{false};
    std::vector<double> rates(static_cast<size_t>(threads), 0.0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            while (!go.load()) std::this_thread::yield();
            const auto start = std::chrono::steady_clock::now();
            double flops = 0, elapsed = 0;
            do {
                flops += work(t);
                elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            } while (elapsed < seconds);
            rates[static_cast<size_t>(t)] = flops / elapsed;
        });
    go = true;
    for (auto &th : pool) th.join();
    double total = 0;
    for (double r : rates) total += r;
    return total;
}

// The best of several windows of `kernel` on p.threads threads (see measure_peak).
Peak best_rate(Peak p, Kernel kernel, double seconds);

int thread_count(int threads) { return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

}  // namespace

Peak measure_peak(int threads, double seconds) {
    Peak p;
    p.threads = thread_count(threads);
    Kernel kernel = fma_scalar;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        kernel = fma_avx512;
        p.isa = "avx512";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        kernel = fma_avx2;
        p.isa = "avx2+fma";
    }
#elif defined(__aarch64__)
    kernel = fma_neon;  // Advanced SIMD is part of AArch64
    p.isa = "neon";
#endif
    return best_rate(p, kernel, seconds);
}

Peak measure_bf16_peak(int threads, double seconds) {
    Peak p;
    p.threads = thread_count(threads);
    p.isa = "none";
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bf16")) {
        p.isa = "avx512_bf16";
        return best_rate(p, dpbf16_avx512, seconds);
    }
#endif
    (void)seconds;
    return p;
}

namespace {

Peak best_rate(Peak p, Kernel kernel, double seconds) {
    const auto fma = [kernel](int) { return kernel(kSteps); };
    run_threads(fma, p.threads, 0.05);  // wake the cores
    // The best of several windows: the peak is a ceiling, and a window in which a core was lent
    // to something else (a shared or virtual machine) reads low, which would inflate every
    // "% of peak" of the run (seen here: one 0.3 s window at half the usual rate). Each thread's
    // rate is over its own interval, so threads that did not overlap still add up to every
    // core's rate; an overstatement, if any, lowers the percentages, never raises them.
    constexpr int windows = 6;
    for (int i = 0; i < windows; ++i)
        p.gflops = std::max(p.gflops, run_threads(fma, p.threads, seconds / windows) / 1e9);
    return p;
}

}  // namespace

double measure_copy_gbps(int threads, int64_t bytes, double seconds) {
    threads = thread_count(threads);
    const size_t slice = (static_cast<size_t>(bytes) / static_cast<size_t>(threads) + 63) / 64 * 64;
    std::vector<char> from(slice * static_cast<size_t>(threads), 1), to(from.size(), 0);
    const auto copy = [&](int t) {
        std::memcpy(to.data() + slice * t, from.data() + slice * t, slice);
        return 2.0 * static_cast<double>(slice);  // read and written
    };
    run_threads(copy, threads, 0.02);  // into the caches
    return run_threads(copy, threads, seconds) / 1e9;
}

}  // namespace gdn::ops
