// The tensors of one call, and the same call cut into its packed sequences: docs/VARLEN.md's
// layout as the harness reads it (sequence n = token rows [cu[n], cu[n+1]), state index n,
// snapshot slot s at index s*N + n), written independently of the library's own splitting
// (src/core/sequences.cpp), so that a packed call can be checked against its sequences called
// one by one.
#pragma once

#include <cstdint>

#include "case.h"
#include "gdn/gdn.h"
#include "tensor_set.h"

namespace gdn::testkit {

// Absent tensors have data == NULL; the forward uses problem, out, states; the backward
// problem, d_out, d_states and grads.
struct CallTensors {
    gdn_problem problem{};
    gdn_tensor out{}, states{}, d_out{}, d_states{};
    gdn_grads grads{};
};

// The tensors of case c's call (its op's) in these mirrors of its inputs and outputs.
CallTensors call_tensors(const Case &c, const Mirror &inputs, const Mirror &outputs);

// Sequence n of packed case c (c.cu_seqlens) as an unpacked call (B = Bq = 1, no cu_seqlens)
// on views of the packed call's tensors; with a pool, on its slot's states (none for a
// negative index) and no state_indices.
CallTensors sequence_views(const Case &c, const CallTensors &packed, int64_t n);

}  // namespace gdn::testkit
