// Runs one case on one backend through the public C API, with the case's tensors poisoned,
// mirrored into the backend's memory, and checked for writes outside their elements.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "case.h"
#include "ggml_runner.h"
#include "memory.h"
#include "tensor_set.h"

namespace gdn::testkit {

// A backend as the harness names it: REF, CPU, CUDA0 (CUDA device 0), ... and, with the ggml
// integration, GGML (ggml's own CPU forward, ggml_gated_delta_net) and GGML-GDN (gdn's drop-in
// gdn_ggml_gated_delta_net in a ggml graph): forward only, run on ggml's thread pool.
struct BackendSpec {
    std::string label;   // REF, CPU, CUDA0, GGML, GGML-GDN
    std::string name;    // the library's name: ref, cpu, cuda; ggml, ggml-gdn
    int device = 0;
    bool is_ggml() const { return name.rfind("ggml", 0) == 0; }
};

// Every backend this build can start on this machine, REF first (GGML but not GGML-GDN).
std::vector<BackendSpec> available_backends();
// Parses REF, CPU, CUDA<n>, GGML, GGML-GDN (case-insensitive); false for anything else.
bool parse_backend(const std::string &label, BackendSpec &out);

class BackendSession {
public:
    // Starts a context; check ok() and error().
    BackendSession(const BackendSpec &spec, int n_threads, int chunk_size = 0);
    ~BackendSession();
    BackendSession(const BackendSession &) = delete;
    BackendSession &operator=(const BackendSession &) = delete;

    bool ok() const { return (ctx_ != nullptr || ggml_ != nullptr) && memory_ != nullptr; }
    const std::string &error() const { return error_; }
    const BackendSpec &spec() const { return spec_; }
    gdn_context *context() const { return ctx_; }  // nullptr for GGML backends
    Memory &memory() const { return *memory_; }

    // The op on this backend (compute = false: the dry run), as the C API answers; GGML
    // backends take the forward only. last_error() after a failure.
    gdn_status forward(const gdn_problem &p, const gdn_tensor *out, const gdn_tensor *states, bool compute = true);
    gdn_status backward(const gdn_problem &p, const gdn_tensor *d_out, const gdn_tensor *d_states, const gdn_grads *grads,
                        bool compute = true);
    std::string last_error() const;
    uint64_t workspace_bytes() const { return ctx_ ? gdn_context_workspace_bytes(ctx_) : 0; }
    // Seconds of the last call spent in the op itself when the backend measures that apart from
    // its own copies (GGML: ggml_graph_compute without the copy out of ggml's packed result); 0 otherwise.
    // last_op_cpu_seconds: the process's CPU time over that same span.
    double last_op_seconds() const { return ggml_ ? ggml_->last_compute_seconds() : 0.0; }
    double last_op_cpu_seconds() const { return ggml_ ? ggml_->last_compute_cpu_seconds() : 0.0; }

private:
    BackendSpec spec_;
    gdn_context *ctx_ = nullptr;
    std::unique_ptr<GgmlRunner> ggml_;
    std::string ggml_error_;
    std::unique_ptr<Memory> owned_memory_;
    Memory *memory_ = nullptr;
    std::string error_;
};

struct RunResult {
    gdn_status status = GDN_OK;
    std::string error;          // gdn_last_error, or the harness's own failure
    std::string stray_write;    // a write outside the outputs' elements, "" when none
    TensorSet outputs{GDN_TYPE_F32};
};

// A planted fault for the harness's own tests (tests/harness: a crash or a stray write must be
// one failed case, and the run goes on): called by run_case right after the op returned, with
// the case's main output (out, or dv for the backward) and its input k, in the backend's memory.
// nullptr (the default) everywhere but in that test build.
using AfterCallHook = void (*)(const Case &c, const BackendSession &session, const gdn_tensor &main_output,
                               const gdn_tensor &key_input);
extern AfterCallHook after_call_hook;

// How a packed case (cu_seqlens) is called: as one call, or each of its sequences apart, as an
// unpacked call on views of the packed tensors (sequence_views.h), which must give what the
// packed call gives (docs/VARLEN.md). Unpacked cases are one call either way.
enum class Calls { AsGiven, SequencesApart };

// Runs case c (its op) on the session with the given host inputs; outputs come back to the host.
RunResult run_case(const Case &c, TensorSet &inputs, BackendSession &session, Calls calls = Calls::AsGiven);

// The case as the backend computed it, for its limits (thresholds.h): a precision=bf16 case
// whose every output has the bits of the same call at EXACT (a backend computes as EXACT where
// the host has no native bf16 products, SPEC 3.1) is that EXACT case, held to its limits rather
// than to the allowance for bf16 products; any other case as it is. Runs the EXACT call.
Case as_computed(const Case &c, TensorSet &inputs, BackendSession &session, const TensorSet &outputs);

// Whether the session's backend takes the case with these host inputs (gdn_check_forward /
// gdn_check_backward: validation only, nothing is computed or dereferenced).
gdn_status check_case(const Case &c, TensorSet &inputs, BackendSession &session, std::string &why);

}  // namespace gdn::testkit
