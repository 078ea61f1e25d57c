// The cuda backend, host side: device checks, tensor views, the workspace, and the choice of
// kernels. Every kernel runs on the context's stream (gdn_context_params.stream, NULL = the
// default stream); no call synchronises with the host, and no call allocates once the
// workspace has reached the size of the largest call so far. Packed sequences (cu_seqlens) are
// walked one after another, each with the kernels of an unpacked call (cuda/sequence_views.h);
// offsets in device memory cost one synchronisation of the stream (read_offsets).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <memory>

#include "core/backend.h"
#include "core/sequences.h"
#include "core/tensor.h"
#include "cuda/cuda_status.h"
#include "cuda/kernels.h"
#include "cuda/sequence_views.h"
#include "cuda/workspace.h"

namespace gdn {
namespace {

using cuda::View;

// Makes `device` current for the duration of a call and restores the caller's device after.
class DeviceScope {
public:
    Status enter(int device) {
        GDN_CUDA_TRY(cudaGetDevice(&previous_), "cudaGetDevice");
        if (previous_ != device) {
            GDN_CUDA_TRY(cudaSetDevice(device), "cudaSetDevice");
            switched_ = true;
        }
        return {};
    }
    ~DeviceScope() {
        if (switched_) cudaSetDevice(previous_);
    }

private:
    int previous_ = 0;
    bool switched_ = false;
};

// Checks that a tensor is F32 memory this device can read whole floats from, and describes it
// in element strides.
Status view_of(const char *name, const gdn_tensor *t, int device, View &out) {
    out = View{};
    if (t == nullptr) return {};
    const uintptr_t address = reinterpret_cast<uintptr_t>(t->data);
    if (address % sizeof(float) != 0)
        return fail(GDN_ERROR_UNSUPPORTED, "%s.data = %p is not aligned to 4 bytes (the cuda backend reads whole floats)", name, t->data);
    for (int d = 0; d < 4; ++d)
        if (t->nb[d] % static_cast<int64_t>(sizeof(float)) != 0)
            return fail(GDN_ERROR_UNSUPPORTED, "%s.nb[%d] = %" PRId64 " is not a multiple of 4 bytes (the cuda backend reads whole floats)",
                        name, d, t->nb[d]);
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, t->data);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(GDN_ERROR_INVALID_ARGUMENT, "%s.data = %p: cudaPointerGetAttributes failed: %s", name, t->data, cudaGetErrorString(e));
    }
    switch (attr.type) {
        case cudaMemoryTypeDevice:
            if (attr.device != device)
                return fail(GDN_ERROR_INVALID_ARGUMENT, "%s.data = %p is memory of device %d, but this context runs on device %d", name,
                            t->data, attr.device, device);
            break;
        case cudaMemoryTypeManaged: break;
        case cudaMemoryTypeHost:  // pinned host memory, readable by the device when mapped at the same address
            if (attr.devicePointer != t->data)
                return fail(GDN_ERROR_INVALID_ARGUMENT, "%s.data = %p is pinned host memory not mapped at the same device address", name,
                            t->data);
            break;
        default:
            return fail(GDN_ERROR_INVALID_ARGUMENT, "%s.data = %p is not device memory (the cuda backend takes device pointers)", name,
                        t->data);
    }
    out.data = static_cast<float *>(t->data);
    out.s0 = t->nb[0] / static_cast<int64_t>(sizeof(float));  // 1 but in value-major states
    out.s1 = t->nb[1] / static_cast<int64_t>(sizeof(float));
    out.s2 = t->nb[2] / static_cast<int64_t>(sizeof(float));
    out.s3 = t->nb[3] / static_cast<int64_t>(sizeof(float));
    return {};
}

// The problem's inputs, common to both ops' argument and view structs.
template <class Args, class Views>
Status input_views(const Args &a, int device, Views &w) {
    GDN_TRY(view_of("q", a.q, device, w.q));
    GDN_TRY(view_of("k", a.k, device, w.k));
    GDN_TRY(view_of("v", a.v, device, w.v));
    GDN_TRY(view_of("g", a.g, device, w.g));
    GDN_TRY(view_of("beta", a.beta, device, w.beta));
    return view_of("state", a.s0, device, w.s0);
}

