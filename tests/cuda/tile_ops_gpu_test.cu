// The tensor-core tile operations (src/cuda/tile_ops.cuh) on the GPU; skips without a device.
#include <cuda_runtime.h>

#include "tile_ops_reference.h"

namespace {

using namespace gdn_tile_check;

__global__ void checks_kernel(const float *a, const float *b, const float *l, float *c, float *c2, float *c3, float *x,
                              float *x_chunk, bool bf16_products) {
    extern __shared__ __align__(32) float smem[];
    run_checks(smem, a, b, l, c, c2, c3, x, x_chunk, bf16_products);
}

template <class T>
T *to_device(const std::vector<T> &v) {
    T *p = nullptr;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&p), v.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return p;
}

void run_gpu_checks(bool bf16_products) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        GTEST_SKIP() << "no CUDA device";
    }
    const Inputs in = make_check_inputs();
    float *a = to_device(in.a), *b = to_device(in.b), *l = to_device(in.l);
    std::vector<float> c(M * N), c2(M * N), c3(M * N), x(n * n), x_chunk(n_chunk * n_chunk);
    float *dc = to_device(c), *dc2 = to_device(c2), *dc3 = to_device(c3), *dx = to_device(x), *dx_chunk = to_device(x_chunk);
    const size_t shared = sizeof(float) * shared_floats;
    ASSERT_EQ(cudaFuncSetAttribute(checks_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)), cudaSuccess);
    checks_kernel<<<1, 128, shared>>>(a, b, l, dc, dc2, dc3, dx, dx_chunk, bf16_products);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(c2.data(), dc2, c2.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(c3.data(), dc3, c3.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(x.data(), dx, x.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(x_chunk.data(), dx_chunk, x_chunk.size() * sizeof(float), cudaMemcpyDeviceToHost);
    expect_checks_pass(in, c, c2, c3, x, x_chunk, bf16_products);
    for (float *p : {a, b, l, dc, dc2, dc3, dx, dx_chunk}) cudaFree(p);
}

TEST(TileOpsGpu, GemmAndTriangularInverse) { run_gpu_checks(false); }

// The bf16 mma's fragments as PTX documents them, and its sums within F32 roundoff of the
// bf16-rounded operands' products.
TEST(TileOpsGpu, Bf16GemmAndTriangularInverse) { run_gpu_checks(true); }

}  // namespace
