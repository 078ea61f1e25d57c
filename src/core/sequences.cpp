#include "core/sequences.h"

#include <cstring>

#include "core/backend.h"

namespace gdn {
namespace {

// Where one sequence of the call lives in the call's tensors.
struct Span {
    int64_t begin, length;     // tokens [begin, begin + length) of dim 2
    int64_t batch, qk_batch;   // index of dim 3 of v-like and of q/k tensors (0 when packed)
    int64_t state;             // index of dim 3 of the state tensors; -1: none (a pool's negative index)
    int64_t slot_stride;       // snapshot slot s of the sequence at index s * slot_stride + state
};

// Sequence n of a packed call (by cu_seqlens) or of a pooled call (by batch index).
template <class Args>
Span span_of(const Args &a, int64_t n) {
    const Dims &d = a.dims;
    if (d.packed) return {a.offsets[n], a.offsets[n + 1] - a.offsets[n], 0, 0, state_index(a, n), d.N};
    return {0, d.T, n, d.qk_sequence(n), state_index(a, n), d.B};
}

bool has_tokens(const Span &s) { return s.length > 0; }

// The sequence's tokens of a q/k (qk = true) or v-like tensor.
const gdn_tensor *token_view(const gdn_tensor *whole, const Span &s, bool qk, gdn_tensor &view) {
    if (whole == nullptr) return nullptr;
    view = *whole;
    view.data = static_cast<char *>(whole->data) + s.begin * whole->nb[2] + (qk ? s.qk_batch : s.batch) * whole->nb[3];
    view.ne[2] = s.length;
    view.ne[3] = 1;
    return &view;
}

// The sequence's state (or its pool slot).
const gdn_tensor *state_view(const gdn_tensor *whole, const Span &s, gdn_tensor &view) {
    if (whole == nullptr || s.state < 0) return nullptr;
    view = *whole;
    view.data = static_cast<char *>(whole->data) + s.state * whole->nb[3];
    view.ne[3] = 1;
    return &view;
}

// The sequence's K snapshot slots: indices s * slot_stride + state of dim 3.
const gdn_tensor *slots_view(const gdn_tensor *whole, const Span &s, int64_t K, gdn_tensor &view) {
    if (whole == nullptr || s.state < 0) return nullptr;
    view = *whole;
    view.data = static_cast<char *>(whole->data) + s.state * whole->nb[3];
    view.ne[3] = K;
    if (K > 1) view.nb[3] = whole->nb[3] * s.slot_stride;
    return &view;
}

Dims sequence_dims(const Dims &whole, const Span &s) {
    Dims d = whole;
    d.T = s.length;
    d.B = d.Bq = 1;
    d.N = 0;
    d.packed = false;
    d.pooled = false;
    d.slots = 0;
    return d;
}

template <class Args>
Dims longest_of(const std::vector<const Args *> &calls) {
    Dims d = calls.front()->dims;
    for (const Args *a : calls)
        if (a->dims.T > d.T) d = a->dims;
    return d;
}

}  // namespace

void read_host_offsets(const gdn_tensor &t, std::vector<int64_t> &offsets) {
    offsets.resize(static_cast<size_t>(t.ne[0]));
    for (size_t i = 0; i < offsets.size(); ++i) {
        const char *p = static_cast<const char *>(t.data) + static_cast<int64_t>(i) * t.nb[0];
        if (t.type == GDN_TYPE_I32) {
            int32_t v;
            std::memcpy(&v, p, sizeof v);
            offsets[i] = v;
        } else {
            std::memcpy(&offsets[i], p, sizeof(int64_t));
        }
    }
}

Status Backend::read_offsets(const gdn_tensor &indices, std::vector<int64_t> &values) {
    read_host_offsets(indices, values);
    return {};
}

void SequenceForward::set(const ForwardArgs &a, int64_t n) {
    const Span s = span_of(a, n);
    args_.dims = sequence_dims(a.dims, s);
    args_.q = token_view(a.q, s, true, q_);
    args_.k = token_view(a.k, s, true, k_);
    args_.v = token_view(a.v, s, false, v_);
    args_.g = token_view(a.g, s, false, g_);
    args_.beta = token_view(a.beta, s, false, beta_);
    args_.s0 = state_view(a.s0, s, s0_);
    args_.out = token_view(a.out, s, false, out_);
    args_.states = slots_view(a.states, s, a.dims.K, states_);
}

void SequenceBackward::set(const BackwardArgs &a, int64_t n) {
    const Span s = span_of(a, n);
    args_.dims = sequence_dims(a.dims, s);
    args_.q = token_view(a.q, s, true, q_);
    args_.k = token_view(a.k, s, true, k_);
    args_.v = token_view(a.v, s, false, v_);
    args_.g = token_view(a.g, s, false, g_);
    args_.beta = token_view(a.beta, s, false, beta_);
    args_.s0 = state_view(a.s0, s, s0_);
    args_.d_out = token_view(a.d_out, s, false, d_out_);
    args_.d_states = slots_view(a.d_states, s, a.dims.K, d_states_);
    args_.dq = token_view(a.dq, s, true, dq_);
    args_.dk = token_view(a.dk, s, true, dk_);
    args_.dv = token_view(a.dv, s, false, dv_);
    args_.dg = token_view(a.dg, s, false, dg_);
    args_.dbeta = token_view(a.dbeta, s, false, dbeta_);
    args_.ds0 = state_view(a.ds0, s, ds0_);
}

template <class Args, class Sequence>
const std::vector<const Args *> &SequenceSplit<Args, Sequence>::split(const Args &whole) {
    calls_.clear();
    const Dims &d = whole.dims;
    if (!d.packed && !d.pooled) {
        calls_.push_back(&whole);
        return calls_;
    }
    calls_.reserve(static_cast<size_t>(d.state_sequences()));
    for (int64_t n = 0; n < d.state_sequences(); ++n) {
        if (!has_tokens(span_of(whole, n))) continue;
        if (calls_.size() == views_.size()) views_.emplace_back();
        Sequence &view = views_[calls_.size()];
        view.set(whole, n);
        calls_.push_back(&view.args());
    }
    return calls_;
}

template class SequenceSplit<ForwardArgs, SequenceForward>;
template class SequenceSplit<BackwardArgs, SequenceBackward>;

Dims longest(const std::vector<const ForwardArgs *> &calls) { return longest_of(calls); }
Dims longest(const std::vector<const BackwardArgs *> &calls) { return longest_of(calls); }

}  // namespace gdn