cuda::Sizes sizes_of(const Dims &d) {
    cuda::Sizes n;
    n.Sk = static_cast<int>(d.Sk);
    n.Sv = static_cast<int>(d.Sv);
    n.Hk = static_cast<int>(d.Hk);
    n.Hv = static_cast<int>(d.Hv);
    n.B = static_cast<int>(d.B);
    n.Bq = static_cast<int>(d.Bq);
    n.K = static_cast<int>(d.K);
    n.gate_width = static_cast<int>(d.gate_width);
    n.grouped = d.head_map == GDN_HEAD_MAP_GROUPED ? 1 : 0;
    n.T = d.T;
    n.scale = static_cast<float>(d.scale);
    return n;
}

class CudaBackend final : public Backend {
public:
    CudaBackend(int device, cudaStream_t stream, bool stream_ordered, size_t shared_limit, int chunk_size)
        : device_(device),
          target_{stream, shared_limit},
          chunk_size_(chunk_size),
          workspace_(std::make_unique<cuda::DeviceWorkspace>(stream, stream_ordered)) {}

    ~CudaBackend() override {
        DeviceScope scope;
        scope.enter(device_);  // best effort: the workspace is freed with its own device current
        workspace_.reset();
    }

    const char *name() const override { return "cuda"; }

    Status supports(const Dims &d, bool) const override {
        if (d.type != GDN_TYPE_F32) return fail(GDN_ERROR_TYPE, "the cuda backend takes F32 tensors, not %s", type_name(d.type));
        if (d.Sk > cuda::kMaxHeadSize)
            return fail(GDN_ERROR_UNSUPPORTED, "Sk = %" PRId64 ": the cuda backend takes key head sizes up to %d", d.Sk, cuda::kMaxHeadSize);
        if (d.Sv > cuda::kMaxHeadSize)
            return fail(GDN_ERROR_UNSUPPORTED, "Sv = %" PRId64 ": the cuda backend takes value head sizes up to %d", d.Sv,
                        cuda::kMaxHeadSize);
        if (d.Hv > kMaxGridDim)
            return fail(GDN_ERROR_UNSUPPORTED, "Hv = %" PRId64 ": the cuda backend takes at most %d value heads", d.Hv, kMaxGridDim);
        if (d.B > kMaxGridDim)
            return fail(GDN_ERROR_UNSUPPORTED, "B = %" PRId64 ": the cuda backend takes at most %d sequences", d.B, kMaxGridDim);
        if (d.K > INT_MAX)
            return fail(GDN_ERROR_UNSUPPORTED, "K = %" PRId64 ": the cuda backend takes at most %d snapshot slots", d.K, INT_MAX);
        return {};
    }

    // Packed sequences (docs/VARLEN.md): offsets in host memory are read in place; in device
    // memory they are copied back on the context's stream, which synchronises it once.
    Status read_offsets(const gdn_tensor &t, std::vector<int64_t> &offsets) override {
        DeviceScope scope;
        GDN_TRY(scope.enter(device_));
        cudaPointerAttributes attr{};
        const cudaError_t e = cudaPointerGetAttributes(&attr, t.data);
        if (e != cudaSuccess) cudaGetLastError();
        if (e != cudaSuccess || attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost) {
            read_host_offsets(t, offsets);
            return {};
        }
        if (attr.type == cudaMemoryTypeDevice && attr.device != device_)
            return fail(GDN_ERROR_INVALID_ARGUMENT, "cu_seqlens.data = %p is memory of device %d, but this context runs on device %d",
                        t.data, attr.device, device_);
        const size_t element = t.type == GDN_TYPE_I32 ? 4 : 8;
        std::vector<uint8_t> bytes(static_cast<size_t>(t.ne[0]) * element);
        GDN_CUDA_TRY(cudaMemcpyAsync(bytes.data(), t.data, bytes.size(), cudaMemcpyDeviceToHost, target_.stream),
                     "copying cu_seqlens to the host");
        GDN_CUDA_TRY(cudaStreamSynchronize(target_.stream), "waiting for cu_seqlens");
        gdn_tensor host = t;
        host.data = bytes.data();
        read_host_offsets(host, offsets);
        return {};
    }

