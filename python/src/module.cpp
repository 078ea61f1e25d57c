// gdn._gdn: the C API on DLPack arrays (numpy, torch, anything with __dlpack__), zero copy.
//
// An array's shape is read outermost first, as numpy and torch print it, so it is the reverse of
// gdn's ne[]: a [B, T, H, S] array is the tensor ne = {S, H, T, B}. Strides are passed through
// (q, k and v may be views into one packed projection buffer); the library validates them.
// Errors are thrown as GdnError and become the gdn.Error subclass of their status in Python.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

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

// One call's arrays: converts each to a gdn_tensor and checks they all live where the context
// computes. Conversion reads only the array's descriptor, never its data.
class Binder {
public:
    explicit Binder(const Context &ctx) : ctx_(ctx) {}

    template <class Array>
    gdn_tensor tensor(const std::optional<Array> &a, const char *name) {
        gdn_tensor t{};
        if (!a) return t;  // absent: data NULL
        const size_t ndim = a->ndim();
        if (ndim < 1 || ndim > 4)
            raise(GDN_ERROR_SHAPE, "%s has %zu dimensions; gdn tensors have 1 to 4", name, ndim);
        t.type = element_type(a->dtype(), name);
        const int64_t item = a->itemsize();
        for (size_t i = 0; i < 4; ++i) {
            if (i < ndim) {
                const size_t axis = ndim - 1 - i;
                t.ne[i] = static_cast<int64_t>(a->shape(axis));
                t.nb[i] = a->stride(axis) * item;
            } else {
                t.ne[i] = 1;
            }
            // A dimension of size 1 is never stepped over: give it the packed stride so that
            // frameworks' arbitrary strides there (0 from expand, say) are not refused.
            if (t.ne[i] == 1) t.nb[i] = i == 0 ? item : t.nb[i - 1] * t.ne[i - 1];
        }
        const Placement where{a->device_type(), a->device_id()};
        if (!(where == ctx_.placement()))
            raise(GDN_ERROR_INVALID_ARGUMENT, "%s is on %s but the context (backend %s) computes on %s", name,
                  describe(where).c_str(), ctx_.backend().c_str(), describe(ctx_.placement()).c_str());
        t.data = const_cast<void *>(static_cast<const void *>(a->data()));
        return t;
    }

    // The offsets of packed sequences (docs/VARLEN.md): int32 or int64, one dimension, on the
    // host or where the context computes (device offsets cost the cuda backend one stream
    // synchronisation; host offsets none).
    gdn_tensor offsets(const std::optional<InArray> &a) {
        gdn_tensor t{};
        if (!a) return t;
        using nb::dlpack::dtype_code;
        const auto dt = a->dtype();
        const bool i32 = dt.code == static_cast<uint8_t>(dtype_code::Int) && dt.bits == 32 && dt.lanes == 1;
        const bool i64 = dt.code == static_cast<uint8_t>(dtype_code::Int) && dt.bits == 64 && dt.lanes == 1;
        if (!i32 && !i64)
            raise(GDN_ERROR_TYPE, "cu_seqlens has DLPack code %d, %d bits: the offsets are int32 or int64", dt.code, dt.bits);
        if (a->ndim() != 1) raise(GDN_ERROR_SHAPE, "cu_seqlens has %zu dimensions: it is one dimension of N + 1 offsets", a->ndim());
        const Placement where{a->device_type(), a->device_id()};
        const bool host = where.type == nb::device::cpu::value;
        if (!host && !(where == ctx_.placement()))
            raise(GDN_ERROR_INVALID_ARGUMENT, "cu_seqlens is on %s but the context (backend %s) computes on %s (host offsets are fine too)",
                  describe(where).c_str(), ctx_.backend().c_str(), describe(ctx_.placement()).c_str());
        const int64_t item = i32 ? 4 : 8;
        t.type = i32 ? GDN_TYPE_I32 : GDN_TYPE_I64;
        t.ne[0] = static_cast<int64_t>(a->shape(0));
        t.ne[1] = t.ne[2] = t.ne[3] = 1;
        t.nb[0] = t.ne[0] == 1 ? item : a->stride(0) * item;
        t.nb[1] = t.nb[2] = t.nb[3] = t.ne[0] * item;
        t.data = const_cast<void *>(static_cast<const void *>(a->data()));
        return t;
    }

private:
    const Context &ctx_;
};

using In = std::optional<InArray>;
using Out = std::optional<OutArray>;

