// gdn._gdn: the C API on DLPack arrays (numpy, torch, anything with __dlpack__), zero copy.
//
// An array's shape is read outermost first, as numpy and torch print it, so it is the reverse of
// gdn's ne[]: a [B, T, H, S] array is the tensor ne = {S, H, T, B}. Strides are passed through
// (q, k and v may be views into one packed projection buffer; a state may be key-major or a
// transposed view of a [..., K, V] tensor, value-major); the library validates them.
// Errors are thrown as GdnError and become the gdn.Error subclass of their status in Python.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "exchange.h"
#include "gdn/gdn.h"
#include "l2norm.h"
#include "memory.h"

namespace nb = nanobind;

namespace {

using InArray = nb::ndarray<nb::ro>;  // inputs: read-only arrays are fine
using OutArray = nb::ndarray<>;       // outputs: must be writable

struct GdnError {
    int status;
    std::string message;
};

[[noreturn]] void raise(gdn_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] void raise(gdn_status status, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    throw GdnError{status, buf};
}

// Where an array lives, as DLPack says: device type (1 = CPU, 2 = CUDA) and ordinal.
struct Placement {
    int32_t type = 0, id = 0;
    bool operator==(const Placement &o) const { return type == o.type && (type == nb::device::cpu::value || id == o.id); }
};

std::string describe(Placement p) {
    if (p.type == nb::device::cpu::value) return "cpu";
    if (p.type == nb::device::cuda::value) return "cuda:" + std::to_string(p.id);
    return "device type " + std::to_string(p.type);
}

class Context {
public:
    Context(std::optional<std::string> backend, int threads, int chunk_size, int device, uintptr_t stream) {
        gdn_context_params params = gdn_context_default_params();
        params.n_threads = threads;
        params.chunk_size = chunk_size;
        params.device = device;
        params.stream = reinterpret_cast<void *>(stream);
        const gdn_status s = gdn_context_create(backend ? backend->c_str() : nullptr, &params, &ctx_);
        if (s != GDN_OK) throw GdnError{s, gdn_last_create_error()};
        const std::string name = gdn_context_backend(ctx_);
        placement_ = name == "cuda" ? Placement{nb::device::cuda::value, device} : Placement{nb::device::cpu::value, 0};
    }
    ~Context() { gdn_context_free(ctx_); }
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;

    std::string backend() const { return gdn_context_backend(ctx_); }
    uint64_t workspace_bytes() const { return gdn_context_workspace_bytes(ctx_); }
    void release_workspace() { gdn_context_release_workspace(ctx_); }
    gdn_context *raw() const { return ctx_; }
    Placement placement() const { return placement_; }

    void check(gdn_status s) const {
        if (s != GDN_OK) throw GdnError{s, gdn_last_error(ctx_)};
    }

private:
    gdn_context *ctx_ = nullptr;
    Placement placement_;
};

gdn_type element_type(const nb::dlpack::dtype &dt, const char *name) {
    using nb::dlpack::dtype_code;
    const auto code = static_cast<dtype_code>(dt.code);
    if (dt.lanes == 1) {
        if (code == dtype_code::Float && dt.bits == 32) return GDN_TYPE_F32;
        if (code == dtype_code::Float && dt.bits == 64) return GDN_TYPE_F64;
        if (code == dtype_code::Float && dt.bits == 16) return GDN_TYPE_F16;
        if (code == dtype_code::Bfloat && dt.bits == 16) return GDN_TYPE_BF16;
    }
    raise(GDN_ERROR_TYPE, "%s has an element type gdn does not take (DLPack code %d, %d bits, %d lanes); "
          "gdn takes float32, float64, float16 and bfloat16", name, dt.code, dt.bits, dt.lanes);
}

// One array's descriptor: shape and strides (in elements) outermost first, as DLPack gives them.
struct ArrayView {
    void *data = nullptr;
    nb::dlpack::dtype dtype;
    Placement where;
    size_t ndim = 0;
    int64_t shape[4] = {}, strides[4] = {};
    int64_t itemsize() const { return (dtype.bits * dtype.lanes + 7) / 8; }
};

// How an array's dimensions become a gdn tensor's, beyond the reversal: as they are; FLA's
// per-head g and beta ([B, T, HV], three dimensions) given a unit innermost dimension; FLA's
// states ([N, HV, K, V]) with the two innermost swapped, gdn's [Sk, Sv, Hv, N] read by strides
// (value-major). gdn.torch's decoding path reads its arguments so, without making views of them
// in Python (a microsecond each, a call of three).
enum class Reading { as_is, unit_inner, swapped_inner };

// One call's arrays: converts each to a gdn_tensor and checks they all live where the context
// computes. Conversion reads only the array's descriptor, never its data: through the DLPack C
// exchange API where the array's type offers it (PyTorch's tensors), else through __dlpack__ or
// the buffer protocol, as nanobind imports arrays (numpy, JAX, ...).
class Binder {
public:
    explicit Binder(const Context &ctx) : ctx_(ctx) {}