    // An empty sequence's state (core/empty_sequences.h), on the context's stream: one 2-D copy
    // (or fill) per head when rows are pitched apart, one per row otherwise.
    Status copy_state(const StateCopy &c) override {
        DeviceScope scope;
        GDN_TRY(scope.enter(device_));
        View src, dst;
        GDN_TRY(view_of("state", c.src.data != nullptr ? &c.src : nullptr, device_, src));
        GDN_TRY(view_of("states", &c.dst, device_, dst));
        const size_t width = static_cast<size_t>(c.dst.ne[0]) * sizeof(float);
        const auto rows = static_cast<size_t>(c.dst.ne[1]);
        const auto pitch_of = [](const gdn_tensor &t) { return static_cast<size_t>(t.nb[1]); };
        const bool pitched = pitch_of(c.dst) >= width && (!src.present() || pitch_of(c.src) >= width);
        for (int64_t h = 0; h < c.dst.ne[2]; ++h) {
            char *to = static_cast<char *>(c.dst.data) + h * c.dst.nb[2];
            const char *from = src.present() ? static_cast<const char *>(c.src.data) + h * c.src.nb[2] : nullptr;
            if (pitched) {
                if (from != nullptr)
                    GDN_CUDA_TRY(cudaMemcpy2DAsync(to, pitch_of(c.dst), from, pitch_of(c.src), width, rows, cudaMemcpyDefault,
                                                   target_.stream), "copying an empty sequence's state");
                else GDN_CUDA_TRY(cudaMemset2DAsync(to, pitch_of(c.dst), 0, width, rows, target_.stream), "zeroing an empty sequence's state");
                continue;
            }
            for (size_t j = 0; j < rows; ++j) {
                char *row = to + static_cast<int64_t>(j) * c.dst.nb[1];
                if (from != nullptr)
                    GDN_CUDA_TRY(cudaMemcpyAsync(row, from + static_cast<int64_t>(j) * c.src.nb[1], width, cudaMemcpyDefault, target_.stream),
                                 "copying an empty sequence's state");
                else GDN_CUDA_TRY(cudaMemsetAsync(row, 0, width, target_.stream), "zeroing an empty sequence's state");
            }
        }
        return {};
    }

    Status forward(const ForwardArgs &a) override {
        DeviceScope scope;
        GDN_TRY(scope.enter(device_));
        cuda::ForwardViews w;
        GDN_TRY(input_views(a, device_, w));
        GDN_TRY(view_of("out", a.out, device_, w.out));
        GDN_TRY(view_of("states", a.states, device_, w.states));
        // One call, or one per packed sequence, each with its own choice of kernels; the
        // workspace of the largest is reserved before anything is enqueued.
        const auto calls = cuda::sequence_calls(w, sizes_of(a.dims), a.offsets);
        std::vector<ForwardChoice> choices;
        size_t bytes = 0;
        for (const auto &c : calls) {
            choices.push_back(choose_forward(c.sizes));
            bytes = std::max(bytes, choices.back().bytes);
        }
        GDN_TRY(workspace_->reserve(bytes));
        for (size_t i = 0; i < calls.size(); ++i) {
            const ForwardChoice &c = choices[i];
            if (c.chunked)
                GDN_CUDA_TRY(cuda::launch_chunk_forward(calls[i].views, calls[i].sizes, c.plan, workspace_->data(), target_),
                             "launching the chunked forward");
            else GDN_CUDA_TRY(cuda::launch_token_forward(calls[i].views, calls[i].sizes, target_), "launching the per-token forward");
        }
        last_workspace_ = bytes;
        return {};
    }

    Status backward(const BackwardArgs &a) override {
        DeviceScope scope;
        GDN_TRY(scope.enter(device_));
        cuda::BackwardViews w;
        GDN_TRY(input_views(a, device_, w));
        GDN_TRY(view_of("d_out", a.d_out, device_, w.d_out));
        GDN_TRY(view_of("d_states", a.d_states, device_, w.d_states));
        GDN_TRY(view_of("grads.q", a.dq, device_, w.dq));
        GDN_TRY(view_of("grads.k", a.dk, device_, w.dk));
        GDN_TRY(view_of("grads.v", a.dv, device_, w.dv));
        GDN_TRY(view_of("grads.g", a.dg, device_, w.dg));
        GDN_TRY(view_of("grads.beta", a.dbeta, device_, w.dbeta));
        GDN_TRY(view_of("grads.state", a.ds0, device_, w.ds0));
        const auto calls = cuda::sequence_calls(w, sizes_of(a.dims), a.offsets);
        std::vector<BackwardChoice> choices;
        size_t bytes = 0;
        for (const auto &c : calls) {
            choices.push_back(choose_backward(c.sizes));
            bytes = std::max(bytes, choices.back().bytes());
        }
        GDN_TRY(workspace_->reserve(bytes));
        for (size_t i = 0; i < calls.size(); ++i) {
            const BackwardChoice &c = choices[i];
            if (c.chunked)
                GDN_CUDA_TRY(cuda::launch_chunk_backward(calls[i].views, calls[i].sizes, c.chunk, workspace_->data(), target_),
                             "launching the chunked backward");
            else GDN_CUDA_TRY(cuda::launch_token_backward(calls[i].views, calls[i].sizes, c.token, workspace_->data(), target_),
                              "launching the per-token backward");
        }
        last_workspace_ = bytes;
        return {};
    }

