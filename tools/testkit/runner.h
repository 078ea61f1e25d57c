// Runs one case on one backend through the public C API, with the case's tensors poisoned,
// mirrored into the backend's memory, and checked for writes outside their elements.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "case.h"
#include "memory.h"
#include "tensor_set.h"

namespace gdn::testkit {

// A backend as the harness names it: REF, CPU, CUDA0 (CUDA device 0), ...
struct BackendSpec {
    std::string label;   // REF, CPU, CUDA0
    std::string name;    // the library's name: ref, cpu, cuda
    int device = 0;
};

// Every backend this build can start on this machine, REF first.
std::vector<BackendSpec> available_backends();
// Parses REF, CPU, CUDA<n> (case-insensitive); false for anything else.
bool parse_backend(const std::string &label, BackendSpec &out);

class BackendSession {
public:
    // Starts a context; check ok() and error().
    BackendSession(const BackendSpec &spec, int n_threads, int chunk_size = 0);
    ~BackendSession();
    BackendSession(const BackendSession &) = delete;
    BackendSession &operator=(const BackendSession &) = delete;

    bool ok() const { return ctx_ != nullptr && memory_ != nullptr; }
    const std::string &error() const { return error_; }
    const BackendSpec &spec() const { return spec_; }
    gdn_context *context() const { return ctx_; }
    Memory &memory() const { return *memory_; }

private:
    BackendSpec spec_;
    gdn_context *ctx_ = nullptr;
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

// Runs case c (its op) on the session with the given host inputs; outputs come back to the host.
RunResult run_case(const Case &c, TensorSet &inputs, BackendSession &session);

// Whether the session's backend takes the case with these host inputs (gdn_check_forward /
// gdn_check_backward: validation only, nothing is computed or dereferenced).
gdn_status check_case(const Case &c, TensorSet &inputs, BackendSession &session, std::string &why);

}  // namespace gdn::testkit