    // None: absent (data NULL). An output (writable) must be an array that may be written.
    gdn_tensor tensor(nb::handle a, const char *name, bool writable = false, Reading reading = Reading::as_is) {
        gdn_tensor t{};
        if (a.is_none()) return t;
        const ArrayView view = view_of(a, name, writable);
        if (seen_count_ < kSeen) seen_[seen_count_++] = {name, view};
        if (view.ndim < 1) raise(GDN_ERROR_SHAPE, "%s has %zu dimensions; gdn tensors have 1 to 4", name, view.ndim);
        t.type = element_type(view.dtype, name);
        const int64_t item = view.itemsize();
        for (size_t i = 0; i < 4; ++i) {
            if (i < view.ndim) {
                const size_t axis = view.ndim - 1 - i;
                t.ne[i] = view.shape[axis];
                t.nb[i] = view.strides[axis] * item;
            } else {
                t.ne[i] = 1;
            }
        }
        if (reading == Reading::unit_inner && view.ndim == 3) {  // [B, T, HV] as [B, T, HV, 1]
            for (size_t i = 3; i > 0; --i) {
                t.ne[i] = t.ne[i - 1];
                t.nb[i] = t.nb[i - 1];
            }
            t.ne[0] = 1;
            t.nb[0] = item;
        }
        if (reading == Reading::swapped_inner) {  // [..., K, V] as gdn's [Sk, Sv, ...]: value-major
            std::swap(t.ne[0], t.ne[1]);
            std::swap(t.nb[0], t.nb[1]);
        }
        // A dimension of size 1 is never stepped over: give it the stride just past the span of
        // the dimensions inside it, so that frameworks' arbitrary strides there (0 from expand,
        // say) are not refused. The span, not nb[i-1] * ne[i-1]: in a value-major state (a
        // transposed [..., K, V] view) dimension 1 is the innermost one. A dimension 1 of size 1
        // beside a strided dimension 0 (a state with V = 1 whose keys are a stride apart, a
        // slice of a wider state) takes the element size instead: it is then the contiguous
        // one, as a state's layout rule asks (SPEC 3), and nothing is stepped over either way.
        for (size_t i = 0; i < 4; ++i) {
            if (t.ne[i] != 1) continue;
            int64_t span = item;
            for (size_t j = 0; j < i; ++j) span = std::max(span, t.nb[j] * t.ne[j]);
            t.nb[i] = i == 1 && t.nb[0] != item ? item : span;
        }
        if (!(view.where == ctx_.placement()))
            raise(GDN_ERROR_INVALID_ARGUMENT, "%s is on %s but the context (backend %s) computes on %s", name,
                  describe(view.where).c_str(), ctx_.backend().c_str(), describe(ctx_.placement()).c_str());
        t.data = view.data;
        return t;
    }

