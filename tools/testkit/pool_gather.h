// A pooled call (state_indices) against the same call on a plain batch whose states were gathered
// from the pool's slots in sequence order, by the harness: what a caller without pools does, and
// what a pool must equal (SPEC section 2). Checked on each backend without REF.
#pragma once

#include <string>
#include <vector>

#include "case.h"
#include "tensor_set.h"

namespace gdn::testkit {

// Pooled case c without its pool: the states of its sequences one after another (B of them, or
// N packed), not in place.
Case batch_case(const Case &c);

// Inputs of batch_case(c): c's inputs, with state and d_states gathered from their slots
// (zeros for a sequence with a negative index: it starts from zero and its final state is
// nobody's, so nothing flows back from it).
TensorSet gather_inputs(const Case &c, const TensorSet &pooled_inputs);

// Output `name` of the pooled call and of the batch call, as two vectors in the batch's order:
// a state-shaped output (states, ds0) as the states of the sequences that have a slot, the
// others whole.
struct OutputPair {
    std::vector<double> pooled, batch;
};
OutputPair pooled_and_batch(const Case &c, const std::string &name, const TensorSet &pooled_outputs,
                            const TensorSet &batch_outputs);

}  // namespace gdn::testkit
