// What the cuda benches (cuda_bench, cuda_precision_bench) share: CUDA error checks, device
// buffers from host data, strided tensors, and the median time of a call by CUDA events.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "gdn/gdn.h"

namespace gdn_bench {

inline void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "cuda bench: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(2);
    }
}

template <class T>
T *to_device(const std::vector<T> &host) {
    T *d = nullptr;
    check(cudaMalloc(reinterpret_cast<void **>(&d), host.size() * sizeof(T)), "cudaMalloc");
    check(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    return d;
}

template <class T>
std::vector<T> to_host(const T *d, size_t count) {
    std::vector<T> host(count);
    check(cudaMemcpy(host.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
}

inline std::vector<float> uniform(size_t count, float lo, float hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> host(count);
    for (float &x : host) x = u(rng);
    return host;
}

inline float *device_random(size_t count, float lo, float hi, uint32_t seed) { return to_device(uniform(count, lo, hi, seed)); }

// A [ne0, ne1, ne2, ne3] tensor of `type` (element_bytes each) with rows of ne0 elements
// `row_stride` elements apart and tokens `token_stride` apart (dim 3 follows dim 2).
inline gdn_tensor tensor(void *data, gdn_type type, int64_t element_bytes, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                         int64_t row_stride, int64_t token_stride) {
    gdn_tensor t{};
    t.data = data;
    t.type = type;
    t.ne[0] = ne0, t.ne[1] = ne1, t.ne[2] = ne2, t.ne[3] = ne3;
    t.nb[0] = element_bytes, t.nb[1] = element_bytes * row_stride, t.nb[2] = element_bytes * token_stride;
    t.nb[3] = element_bytes * token_stride * ne2;
    return t;
}

// Median over timed calls (CUDA events around each, at least 0.3 s and 5 calls, 3 warm-up calls).
template <class Fn>
double median_ms(Fn &&call) {
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    for (int i = 0; i < 3; ++i) call();  // warm-up: workspace, caches, clocks
    check(cudaDeviceSynchronize(), "warm-up");
    std::vector<double> times;
    double total = 0;
    while ((total < 300.0 || times.size() < 5) && times.size() < 2000) {
        check(cudaEventRecord(start), "cudaEventRecord");
        call();
        check(cudaEventRecord(stop), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        times.push_back(ms);
        total += ms;
    }
    std::sort(times.begin(), times.end());
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return times[times.size() / 2];
}

}  // namespace gdn_bench
