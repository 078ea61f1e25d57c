#include "spec_oracle.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace gdn::fuzz {
namespace {

std::string say(const char *slot, const char *what) { return std::string(slot) + ": " + what; }

// The rules a tensor obeys on its own (SPEC 3: counts >= 0; unless it is empty, nb[0] = element
// size, or nb[1] for a state in the value-major layout, positive strides that are multiples of
// the element size, aligned data, an extent that fits the address space).
bool intrinsic(const gdn_tensor &t, const char *name, std::string &why, bool state = false) {
    const int64_t elem = element_bytes(raw_type(t));
    if (elem == 0) return why = say(name, "type is not a gdn_type"), false;
    for (int d = 0; d < 4; ++d)
        if (t.ne[d] < 0) return why = say(name, "a negative count"), false;
    int64_t count = 1;
    for (int d = 0; d < 4; ++d)
        if (__builtin_mul_overflow(count, t.ne[d], &count)) return why = say(name, "element count overflows"), false;
    if (count == 0) return true;  // nothing addressed: no stride, alignment or span to get wrong
    if (t.nb[0] != elem && !(state && t.nb[1] == elem))
        return why = say(name, state ? "neither nb[0] nor nb[1] is the element size" : "nb[0] is not the element size"), false;
    for (int d = 0; d < 4; ++d)
        if (t.nb[d] < 1) return why = say(name, "a stride below 1"), false;
    for (int d = 0; d < 4; ++d)
        if (t.nb[d] % elem != 0) return why = say(name, "a stride that is not a multiple of the element size"), false;
    if (reinterpret_cast<uintptr_t>(t.data) % elem != 0) return why = say(name, "data not aligned to the element size"), false;
    int64_t span;
    if (!tensor_span(t, span)) return why = say(name, "byte span overflows"), false;
    uintptr_t end;
    if (__builtin_add_overflow(reinterpret_cast<uintptr_t>(t.data), static_cast<uintptr_t>(span), &end))
        return why = say(name, "extent wraps the address space"), false;
    return true;
}

// Elements of a tensor that passed intrinsic (non-negative counts, no overflow).
int64_t element_count(const gdn_tensor &t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

bool shape_is(const gdn_tensor &t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return t.ne[0] == a && t.ne[1] == b && t.ne[2] == c && t.ne[3] == d;
}

bool same_view(const gdn_tensor &a, const gdn_tensor &b) {
    return a.data == b.data && raw_type(a) == raw_type(b) && std::memcmp(a.ne, b.ne, sizeof a.ne) == 0 &&
           std::memcmp(a.nb, b.nb, sizeof a.nb) == 0;
}

// Byte ownership inside the arena: which output claimed each byte, and which bytes inputs read.
struct ByteMap {
    std::vector<int8_t> output;   // -1: none, else the slot
    std::vector<uint8_t> input;
};

template <class Fn>
void for_each_byte(const gdn_tensor &t, Fn &&fn) {
    const int64_t elem = element_bytes(raw_type(t));
    for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < t.ne[0]; ++i0)
                    for (int64_t byte = 0; byte < elem; ++byte)
                        fn(i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3] + byte);
}

// Whether two elements of t share a byte, by enumerating byte offsets from t.data (so it
// holds wherever t points); Unknown when t has too many elements to enumerate here.
Verdict self_overlap(const gdn_tensor &t, bool &overlapping) {
    int64_t span;
    const int64_t count = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
    if (!tensor_span(t, span) || count > (1 << 16) || span > (int64_t{1} << 24)) return Verdict::Unknown;
    std::vector<uint8_t> seen(static_cast<size_t>(span), 0);
    overlapping = false;
    for_each_byte(t, [&](int64_t off) {
        if (seen[off]) overlapping = true;
        seen[off] = 1;
    });
    return Verdict::Valid;
}

