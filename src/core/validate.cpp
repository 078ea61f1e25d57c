#include "core/validate.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace gdn {
namespace {

// The integer a caller stored in an enum field. A C caller may store any int there, and in C++
// loading an enum object that holds a value outside the enum's range is undefined (UBSan stops
// on it), so enum fields are read as int until they are known to be valid.
template <class Enum>
int stored_value(const Enum &field) {
    static_assert(sizeof(Enum) == sizeof(int), "a C enum is int-sized");
    int value;
    std::memcpy(&value, &field, sizeof value);
    return value;
}

bool is_type(int value) { return value >= GDN_TYPE_F32 && value <= GDN_TYPE_I64; }
bool is_integer_type(gdn_type type) { return type == GDN_TYPE_I32 || type == GDN_TYPE_I64; }

struct Named {
    const char *name;
    const gdn_tensor *tensor;
};

// The tensors of one call (at most 16: every input, output and gradient), held without
// allocating: decoding validates a call per token and layer.
class NamedList {
public:
    void push_back(const Named &t) {
        if (size_ == items_.size()) throw std::logic_error("NamedList: more tensors than a call has");
        items_[size_++] = t;
    }
    size_t size() const { return size_; }
    const Named &operator[](size_t i) const { return items_[i]; }
    const Named *begin() const { return items_.data(); }
    const Named *end() const { return items_.data() + size_; }
    const Named &back() const { return items_[size_ - 1]; }
    NamedList &operator=(std::initializer_list<Named> list) {
        size_ = 0;
        for (const Named &t : list) push_back(t);
        return *this;
    }

private:
    std::array<Named, 16> items_{};
    size_t size_ = 0;
};

// Which dimension of a tensor must be contiguous: dim 0 (every tensor's rows), or, for a state
// tensor, dim 0 (key-major, ggml's) or dim 1 (value-major, PyTorch's [..., K, V]).
enum class Rows { keys, keys_or_values };

// Type, counts and strides of one tensor on its own.
Status check_tensor(const Named &t, Rows rows = Rows::keys) {
    const gdn_tensor &x = *t.tensor;
    if (!is_type(stored_value(x.type)))
        return fail(GDN_ERROR_INVALID_ARGUMENT, "%s.type = %d is not a gdn_type", t.name, stored_value(x.type));
    for (int d = 0; d < 4; ++d)
        if (x.ne[d] < 0)
            return fail(GDN_ERROR_SHAPE, "%s.ne[%d] = %" PRId64 ": a dimension cannot be negative", t.name, d, x.ne[d]);
    if (element_count(x) < 0)
        return fail(GDN_ERROR_SHAPE, "%s: ne = [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] has more elements than int64 counts",
                    t.name, x.ne[0], x.ne[1], x.ne[2], x.ne[3]);
    if (element_count(x) == 0) return {};  // nothing is addressed, so no stride can be wrong
    const auto elem = static_cast<int64_t>(type_size(x.type));
    if (rows == Rows::keys && x.nb[0] != elem)
        return fail(GDN_ERROR_LAYOUT, "%s.nb[0] = %" PRId64 ": rows must be contiguous (nb[0] = %" PRId64 " for %s)",
                    t.name, x.nb[0], elem, type_name(x.type));
    if (rows == Rows::keys_or_values && x.nb[0] != elem && x.nb[1] != elem)
        return fail(GDN_ERROR_LAYOUT, "%s.nb = [%" PRId64 ", %" PRId64 ", ...]: a state is contiguous over the key index (nb[0] = %" PRId64
                    ", ggml's layout) or over the value index (nb[1] = %" PRId64 ", PyTorch's [..., K, V])",
                    t.name, x.nb[0], x.nb[1], elem, elem);
    for (int d = 0; d < 4; ++d)
        if (x.nb[d] <= 0)
            return fail(GDN_ERROR_LAYOUT, "%s.nb[%d] = %" PRId64 ": strides must be positive", t.name, d, x.nb[d]);
    // Elements must be aligned to their size: a misaligned float or double load is undefined
    // behaviour in C++ and a fault on a GPU.
    for (int d = 0; d < 4; ++d)
        if (x.nb[d] % elem != 0)
            return fail(GDN_ERROR_LAYOUT, "%s.nb[%d] = %" PRId64 " is not a multiple of the element size %" PRId64 " (%s)",
                        t.name, d, x.nb[d], elem, type_name(x.type));
    if (reinterpret_cast<uintptr_t>(x.data) % static_cast<uintptr_t>(elem) != 0)
        return fail(GDN_ERROR_LAYOUT, "%s.data = %p is not aligned to its element size %" PRId64 " (%s)", t.name, x.data,
                    elem, type_name(x.type));
    const int64_t span = byte_span(x);
    const auto base = reinterpret_cast<uintptr_t>(x.data);
    if (span < 0 || base + static_cast<uintptr_t>(span) < base)
        return fail(GDN_ERROR_LAYOUT, "%s: the last element's byte offset overflows (ne and nb too large)", t.name);
    return {};
}

Status check_shape(const Named &t, int64_t e0, int64_t e1, int64_t e2, int64_t e3, const char *what) {
    const int64_t want[4] = {e0, e1, e2, e3};
    for (int d = 0; d < 4; ++d)
        if (t.tensor->ne[d] != want[d])
            return fail(GDN_ERROR_SHAPE, "%s.ne[%d] = %" PRId64 " but %s.ne must be [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] (%s)",
                        t.name, d, t.tensor->ne[d], t.name, e0, e1, e2, e3, what);
    return {};
}

// What a float tensor is to the type rule of SPEC 3.1.
enum class Role {
    data,   // q, k, v, out, d_out, dq, dk, dv: q's type
    beta,   // beta: q's type or F32
    gate,   // g: F32 or BF16
    state,  // state, states, d_states, grads.state: F32
};

// The type rule for one tensor, given q's type (d.type). An F64 call is F64 throughout.
Status check_type(const Named &t, const Dims &d, Role role) {
    const gdn_type x = t.tensor->type;
    const char *name = type_name(x), *q = type_name(d.type);
    if (d.type == GDN_TYPE_F64) {
        if (x == GDN_TYPE_F64) return {};
        return fail(GDN_ERROR_TYPE, "%s.type = %s but q.type = F64: a call with F64 q is F64 throughout", t.name, name);
    }
    switch (role) {
        case Role::data:
            if (x == d.type) return {};
            return fail(GDN_ERROR_TYPE, "%s.type = %s but q.type = %s: q, k, v, out and their gradients have one element type",
                        t.name, name, q);
        case Role::beta:
            if (x == d.type || x == GDN_TYPE_F32) return {};
            return fail(GDN_ERROR_TYPE, "%s.type = %s: beta is F32 or the type of q (%s)", t.name, name, q);
        case Role::gate:
            if (x == GDN_TYPE_F32 || x == GDN_TYPE_BF16) return {};
            return fail(GDN_ERROR_TYPE, "%s.type = %s: g is F32 or BF16", t.name, name);
        case Role::state:
            if (x == GDN_TYPE_F32) return {};
            return fail(GDN_ERROR_TYPE, "%s.type = %s: states are F32 when q is %s (F64 only in a call that is F64 throughout)",
                        t.name, name, q);
    }
    return {};
}

// A gradient has the type of its input.
Status check_gradient_type(const Named &t, const char *input, gdn_type type) {
    if (t.tensor->type == type) return {};
    return fail(GDN_ERROR_TYPE, "%s.type = %s but %s.type = %s: a gradient has the type of its input", t.name,
                type_name(t.tensor->type), input, type_name(type));
}

// An index tensor (cu_seqlens, state_indices): I32 or I64, ne = {count, 1, 1, 1}, contiguous.
Status check_index_tensor(const Named &t, const char *what, const char *count) {
    const gdn_tensor &x = *t.tensor;
    GDN_TRY(check_tensor(t));
    if (!is_integer_type(x.type))
        return fail(GDN_ERROR_TYPE, "%s.type = %s: %s are I32 or I64", t.name, type_name(x.type), what);
    if (x.ne[1] != 1 || x.ne[2] != 1 || x.ne[3] != 1)
        return fail(GDN_ERROR_SHAPE, "%s.ne = [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] must be [%s, 1, 1, 1]",
                    t.name, x.ne[0], x.ne[1], x.ne[2], x.ne[3], count);
    return {};
}

// N from the offsets tensor of packed sequences (docs/VARLEN.md): its type, shape and layout,
// and the one packed stream it implies (B = Bq = 1). Its values are checked by
// validate_offsets once the backend has read them.
Status resolve_packed_sequences(const Named &t, Dims &d) {
    const gdn_tensor &x = *t.tensor;
    GDN_TRY(check_index_tensor(t, "the offsets of packed sequences", "N+1"));
    if (x.ne[0] < 1)
        return fail(GDN_ERROR_SHAPE, "cu_seqlens.ne[0] = 0: N + 1 offsets need at least one (N = 0 sequences: {0})");
    if (d.B != 1 || d.Bq != 1)
        return fail(GDN_ERROR_SHAPE, "q.ne[3] = %" PRId64 ", v.ne[3] = %" PRId64 " but with cu_seqlens the sequences are one packed stream (both must be 1)",
                    d.Bq, d.B);
    d.N = x.ne[0] - 1;
    d.packed = true;
    return {};
}

// A pool's state tensor, [Sk, Sv, Hv, slots]: the first one seen sets the call's slot count,
// every other pool of the call has as many (section 3.2).
Status check_pool(const Named &t, Dims &d) {
    if (!d.pooled) return {};
    if (d.slots < 0) d.slots = t.tensor->ne[3];
    return check_shape(t, d.Sk, d.Sv, d.Hv, d.slots, "with state_indices the state tensors are pools [Sk, Sv, Hv, slots] of one size");
}

// The state pool's index tensor: one index per sequence (its values are checked by
// validate_state_slots once the backend has read them).
Status resolve_state_indices(const Named &t, Dims &d) {
    GDN_TRY(check_index_tensor(t, "state pool indices", "sequences"));
    if (t.tensor->ne[0] != d.state_sequences())
        return fail(GDN_ERROR_SHAPE, "state_indices.ne[0] = %" PRId64 " but there are %" PRId64 " sequences (%s): one index per sequence",
                    t.tensor->ne[0], d.state_sequences(), d.packed ? "N, from cu_seqlens" : "B = v.ne[3]");
    d.pooled = true;
    d.slots = -1;  // set by the first pool seen (check_pool)
    return {};
}

// Sizes from q, k, v, g, beta and the optional s0.
Status resolve_inputs(const gdn_problem *p, Dims &d, NamedList &inputs) {
    if (p == nullptr) return fail(GDN_ERROR_INVALID_ARGUMENT, "problem is NULL");
    const Named q{"q", &p->q}, k{"k", &p->k}, v{"v", &p->v}, g{"g", &p->g}, beta{"beta", &p->beta};
    const int head_map = stored_value(p->head_map);
    if (head_map != GDN_HEAD_MAP_TILED && head_map != GDN_HEAD_MAP_GROUPED)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "head_map = %d is not a gdn_head_map", head_map);
    if (!std::isfinite(p->scale)) return fail(GDN_ERROR_INVALID_ARGUMENT, "scale = %g is not finite", p->scale);
    inputs = {q, k, v, g, beta};
    for (const Named &t : inputs) GDN_TRY(check_tensor(t));
    if (p->state.data != nullptr) {
        inputs.push_back({"state", &p->state});
        GDN_TRY(check_tensor(inputs.back(), Rows::keys_or_values));
    }
    // An input with no elements is never read, so it may have no memory (torch gives such
    // tensors a NULL data pointer); a NULL optional input still means "absent".
    for (const Named &t : {q, k, v, g, beta})
        if (t.tensor->data == nullptr && element_count(*t.tensor) != 0)
            return fail(GDN_ERROR_INVALID_ARGUMENT, "%s.data is NULL: %s is required", t.name, t.name);
    if (is_integer_type(p->q.type))
        return fail(GDN_ERROR_TYPE, "q.type = %s: integer types are only for cu_seqlens and state_indices", type_name(p->q.type));
    d.type = p->q.type;
    for (const Named &t : {k, v}) GDN_TRY(check_type(t, d, Role::data));
    GDN_TRY(check_type(beta, d, Role::beta));
    GDN_TRY(check_type(g, d, Role::gate));
    if (p->state.data != nullptr) GDN_TRY(check_type({"state", &p->state}, d, Role::state));
    d.beta_type = p->beta.type;
    d.gate_type = p->g.type;
    d.state_type = d.type == GDN_TYPE_F64 ? GDN_TYPE_F64 : GDN_TYPE_F32;
    const int precision = stored_value(p->precision);
    if (precision != GDN_PRECISION_EXACT && precision != GDN_PRECISION_BF16)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "precision = %d is not a gdn_precision", precision);
    d.precision = p->precision;

    d.Sk = p->q.ne[0];
    d.Hk = p->q.ne[1];
    d.T = p->q.ne[2];
    d.Bq = p->q.ne[3];
    d.Sv = p->v.ne[0];
    d.Hv = p->v.ne[1];
    d.B = p->v.ne[3];
    d.head_map = p->head_map;
    for (const Named &t : {q, v})
        for (int dim = 0; dim < 2; ++dim)
            if (t.tensor->ne[dim] < 1)
                return fail(GDN_ERROR_SHAPE, "%s.ne[%d] = 0: head sizes and head counts must be at least 1 (only tokens, ne[2], and sequences, ne[3], may be 0)",
                            t.name, dim);
    d.scale = p->scale != 0.0 || p->scale_is_explicit ? p->scale : 1.0 / std::sqrt(static_cast<double>(d.Sk));
    // Calls with F32 states compute with a float scale: a larger one would turn into inf there.
    if (d.state_type == GDN_TYPE_F32 && std::fabs(d.scale) > std::numeric_limits<float>::max())
        return fail(GDN_ERROR_INVALID_ARGUMENT, "scale = %g does not fit the F32 arithmetic of a call with F32 states (|scale| <= %g)", d.scale,
                    static_cast<double>(std::numeric_limits<float>::max()));

    GDN_TRY(check_shape(k, d.Sk, d.Hk, d.T, d.Bq, "k has the shape of q"));
    if (p->v.ne[2] != d.T)
        return fail(GDN_ERROR_SHAPE, "v.ne[2] = %" PRId64 " differs from q.ne[2] = %" PRId64 " (tokens)", p->v.ne[2], d.T);
    if (d.Hv % d.Hk != 0)
        return fail(GDN_ERROR_SHAPE, "q.ne[1] = %" PRId64 " does not divide v.ne[1] = %" PRId64 " (key heads must divide value heads)", d.Hk, d.Hv);
    if ((d.B == 0) != (d.Bq == 0))
        return fail(GDN_ERROR_SHAPE, "q.ne[3] = %" PRId64 ", v.ne[3] = %" PRId64 ": with no sequences there are no q/k sequences, and the other way round",
                    d.Bq, d.B);
    if (d.B > 0 && d.B % d.Bq != 0)
        return fail(GDN_ERROR_SHAPE, "q.ne[3] = %" PRId64 " does not divide v.ne[3] = %" PRId64 " (q/k sequences must divide sequences)", d.Bq, d.B);
    if (p->g.ne[0] != 1 && p->g.ne[0] != d.Sk)
        return fail(GDN_ERROR_SHAPE, "g.ne[0] = %" PRId64 " must be 1 (scalar gate) or q.ne[0] = %" PRId64 " (per-channel gate)", p->g.ne[0], d.Sk);
    d.gate_width = p->g.ne[0];
    GDN_TRY(check_shape(g, d.gate_width, d.Hv, d.T, d.B, "g is [1 or Sk, Hv, T, B]"));
    GDN_TRY(check_shape(beta, 1, d.Hv, d.T, d.B, "beta is [1, Hv, T, B]"));
    if (p->cu_seqlens.data != nullptr) {
        const Named offsets{"cu_seqlens", &p->cu_seqlens};
        GDN_TRY(resolve_packed_sequences(offsets, d));
        inputs.push_back(offsets);
    }
    if (p->state_indices.data != nullptr) {
        const Named indices{"state_indices", &p->state_indices};
        GDN_TRY(resolve_state_indices(indices, d));
        inputs.push_back(indices);
    }
    if (p->state.data != nullptr) {
        const Named state{"state", &p->state};
        if (d.pooled) GDN_TRY(check_pool(state, d));
        else if (d.packed) GDN_TRY(check_shape(state, d.Sk, d.Sv, d.Hv, d.N, "with cu_seqlens, state is [Sk, Sv, Hv, N]"));
        else GDN_TRY(check_shape(state, d.Sk, d.Sv, d.Hv, d.B, "state is [Sk, Sv, Hv, B]"));
    }
    return {};
}

