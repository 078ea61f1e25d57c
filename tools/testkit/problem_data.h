// The data of one harness case: inputs filled from the case's seed, output sets laid out as
// the case says (contiguous, or views into a packed conv buffer and padded strides), and the
// gdn_problem / gdn_grads that point at them in some memory.
#pragma once

#include <cstdint>

#include "case.h"
#include "tensor_set.h"

namespace gdn::testkit {

// Inputs: q, k, v, g, beta, state (when the case has s0), d_out and d_states (backward cases).
// `type` GDN_TYPE_F64: every tensor F64 (the oracle's twin of the case); GDN_TYPE_F32: each
// tensor in the type the case gives it (c.types: all F32 unless the case says type=bf16 ...;
// the states F32). Values are drawn in double and rounded through F32, then to the case's
// BF16 or F16 where it has them, whatever `type` is, so that every set of one case and seed
// holds exactly the same numbers.
TensorSet make_inputs(const Case &c, gdn_type type, uint64_t seed);

// Outputs: out, states (forward; not when in place: the call writes the inputs' state); dq, dk,
// dv, dg, dbeta, ds0 (backward); `type` as for make_inputs.
TensorSet make_outputs(const Case &c, gdn_type type);

// After an in-place forward: the final states (the inputs' state, as the call left it) copied
// into the outputs as "states", laid out as the state is, so that they compare like any output.
void keep_final_states(const Case &c, const TensorSet &inputs_after, TensorSet &outputs);

gdn_problem problem_of(const Case &c, const Mirror &inputs);
gdn_grads grads_of(const Mirror &outputs);

}  // namespace gdn::testkit