// SPEC 4: an output overlaps neither itself, nor an input, nor another output; the one
// exception is the forward's states being exactly the input state.
Verdict check_overlaps(const Call &c, std::string &why) {
    std::string outside;
    const bool in_place = !c.backward && c.present(STATES) && c.present(STATE) && same_view(c.t[STATES], c.t[STATE]);
    for (int o = 0; o < kSlots; ++o) {
        if (!c.present(o) || !c.is_output(o)) continue;
        bool overlapping = false;
        if (self_overlap(c.t[o], overlapping) == Verdict::Unknown) return Verdict::Unknown;
        if (overlapping) return why = say(slot_name(o), "elements overlap each other"), Verdict::Invalid;
    }
    if (!all_in_arena(c, outside)) {
        // Not decided for index tensors outside the arena.
        if (c.cu_seqlens.data != nullptr || c.state_indices.data != nullptr) return Verdict::Unknown;
        // Only byte ranges can be compared here.
        for (int o = 0; o < kSlots; ++o) {
            if (!c.present(o) || !c.is_output(o)) continue;
            int64_t span_o;
            tensor_span(c.t[o], span_o);
            const auto begin_o = reinterpret_cast<uintptr_t>(c.t[o].data), end_o = begin_o + span_o;
            for (int i = 0; i < kSlots; ++i) {
                if (i == o || !c.present(i) || (in_place && o == STATES && i == STATE)) continue;
                int64_t span_i;
                tensor_span(c.t[i], span_i);
                const auto begin_i = reinterpret_cast<uintptr_t>(c.t[i].data), end_i = begin_i + span_i;
                if (begin_o < end_i && begin_i < end_o) return Verdict::Unknown;
            }
        }
        return Verdict::Valid;
    }
    const uint8_t *base = c.arena->payload();
    ByteMap map{std::vector<int8_t>(c.arena->payload_bytes(), -1), std::vector<uint8_t>(c.arena->payload_bytes(), 0)};
    for (int i = 0; i < kSlots; ++i) {
        if (!c.present(i) || c.is_output(i) || (in_place && i == STATE)) continue;
        const int64_t at = static_cast<const uint8_t *>(c.t[i].data) - base;
        for_each_byte(c.t[i], [&](int64_t off) { map.input[at + off] = 1; });
    }
    for (const gdn_tensor *index : {&c.cu_seqlens, &c.state_indices}) {  // inputs too (all_in_arena holds them)
        if (index->data == nullptr) continue;
        const int64_t at = static_cast<const uint8_t *>(index->data) - base;
        for_each_byte(*index, [&](int64_t off) { map.input[at + off] = 1; });
    }
    for (int o = 0; o < kSlots; ++o) {
        if (!c.present(o) || !c.is_output(o)) continue;
        const int64_t at = static_cast<const uint8_t *>(c.t[o].data) - base;
        bool self = false, other = false, input = false;
        for_each_byte(c.t[o], [&](int64_t off) {
            int8_t &owner = map.output[at + off];
            if (owner == o) self = true;
            else if (owner >= 0) other = true;
            owner = static_cast<int8_t>(o);
            if (map.input[at + off]) input = true;
        });
        if (self) return why = say(slot_name(o), "elements overlap each other (byte map)"), Verdict::Invalid;
        if (other) return why = say(slot_name(o), "overlaps another output"), Verdict::Invalid;
        if (input) return why = say(slot_name(o), "overlaps an input"), Verdict::Invalid;
    }
    return Verdict::Valid;
}

}  // namespace

bool index_tensors_in_arena(const Call &c) {
    for (const gdn_tensor *index : {&c.cu_seqlens, &c.state_indices}) {
        if (index->data == nullptr) continue;
        int64_t span;
        if (!tensor_span(*index, span) || span < 0 || !c.arena->holds(index->data, static_cast<uint64_t>(span))) return false;
    }
    return true;
}

bool all_in_arena(const Call &c, std::string &which) {
    if (!index_tensors_in_arena(c)) {
        which = "cu_seqlens or state_indices";
        return false;
    }
    for (int i = 0; i < kSlots; ++i) {
        if (!c.present(i)) continue;
        int64_t span;
        if (!tensor_span(c.t[i], span) || span < 0 || !c.arena->holds(c.t[i].data, static_cast<uint64_t>(span))) {
            which = slot_name(i);
            return false;
        }
    }
    return true;
}

