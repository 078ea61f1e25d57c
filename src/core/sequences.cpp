#include "core/sequences.h"

#include <cstring>

#include "core/backend.h"

namespace gdn {
namespace {

struct Span {
    int64_t begin, length, index, count;  // tokens [begin, begin + length); sequence index of count
};

Span span_of(const std::vector<int64_t> &offsets, int64_t n) {
    return {offsets[n], offsets[n + 1] - offsets[n], n, static_cast<int64_t>(offsets.size()) - 1};
}

// Tokens of the sequence: the packed stream has ne[3] = 1.
const gdn_tensor *token_view(const gdn_tensor *packed, const Span &s, gdn_tensor &view) {
    if (packed == nullptr) return nullptr;
    view = *packed;
    view.data = static_cast<char *>(packed->data) + s.begin * packed->nb[2];
    view.ne[2] = s.length;
    return &view;
}

// The sequence's state: index n of dim 3.
const gdn_tensor *state_view(const gdn_tensor *packed, const Span &s, gdn_tensor &view) {
    if (packed == nullptr) return nullptr;
    view = *packed;
    view.data = static_cast<char *>(packed->data) + s.index * packed->nb[3];
    view.ne[3] = 1;
    return &view;
}

// The sequence's K snapshot slots: indices s*N + n of dim 3.
const gdn_tensor *slots_view(const gdn_tensor *packed, const Span &s, int64_t K, gdn_tensor &view) {
    if (packed == nullptr) return nullptr;
    view = *packed;
    view.data = static_cast<char *>(packed->data) + s.index * packed->nb[3];
    view.ne[3] = K;
    if (K > 1) view.nb[3] = packed->nb[3] * s.count;
    return &view;
}

Dims sequence_dims(const Dims &packed, const Span &s) {
    Dims d = packed;
    d.T = s.length;
    d.B = d.Bq = 1;
    d.N = 0;
    d.packed = false;
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

Status Backend::read_offsets(const gdn_tensor &cu_seqlens, std::vector<int64_t> &offsets) {
    read_host_offsets(cu_seqlens, offsets);
    return {};
}

SequenceForward::SequenceForward(const ForwardArgs &a, int64_t n) {
    const Span s = span_of(a.offsets, n);
    args_.dims = sequence_dims(a.dims, s);
    args_.q = token_view(a.q, s, q_);
    args_.k = token_view(a.k, s, k_);
    args_.v = token_view(a.v, s, v_);
    args_.g = token_view(a.g, s, g_);
    args_.beta = token_view(a.beta, s, beta_);
    args_.s0 = state_view(a.s0, s, s0_);
    args_.out = token_view(a.out, s, out_);
    args_.states = slots_view(a.states, s, a.dims.K, states_);
}

SequenceBackward::SequenceBackward(const BackwardArgs &a, int64_t n) {
    const Span s = span_of(a.offsets, n);
    args_.dims = sequence_dims(a.dims, s);
    args_.q = token_view(a.q, s, q_);
    args_.k = token_view(a.k, s, k_);
    args_.v = token_view(a.v, s, v_);
    args_.g = token_view(a.g, s, g_);
    args_.beta = token_view(a.beta, s, beta_);
    args_.s0 = state_view(a.s0, s, s0_);
    args_.d_out = token_view(a.d_out, s, d_out_);
    args_.d_states = slots_view(a.d_states, s, a.dims.K, d_states_);
    args_.dq = token_view(a.dq, s, dq_);
    args_.dk = token_view(a.dk, s, dk_);
    args_.dv = token_view(a.dv, s, dv_);
    args_.dg = token_view(a.dg, s, dg_);
    args_.dbeta = token_view(a.dbeta, s, dbeta_);
    args_.ds0 = state_view(a.ds0, s, ds0_);
}

std::vector<const ForwardArgs *> split_sequences(const ForwardArgs &packed, std::deque<SequenceForward> &storage) {
    storage.clear();
    if (!packed.dims.packed) return {&packed};
    std::vector<const ForwardArgs *> calls;
    calls.reserve(static_cast<size_t>(packed.dims.N));
    for (int64_t n = 0; n < packed.dims.N; ++n)
        if (packed.offsets[n + 1] > packed.offsets[n]) calls.push_back(&storage.emplace_back(packed, n).args());
    return calls;
}

std::vector<const BackwardArgs *> split_sequences(const BackwardArgs &packed, std::deque<SequenceBackward> &storage) {
    storage.clear();
    if (!packed.dims.packed) return {&packed};
    std::vector<const BackwardArgs *> calls;
    calls.reserve(static_cast<size_t>(packed.dims.N));
    for (int64_t n = 0; n < packed.dims.N; ++n)
        if (packed.offsets[n + 1] > packed.offsets[n]) calls.push_back(&storage.emplace_back(packed, n).args());
    return calls;
}

Dims longest(const std::vector<const ForwardArgs *> &calls) { return longest_of(calls); }
Dims longest(const std::vector<const BackwardArgs *> &calls) { return longest_of(calls); }

}  // namespace gdn
