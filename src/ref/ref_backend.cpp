// The ref backend: the per-token recurrence of SPEC section 2 accumulating in double, one unit
// after another on the calling thread. It is the oracle the other backends are held against:
// clear before fast. Packed sequences (cu_seqlens) are walked one after another. It takes every
// element type of SPEC 3.1: each element is converted to double as it is read and each result
// rounded once to its tensor's type as it is written; it ignores gdn_problem.precision (the oracle
// is always exact).

#include <vector>

#include "core/backend.h"
#include "core/sequences.h"
#include "math/token_driver.h"

namespace gdn {
namespace {

class RefBackend final : public Backend {
public:
    const char *name() const override { return "ref"; }

    // Sizes whose workspace no machine has (or whose count overflows) are refused before
    // anything is allocated: the accumulators are doubles.
    Status supports(const Dims &d, bool backward) const override {
        return refuse_past_host_scratch(d, token::scratch_elements(d, backward), sizeof(double),
                                        "the ref backend's workspace");
    }

    Status forward(const ForwardArgs &a) override {
        return run_forward(a);
    }

    Status backward(const BackwardArgs &a) override {
        return run_backward(a);
    }

    uint64_t workspace_bytes() const override { return workspace_; }
    void release_workspace() override { workspace_ = 0; }  // each call's scratch is its own: nothing is kept

private:
    // Packed sequences run one after another, each as its own call on views (core/sequences.h).
    Status run_forward(const ForwardArgs &packed) {
        ForwardSequences sequences;
        const std::vector<const ForwardArgs *> &calls = sequences.split(packed);
        token::ForwardScratch<double> scratch;
        scratch.resize(packed.dims);  // allocate before anything is written
        workspace_ = sizeof(double) * (scratch.state.size() + scratch.o.size());
        for (const ForwardArgs *a : calls)
            for (int64_t b = 0; b < a->dims.B; ++b)
                for (int64_t h = 0; h < a->dims.Hv; ++h) token::forward_unit(*a, b, h, scratch);
        return {};
    }

    Status run_backward(const BackwardArgs &packed) {
        BackwardSequences sequences;
        const std::vector<const BackwardArgs *> &calls = sequences.split(packed);
        const Dims longest_call = longest(calls);
        token::BackwardScratch<double> scratch;
        scratch.resize(longest_call, token::default_segment(longest_call.T));  // fits every call's T
        workspace_ = scratch.bytes();
        for (const BackwardArgs *a : calls)
            for (int64_t bq = 0; bq < a->dims.Bq; ++bq)
                for (int64_t kh = 0; kh < a->dims.Hk; ++kh) token::backward_group(*a, bq, kh, scratch);
        return {};
    }

    uint64_t workspace_ = 0;
};

}  // namespace

Status make_ref_backend(const gdn_context_params &, std::unique_ptr<Backend> &out) {
    out = std::make_unique<RefBackend>();
    return {};
}

}  // namespace gdn