Judgement judge(const Call &c) {
    Judgement j;
    auto invalid = [&j](std::string why) {
        j.verdict = Verdict::Invalid;
        j.reason = std::move(why);
        return j;
    };
    if (c.problem_null) return invalid("problem is NULL");
    if (c.head_map != GDN_HEAD_MAP_TILED && c.head_map != GDN_HEAD_MAP_GROUPED) return invalid("head_map out of range");
    if (c.precision != GDN_PRECISION_EXACT && c.precision != GDN_PRECISION_BF16) return invalid("precision out of range");
    if (!std::isfinite(c.scale)) return invalid("scale not finite");
    // A call with F32 states (every q type but F64) computes with a float scale.
    const int q_type = raw_type(c.t[Q]);
    const bool f32_states = q_type == GDN_TYPE_F32 || q_type == GDN_TYPE_BF16 || q_type == GDN_TYPE_F16;
    if (f32_states && std::fabs(c.scale) > 3.4028234663852886e38) return invalid("scale past float");
    if (c.backward && c.grads_null) return invalid("grads is NULL");

    std::string why;
    // q, k, v, g, beta are always read as tensors; NULL data is fine only with no elements.
    for (int i = Q; i <= BETA; ++i) {
        if (!intrinsic(c.t[i], slot_name(i), why)) return invalid(why);
        if (c.t[i].data == nullptr && element_count(c.t[i]) != 0) return invalid(say(slot_name(i), "required but NULL"));
    }
    for (int i = 0; i < kSlots; ++i)
        if (c.present(i) && !intrinsic(c.t[i], slot_name(i), why, state_shaped(i))) return invalid(why);
    const bool packed = c.cu_seqlens.data != nullptr, pooled = c.state_indices.data != nullptr;
    if (packed && !intrinsic(c.cu_seqlens, "cu_seqlens", why)) return invalid(why);
    if (pooled && !intrinsic(c.state_indices, "state_indices", why)) return invalid(why);
    if (integer_type(q_type)) return invalid("q: an integer type (only cu_seqlens takes I32 / I64)");
    // SPEC 3.1: F64 throughout, or q/k/v/out/d_out/dq/dk/dv of q's type X (F32, BF16, F16), beta X
    // or F32, g F32 or BF16, their gradients of their types, the states F32. q, k, v, g and beta
    // are judged whether or not they hold data (the library reads their descriptors always).
    for (int i = 0; i < kSlots; ++i) {
        if (!c.present(i) && i > BETA) continue;
        const int type = raw_type(c.t[i]);
        bool ok = false;
        if (q_type == GDN_TYPE_F64) ok = type == GDN_TYPE_F64;
        else if (i == BETA) ok = type == q_type || type == GDN_TYPE_F32;
        else if (i == G) ok = type == GDN_TYPE_F32 || type == GDN_TYPE_BF16;
        else if (i == DBETA) ok = type == raw_type(c.t[BETA]);
        else if (i == DG) ok = type == raw_type(c.t[G]);
        else if (state_shaped(i)) ok = type == GDN_TYPE_F32;
        else ok = type == q_type;  // k, v, out, d_out, dq, dk, dv
        if (!ok) return invalid(say(slot_name(i), "type outside the rule of SPEC 3.1"));
    }

    const gdn_tensor &q = c.t[Q], &v = c.t[V];
    const int64_t Sk = q.ne[0], Hk = q.ne[1], T = q.ne[2], Bq = q.ne[3], Sv = v.ne[0], Hv = v.ne[1], B = v.ne[3];
    // docs/VARLEN.md: offsets are I32 / I64 [N+1, 1, 1, 1] with N >= 0 over one stream (B = Bq = 1);
    // the states are then per sequence (N where B was).
    int64_t S0 = B;
    if (packed) {
        const gdn_tensor &o = c.cu_seqlens;
        if (!integer_type(raw_type(o))) return invalid("cu_seqlens: not I32 / I64");
        if (o.ne[0] < 1 || o.ne[1] != 1 || o.ne[2] != 1 || o.ne[3] != 1) return invalid("cu_seqlens shape");
        if (B != 1 || Bq != 1) return invalid("cu_seqlens with more than one stream");
        S0 = o.ne[0] - 1;
    }
    // SPEC 3: only tokens and sequences may be 0; B = 0 exactly when Bq = 0.
    if (Sk < 1 || Hk < 1 || Sv < 1 || Hv < 1) return invalid("a head size or head count of 0");
    if (!shape_is(c.t[K], Sk, Hk, T, Bq)) return invalid("k shape differs from q");
    if (v.ne[2] != T) return invalid("v tokens differ from q");
    if (Hv % Hk != 0) return invalid("Hk does not divide Hv");
    if ((B == 0) != (Bq == 0)) return invalid("sequences without q/k sequences, or the other way round");
    if (B > 0 && B % Bq != 0) return invalid("Bq does not divide B");
    const int64_t gw = c.t[G].ne[0];
    if ((gw != 1 && gw != Sk) || !shape_is(c.t[G], gw, Hv, T, B)) return invalid("g shape");
    if (!shape_is(c.t[BETA], 1, Hv, T, B)) return invalid("beta shape");
    // SPEC 3.2: with state_indices (I32 / I64 [S0, 1, 1, 1], contiguous) every state tensor is a
    // pool of one size, states and d_states holding K = 1 state per slot.
    int64_t slots = -1;  // the pool's size; -1: no state tensor says it
    if (pooled) {
        const gdn_tensor &x = c.state_indices;
        if (!integer_type(raw_type(x))) return invalid("state_indices: not I32 / I64");
        if (!shape_is(x, S0, 1, 1, 1)) return invalid("state_indices: not one index per sequence");
        for (int s : {STATE, STATES, D_STATES, DSTATE}) {
            if (!c.present(s)) continue;
            if (slots < 0) slots = c.t[s].ne[3];
            if (!shape_is(c.t[s], Sk, Sv, Hv, slots)) return invalid(say(slot_name(s), "not a pool [Sk, Sv, Hv, slots] of the call's size"));
        }
    }
    if (c.backward && pooled && !packed && Bq != B) return invalid("a pooled backward with q/k shared by sequences (Bq < B)");
    if (!pooled && c.present(STATE) && !shape_is(c.t[STATE], Sk, Sv, Hv, S0)) return invalid("state shape");
    for (int s : {OUT, D_OUT})
        if (c.present(s) && !shape_is(c.t[s], Sv, Hv, T, B)) return invalid(say(slot_name(s), "shape"));
    for (int s : {STATES, D_STATES}) {
        if (!c.present(s) || pooled) continue;
        const gdn_tensor &x = c.t[s];
        const bool slots_ok = S0 == 0 ? x.ne[3] == 0 : x.ne[3] >= 1 && x.ne[3] % S0 == 0;  // K >= 1 snapshots
        if (!slots_ok || !shape_is(x, Sk, Sv, Hv, x.ne[3])) return invalid(say(slot_name(s), "shape"));
    }
    const int grad_of[] = {Q, K, V, G, BETA};
    for (int i = 0; i < 5; ++i) {
        const int s = DQ + i;
        const int64_t *ne = c.t[grad_of[i]].ne;
        if (c.present(s) && !shape_is(c.t[s], ne[0], ne[1], ne[2], ne[3])) return invalid(say(slot_name(s), "shape"));
    }
    if (!pooled && c.present(DSTATE) && !shape_is(c.t[DSTATE], Sk, Sv, Hv, S0)) return invalid("dstate shape");

    j.verdict = check_overlaps(c, j.reason);
    if (j.verdict != Verdict::Valid || (!packed && !pooled)) return j;
    // The index tensors' values, once nothing else is wrong.
    if (!index_tensors_in_arena(c)) return j.verdict = Verdict::Unknown, j;
    if (packed) {  // 0 first, T last, never decreasing
        const std::vector<int64_t> offsets = offsets_of(c.cu_seqlens);
        if (offsets.front() != 0 || offsets.back() != T) return invalid("cu_seqlens: not from 0 to T");
        for (size_t n = 1; n < offsets.size(); ++n)
            if (offsets[n] < offsets[n - 1]) return invalid("cu_seqlens: decreasing");
    }
    if (pooled) {  // negative: no slot; the others distinct and inside the pool (when a state tensor sizes it)
        const std::vector<int64_t> indices = offsets_of(c.state_indices);
        for (size_t n = 0; n < indices.size(); ++n) {
            if (indices[n] < 0) continue;
            if (slots >= 0 && indices[n] >= slots) return invalid("state_indices: an index past the pool");
            for (size_t m = 0; m < n; ++m)
                if (indices[m] == indices[n]) return invalid("state_indices: two sequences on one slot");
        }
    }
    return j;
}

}  // namespace gdn::fuzz
