#include "runner.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "problem_data.h"
#include "sequence_views.h"

namespace gdn::testkit {

AfterCallHook after_call_hook = nullptr;

std::vector<BackendSpec> available_backends() {
    std::vector<BackendSpec> out = {{"REF", "ref", 0}};
    if (gdn_backend_available("cpu")) out.push_back({"CPU", "cpu", 0});
    if (ggml_runner_built()) out.push_back({"GGML", "ggml", 0});
    std::string why;
    for (int device = 0; device < 16; ++device) {
        if (!make_cuda_memory(device, why)) break;
        out.push_back({"CUDA" + std::to_string(device), "cuda", device});
    }
    return out;
}

bool parse_backend(const std::string &label, BackendSpec &out) {
    std::string up = label;
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (up == "REF") out = {"REF", "ref", 0};
    else if (up == "CPU") out = {"CPU", "cpu", 0};
    else if (up == "GGML") out = {"GGML", "ggml", 0};
    else if (up == "GGML-GDN") out = {"GGML-GDN", "ggml-gdn", 0};
    else if (up.rfind("CUDA", 0) == 0) {
        const std::string digits = up.substr(4);
        if (!digits.empty() && !std::all_of(digits.begin(), digits.end(), ::isdigit)) return false;
        const int device = digits.empty() ? 0 : std::stoi(digits);
        out = {"CUDA" + std::to_string(device), "cuda", device};
    } else return false;
    return true;
}

BackendSession::BackendSession(const BackendSpec &spec, int n_threads, int chunk_size) : spec_(spec) {
    if (spec.name == "cuda") {
        owned_memory_ = make_cuda_memory(spec.device, error_);
        if (!owned_memory_) return;
        memory_ = owned_memory_.get();
    } else {
        memory_ = &host_memory();
    }
    if (spec.is_ggml()) {
        ggml_ = make_ggml_runner(spec.name == "ggml" ? GgmlOp::Upstream : GgmlOp::Gdn, n_threads, error_);
        return;
    }
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = n_threads;
    params.device = spec.device;
    params.chunk_size = chunk_size;
    if (gdn_context_create(spec.name.c_str(), &params, &ctx_) != GDN_OK) error_ = gdn_last_create_error();
}

BackendSession::~BackendSession() { gdn_context_free(ctx_); }

gdn_status BackendSession::forward(const gdn_problem &p, const gdn_tensor *out, const gdn_tensor *states, bool compute) {
    if (ggml_) return compute ? ggml_->forward(p, out, states, ggml_error_) : ggml_->check(p, out, states, ggml_error_);
    return compute ? gdn_forward(ctx_, &p, out, states) : gdn_check_forward(ctx_, &p, out, states);
}

gdn_status BackendSession::backward(const gdn_problem &p, const gdn_tensor *d_out, const gdn_tensor *d_states,
                                    const gdn_grads *grads, bool compute) {
    if (ggml_) {
        ggml_error_ = spec_.name == "ggml" ? "ggml has no backward of the gated delta net (upstream has the forward only)"
                                           : "the harness runs GGML-GDN's forward only (tests/ggml holds gdn_ggml_gated_delta_net_back "
                                             "against the C API)";
        return GDN_ERROR_UNSUPPORTED;
    }
    return compute ? gdn_backward(ctx_, &p, d_out, d_states, grads) : gdn_check_backward(ctx_, &p, d_out, d_states, grads);
}

std::string BackendSession::last_error() const { return ggml_ ? ggml_error_ : gdn_last_error(ctx_); }

namespace {

gdn_status call(const Case &c, const CallTensors &t, BackendSession &session, bool compute) {
    if (c.op == Op::Forward) return session.forward(t.problem, &t.out, &t.states, compute);
    return session.backward(t.problem, &t.d_out, &t.d_states, &t.grads, compute);
}

// The case's call, or (calls = SequencesApart) its sequences one call each, stopping at the
// first that fails.
gdn_status run_calls(const Case &c, const CallTensors &t, BackendSession &session, Calls calls) {
    if (calls == Calls::AsGiven || c.cu_seqlens.empty()) return call(c, t, session, true);
    for (int64_t n = 0; n < c.sequences(); ++n)
        if (const gdn_status s = call(c, sequence_views(c, t, n), session, true); s != GDN_OK) return s;
    return GDN_OK;
}

}  // namespace

namespace {

// The bits of a call's inputs as given (all but the state an in-place call updates), as a hash
// of each (no copy: the inputs of a 27B-shape call are hundreds of MiB): a backend reads them and
// must leave them as they were (SPEC 3: inputs are read only).
class InputBits {
public:
    InputBits(const TensorSet &inputs, bool in_place) {
        for (const auto &[name, view] : inputs.views())
            if (!(in_place && name == "state")) given_.emplace_back(name, inputs.bits_hash(name));
    }
    // "" when every input holds its bits (NaN and infinities included), else which was written.
    std::string written_in(const TensorSet &inputs) const {
        for (const auto &[name, hash] : given_)
            if (inputs.bits_hash(name) != hash) return "input " + name + " was written by the call";
        return "";
    }

private:
    std::vector<std::pair<std::string, uint64_t>> given_;
};

}  // namespace

RunResult run_case(const Case &c, TensorSet &inputs, BackendSession &session, Calls calls) {
    RunResult r;
    try {
        // In place, the call writes its final states into the inputs' state: it runs on a copy,
        // so that the inputs stay what every backend and every call is given.
        std::optional<TensorSet> copy;
        if (c.in_place) copy = inputs;
        TensorSet &call_inputs = copy ? *copy : inputs;
        r.outputs = make_outputs(c, inputs.type());
        const InputBits given(call_inputs, c.in_place);
        Mirror in(call_inputs, session.memory()), out(r.outputs, session.memory());
        in.upload();
        out.upload();
        r.status = run_calls(c, call_tensors(c, in, out), session, calls);
        if (after_call_hook) after_call_hook(c, session, out.tensor(c.op == Op::Forward ? "out" : "dv"), in.tensor("k"));
        if (r.status != GDN_OK) r.error = session.last_error();
        out.download();
        in.download();
        r.stray_write = r.outputs.changed_outside_views();
        if (r.stray_write.empty()) r.stray_write = call_inputs.changed_outside_views();
        if (r.stray_write.empty()) r.stray_write = given.written_in(call_inputs);
        if (c.in_place && c.op == Op::Forward) keep_final_states(c, call_inputs, r.outputs);
    } catch (const std::exception &e) {
        r.status = GDN_ERROR_BACKEND;
        r.error = std::string("harness: ") + e.what();
    }
    return r;
}

Case as_computed(const Case &c, TensorSet &inputs, BackendSession &session, const TensorSet &outputs) {
    if (c.precision != GDN_PRECISION_BF16) return c;
    Case exact = c;
    exact.precision = GDN_PRECISION_EXACT;
    const RunResult r = run_case(exact, inputs, session);
    if (r.status != GDN_OK || !r.stray_write.empty()) return c;
    for (const auto &[name, view] : outputs.views())
        if (outputs.bits_hash(name) != r.outputs.bits_hash(name)) return c;
    return exact;
}

gdn_status check_case(const Case &c, TensorSet &inputs, BackendSession &session, std::string &why) {
    TensorSet outputs = make_outputs(c, inputs.type());
    Mirror in(inputs, host_memory()), out(outputs, host_memory());
    const gdn_status s = call(c, call_tensors(c, in, out), session, false);
    why = s == GDN_OK ? "" : session.last_error();
    return s;
}

}  // namespace gdn::testkit
