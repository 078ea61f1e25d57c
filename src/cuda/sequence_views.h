// Packed sequences (cu_seqlens, docs/VARLEN.md) on the cuda backend: sequence n is walked by
// the kernels of an unpacked call (B = Bq = 1, T = its length) on views of the packed tensors:
// rows [cu[n], cu[n+1]) of the token tensors, index n of s0 / ds0, indices s*N + n of the
// snapshot tensors (a dim-3 stride N times the packed one). Host code, plain arithmetic on
// views: the backend and the emulation tests (tests/cuda/emulated_varlen_test.cpp) share it.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/device_views.h"

namespace gdn::cuda {

struct SequenceSpan {
    int64_t begin = 0, length = 0;  // tokens [begin, begin + length) of the packed stream
    int64_t index = 0, count = 1;   // sequence `index` of `count`
};

inline SequenceSpan sequence_span(const std::vector<int64_t> &offsets, int64_t n) {
    return {offsets[n], offsets[n + 1] - offsets[n], n, static_cast<int64_t>(offsets.size()) - 1};
}

inline View token_rows(View v, const SequenceSpan &s) {
    if (v.present()) v.data += s.begin * v.s2;
    return v;
}

inline View state_of(View v, const SequenceSpan &s) {
    if (v.present()) v.data += s.index * v.s3;
    return v;
}

inline View slots_of(View v, const SequenceSpan &s) {
    if (v.present()) {
        v.data += s.index * v.s3;
        v.s3 *= s.count;
    }
    return v;
}

inline Sizes sequence_sizes(Sizes n, const SequenceSpan &s) {
    n.T = s.length;
    n.B = n.Bq = 1;
    return n;
}

inline ForwardViews sequence_views(const ForwardViews &w, const SequenceSpan &s) {
    ForwardViews v = w;
    v.q = token_rows(w.q, s), v.k = token_rows(w.k, s), v.v = token_rows(w.v, s);
    v.g = token_rows(w.g, s), v.beta = token_rows(w.beta, s);
    v.s0 = state_of(w.s0, s);
    v.out = token_rows(w.out, s);
    v.states = slots_of(w.states, s);
    return v;
}

inline BackwardViews sequence_views(const BackwardViews &w, const SequenceSpan &s) {
    BackwardViews v = w;
    v.q = token_rows(w.q, s), v.k = token_rows(w.k, s), v.v = token_rows(w.v, s);
    v.g = token_rows(w.g, s), v.beta = token_rows(w.beta, s);
    v.s0 = state_of(w.s0, s);
    v.d_out = token_rows(w.d_out, s);
    v.d_states = slots_of(w.d_states, s);
    v.dq = token_rows(w.dq, s), v.dk = token_rows(w.dk, s), v.dv = token_rows(w.dv, s);
    v.dg = token_rows(w.dg, s), v.dbeta = token_rows(w.dbeta, s);
    v.ds0 = state_of(w.ds0, s);
    return v;
}

// The calls a packed call is made of, in order: (views, sizes) per sequence with tokens, or the
// call itself when offsets is empty.
template <class Views>
struct SequenceCall {
    Views views;
    Sizes sizes;
};

template <class Views>
std::vector<SequenceCall<Views>> sequence_calls(const Views &w, const Sizes &n, const std::vector<int64_t> &offsets) {
    if (offsets.empty()) return {{w, n}};
    std::vector<SequenceCall<Views>> calls;
    calls.reserve(offsets.size() - 1);
    for (int64_t i = 0; i + 1 < static_cast<int64_t>(offsets.size()); ++i) {
        const SequenceSpan s = sequence_span(offsets, i);
        if (s.length == 0) continue;  // an empty sequence's state is moved by the C API (core/empty_sequences.h)
        calls.push_back({sequence_views(w, s), sequence_sizes(n, s)});
    }
    return calls;
}

}  // namespace gdn::cuda
