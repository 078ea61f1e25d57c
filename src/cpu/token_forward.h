// The per-token forward for decoding-size inputs (and chunk_size = 1): SPEC section 2 one token
// at a time, directly on the state's memory layout, in blocks of tokens that each column of the
// state goes through while it sits in L1 (cpu/token_block.h). Decoding (T = 1) reads the initial
// state once and writes the final state once, with no copy in between.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "cpu/token_block.h"

namespace gdn::cpu {

struct TokenForwardScratch {
    std::vector<float> state;    // Sk x Sv in the kernel's layout: the state between blocks (T > one block),
                                 // or an initial state in the other layout
    std::vector<float> columns;  // the block's columns in flight (token_block's scratch)
    std::vector<float> k, q, decay, decayed_k;  // the block's tokens: padded rows of k, q, a, a o k
    std::vector<float> beta;
    std::vector<float> v_rows, out_rows;  // BF16/F16 v and out: the block's rows as floats (Sv each)
    std::vector<const float *> v;
    std::vector<float *> out;
    std::vector<StateLines> snapshot;
    void resize(const Dims &d);
    uint64_t bytes() const;
};

// A unit's initial state in memory, as the kernel of its layout reads it: the rows of a
// value-major state, the columns of a key-major one.
struct InitialState {
    StateLines lines;  // base nullptr: none (zero)
    bool rows = false;
};
InitialState token_forward_initial(const ForwardArgs &a, int64_t b, int64_t h);

// Unit (b, h) over all T tokens: its rows of out and its snapshot slots. `next`: the initial
// state of the unit the worker runs next (token_forward_initial), which the kernel asks of L2
// while its last pass runs when it is in the kernel's own layout (TokenBlock::ahead).
void token_forward_unit(const ForwardArgs &a, int64_t b, int64_t h, TokenForwardScratch &w, InitialState next = {});

}  // namespace gdn::cpu
