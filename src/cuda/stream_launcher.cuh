// Kernel launches on a stream, as the launch sequences in the kernel headers (run_*) ask for
// them: launch(kernel, shape, args...). The host emulation tests pass their own launcher with
// the same call, so that they run the very sequence (windows, reductions) the GPU runs.
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernels.h"
#include "cuda/plans.h"

namespace gdn::cuda {

struct StreamLauncher {
    LaunchTarget target;

    template <class... Params, class... Args>
    cudaError_t operator()(void (*kernel)(Params...), const LaunchShape &shape, const Args &...args) const {
        if (shape.shared_bytes > 48 * 1024) {
            // Above the default a kernel must opt in. The opt-in is a property of the function
            // on this device, shared by every thread and context: always the device's limit,
            // so that concurrent calls never shrink it under each other's launches.
            const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(target.shared_limit));
            if (e != cudaSuccess) return e;
        }
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(shape.x, shape.y, shape.z);
        config.blockDim = dim3(shape.threads);
        config.dynamicSmemBytes = shape.shared_bytes;
        config.stream = target.stream;
        // The launch's own status: an earlier error the caller left unchecked is not ours.
        const cudaError_t e = cudaLaunchKernelEx(&config, kernel, args...);
        if (e != cudaSuccess) cudaGetLastError();  // reported here; not left for the caller's next check
        return e;
    }
};

}  // namespace gdn::cuda