// K from a states-shaped tensor [Sk, Sv, Hv, B*K] (N*K with packed sequences; a pool with K = 1
// under state_indices).
Status resolve_slots(const Named &t, Dims &d) {
    if (d.pooled) {
        d.K = 1;
        return check_pool(t, d);
    }
    if (d.state_sequences() == 0) {  // no sequences: no slots either, whatever K the caller meant
        d.K = 1;
        return check_shape(t, d.Sk, d.Sv, d.Hv, 0, "with no sequences, states are [Sk, Sv, Hv, 0]");
    }
    if (d.packed) {
        if (t.tensor->ne[3] == 0)
            return fail(GDN_ERROR_SHAPE, "%s.ne[3] = 0: K = 0 snapshots (pass NULL for no states; K >= 1)", t.name);
        if (t.tensor->ne[3] % d.N != 0)
            return fail(GDN_ERROR_SHAPE, "%s.ne[3] = %" PRId64 " is not a multiple of N = %" PRId64 " (cu_seqlens.ne[0] - 1; it is N*K for K snapshots)",
                        t.name, t.tensor->ne[3], d.N);
        d.K = t.tensor->ne[3] / d.N;
        return check_shape(t, d.Sk, d.Sv, d.Hv, d.N * d.K, "with cu_seqlens, states are [Sk, Sv, Hv, N*K]");
    }
    if (t.tensor->ne[3] == 0)
        return fail(GDN_ERROR_SHAPE, "%s.ne[3] = 0: K = 0 snapshots (pass NULL for no states; K >= 1)", t.name);
    if (t.tensor->ne[3] % d.B != 0)
        return fail(GDN_ERROR_SHAPE, "%s.ne[3] = %" PRId64 " is not a multiple of v.ne[3] = %" PRId64 " (it is B*K for K snapshots)",
                    t.name, t.tensor->ne[3], d.B);
    d.K = t.tensor->ne[3] / d.B;
    return check_shape(t, d.Sk, d.Sv, d.Hv, d.B * d.K, "states are [Sk, Sv, Hv, B*K]");
}