// scale: None is the library's default 1/sqrt(Sk); any value, 0.0 included, is used as given.
gdn_problem make_problem(Binder &bind, const InArray &q, const InArray &k, const InArray &v, const InArray &g,
                         const InArray &beta, const In &state, std::optional<double> scale, int head_map,
                         const In &cu_seqlens) {
    if (head_map != GDN_HEAD_MAP_TILED && head_map != GDN_HEAD_MAP_GROUPED)
        raise(GDN_ERROR_INVALID_ARGUMENT, "head_map = %d is neither tiled (0) nor grouped (1)", head_map);
    gdn_problem p{};
    p.q = bind.tensor(In(q), "q");
    p.k = bind.tensor(In(k), "k");
    p.v = bind.tensor(In(v), "v");
    p.g = bind.tensor(In(g), "g");
    p.beta = bind.tensor(In(beta), "beta");
    p.state = bind.tensor(state, "state");
    p.scale = scale.value_or(0.0);
    p.scale_is_explicit = scale.has_value() ? 1 : 0;
    p.head_map = static_cast<gdn_head_map>(head_map);
    p.cu_seqlens = bind.offsets(cu_seqlens);
    return p;
}

void forward(Context &ctx, const InArray &q, const InArray &k, const InArray &v, const InArray &g,
             const InArray &beta, const In &state, const Out &out, const Out &states, std::optional<double> scale, int head_map,
             bool dry_run, const In &cu_seqlens) {
    Binder bind(ctx);
    const gdn_problem p = make_problem(bind, q, k, v, g, beta, state, scale, head_map, cu_seqlens);
    const gdn_tensor o = bind.tensor(out, "out"), s = bind.tensor(states, "states");
    const gdn_tensor *o_ptr = out ? &o : nullptr, *s_ptr = states ? &s : nullptr;
    gdn_status status;
    {
        nb::gil_scoped_release unlocked;
        status = dry_run ? gdn_check_forward(ctx.raw(), &p, o_ptr, s_ptr) : gdn_forward(ctx.raw(), &p, o_ptr, s_ptr);
    }
    ctx.check(status);
}

void backward(Context &ctx, const InArray &q, const InArray &k, const InArray &v, const InArray &g,
              const InArray &beta, const In &state, const In &d_out, const In &d_states, const Out &dq,
              const Out &dk, const Out &dv, const Out &dg, const Out &dbeta, const Out &dstate, std::optional<double> scale,
              int head_map, bool dry_run, const In &cu_seqlens) {
    Binder bind(ctx);
    const gdn_problem p = make_problem(bind, q, k, v, g, beta, state, scale, head_map, cu_seqlens);
    const gdn_tensor d_o = bind.tensor(d_out, "d_out"), d_s = bind.tensor(d_states, "d_states");
    const gdn_grads grads{bind.tensor(dq, "dq"), bind.tensor(dk, "dk"),     bind.tensor(dv, "dv"),
                          bind.tensor(dg, "dg"), bind.tensor(dbeta, "dbeta"), bind.tensor(dstate, "dstate")};
    const gdn_tensor *do_ptr = d_out ? &d_o : nullptr, *ds_ptr = d_states ? &d_s : nullptr;
    gdn_status status;
    {
        nb::gil_scoped_release unlocked;
        status = dry_run ? gdn_check_backward(ctx.raw(), &p, do_ptr, ds_ptr, &grads)
                         : gdn_backward(ctx.raw(), &p, do_ptr, ds_ptr, &grads);
    }
    ctx.check(status);
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
        .def("release_workspace", &Context::release_workspace);

    m.def("forward", &forward, nb::arg("ctx"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
          nb::arg("beta"), nb::arg("state").none(), nb::arg("out").none(), nb::arg("states").none(), nb::arg("scale").none(),
          nb::arg("head_map"), nb::arg("dry_run"), nb::arg("cu_seqlens").none() = nb::none());
    m.def("backward", &backward, nb::arg("ctx"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("g"),
          nb::arg("beta"), nb::arg("state").none(), nb::arg("d_out").none(), nb::arg("d_states").none(),
          nb::arg("dq").none(), nb::arg("dk").none(), nb::arg("dv").none(), nb::arg("dg").none(),
          nb::arg("dbeta").none(), nb::arg("dstate").none(), nb::arg("scale").none(), nb::arg("head_map"),
          nb::arg("dry_run"), nb::arg("cu_seqlens").none() = nb::none());
    gdn_python::bind_l2norm(m);
    gdn_python::bind_memory(m);
    m.def("backend_available", [](const std::string &name) { return gdn_backend_available(name.c_str()) != 0; });
    m.def("status_string", [](int s) { return std::string(gdn_status_string(static_cast<gdn_status>(s))); });
    m.attr("version") = gdn_version();
}
