// Validation shared by every backend (SPEC section 6): every rule of SPEC sections 3 and 4 is
// checked before any backend runs, so that a failed call has written nothing.
#pragma once

#include <vector>

#include "core/problem.h"
#include "core/status.h"

namespace gdn {

Status validate_forward(const gdn_problem *p, const gdn_tensor *out, const gdn_tensor *states, ForwardArgs &args);

Status validate_backward(const gdn_problem *p, const gdn_tensor *d_out, const gdn_tensor *d_states,
                         const gdn_grads *grads, BackwardArgs &args);

// The values of cu_seqlens (read to the host by the backend): 0, strictly increasing, T last.
Status validate_offsets(const Dims &dims, const std::vector<int64_t> &offsets);

}  // namespace gdn