bool same_view(const gdn_tensor &a, const gdn_tensor &b) {
    if (a.data != b.data || a.type != b.type) return false;
    for (int i = 0; i < 4; ++i)
        if (a.ne[i] != b.ne[i] || a.nb[i] != b.nb[i]) return false;
    return true;
}

// Outputs must not overlap themselves, the inputs, or each other. The one allowed exception:
// output `in_place` may be exactly input `in_place_source`, the input state (the recurrent cache
// update). Any other input that happens to be the same view still counts as an overlap.
Status check_aliasing(const NamedList &inputs, const NamedList &outputs, const gdn_tensor *in_place,
                      const gdn_tensor *in_place_source) {
    for (size_t i = 0; i < outputs.size(); ++i) {
        const Named &out = outputs[i];
        if (self_overlaps(*out.tensor))
            return fail(GDN_ERROR_LAYOUT, "%s: the strides nb = [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] make elements overlap; an output needs distinct elements",
                        out.name, out.tensor->nb[0], out.tensor->nb[1], out.tensor->nb[2], out.tensor->nb[3]);
        for (const Named &in : inputs) {
            if (out.tensor == in_place && in.tensor == in_place_source) continue;
            if (overlaps(*out.tensor, *in.tensor))
                return fail(GDN_ERROR_ALIAS, "output %s overlaps input %s", out.name, in.name);
        }
        for (size_t j = 0; j < i; ++j)
            if (overlaps(*out.tensor, *outputs[j].tensor))
                return fail(GDN_ERROR_ALIAS, "output %s overlaps output %s", out.name, outputs[j].name);
    }
    return {};
}

