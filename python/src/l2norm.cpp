// Row normalisation of q and k for gdn.torch's use_qk_l2norm_in_kernel, on host arrays:
//   y = x r,  r = 1 / sqrt(sum x^2 + eps)            (per row of the last dimension)
//   dx = r dy - x r^3 (x . dy)                        (its backward, given x and dy)
// PyTorch composes the forward from four element-wise ops whose autograd keeps their results,
// and each fresh 30-MB temporary costs page faults; here one pass writes y, and the backward
// turns dy into dx in place. Sums are kept in double (an exact-enough sum of 128 squares); x and
// y may have any strides over the leading dimensions but are contiguous along a row.
// bfloat16 and float16 rows are read in place, computed on in float32 and rounded once as they
// are written: the float32 call's bits on the converted values, rounded to the row's type (what
// FLA's kernel does, with no float32 copy of q and k in between).
#include "l2norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "math/elements.h"  // the library's bf16/f16 conversions: exact reads, rounding once

namespace gdn_python {
namespace {

using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

// Rows of a [d0, d1, d2, n] view: element (i0, i1, i2, j) at data + i0*s0 + i1*s1 + i2*s2 + j.
template <class T>
struct Rows {
    T *data;
    int64_t count[3], stride[3], n;
    T *row(int64_t r) const {
        const int64_t i2 = r % count[2], i1 = (r / count[2]) % count[1], i0 = r / (count[2] * count[1]);
        return data + i0 * stride[0] + i1 * stride[1] + i2 * stride[2];
    }
    int64_t total() const { return count[0] * count[1] * count[2]; }
};

template <class T, class Array>
Rows<T> rows_of(const Array &a) {
    T *data = static_cast<T *>(const_cast<void *>(static_cast<const void *>(a.data())));
    Rows<T> r{data, {1, 1, 1}, {0, 0, 0}, static_cast<int64_t>(a.shape(a.ndim() - 1))};
    const size_t lead = a.ndim() - 1;
    for (size_t i = 0; i < lead; ++i) {
        r.count[3 - lead + i] = static_cast<int64_t>(a.shape(i));
        r.stride[3 - lead + i] = a.stride(i);
    }
    return r;
}

// Runs body(begin, end) over [0, total) rows on up to `threads` threads.
template <class Body>
void parallel_rows(int64_t total, int threads, const Body &body) {
    const int64_t min_rows_per_thread = 1024;  // below this, a thread costs more than it saves
    const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(threads, total / min_rows_per_thread));
    if (workers == 1) return body(int64_t(0), total);
    std::vector<std::thread> pool;
    int64_t started = 1;  // ranges [0, started) have a thread (range 0: this one)
    try {
        for (; started < workers; ++started)
            pool.emplace_back([&, w = started] { body(total * w / workers, total * (w + 1) / workers); });
    } catch (const std::system_error &) {
        // No more threads to be had: this thread runs the ranges that have none.
    }
    body(int64_t(0), total / workers);
    if (started < workers) body(total * started / workers, total);
    for (auto &t : pool) t.join();
}

// Calls row_fn(x row, y row) for every row pair, the rows split over up to `threads` threads.
template <class T, class RowFn>
void for_each_row(const Rows<T> &x, const Rows<T> &y, int threads, const RowFn &row_fn) {
    parallel_rows(x.total(), threads, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) row_fn(static_cast<const T *>(x.row(r)), y.row(r));
    });
}

// How a row element of each type is read and written. Acc is what the row is computed in: the
// type itself for float32 and float64, float32 for the halves (their conversions are exact both
// ways but the final rounding, so the arithmetic is the float32 call's).
struct F32 {
    using Storage = float;
    using Acc = float;
    static Acc load(Storage x) { return x; }
    static Storage store(Acc x) { return x; }
};
struct F64 {
    using Storage = double;
    using Acc = double;
    static Acc load(Storage x) { return x; }
    static Storage store(Acc x) { return x; }
};
struct BF16 {
    using Storage = uint16_t;
    using Acc = float;
    static Acc load(Storage x) { return gdn::bf16_to_float(x); }
    static Storage store(Acc x) { return gdn::float_to_bf16(x); }
};
struct F16 {
    using Storage = uint16_t;
    using Acc = float;
    static Acc load(Storage x) { return gdn::f16_to_float(x); }
    static Storage store(Acc x) { return gdn::float_to_f16(x); }
};

template <class E>
void normalize(const Rows<typename E::Storage> &x, const Rows<typename E::Storage> &y, double eps, int threads) {
    using S = typename E::Storage;
    using Acc = typename E::Acc;
    const int64_t n = x.n;
    for_each_row(x, y, threads, [&](const S *xr, S *yr) {
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            const double xj = E::load(xr[j]);
            sum += xj * xj;
        }
        const Acc inv = static_cast<Acc>(1.0 / std::sqrt(sum + eps));
        for (int64_t j = 0; j < n; ++j) yr[j] = E::store(E::load(xr[j]) * inv);
    });
}

