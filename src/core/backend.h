// The interface every backend implements. The C API (api.cpp) validates each call with
// validate.cpp, asks the backend whether it takes the case, and only then runs it: a backend
// may assume its arguments are valid, and must not write anything before it knows it succeeds
// (allocate first, then compute).
#pragma once

#include <cinttypes>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/empty_sequences.h"
#include "core/problem.h"
#include "core/status.h"

namespace gdn {

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char *name() const = 0;

    // Backend-specific limits (types, head sizes) on top of the common validation:
    // GDN_ERROR_TYPE or GDN_ERROR_UNSUPPORTED naming the limit, or success.
    virtual Status supports(const Dims &dims, bool backward) const = 0;

    // Copies a validated index tensor (cu_seqlens or state_indices: I32 or I64, ne[0] entries) to
    // the host as int64: its values are checked before the call runs. Host memory by default
    // (core/sequences.h).
    virtual Status read_offsets(const gdn_tensor &indices, std::vector<int64_t> &values);

    // One state of an empty sequence (core/empty_sequences.h), after the call's other sequences
    // ran. Host memory by default.
    virtual Status copy_state(const StateCopy &copy);

    virtual Status forward(const ForwardArgs &args) = 0;
    virtual Status backward(const BackwardArgs &args) = 0;

    // Share `ith` of `nth` of a call, on the calling thread (gdn_forward_share). A backend that
    // cannot split its work runs the whole call in share 0; the cpu backend splits it statically
    // by work unit, with per-thread scratch, so shares of any calls may run concurrently.
    virtual Status forward_share(const ForwardArgs &args, int ith, int) { return ith == 0 ? forward(args) : Status{}; }
    virtual Status backward_share(const BackwardArgs &args, int ith, int) { return ith == 0 ? backward(args) : Status{}; }

    // Workspace bytes held for (or needed by) the last call.
    virtual uint64_t workspace_bytes() const { return 0; }

    // Frees the workspace the backend keeps between calls (the next call allocates it again).
    virtual void release_workspace() {}
};

// A host backend's scratch for one call (per worker thread, where each has its own) stays under
// 2^40 bytes: more is no machine's, and is refused before anything is sized. `elements` of
// `element_bytes` each, or negative where their count overflowed; `what` names the scratch
// ("the ref backend's workspace").
inline Status refuse_past_host_scratch(const Dims &d, int64_t elements, int64_t element_bytes, const char *what) {
    constexpr int64_t kMaxHostScratchBytes = int64_t{1} << 40;
    if (elements >= 0 && elements <= kMaxHostScratchBytes / element_bytes) return {};
    return fail(GDN_ERROR_UNSUPPORTED,
                "%s for Sk = %" PRId64 ", Sv = %" PRId64 ", T = %" PRId64 " and %" PRId64
                " value heads per key head would exceed 2^40 bytes",
                what, d.Sk, d.Sv, d.T, d.value_heads_per_key_head() * d.sequences_per_qk_sequence());
}

// Factories. Each returns a status with a message when the backend cannot start here.
Status make_ref_backend(const gdn_context_params &params, std::unique_ptr<Backend> &out);
Status make_cpu_backend(const gdn_context_params &params, std::unique_ptr<Backend> &out);
Status make_cuda_backend(const gdn_context_params &params, std::unique_ptr<Backend> &out);

}  // namespace gdn
