// The state of an empty sequence (core/empty_sequences.h): one [Sk, Sv, Hv] state from one view
// to another in either layout (View::s0), the two alike or not, or zeros when the source is
// absent. Consecutive threads take consecutive floats of the destination.
//
// Device code plus its launch, included by state_copy.cu (nvcc) and by the host emulation test.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cuda/device_views.h"
#include "cuda/plans.h"

namespace gdn::cuda {
// Internal to the one translation unit that includes this.
namespace {

__global__ void copy_state_kernel(View src, View dst, int Sk, int Sv, int Hv) {
    const int64_t total = static_cast<int64_t>(Sk) * Sv * Hv;
    const bool keys = dst.rows_contiguous();
    const int inner = keys ? Sk : Sv, outer = keys ? Sv : Sk;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int a = static_cast<int>(idx % inner), b = static_cast<int>(idx / inner % outer), h = static_cast<int>(idx / inner / outer);
        const int i = keys ? a : b, j = keys ? b : a;
        *dst.at(i, j, h, 0) = src.present() ? *src.at(i, j, h, 0) : 0.0f;
    }
}

// Enqueues the copy (launch: see stream_launcher.cuh).
template <class Launch>
cudaError_t run_copy_state(const Launch &launch, const View &src, const View &dst, int Sk, int Sv, int Hv) {
    const int64_t total = static_cast<int64_t>(Sk) * Sv * Hv;
    const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 65536));
    return launch(copy_state_kernel, LaunchShape{std::max(blocks, 1), 1, 1, 256, 0}, src, dst, Sk, Sv, Hv);
}

}  // namespace
}  // namespace gdn::cuda
