// CUDA errors as gdn Status values: GDN_ERROR_OUT_OF_MEMORY for a failed allocation,
// GDN_ERROR_BACKEND with CUDA's own message for everything else.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace gdn::cuda {

inline Status cuda_status(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return {};
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky: clear it so that later checks see only later errors
        return fail(GDN_ERROR_OUT_OF_MEMORY, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return fail(GDN_ERROR_BACKEND, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace gdn::cuda

// Returns from the enclosing Status function when a CUDA call failed.
#define GDN_CUDA_TRY(call, what) GDN_TRY(::gdn::cuda::cuda_status((call), (what)))