    uint64_t workspace_bytes() const override { return last_workspace_; }

    void release_workspace() override {
        DeviceScope scope;
        if (!scope.enter(device_).ok()) return;
        workspace_->release();
        last_workspace_ = 0;
    }

private:
    static constexpr int kMaxGridDim = 65535;  // grid y and z carry value heads and sequences
    // Below this many tokens the per-token kernel wins (and decoding is T = 1).
    static constexpr int64_t kChunkedFromTokens = 64;

    // The kernels of one unpacked call (a whole call, or one packed sequence) and their workspace.
    struct ForwardChoice {
        bool chunked = false;
        cuda::ChunkForwardPlan plan;
        size_t bytes = 0;
    };
    ForwardChoice choose_forward(const cuda::Sizes &n) const {
        ForwardChoice c;
        c.chunked = use_chunked(n) && cuda::chunk_forward_takes(n, target_.shared_limit);
        if (c.chunked) {
            c.plan = cuda::plan_chunk_forward(n);
            c.bytes = c.plan.bytes;
        }
        return c;
    }

    struct BackwardChoice {
        bool chunked = false;
        cuda::ChunkBackwardPlan chunk;
        cuda::TokenBackwardPlan token;
        size_t bytes() const { return chunked ? chunk.bytes : token.bytes; }
    };
    BackwardChoice choose_backward(const cuda::Sizes &n) const {
        BackwardChoice c;
        c.chunked = use_chunked(n) && cuda::chunk_backward_takes(n, target_.shared_limit);
        if (c.chunked) c.chunk = cuda::plan_chunk_backward(n);
        else c.token = cuda::plan_token_backward(n, target_.shared_limit);
        return c;
    }

    // chunk_size = 1 in the context parameters asks for the per-token kernels throughout.
    bool use_chunked(const cuda::Sizes &n) const { return chunk_size_ != 1 && n.T >= kChunkedFromTokens; }

    int device_;
    cuda::LaunchTarget target_;  // the caller's stream; the most dynamic shared memory a block may opt in to
    int chunk_size_;             // gdn_context_params.chunk_size: 1 = per-token kernels only
    std::unique_ptr<cuda::DeviceWorkspace> workspace_;
    uint64_t last_workspace_ = 0;  // bytes the last successful call needed
};

}  // namespace

Status make_cuda_backend(const gdn_context_params &params, std::unique_ptr<Backend> &out) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fail(GDN_ERROR_BACKEND, "cuda: no usable CUDA device: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (count == 0) return fail(GDN_ERROR_BACKEND, "cuda: no CUDA device found");
    if (params.device >= count)
        return fail(GDN_ERROR_BACKEND, "cuda: device %d does not exist (this machine has %d CUDA device(s))", params.device, count);
    int major = 0, minor = 0;
    GDN_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, params.device), "cudaDeviceGetAttribute");
    GDN_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, params.device), "cudaDeviceGetAttribute");
    if (major < 8) {
        cudaDeviceProp prop{};
        const bool named = cudaGetDeviceProperties(&prop, params.device) == cudaSuccess;
        return fail(GDN_ERROR_BACKEND, "cuda: device %d (%s) has compute capability %d.%d; the cuda backend needs 8.0 or newer (Ampere on)",
                    params.device, named ? prop.name : "unnamed", major, minor);
    }
    int pools = 0;
    GDN_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, params.device), "cudaDeviceGetAttribute");
    int shared_limit = 0;
    GDN_CUDA_TRY(cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, params.device),
                 "cudaDeviceGetAttribute");
    out = std::make_unique<CudaBackend>(params.device, static_cast<cudaStream_t>(params.stream), pools != 0,
                                        static_cast<size_t>(shared_limit), params.chunk_size);
    return {};
}

}  // namespace gdn
