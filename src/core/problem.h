// The validated form of one call: sizes resolved once, absent tensors as nullptr.
// Backends receive these after validate.cpp has accepted every argument.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "gdn/gdn.h"

namespace gdn {

struct Dims {
    int64_t Sk = 0, Sv = 0;   // key and value head sizes
    int64_t Hk = 0, Hv = 0;   // key heads, value heads (Hv % Hk == 0)
    int64_t T = 0;            // tokens
    int64_t B = 0, Bq = 0;    // sequences, q/k sequences (B % Bq == 0)
    int64_t K = 1;            // state snapshots
    int64_t N = 0;            // packed sequences (cu_seqlens); 0: none, B and Bq as above.
                              // With N > 0: B = Bq = 1, T = total tokens, states index s*N + n
    bool packed = false;      // cu_seqlens given: N sequences, N = 0 included (then T = 0).
                              // Backends see only packed calls with N > 0 (api.cpp)
    bool pooled = false;      // state_indices given: every state tensor is a pool of `slots`
    int64_t slots = 0;        // states, read and written at the sequences' indices (K = 1);
                              // -1 when the call has no state tensor
    int64_t gate_width = 1;   // 1 = GDA (scalar gate), Sk = KDA (per key channel)
    double scale = 1.0;       // resolved: never 0
    gdn_head_map head_map = GDN_HEAD_MAP_TILED;
    // Element types (SPEC 3.1), each checked against the rule of the call.
    gdn_type type = GDN_TYPE_F32;        // q, k, v, out, d_out, dq, dk, dv
    gdn_type beta_type = GDN_TYPE_F32;   // beta, grads.beta: `type` or F32
    gdn_type gate_type = GDN_TYPE_F32;   // g, grads.g: F32 or BF16
    gdn_type state_type = GDN_TYPE_F32;  // state, states, d_states, grads.state: F32 (F64 in an F64 call)
    gdn_precision precision = GDN_PRECISION_EXACT;

    // Whether every float tensor of the call has element type t.
    bool all_of_type(gdn_type t) const { return type == t && beta_type == t && gate_type == t && state_type == t; }

    int64_t value_heads_per_key_head() const { return Hv / Hk; }
    int64_t sequences_per_qk_sequence() const { return Bq > 0 ? B / Bq : 0; }  // B = Bq = 0: no sequences
    int64_t key_head(int64_t value_head) const {
        return head_map == GDN_HEAD_MAP_TILED ? value_head % Hk : value_head / (Hv / Hk);
    }
    int64_t qk_sequence(int64_t sequence) const { return sequence / (B / Bq); }
    // Sequences that own a state: N packed sequences, else B.
    int64_t state_sequences() const { return packed ? N : B; }
    // Snapshots the forward writes: slots 0 .. min(K, T) - 1 (a call with no tokens writes its
    // final state, slot 0, outside the backends: api.cpp).
    int64_t written_slots() const { return K < T ? K : T; }
    // The j-th value head (0 <= j < Hv/Hk) that reads key head kh, in ascending order.
    int64_t value_head_of(int64_t kh, int64_t j) const {
        return head_map == GDN_HEAD_MAP_TILED ? kh + j * Hk : kh * (Hv / Hk) + j;
    }
};

struct ForwardArgs {
    Dims dims;
    const gdn_tensor *q, *k, *v, *g, *beta;
    const gdn_tensor *s0;      // nullptr: zero initial state
    const gdn_tensor *out;     // nullptr: not wanted
    const gdn_tensor *states;  // nullptr: not wanted; dims.K slots otherwise
    const gdn_tensor *cu_seqlens = nullptr;  // nullptr: no packed sequences
    std::vector<int64_t> offsets;            // dims.N + 1 host copies of cu_seqlens (validated)
    const gdn_tensor *state_indices = nullptr;  // nullptr: no pool
    std::vector<int64_t> state_slots;           // one per sequence (validated; -1: none)
};

struct BackwardArgs {
    Dims dims;                 // dims.K from d_states (1 when absent)
    const gdn_tensor *q, *k, *v, *g, *beta;
    const gdn_tensor *s0;        // nullptr: zero initial state
    const gdn_tensor *d_out;     // nullptr: zero
    const gdn_tensor *d_states;  // nullptr: zero
    const gdn_tensor *dq, *dk, *dv, *dg, *dbeta, *ds0;  // nullptr: not wanted
    const gdn_tensor *cu_seqlens = nullptr;  // nullptr: no packed sequences
    std::vector<int64_t> offsets;            // dims.N + 1 host copies of cu_seqlens (validated)
    const gdn_tensor *state_indices = nullptr;  // nullptr: no pool
    std::vector<int64_t> state_slots;           // one per sequence (validated; -1: none)
};

// Index (dim 3) of sequence n's state in the call's state tensors: n, or its pool slot (-1: the
// sequence has no stored state: it starts from zero and writes none).
template <class Args>
int64_t state_index(const Args &a, int64_t n) {
    return a.dims.pooled ? a.state_slots[static_cast<size_t>(n)] : n;
}

}  // namespace gdn
