// CUDA device memory for the harness (compiled when libgdn has the CUDA backend).
#include <cuda_runtime.h>

#include <stdexcept>

#include "memory.h"

namespace gdn::testkit {
namespace {

void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

class CudaMemory final : public Memory {
public:
    explicit CudaMemory(int device) : device_(device) {}
    bool is_host() const override { return false; }
    void *allocate(size_t bytes) override {
        check(cudaSetDevice(device_), "cudaSetDevice");
        void *p = nullptr;
        check(cudaMalloc(&p, bytes), "cudaMalloc");
        return p;
    }
    void release(void *p) override { cudaFree(p); }
    void upload(void *dst, const void *src, size_t bytes) override {
        check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    }
    void download(void *dst, const void *src, size_t bytes) override {
        check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    }
    void synchronize() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

private:
    int device_;
};

}  // namespace

std::unique_ptr<Memory> make_cuda_memory(int device, std::string &why) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        why = cudaGetErrorString(e);
        return nullptr;
    }
    if (device >= count) {
        why = "no CUDA device " + std::to_string(device);
        return nullptr;
    }
    return std::make_unique<CudaMemory>(device);
}

}  // namespace gdn::testkit