const gdn_tensor *if_present(const gdn_tensor *t) { return present(t) ? t : nullptr; }

}  // namespace

Status validate_forward(const gdn_problem *p, const gdn_tensor *out, const gdn_tensor *states, ForwardArgs &args) {
    Dims d;
    NamedList inputs;
    GDN_TRY(resolve_inputs(p, d, inputs));
    NamedList outputs;
    if (present(out)) {
        const Named o{"out", out};
        GDN_TRY(check_tensor(o));
        GDN_TRY(check_type(o, d, Role::data));
        GDN_TRY(check_shape(o, d.Sv, d.Hv, d.T, d.B, "out is [Sv, Hv, T, B]"));
        outputs.push_back(o);
    }
    const gdn_tensor *in_place = nullptr;
    if (present(states)) {
        const Named s{"states", states};
        GDN_TRY(check_tensor(s, Rows::keys_or_values));
        GDN_TRY(check_type(s, d, Role::state));
        GDN_TRY(resolve_slots(s, d));
        outputs.push_back(s);
        if (p->state.data != nullptr && same_view(*states, p->state)) in_place = states;
    }
    GDN_TRY(check_aliasing(inputs, outputs, in_place, &p->state));
    args = ForwardArgs{d, &p->q, &p->k, &p->v, &p->g, &p->beta, if_present(&p->state), if_present(out), if_present(states),
                       if_present(&p->cu_seqlens), {}, if_present(&p->state_indices), {}};
    return {};
}

