#include "cuda/workspace.h"

#include "cuda/cuda_status.h"

namespace gdn::cuda {

Status DeviceWorkspace::reserve(size_t bytes) {
    if (bytes <= capacity_) return {};
    if (bytes == SIZE_MAX) return fail(GDN_ERROR_OUT_OF_MEMORY, "cuda: the workspace this call needs is too large to allocate");
    // Inside a stream capture an allocation would belong to the graph, not to this context.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    GDN_CUDA_TRY(cudaStreamIsCapturing(stream_, &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone)
        return fail(GDN_ERROR_BACKEND,
                    "cuda: this call needs a larger workspace (%zu bytes, %zu held) while its stream is being captured; make the "
                    "same call once before capturing",
                    bytes, capacity_);
    // Round up to 2 MiB so that slowly growing shapes do not reallocate every call.
    const size_t granule = size_t(2) << 20;
    const size_t rounded = (bytes + granule - 1) / granule * granule;
    void *fresh = nullptr;
    const cudaError_t e = stream_ordered_ ? cudaMallocAsync(&fresh, rounded, stream_) : cudaMalloc(&fresh, rounded);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(GDN_ERROR_OUT_OF_MEMORY, "cuda: allocating a workspace of %zu bytes failed: %s", rounded, cudaGetErrorString(e));
    }
    release();
    data_ = fresh;
    capacity_ = rounded;
    return {};
}

void DeviceWorkspace::release() {
    if (data_ == nullptr) return;
    // Stream-ordered: freed after the work already queued on the stream that uses it.
    // cudaFree (the fallback) waits for the device.
    if (!stream_ordered_ || cudaFreeAsync(data_, stream_) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(data_);
    }
    data_ = nullptr;
    capacity_ = 0;
}

DeviceWorkspace::~DeviceWorkspace() { release(); }

}  // namespace gdn::cuda
