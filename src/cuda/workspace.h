// The device workspace a cuda context owns: allocated at the first call that needs it and
// grown (never shrunk) when a later call needs more, so that calls of a steady shape allocate
// nothing. Allocation is stream-ordered (cudaMallocAsync on the context's stream) where the
// device supports memory pools, so growing it does not synchronise with the host either.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/status.h"

namespace gdn::cuda {

class DeviceWorkspace {
public:
    DeviceWorkspace(cudaStream_t stream, bool stream_ordered) : stream_(stream), stream_ordered_(stream_ordered) {}
    ~DeviceWorkspace();
    DeviceWorkspace(const DeviceWorkspace &) = delete;
    DeviceWorkspace &operator=(const DeviceWorkspace &) = delete;

    // Makes at least `bytes` available. On failure the old buffer is kept and nothing that a
    // caller wrote is touched (the caller allocates before it launches anything that writes).
    Status reserve(size_t bytes);

    void *data() const { return data_; }
    size_t capacity() const { return capacity_; }
    // Frees the buffer, stream-ordered where the device allows (after the queued work that uses it).
    void release();

private:
    cudaStream_t stream_;
    bool stream_ordered_;
    void *data_ = nullptr;
    size_t capacity_ = 0;
};

}  // namespace gdn::cuda
