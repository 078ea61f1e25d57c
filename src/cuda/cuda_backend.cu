// The cuda backend, host side: device checks, tensor views, the workspace, and the choice of
// kernels. Every kernel runs on the context's stream (gdn_context_params.stream, NULL = the
// default stream); no call synchronises with the host, and no call allocates once the
// workspace has reached the size of the largest call so far. Packed sequences (cu_seqlens) and
// pooled states (state_indices) are walked by sequence tables (cuda/sequence_views.h): the short
// sequences of a call in one launch chain, the long ones by the chunked kernels one by one;
// offsets or indices in device memory cost one synchronisation of the stream each (read_offsets).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <memory>

#include "core/backend.h"
#include "core/sequences.h"
#include "core/tensor.h"
#include "core/validate.h"
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

// The element type of a tensor the backend takes (SPEC 3.1: F32, BF16, F16; supports() has
// refused F64).
cuda::Element element_of(gdn_type type) {
    return type == GDN_TYPE_BF16 ? cuda::Element::BF16 : type == GDN_TYPE_F16 ? cuda::Element::F16 : cuda::Element::F32;
}

// Checks that a tensor is memory this device can read whole elements (4 or 2 bytes) from, and
// describes it in element strides.
Status view_of(const char *name, const gdn_tensor *t, int device, View &out) {
    out = View{};
    if (t == nullptr) return {};
    const cuda::Element type = element_of(t->type);
    const int64_t size = cuda::element_bytes(type);
    const uintptr_t address = reinterpret_cast<uintptr_t>(t->data);
    if (address % size != 0)
        return fail(GDN_ERROR_UNSUPPORTED, "%s.data = %p is not aligned to %d bytes (the cuda backend reads whole %s elements)", name,
                    t->data, static_cast<int>(size), type_name(t->type));
    for (int d = 0; d < 4; ++d)
        if (t->nb[d] % size != 0)
            return fail(GDN_ERROR_UNSUPPORTED, "%s.nb[%d] = %" PRId64 " is not a multiple of %d bytes (the cuda backend reads whole %s elements)",
                        name, d, t->nb[d], static_cast<int>(size), type_name(t->type));
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
    out.data = t->data;
    out.type = type;
    out.s0 = t->nb[0] / size;  // 1 but in value-major states
    out.s1 = t->nb[1] / size;
    out.s2 = t->nb[2] / size;
    out.s3 = t->nb[3] / size;
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
    // Every device the backend runs on (sm_80+) has bf16 mma: the precision is the call's.
    n.bf16_products = d.precision == GDN_PRECISION_BF16 ? 1 : 0;
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
        // SPEC 3.1: every combination of F32 states with F32, BF16 or F16 tensors (the C API has
        // checked the rule); the F64 call is ref's.
        if (d.state_type != GDN_TYPE_F32)
            return fail(GDN_ERROR_TYPE, "cuda: the call is %s throughout; the cuda backend computes with F32 states from F32, BF16 or F16 tensors",
                        type_name(d.state_type));
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

    // cu_seqlens (docs/VARLEN.md) or state_indices (SPEC section 3.2): in host memory read in
    // place; in device memory copied back on the context's stream, which synchronises it once.
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
            return fail(GDN_ERROR_INVALID_ARGUMENT, "cu_seqlens or state_indices: data = %p is memory of device %d, but this context runs on device %d",
                        t.data, attr.device, device_);
        const size_t element = t.type == GDN_TYPE_I32 ? 4 : 8;
        std::vector<uint8_t> bytes(static_cast<size_t>(t.ne[0]) * element);
        GDN_CUDA_TRY(cudaMemcpyAsync(bytes.data(), t.data, bytes.size(), cudaMemcpyDeviceToHost, target_.stream),
                     "copying cu_seqlens or state_indices to the host");
        GDN_CUDA_TRY(cudaStreamSynchronize(target_.stream), "waiting for cu_seqlens or state_indices");
        gdn_tensor host = t;
        host.data = bytes.data();
        read_host_offsets(host, offsets);
        return {};
    }

    // An empty sequence's state (core/empty_sequences.h), on the context's stream: one small
    // kernel, whatever the two tensors' layouts.
    Status copy_state(const StateCopy &c) override {
        DeviceScope scope;
        GDN_TRY(scope.enter(device_));
        View src, dst;
        GDN_TRY(view_of("state", c.src.data != nullptr ? &c.src : nullptr, device_, src));
        GDN_TRY(view_of("states", &c.dst, device_, dst));
        GDN_CUDA_TRY(cuda::launch_copy_state(src, dst, static_cast<int>(c.dst.ne[0]), static_cast<int>(c.dst.ne[1]),
                                             static_cast<int>(c.dst.ne[2]), target_),
                     "copying an empty sequence's state");
        return {};
    }

    Status forward(const ForwardArgs &a) override {
        DeviceScope scope;
        GDN_TRY(scope.enter(device_));
        cuda::ForwardViews w;
        GDN_TRY(input_views(a, device_, w));
        GDN_TRY(view_of("out", a.out, device_, w.out));
        GDN_TRY(view_of("states", a.states, device_, w.states));
        const cuda::Sizes n = sizes_of(a.dims);
        if (!a.dims.packed && !a.dims.pooled) {
            const ForwardChoice c = choose_forward(n);
            GDN_TRY(workspace_->reserve(c.bytes));
            GDN_TRY(enqueue_forward(w, n, c, {}, workspace_->data()));
            last_workspace_ = c.bytes;
            return {};
        }
        // Every launch's workspace is reserved before anything is enqueued.
        SequenceWalk walk = sequence_walk(a, n, false);
        std::vector<ForwardChoice> alone;
        size_t bytes = 0;
        for (const cuda::SequenceEntry &e : walk.alone) {
            alone.push_back(choose_forward(cuda::sequence_sizes(n, e)));
            bytes = std::max(bytes, alone.back().bytes);
        }
        void *scratch = nullptr;
        GDN_TRY(enter_walk(walk, bytes, scratch));
        for (size_t i = 0; i < walk.alone.size(); ++i) {
            const auto call = cuda::sequence_call(w, n, walk.alone[i], walk.snapshot_step);
            GDN_TRY(enqueue_forward(call.views, call.sizes, alone[i], {}, scratch));
        }
        for (const cuda::SequenceGroup &g : walk.groups) GDN_TRY(enqueue_forward(w, n, ForwardChoice{}, walk.table(g), scratch));
        last_workspace_ = walk.table_bytes + bytes;
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
        const cuda::Sizes n = sizes_of(a.dims);
        if (!a.dims.packed && !a.dims.pooled) {
            const BackwardChoice c = choose_backward(n);
            GDN_TRY(workspace_->reserve(c.bytes()));
            GDN_TRY(enqueue_backward(w, n, c, {}, workspace_->data()));
            last_workspace_ = c.bytes();
            return {};
        }
        SequenceWalk walk = sequence_walk(a, n, true);
        std::vector<BackwardChoice> alone, grouped;
        size_t bytes = 0;
        for (const cuda::SequenceEntry &e : walk.alone) {
            alone.push_back(choose_backward(cuda::sequence_sizes(n, e)));
            bytes = std::max(bytes, alone.back().bytes());
        }
        for (const cuda::SequenceGroup &g : walk.groups) {
            grouped.emplace_back();
            grouped.back().token = cuda::plan_token_backward(n, target_.shared_limit, g.table);
            bytes = std::max(bytes, grouped.back().bytes());
        }
        void *scratch = nullptr;
        GDN_TRY(enter_walk(walk, bytes, scratch));
        for (size_t i = 0; i < walk.alone.size(); ++i) {
            const auto call = cuda::sequence_call(w, n, walk.alone[i], walk.snapshot_step);
            GDN_TRY(enqueue_backward(call.views, call.sizes, alone[i], {}, scratch));
        }
        for (size_t i = 0; i < walk.groups.size(); ++i)
            GDN_TRY(enqueue_backward(w, n, grouped[i], walk.table(walk.groups[i]), scratch));
        last_workspace_ = walk.table_bytes + bytes;
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
        else c.token = cuda::plan_token_backward(n, target_.shared_limit, {});
        return c;
    }

    Status enqueue_forward(const cuda::ForwardViews &w, const cuda::Sizes &n, const ForwardChoice &c, const cuda::SequenceTable &table,
                           void *workspace) const {
        if (c.chunked)
            GDN_CUDA_TRY(cuda::launch_chunk_forward(w, n, c.plan, workspace, target_), "launching the chunked forward");
        else GDN_CUDA_TRY(cuda::launch_token_forward(w, n, table, target_), "launching the per-token forward");
        return {};
    }

    Status enqueue_backward(const cuda::BackwardViews &w, const cuda::Sizes &n, const BackwardChoice &c,
                            const cuda::SequenceTable &table, void *workspace) const {
        if (c.chunked)
            GDN_CUDA_TRY(cuda::launch_chunk_backward(w, n, c.chunk, workspace, target_), "launching the chunked backward");
        else GDN_CUDA_TRY(cuda::launch_token_backward(w, n, c.token, workspace, table, target_), "launching the per-token backward");
        return {};
    }

    // A packed or pooled call (cuda/sequence_views.h): its sequences with tokens, those the
    // chunked kernels take each walked by launches of its own, the others in groups of one
    // launch chain each (every short sequence of a serving batch in one), their entries copied
    // once to the start of the workspace.
    struct SequenceWalk {
        std::vector<cuda::SequenceEntry> alone, grouped;
        std::vector<cuda::SequenceGroup> groups;  // of `grouped`
        int64_t snapshot_step = 1;
        size_t table_bytes = 0;
        const cuda::SequenceEntry *device_entries = nullptr;

        cuda::SequenceTable table(const cuda::SequenceGroup &g) const {
            cuda::SequenceTable t = g.table;
            t.entries = device_entries + g.first;
            return t;
        }
    };

    template <class Args>
    SequenceWalk sequence_walk(const Args &a, const cuda::Sizes &n, bool backward) const {
        SequenceWalk walk;
        walk.snapshot_step = a.dims.packed ? a.dims.N : a.dims.B;
        // Sequences of an unpacked call that share q/k (Bq < B) add to the same dq, dk: one
        // launch chain over all of them, whose reductions sum them.
        const bool shared_keys = !a.dims.packed && n.Bq < n.B;
        for (const cuda::SequenceEntry &e : cuda::sequence_entries(n, a.offsets, a.state_slots)) {
            const cuda::Sizes one = cuda::sequence_sizes(n, e);
            const bool chunked = backward ? !shared_keys && choose_backward(one).chunked : choose_forward(one).chunked;
            (chunked ? walk.alone : walk.grouped).push_back(e);
        }
        const auto fits = [&](const cuda::SequenceTable &group) {
            return !backward || cuda::plan_token_backward(n, target_.shared_limit, group).bytes <= cuda::kGroupBudget;
        };
        walk.groups = cuda::sequence_groups(walk.grouped, a.dims.packed, walk.snapshot_step, kMaxGridDim, fits);
        walk.table_bytes = walk.grouped.empty() ? 0 : cuda::align_up(static_cast<double>(walk.grouped.size() * sizeof(cuda::SequenceEntry)));
        return walk;
    }

    // Reserves the table and `bytes` of scratch after it, and copies the table there (from
    // pageable memory: staged before the call returns; see README.md on what that may cost).
    Status enter_walk(SequenceWalk &walk, size_t bytes, void *&scratch) {
        GDN_TRY(workspace_->reserve(walk.table_bytes + bytes));
        char *base = static_cast<char *>(workspace_->data());
        walk.device_entries = reinterpret_cast<const cuda::SequenceEntry *>(base);
        scratch = base + walk.table_bytes;
        if (!walk.grouped.empty())
            GDN_CUDA_TRY(cudaMemcpyAsync(base, walk.grouped.data(), walk.grouped.size() * sizeof(cuda::SequenceEntry),
                                         cudaMemcpyHostToDevice, target_.stream),
                         "copying the sequence table");
        return {};
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