Status validate_backward(const gdn_problem *p, const gdn_tensor *d_out, const gdn_tensor *d_states,
                         const gdn_grads *grads, BackwardArgs &args) {
    Dims d;
    NamedList inputs;
    GDN_TRY(resolve_inputs(p, d, inputs));
    if (grads == nullptr) return fail(GDN_ERROR_INVALID_ARGUMENT, "grads is NULL (set a gradient's data to NULL to skip it)");
    // A pooled call runs as one call per sequence (core/sequences.h): sequences sharing a q/k
    // sequence would each overwrite its dq/dk instead of summing into them.
    if (d.pooled && !d.packed && d.Bq != d.B)
        return fail(GDN_ERROR_UNSUPPORTED, "the backward with state_indices takes q/k per sequence: q.ne[3] = %" PRId64
                    " but v.ne[3] = %" PRId64 " (pass q and k repeated to B sequences, or use cu_seqlens)", d.Bq, d.B);
    if (present(d_out)) {
        const Named t{"d_out", d_out};
        GDN_TRY(check_tensor(t));
        GDN_TRY(check_type(t, d, Role::data));
        GDN_TRY(check_shape(t, d.Sv, d.Hv, d.T, d.B, "d_out is [Sv, Hv, T, B]"));
        inputs.push_back(t);
    }
    if (present(d_states)) {
        const Named t{"d_states", d_states};
        GDN_TRY(check_tensor(t, Rows::keys_or_values));
        GDN_TRY(check_type(t, d, Role::state));
        GDN_TRY(resolve_slots(t, d));
        inputs.push_back(t);
    }
    const Named wanted[] = {{"grads.q", &grads->q}, {"grads.k", &grads->k}, {"grads.v", &grads->v},
                            {"grads.g", &grads->g}, {"grads.beta", &grads->beta}, {"grads.state", &grads->state}};
    const gdn_tensor *shape_of[] = {&p->q, &p->k, &p->v, &p->g, &p->beta, nullptr};
    const char *input_names[] = {"q", "k", "v", "g", "beta", "state"};
    NamedList outputs;
    for (int i = 0; i < 6; ++i) {
        const Named &t = wanted[i];
        if (!present(t.tensor)) continue;
        GDN_TRY(check_tensor(t, shape_of[i] != nullptr ? Rows::keys : Rows::keys_or_values));
        if (shape_of[i] != nullptr) GDN_TRY(check_gradient_type(t, input_names[i], shape_of[i]->type));
        else GDN_TRY(check_type(t, d, Role::state));
        if (shape_of[i] != nullptr) {
            const int64_t *ne = shape_of[i]->ne;
            GDN_TRY(check_shape(t, ne[0], ne[1], ne[2], ne[3], "a gradient has the shape of its input"));
        } else {
            if (d.pooled) GDN_TRY(check_pool(t, d));
            else if (d.packed) GDN_TRY(check_shape(t, d.Sk, d.Sv, d.Hv, d.N, "with cu_seqlens, the state gradient is [Sk, Sv, Hv, N]"));
            else GDN_TRY(check_shape(t, d.Sk, d.Sv, d.Hv, d.B, "the state gradient is [Sk, Sv, Hv, B]"));
        }
        outputs.push_back(t);
    }
    GDN_TRY(check_aliasing(inputs, outputs, nullptr, nullptr));
    args = BackwardArgs{d,
                        &p->q,
                        &p->k,
                        &p->v,
                        &p->g,
                        &p->beta,
                        if_present(&p->state),
                        if_present(d_out),
                        if_present(d_states),
                        if_present(&grads->q),
                        if_present(&grads->k),
                        if_present(&grads->v),
                        if_present(&grads->g),
                        if_present(&grads->beta),
                        if_present(&grads->state),
                        if_present(&p->cu_seqlens),
                        {},
                        if_present(&p->state_indices),
                        {}};
    return {};
}