template <class E>
void normalize_backward(const Rows<typename E::Storage> &x, const Rows<typename E::Storage> &dy, double eps,
                        int threads) {
    using S = typename E::Storage;
    using Acc = typename E::Acc;
    const int64_t n = x.n;
    for_each_row(x, dy, threads, [&](const S *xr, S *gr) {
        double sum = 0.0, dot = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            const double xj = E::load(xr[j]);
            sum += xj * xj;
            dot += xj * double(E::load(gr[j]));
        }
        const double inv = 1.0 / std::sqrt(sum + eps);
        const Acc a = static_cast<Acc>(inv), b = static_cast<Acc>(inv * inv * inv * dot);
        for (int64_t j = 0; j < n; ++j) gr[j] = E::store(a * E::load(gr[j]) - b * E::load(xr[j]));
    });
}

enum class Kind { F32, F64, BF16, F16 };

// x and y: host arrays of one floating type, the same shape (1 to 4 dimensions), rows contiguous.
Kind checked_kind(const InArray &x, const OutArray &y, const char *what) {
    using nb::dlpack::dtype_code;
    auto kind = [](const auto &a) -> std::optional<Kind> {
        const auto dt = a.dtype();
        if (dt.lanes != 1) return std::nullopt;
        if (dt.code == static_cast<uint8_t>(dtype_code::Float)) {
            if (dt.bits == 32) return Kind::F32;
            if (dt.bits == 64) return Kind::F64;
            if (dt.bits == 16) return Kind::F16;
        }
        if (dt.code == static_cast<uint8_t>(dtype_code::Bfloat) && dt.bits == 16) return Kind::BF16;
        return std::nullopt;
    };
    const auto kx = kind(x);
    if (!kx || kx != kind(y))
        throw nb::type_error(
            (std::string(what) + ": float32, float64, bfloat16 or float16 arrays of one type").c_str());
    if (x.ndim() < 1 || x.ndim() > 4 || x.ndim() != y.ndim())
        throw nb::value_error((std::string(what) + ": arrays of 1 to 4 dimensions, both the same").c_str());
    for (size_t i = 0; i < x.ndim(); ++i)
        if (x.shape(i) != y.shape(i)) throw nb::value_error((std::string(what) + ": the arrays differ in shape").c_str());
    if (x.device_type() != nb::device::cpu::value || y.device_type() != nb::device::cpu::value)
        throw nb::value_error((std::string(what) + ": host arrays only").c_str());
    const size_t last = x.ndim() - 1;
    if ((x.shape(last) > 1 && x.stride(last) != 1) || (y.shape(last) > 1 && y.stride(last) != 1))
        throw nb::value_error((std::string(what) + ": rows (the last dimension) must be contiguous").c_str());
    for (size_t i = 0; i < last; ++i)
        if (y.shape(i) > 1 && y.stride(i) == 0)
            throw nb::value_error((std::string(what) + ": the output's rows overlap (a stride of 0)").c_str());
    return *kx;
}

// Calls fn(E{}) with the element type E of kind.
template <class Fn>
void by_kind(Kind kind, const Fn &fn) {
    switch (kind) {
        case Kind::F64: return fn(F64{});
        case Kind::BF16: return fn(BF16{});
        case Kind::F16: return fn(F16{});
        default: return fn(F32{});
    }
}

void l2norm_rows(const InArray &x, const OutArray &y, double eps, int threads) {
    const Kind kind = checked_kind(x, y, "l2norm_rows");
    nb::gil_scoped_release unlocked;
    by_kind(kind, [&](auto e) {
        using E = decltype(e);
        normalize<E>(rows_of<typename E::Storage>(x), rows_of<typename E::Storage>(y), eps, threads);
    });
}

void l2norm_rows_backward(const InArray &x, const OutArray &dy, double eps, int threads) {
    const Kind kind = checked_kind(x, dy, "l2norm_rows_backward");
    nb::gil_scoped_release unlocked;
    by_kind(kind, [&](auto e) {
        using E = decltype(e);
        normalize_backward<E>(rows_of<typename E::Storage>(x), rows_of<typename E::Storage>(dy), eps, threads);
    });
}

}  // namespace

void bind_l2norm(nb::module_ &m) {
    m.def("l2norm_rows", &l2norm_rows, nb::arg("x"), nb::arg("y"), nb::arg("eps"), nb::arg("threads"),
          "y = x / sqrt(sum(x^2, last dim) + eps), written into y");
    m.def("l2norm_rows_backward", &l2norm_rows_backward, nb::arg("x"), nb::arg("dy"), nb::arg("eps"),
          nb::arg("threads"), "dy becomes dx, the gradient through l2norm_rows at x");
}

}  // namespace gdn_python