    // An index vector: the offsets of packed sequences (cu_seqlens, docs/VARLEN.md) or the state
    // slots of a pooled call (state_indices). int32 or int64, one dimension, on the host or where
    // the context computes (device indices cost the cuda backend one stream synchronisation;
    // host indices none).
    gdn_tensor indices(nb::handle a, const char *name, const char *what) {
        gdn_tensor t{};
        if (a.is_none()) return t;
        const ArrayView view = view_of(a, name, false);
        using nb::dlpack::dtype_code;
        const auto dt = view.dtype;
        const bool i32 = dt.code == static_cast<uint8_t>(dtype_code::Int) && dt.bits == 32 && dt.lanes == 1;
        const bool i64 = dt.code == static_cast<uint8_t>(dtype_code::Int) && dt.bits == 64 && dt.lanes == 1;
        if (!i32 && !i64)
            raise(GDN_ERROR_TYPE, "%s has DLPack code %d, %d bits: %s are int32 or int64", name, dt.code, dt.bits, what);
        if (view.ndim != 1) raise(GDN_ERROR_SHAPE, "%s has %zu dimensions: it is one dimension of %s", name, view.ndim, what);
        const bool host = view.where.type == nb::device::cpu::value;
        if (!host && !(view.where == ctx_.placement()))
            raise(GDN_ERROR_INVALID_ARGUMENT, "%s is on %s but the context (backend %s) computes on %s (host %s are fine too)",
                  name, describe(view.where).c_str(), ctx_.backend().c_str(), describe(ctx_.placement()).c_str(), what);
        const int64_t item = i32 ? 4 : 8;
        t.type = i32 ? GDN_TYPE_I32 : GDN_TYPE_I64;
        t.ne[0] = view.shape[0];
        t.ne[1] = t.ne[2] = t.ne[3] = 1;
        t.nb[0] = t.ne[0] == 1 ? item : view.strides[0] * item;
        t.nb[1] = t.nb[2] = t.nb[3] = t.ne[0] * item;
        // An empty vector given (no sequences: a serving step with no requests) is not an absent
        // one, but PyTorch gives it a NULL data pointer, which the C API reads as absent.
        static const int64_t no_entries = 0;
        t.data = view.data != nullptr || t.ne[0] != 0 ? view.data : const_cast<int64_t *>(&no_entries);
        return t;
    }

    // The array tensor() converted under `name` (its first kSeen), as the caller gave it: rank and
    // shape outermost first, before any Reading. An empty view (ndim 0) where there is none.
    ArrayView view(const char *name) const {
        for (size_t i = 0; i < seen_count_; ++i)
            if (std::strcmp(seen_[i].first, name) == 0) return seen_[i].second;
        return {};
    }

private:
    ArrayView view_of(nb::handle a, const char *name, bool writable) {
        nb::dlpack::dltensor dl;
        if (gdn_python::exchange_view(a.ptr(), dl)) {
            ArrayView view = with_dims(static_cast<size_t>(dl.ndim < 0 ? 0 : dl.ndim), name);
            view.data = static_cast<char *>(dl.data) + dl.byte_offset;
            view.dtype = dl.dtype;
            view.where = Placement{dl.device.device_type, dl.device.device_id};
            int64_t packed = 1;  // DLPack: no strides means row-major and packed
            for (size_t i = view.ndim; i-- > 0;) {
                view.shape[i] = dl.shape[i];
                view.strides[i] = dl.strides ? dl.strides[i] : packed;
                packed *= dl.shape[i];
            }
            return view;
        }
        if (writable) return from_ndarray(import_array<OutArray>(a, name, "a writable array"), name);
        return from_ndarray(import_array<InArray>(a, name, "an array"), name);
    }

    template <class Array>
    const Array &import_array(nb::handle a, const char *name, const char *what) {
        Array array;
        if (!nb::try_cast(a, array))
            raise(GDN_ERROR_INVALID_ARGUMENT, "%s is not %s gdn can read (a torch tensor, a numpy array, anything "
                  "with __dlpack__); got %s", name, what, nb::inst_name(a).c_str());
        auto &kept = keep<Array>();
        kept.push_back(std::move(array));  // imported through __dlpack__: alive for the call
        return kept.back();
    }

