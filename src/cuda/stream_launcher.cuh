// Kernel launches on a stream, as the launch sequences in the kernel headers (run_*) ask for
// them: launch(kernel, shape, args...). The host emulation tests pass their own launcher with
// the same call, so that they run the very sequence (windows, reductions) the GPU runs.
#pragma once

#include <cuda_runtime.h>

#include "cuda/plans.h"

namespace gdn::cuda {

struct StreamLauncher {
    cudaStream_t stream;

    template <class... Params, class... Args>
    cudaError_t operator()(void (*kernel)(Params...), const LaunchShape &shape, const Args &...args) const {
        if (shape.shared_bytes > 48 * 1024) {  // above the default, a kernel must opt in
            const cudaError_t e =
                cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shape.shared_bytes));
            if (e != cudaSuccess) return e;
        }
        kernel<<<dim3(shape.x, shape.y, shape.z), shape.threads, shape.shared_bytes, stream>>>(args...);
        return cudaGetLastError();
    }
};

}  // namespace gdn::cuda
