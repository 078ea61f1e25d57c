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

// The values of cu_seqlens (read to the host by the backend): 0 first, non-decreasing, T last.
Status validate_offsets(const Dims &dims, const std::vector<int64_t> &offsets);

// For a backend that takes only one element type throughout (cpu and cuda: F32): GDN_ERROR_TYPE
// naming the tensors of another type, or success.
Status require_all_of_type(const Dims &dims, gdn_type type, const char *backend);

// The values of state_indices (read to the host by the backend): each below the pool's slot
// count, the non-negative ones distinct. Negative indices become -1.
Status validate_state_slots(const Dims &dims, std::vector<int64_t> &slots);

}  // namespace gdn