Status validate_offsets(const Dims &d, const std::vector<int64_t> &offsets) {
    if (static_cast<int64_t>(offsets.size()) != d.N + 1)
        return fail(GDN_ERROR_BACKEND, "internal error: %zu offsets read for N = %" PRId64, offsets.size(), d.N);
    if (offsets[0] != 0)
        return fail(GDN_ERROR_SHAPE, "cu_seqlens[0] = %" PRId64 ": the first offset must be 0", offsets[0]);
    for (int64_t n = 0; n < d.N; ++n) {
        const int64_t begin = offsets[n], end = offsets[n + 1];
        if (end < begin)
            return fail(GDN_ERROR_SHAPE, "cu_seqlens[%" PRId64 "] = %" PRId64 " < cu_seqlens[%" PRId64 "] = %" PRId64
                        ": offsets must not decrease", n + 1, end, n, begin);
        if (end > d.T)
            return fail(GDN_ERROR_SHAPE, "cu_seqlens[%" PRId64 "] = %" PRId64 " exceeds q.ne[2] = %" PRId64 " (tokens)", n + 1, end, d.T);
    }
    if (offsets[d.N] != d.T)
        return fail(GDN_ERROR_SHAPE, "cu_seqlens[%" PRId64 "] = %" PRId64 " but the last offset must be q.ne[2] = %" PRId64 " (tokens)",
                    d.N, offsets[d.N], d.T);
    return {};
}

