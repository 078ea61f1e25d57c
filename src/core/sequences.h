// Packed variable-length sequences (docs/VARLEN.md) and state pools (SPEC section 3.2): one call
// on N packed sequences, or on B sequences whose states sit in pool slots, seen as one call per
// sequence on strided views. Sequence n is tokens [offsets[n], offsets[n+1]) of q/k/v/g/beta/out
// and their gradients (packed) or index n of their dim 3 (pooled, unpacked); its state is index
// n of the state tensors, or its pool slot (absent for a negative index), and its snapshot slots
// indices s*N + n. Its Dims have B = Bq = 1, N = 0, no pool and T = its length, so every driver
// that runs an unpacked call runs a sequence unchanged, and a packed or pooled call gives the
// same bits as the per-sequence calls.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/problem.h"

namespace gdn {

// Reads an index tensor (I32 or I64, host memory) as int64: what Backend::read_offsets does by default.
void read_host_offsets(const gdn_tensor &cu_seqlens, std::vector<int64_t> &offsets);

// The views of one sequence own the tensors the args point to: not copyable, not movable.
// set() points them at sequence n of a call (again for each call: a split keeps its views).
class SequenceForward {
public:
    SequenceForward() = default;
    void set(const ForwardArgs &packed, int64_t n);
    SequenceForward(const SequenceForward &) = delete;
    SequenceForward &operator=(const SequenceForward &) = delete;
    const ForwardArgs &args() const { return args_; }

private:
    gdn_tensor q_, k_, v_, g_, beta_, s0_, out_, states_;
    ForwardArgs args_;
};

class SequenceBackward {
public:
    SequenceBackward() = default;
    void set(const BackwardArgs &packed, int64_t n);
    SequenceBackward(const SequenceBackward &) = delete;
    SequenceBackward &operator=(const SequenceBackward &) = delete;
    const BackwardArgs &args() const { return args_; }

private:
    gdn_tensor q_, k_, v_, g_, beta_, s0_, d_out_, d_states_, dq_, dk_, dv_, dg_, dbeta_, ds0_;
    BackwardArgs args_;
};

// The calls a packed or pooled call is made of: its sequences that have tokens (api.cpp moves
// the states of the empty ones), or the call itself when it is neither. A split keeps its views
// and its list for the next call, so splitting a call of no more sequences than an earlier one
// allocates nothing (decoding splits a pooled call per token and layer).
template <class Args, class Sequence>
class SequenceSplit {
public:
    // The list points into this split and into `whole`: valid until the next split, while
    // `whole` lives.
    const std::vector<const Args *> &split(const Args &whole);

private:
    std::deque<Sequence> views_;  // never shrinks: the first calls_.size() views are this call's
    std::vector<const Args *> calls_;
};
using ForwardSequences = SequenceSplit<ForwardArgs, SequenceForward>;
using BackwardSequences = SequenceSplit<BackwardArgs, SequenceBackward>;

// Dims of the longest call in the list (T = the largest T): what scratch is sized for.
Dims longest(const std::vector<const ForwardArgs *> &calls);
Dims longest(const std::vector<const BackwardArgs *> &calls);

}  // namespace gdn
