#include "pool_gather.h"


#include "problem_data.h"

namespace gdn::testkit {
namespace {

int64_t state_elements(const Case &c) { return c.shape.Sk * c.shape.Sv * c.shape.Hv; }

// Appends state `index` of `values` (a state-shaped tensor read in ne order) to `to`.
void append_state(const Case &c, const std::vector<double> &values, int64_t index, std::vector<double> &to) {
    const auto first = values.begin() + index * state_elements(c);
    to.insert(to.end(), first, first + state_elements(c));
}

// A state-shaped input of batch_case(c), gathered from the pool `name` of c's inputs.
std::vector<double> gathered(const Case &c, const TensorSet &pooled, const std::string &name) {
    const std::vector<double> pool = pooled.read(name);
    std::vector<double> out;
    for (int64_t n = 0; n < c.state_sequences(); ++n) {
        if (c.slot_of(n) >= 0) append_state(c, pool, c.slot_of(n), out);
        else out.resize(out.size() + static_cast<size_t>(state_elements(c)), 0.0);
    }
    return out;
}

}  // namespace

Case batch_case(const Case &c) {
    Case batch = c;
    batch.pool = StatePool{};
    batch.in_place = false;
    return batch;
}

TensorSet gather_inputs(const Case &c, const TensorSet &pooled_inputs) {
    const Case batch = batch_case(c);
    TensorSet inputs = make_inputs(batch, pooled_inputs.type(), 0);  // the layout; the values follow
    for (const auto &[name, view] : pooled_inputs.views()) {
        if (name == "state" || name == "d_states") inputs.write(name, gathered(c, pooled_inputs, name));
        else inputs.write(name, pooled_inputs.read(name));
    }
    return inputs;
}

OutputPair pooled_and_batch(const Case &c, const std::string &name, const TensorSet &pooled_outputs,
                            const TensorSet &batch_outputs) {
    OutputPair pair;
    if (name != "states" && name != "ds0") return {pooled_outputs.read(name), batch_outputs.read(name)};
    const std::vector<double> pool = pooled_outputs.read(name), batch = batch_outputs.read(name);
    for (int64_t n = 0; n < c.state_sequences(); ++n) {
        if (c.slot_of(n) < 0) continue;
        append_state(c, pool, c.slot_of(n), pair.pooled);
        append_state(c, batch, n, pair.batch);
    }
    return pair;
}

}  // namespace gdn::testkit
