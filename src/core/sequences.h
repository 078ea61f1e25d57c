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
class SequenceForward {
public:
    SequenceForward(const ForwardArgs &packed, int64_t n);
    SequenceForward(const SequenceForward &) = delete;
    SequenceForward &operator=(const SequenceForward &) = delete;
    const ForwardArgs &args() const { return args_; }

private:
    gdn_tensor q_, k_, v_, g_, beta_, s0_, out_, states_;
    ForwardArgs args_;
};

class SequenceBackward {
public:
    SequenceBackward(const BackwardArgs &packed, int64_t n);
    SequenceBackward(const SequenceBackward &) = delete;
    SequenceBackward &operator=(const SequenceBackward &) = delete;
    const BackwardArgs &args() const { return args_; }

private:
    gdn_tensor q_, k_, v_, g_, beta_, s0_, d_out_, d_states_, dq_, dk_, dv_, dg_, dbeta_, ds0_;
    BackwardArgs args_;
};

// The calls a packed or pooled call is made of: its sequences that have tokens (api.cpp moves
// the states of the empty ones), or the call itself when it is neither. The list points into `storage`
// (and into `packed`), which must outlive it.
std::vector<const ForwardArgs *> split_sequences(const ForwardArgs &packed, std::deque<SequenceForward> &storage);
std::vector<const BackwardArgs *> split_sequences(const BackwardArgs &packed, std::deque<SequenceBackward> &storage);

// Dims of the longest call in the list (T = the largest T): what scratch is sized for.
Dims longest(const std::vector<const ForwardArgs *> &calls);
Dims longest(const std::vector<const BackwardArgs *> &calls);

}  // namespace gdn