Status require_all_of_type(const Dims &d, gdn_type type, const char *backend) {
    if (d.all_of_type(type)) return {};
    return fail(GDN_ERROR_TYPE, "the %s backend takes %s tensors; this call has q/k/v %s, beta %s, g %s, states %s", backend,
                type_name(type), type_name(d.type), type_name(d.beta_type), type_name(d.gate_type), type_name(d.state_type));
}

Status validate_state_slots(const Dims &d, std::vector<int64_t> &slots) {
    if (static_cast<int64_t>(slots.size()) != d.state_sequences())
        return fail(GDN_ERROR_BACKEND, "internal error: %zu state indices read for %" PRId64 " sequences", slots.size(), d.state_sequences());
    for (size_t n = 0; n < slots.size(); ++n) {
        if (slots[n] < 0) slots[n] = -1;
        if (d.slots >= 0 && slots[n] >= d.slots)  // slots < 0: the call has no state tensor to index
            return fail(GDN_ERROR_SHAPE, "state_indices[%zu] = %" PRId64 " but the pool has %" PRId64 " slots (ne[3] of the state tensors)",
                        n, slots[n], d.slots);
    }
    // Two sequences on one slot would both write it: sorted (slot, sequence) pairs find them.
    thread_local std::vector<std::pair<int64_t, size_t>> named;  // kept: no allocation per decoding call
    named.clear();
    named.reserve(slots.size());
    for (size_t n = 0; n < slots.size(); ++n)
        if (slots[n] >= 0) named.emplace_back(slots[n], n);
    std::sort(named.begin(), named.end());
    for (size_t i = 1; i < named.size(); ++i)
        if (named[i].first == named[i - 1].first)
            return fail(GDN_ERROR_ALIAS, "state_indices[%zu] = state_indices[%zu] = %" PRId64 ": two sequences cannot share a pool slot",
                        named[i - 1].second, named[i].second, named[i].first);
    return {};
}

}  // namespace gdn
