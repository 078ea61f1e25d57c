// Sequences with no tokens (docs/SPEC.md section 2): a call with T = 0, or a packed sequence of
// length 0. There is nothing to compute for them; the forward's final state (snapshot slot 0) is
// the initial state, and the backward's initial-state gradient is the final state's gradient.
// The C API runs the backend on the sequences that have tokens and then moves these states with
// Backend::copy_state, so no backend needs a path for empty sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.h"

namespace gdn {

// One state of one sequence, [Sk, Sv, Hv, 1]: dst <- src, or dst <- 0 when src is absent.
struct StateCopy {
    gdn_tensor src;  // data == nullptr: zero
    gdn_tensor dst;
};

// Sequences of the call that have at least one token: 0 means the backend has nothing to do.
int64_t sequences_with_tokens(const Dims &d, const std::vector<int64_t> &offsets);

// The state moves of the call's empty sequences: states slot 0 <- s0 (forward), ds0 <- d_states
// slot 0 (backward). Empty when the output is not wanted or every sequence has tokens.
std::vector<StateCopy> empty_sequence_copies(const ForwardArgs &a);
std::vector<StateCopy> empty_sequence_copies(const BackwardArgs &a);

// Whether two state views keep the same dimension contiguous (both key-major or both value-major;
// a state with Sk = 1 or Sv = 1 counts as key-major when nb[0] is the element size).
bool same_layout(const gdn_tensor &a, const gdn_tensor &b);

// The host implementation of Backend::copy_state: strided rows, memcpy or zero fill; element by
// element between layouts.
void copy_host_state(const StateCopy &c);

}  // namespace gdn