    template <class Array>
    ArrayView from_ndarray(const Array &array, const char *name) {
        ArrayView view = with_dims(array.ndim(), name);
        view.data = const_cast<void *>(static_cast<const void *>(array.data()));
        view.dtype = array.dtype();
        view.where = Placement{array.device_type(), array.device_id()};
        for (size_t i = 0; i < view.ndim; ++i) {
            view.shape[i] = static_cast<int64_t>(array.shape(i));
            view.strides[i] = array.stride(i);
        }
        return view;
    }

    static ArrayView with_dims(size_t ndim, const char *name) {
        if (ndim > 4) raise(GDN_ERROR_SHAPE, "%s has %zu dimensions; gdn tensors have 1 to 4", name, ndim);
        ArrayView view;
        view.ndim = ndim;
        return view;
    }

    template <class Array>
    std::deque<Array> &keep() {
        if constexpr (std::is_same_v<Array, InArray>) return inputs_;
        else return outputs_;
    }

    const Context &ctx_;
    static constexpr size_t kSeen = 8;  // a call's tensors (indices are not kept)
    std::pair<const char *, ArrayView> seen_[kSeen];
    size_t seen_count_ = 0;
    std::deque<InArray> inputs_;
    std::deque<OutArray> outputs_;
};

// torch's own in-place writes bump a tensor's version counter, so that autograd refuses a backward
// that saved the values overwritten; the arrays gdn writes through DLPack get the same, after a
// call that wrote them. Inference tensors have no version counter. Without torch imported there is
// no torch tensor to mark.
void mark_written(std::initializer_list<nb::handle> arrays) {
    struct Torch {
        nb::object tensor, increment_version;
        nb::object is_inference = nb::str("is_inference");
    };
    static const Torch *torch = nullptr;  // under the GIL
    if (torch == nullptr) {
        PyObject *module = PyImport_GetModule(nb::str("torch").ptr());  // only if already imported
        if (module == nullptr) {
            PyErr_Clear();
            return;
        }
        nb::module_ m = nb::steal<nb::module_>(module);
        torch = new Torch{m.attr("Tensor"), nb::module_::import_("torch.autograd.graph").attr("increment_version")};
    }
    for (nb::handle a : arrays)
        if (!a.is_none() && nb::isinstance(a, torch->tensor) && !nb::cast<bool>(a.attr(torch->is_inference)()))
            torch->increment_version(a);
}

// scale: None is the library's default 1/sqrt(Sk); any value, 0.0 included, is used as given.
// Every array argument is a nb::handle: None (absent) or an array, converted by Binder.
using Arg = nb::handle;

// precision: a gdn_precision value; the library refuses one it does not know.
// fla_gates: g and beta of three dimensions are FLA's [B, T, HV]; state_kv: the states are FLA's
// [N, HV, K, V] (Reading).
gdn_problem make_problem(Binder &bind, Arg q, Arg k, Arg v, Arg g, Arg beta, Arg state, std::optional<double> scale,
                         int head_map, Arg cu_seqlens, Arg state_indices, int precision, bool fla_gates = false,
                         bool state_kv = false) {
    if (head_map != GDN_HEAD_MAP_TILED && head_map != GDN_HEAD_MAP_GROUPED)
        raise(GDN_ERROR_INVALID_ARGUMENT, "head_map = %d is neither tiled (0) nor grouped (1)", head_map);
    const Reading per_head = fla_gates ? Reading::unit_inner : Reading::as_is;
    gdn_problem p{};
    p.q = bind.tensor(q, "q");
    p.k = bind.tensor(k, "k");
    p.v = bind.tensor(v, "v");
    p.g = bind.tensor(g, "g", false, per_head);
    p.beta = bind.tensor(beta, "beta", false, per_head);
    p.state = bind.tensor(state, "state", false, state_kv ? Reading::swapped_inner : Reading::as_is);
    p.scale = scale.value_or(0.0);
    p.scale_is_explicit = scale.has_value() ? 1 : 0;
    p.head_map = static_cast<gdn_head_map>(head_map);
    p.cu_seqlens = bind.indices(cu_seqlens, "cu_seqlens", "the N + 1 offsets");
    p.state_indices = bind.indices(state_indices, "state_indices", "the state slots, one per sequence");
    p.precision = static_cast<gdn_precision>(precision);
    return p;
}

void forward(Context &ctx, Arg q, Arg k, Arg v, Arg g, Arg beta, Arg state, Arg out, Arg states,
             std::optional<double> scale, int head_map, bool dry_run, Arg cu_seqlens, Arg state_indices, int precision,
             bool fla_gates, bool state_kv) {
    Binder bind(ctx);
    const gdn_problem p = make_problem(bind, q, k, v, g, beta, state, scale, head_map, cu_seqlens, state_indices,
                                       precision, fla_gates, state_kv);
    const gdn_tensor o = bind.tensor(out, "out", true),
                     s = bind.tensor(states, "states", true, state_kv ? Reading::swapped_inner : Reading::as_is);
    const gdn_tensor *o_ptr = out.is_none() ? nullptr : &o, *s_ptr = states.is_none() ? nullptr : &s;
    gdn_status status;
    {
        nb::gil_scoped_release unlocked;
        status = dry_run ? gdn_check_forward(ctx.raw(), &p, o_ptr, s_ptr) : gdn_forward(ctx.raw(), &p, o_ptr, s_ptr);
    }
    ctx.check(status);
    if (!dry_run) mark_written({out, states});
}

// gdn.torch's decoding step (fused_recurrent_gated_delta_rule with the state updated in place):
// the checks that the library does not make, and the call, in one crossing from Python. After a
// call that streams megabytes of states, every Python-level check and torch call runs from cold
// caches at several times its warm cost (measured: allocating the output alone, 1.2 us warm, adds
// 3-4 us to a 27B-shape decoding step), so this path runs as little of either as it can.
// The checks are those of the path's contract: plain torch.Tensor arguments (no subclass, no
// fake tensor), no autograd wanted, q, k, v of one floating dtype, the state in that call's state
// dtype, FLA's ranks ([B, T, H, K] q and k, [B, T, HV, V] v, [B, T, HV] g and beta, a 4-d
// state), q and v of one [B, T], and a scale that is None or a finite float. Where one fails, or
// the library refuses the call (it writes nothing then, SPEC 6), it returns None and the caller
// takes the general path, which says what is wrong in FLA's terms. As torch's in-place ops: an
// inference tensor (the state, out) is written only in inference mode, and the state's and out's
// version counters are bumped (mark_written). Else the output: `out` when given (written), or a
// new tensor like v.
nb::object decoding_step(Context &ctx, Arg q, Arg k, Arg v, Arg g, Arg beta, Arg state, Arg state_indices, Arg out,
                         Arg scale, bool state_kv, int precision) {
    struct Torch {
        nb::object tensor, is_grad_enabled, is_inference_mode_enabled, empty_like, contiguous_format, increment_version;
        nb::object requires_grad = nb::str("requires_grad"), memory_format = nb::str("memory_format"),
                   is_inference = nb::str("is_inference");
    };
    static const Torch *torch = [] {  // under the GIL; kept for the process, as torch itself is
        nb::module_ m = nb::module_::import_("torch");
        return new Torch{m.attr("Tensor"), m.attr("is_grad_enabled"), m.attr("is_inference_mode_enabled"),
                         m.attr("empty_like"), m.attr("contiguous_format"),
                         nb::module_::import_("torch.autograd.graph").attr("increment_version")};
    }();
    const nb::handle tensors[] = {q, k, v, g, beta, state};
    for (nb::handle t : tensors)
        if (!t.type().is(torch->tensor)) return nb::none();
    if (!(state_indices.is_none() || state_indices.type().is(torch->tensor))) return nb::none();
    if (!(out.is_none() || out.type().is(torch->tensor))) return nb::none();
    if (!(scale.is_none() || (PyFloat_CheckExact(scale.ptr()) && std::isfinite(PyFloat_AS_DOUBLE(scale.ptr())))))
        return nb::none();
    if (nb::cast<bool>(torch->is_grad_enabled())) {
        for (nb::handle t : tensors)
            if (nb::cast<bool>(t.attr(torch->requires_grad))) return nb::none();
        if (!out.is_none() && nb::cast<bool>(out.attr(torch->requires_grad))) return nb::none();
    }
    const bool state_counted = !nb::cast<bool>(state.attr(torch->is_inference)()),
               out_counted = !out.is_none() && !nb::cast<bool>(out.attr(torch->is_inference)());
    if ((!state_counted || (!out.is_none() && !out_counted)) && !nb::cast<bool>(torch->is_inference_mode_enabled()))
        return nb::none();
    const auto floating = [](gdn_type t) {
        return t == GDN_TYPE_F32 || t == GDN_TYPE_F64 || t == GDN_TYPE_BF16 || t == GDN_TYPE_F16;
    };
    gdn_status status;
    nb::object o;
    try {
        Binder bind(ctx);
        const std::optional<double> scale_value =
            scale.is_none() ? std::nullopt : std::optional<double>(PyFloat_AS_DOUBLE(scale.ptr()));
        gdn_problem p = make_problem(bind, q, k, v, g, beta, state, scale_value, GDN_HEAD_MAP_GROUPED, nb::none(),
                                     state_indices, precision, true, state_kv);
        const ArrayView qv = bind.view("q"), vv = bind.view("v");
        const gdn_type call = p.q.type;
        if (!(floating(call) && p.k.type == call && p.v.type == call && floating(p.g.type) && floating(p.beta.type) &&
              p.state.type == (call == GDN_TYPE_F64 ? GDN_TYPE_F64 : GDN_TYPE_F32)))
            return nb::none();
        if (!(qv.ndim == 4 && bind.view("k").ndim == 4 && vv.ndim == 4 && bind.view("g").ndim == 3 &&
              bind.view("beta").ndim == 3 && bind.view("state").ndim == 4))
            return nb::none();
        if (!(vv.shape[0] == qv.shape[0] && vv.shape[1] == qv.shape[1] && qv.shape[2] && qv.shape[3] && vv.shape[2] &&
              vv.shape[3]))
            return nb::none();
        o = out.is_none() ? torch->empty_like(v, nb::arg("memory_format") = torch->contiguous_format) : nb::borrow(out);
        const gdn_tensor o_t = bind.tensor(o, "out", true);
        const ArrayView ov = bind.view("out");  // out=: v's shape, q's dtype (as o would be)
        if (!(o_t.type == call && ov.ndim == 4 && std::equal(ov.shape, ov.shape + 4, vv.shape))) return nb::none();
        nb::gil_scoped_release unlocked;
        status = gdn_forward(ctx.raw(), &p, &o_t, &p.state);
    } catch (const GdnError &) {  // an argument the binding cannot read: the general path says which
        return nb::none();
    }
    switch (status) {
    case GDN_OK:
        if (state_counted) torch->increment_version(state);
        if (out_counted) torch->increment_version(out);
        return o;
    case GDN_ERROR_INVALID_ARGUMENT:
    case GDN_ERROR_SHAPE:
    case GDN_ERROR_LAYOUT:
    case GDN_ERROR_TYPE:
    case GDN_ERROR_ALIAS:
    case GDN_ERROR_UNSUPPORTED:
        return nb::none();  // refused, nothing written
    default:
        ctx.check(status);  // the call failed: raised, not retried
        return nb::none();
    }
}

void backward(Context &ctx, Arg q, Arg k, Arg v, Arg g, Arg beta, Arg state, Arg d_out, Arg d_states, Arg dq, Arg dk,
              Arg dv, Arg dg, Arg dbeta, Arg dstate, std::optional<double> scale, int head_map, bool dry_run,
              Arg cu_seqlens, Arg state_indices, int precision) {
    Binder bind(ctx);
    const gdn_problem p =
        make_problem(bind, q, k, v, g, beta, state, scale, head_map, cu_seqlens, state_indices, precision);
    const gdn_tensor d_o = bind.tensor(d_out, "d_out"), d_s = bind.tensor(d_states, "d_states");
    const gdn_grads grads{bind.tensor(dq, "dq", true), bind.tensor(dk, "dk", true),
                          bind.tensor(dv, "dv", true), bind.tensor(dg, "dg", true),
                          bind.tensor(dbeta, "dbeta", true), bind.tensor(dstate, "dstate", true)};
    const gdn_tensor *do_ptr = d_out.is_none() ? nullptr : &d_o, *ds_ptr = d_states.is_none() ? nullptr : &d_s;
    gdn_status status;
    {
        nb::gil_scoped_release unlocked;
        status = dry_run ? gdn_check_backward(ctx.raw(), &p, do_ptr, ds_ptr, &grads)
                         : gdn_backward(ctx.raw(), &p, do_ptr, ds_ptr, &grads);
    }
    ctx.check(status);
    if (!dry_run) mark_written({dq, dk, dv, dg, dbeta, dstate});
}

}  // namespace

