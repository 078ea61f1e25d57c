// One fuzzed C API call: which op, on which backend, with which tensors. Decoded from the fuzz
// input in two steps: a well-formed call of small sizes laid out in an arena (contiguous,
// padded, transposed or packed views; value-major states; packed sequences; a state pool),
// then a few mutations (NULLs, bogus pointers, odd counts and strides, wrong types, aliasing,
// non-finite values, odd scale and head map, bad offsets and pool indices). Element types follow
// SPEC 3.1's rule (q/k/v of one type, beta that or F32, g F32 or BF16, F32 states) or break it on
// purpose; the precision is EXACT, BF16 or a value outside the enum.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "arena.h"
#include "byte_reader.h"
#include "gdn/gdn.h"

namespace gdn::fuzz {

enum Slot {
    Q, K, V, G, BETA, STATE,           // the problem's inputs
    OUT, STATES,                       // forward outputs
    D_OUT, D_STATES,                   // backward inputs
    DQ, DK, DV, DG, DBETA, DSTATE,     // backward outputs
    kSlots
};

const char *slot_name(int slot);

struct Call {
    bool backward = false;
    bool check_only = false;       // gdn_check_* instead of the computing call
    const char *backend = "ref";   // may be NULL (fastest available) or a name no backend has
    gdn_context_params params = gdn_context_default_params();  // of the context the call runs on

    // The sizes the well-formed call was built with (mutations may contradict them).
    int64_t Sk = 1, Sv = 1, Hk = 1, Hv = 1, T = 1, B = 1, Bq = 1, snapshots = 1, gate_width = 1;  // snapshots: K of SPEC 2

    gdn_tensor t[kSlots] = {};
    bool pointer_passed[kSlots] = {};  // out, states, d_out, d_states: pointer given (else NULL)
    bool problem_null = false, grads_null = false;
    double scale = 0.0;
    int scale_is_explicit = 0;     // SPEC 2: scale used as given, 0 included
    int head_map = GDN_HEAD_MAP_TILED;
    int precision = GDN_PRECISION_EXACT;  // gdn_problem.precision, any int (out of range: invalid)

    // Packed sequences (docs/VARLEN.md): N sequences in one stream (B = Bq = 1), the offsets
    // in the arena as I32 or I64. Not a Slot: the generic mutations leave it alone (their
    // decoding predates it); decode_call mutates it on its own when the call is packed.
    int64_t sequences = 0;         // N; 0 = not packed
    gdn_tensor cu_seqlens = {};    // data NULL: absent

    // A state pool (SPEC 3.2): one index per sequence in the arena, I32 or I64, mostly a valid
    // assignment with some negative, repeated or out-of-range entries. Not a Slot either.
    int64_t slots = 0;             // the pool's size as built; 0 = no pool
    gdn_tensor state_indices = {}; // data NULL: absent

    std::unique_ptr<Arena> arena;

    // Whether the slot takes part in this op at all.
    bool used(int slot) const;
    // Used, its pointer passed, and data not NULL: the library sees a tensor here.
    bool present(int slot) const;
    bool is_output(int slot) const { return backward ? slot >= DQ : (slot == OUT || slot == STATES); }

    gdn_problem problem() const;
    gdn_grads grads() const;
    const gdn_tensor *pointer(int slot) const { return pointer_passed[slot] ? &t[slot] : nullptr; }

    std::string describe() const;
};

bool default_params(const gdn_context_params &p);

// An element of a BF16 or F16 tensor as a double (exact; NaN and Inf kept).
double half_value(int type, uint16_t bits);

// Decodes a whole call; never fails (every byte string is some call).
Call decode_call(ByteReader &in);

// A caller may store any int in an enum field (C allows it); C++ code must not load an enum
// holding a value outside its enumerators, so the target reads and writes these as ints.
static_assert(sizeof(gdn_type) == sizeof(int) && sizeof(gdn_head_map) == sizeof(int) && sizeof(gdn_precision) == sizeof(int));
inline int raw_type(const gdn_tensor &t) {
    int v;
    std::memcpy(&v, &t.type, sizeof v);
    return v;
}
inline void set_raw_type(gdn_tensor &t, int v) { std::memcpy(&t.type, &v, sizeof v); }

// Bytes of one element for a gdn_type value (I32 and I64 included), 0 for a value outside the enum.
int64_t element_bytes(int type);
inline bool integer_type(int type) { return type == GDN_TYPE_I32 || type == GDN_TYPE_I64; }

// The values of an index tensor (cu_seqlens, state_indices) as int64 (its type I32 or I64, its
// elements readable).
std::vector<int64_t> offsets_of(const gdn_tensor &cu_seqlens);

// Whether a slot holds states ([Sk, Sv, Hv, *]: key-major or value-major).
inline bool state_shaped(int slot) { return slot == STATE || slot == STATES || slot == D_STATES || slot == DSTATE; }

// Span in bytes of a tensor; false when a count is below 1, a stride negative, or on overflow.
bool tensor_span(const gdn_tensor &t, int64_t &span);

}  // namespace gdn::fuzz
