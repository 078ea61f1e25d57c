// The per-token forward for decoding-size inputs, vectorised: SPEC section 2 one token at a
// time, directly on the state's memory layout (column j = value channel, contiguous over the key
// index i), so each step is two passes of dot products and axpys over the Sv columns. The same
// recurrence as src/math/token_step.h (which ref runs in double); this one exists because the
// float per-token path is what decoding runs, and scalar reductions there cost 4-8x.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.h"

namespace gdn::cpu {

struct TokenForwardScratch {
    std::vector<float> state, decay, o;
    void resize(const Dims &d) {
        state.resize(d.Sk * d.Sv);
        decay.resize(d.Sk);
        o.resize(d.Sv);
    }
    uint64_t bytes() const { return sizeof(float) * (state.size() + decay.size() + o.size()); }
};

// Unit (b, h) over all T tokens: its rows of out and its snapshot slots.
void token_forward_unit(const ForwardArgs &a, int64_t b, int64_t h, TokenForwardScratch &w);

}  // namespace gdn::cpu