NB_MODULE(_gdn, m) {
    m.doc() = "gdn's C API on DLPack arrays; use the gdn package, not this module";

    nb::register_exception_translator([](const std::exception_ptr &p, void *) {
        try {
            std::rethrow_exception(p);
        } catch (const GdnError &e) {
            // The Python side owns the exception classes (gdn/_errors.py): one per status.
            nb::object cls = nb::module_::import_("gdn._errors").attr("error_class")(e.status);
            PyErr_SetObject(cls.ptr(), nb::str(e.message.c_str()).ptr());
        }
    });

    nb::class_<Context>(m, "Context")
        .def(nb::init<std::optional<std::string>, int, int, int, uintptr_t>(), nb::arg("backend").none(),
             nb::arg("threads"), nb::arg("chunk_size"), nb::arg("device"), nb::arg("stream"))
        .def_prop_ro("backend", &Context::backend)
        .def_prop_ro("workspace_bytes", &Context::workspace_bytes)
        // The gdn_context* itself, for the C API called directly (ctypes); this object owns it.
        .def_prop_ro("address", [](const Context &c) { return reinterpret_cast<uintptr_t>(c.raw()); })
        .def("release_workspace", &Context::release_workspace);

    m.def("forward", &forward, nb::arg("ctx"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
          nb::arg("beta"), nb::arg("state").none(), nb::arg("out").none(), nb::arg("states").none(), nb::arg("scale").none(),
          nb::arg("head_map"), nb::arg("dry_run"), nb::arg("cu_seqlens").none() = nb::none(),
          nb::arg("state_indices").none() = nb::none(), nb::arg("precision") = 0, nb::arg("fla_gates") = false,
          nb::arg("state_kv") = false);
    m.def("backward", &backward, nb::arg("ctx"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
          nb::arg("beta"), nb::arg("state").none(), nb::arg("d_out").none(), nb::arg("d_states").none(),
          nb::arg("dq").none(), nb::arg("dk").none(), nb::arg("dv").none(), nb::arg("dg").none(),
          nb::arg("dbeta").none(), nb::arg("dstate").none(), nb::arg("scale").none(), nb::arg("head_map"),
          nb::arg("dry_run"), nb::arg("cu_seqlens").none() = nb::none(),
          nb::arg("state_indices").none() = nb::none(), nb::arg("precision") = 0);
    m.def("decoding_step", &decoding_step, nb::arg("ctx"), nb::arg("q").none(), nb::arg("k").none(),
          nb::arg("v").none(), nb::arg("g").none(), nb::arg("beta").none(), nb::arg("state").none(),
          nb::arg("state_indices").none(), nb::arg("out").none(),
          nb::arg("scale").none(), nb::arg("state_kv"), nb::arg("precision"));
    gdn_python::bind_l2norm(m);
    gdn_python::bind_memory(m);
    m.def("backend_available", [](const std::string &name) { return gdn_backend_available(name.c_str()) != 0; });
    m.def("status_string", [](int s) { return std::string(gdn_status_string(static_cast<gdn_status>(s))); });
    m.attr("version") = gdn_version();
}
