#include "host_problem.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "math/elements.h"
#include "random.h"

namespace gdn::reftest {

namespace {

size_t element_bytes(gdn_type type) {
    return type == GDN_TYPE_F64 ? 8 : type == GDN_TYPE_BF16 || type == GDN_TYPE_F16 ? 2 : 4;
}

}  // namespace

gdn_type state_type(gdn_type q_type) { return q_type == GDN_TYPE_F64 ? GDN_TYPE_F64 : GDN_TYPE_F32; }

HostTensor::HostTensor(gdn_type type, Extents ne) : type_(type), ne_(ne) {
    if (type != GDN_TYPE_F32 && type != GDN_TYPE_F64 && type != GDN_TYPE_BF16 && type != GDN_TYPE_F16)
        throw std::logic_error("HostTensor holds F32, F64, BF16 or F16");
    bytes_.assign(static_cast<size_t>(count()) * element_bytes(type), 0xFF);
}

double HostTensor::get(int64_t flat) const {
    double x;
    load_elements(type_, bytes_.data() + flat * element_bytes(type_), 1, &x);
    return x;
}

void HostTensor::set(int64_t flat, double x) { store_elements(type_, bytes_.data() + flat * element_bytes(type_), 1, &x); }

bool HostTensor::element_is_poison(int64_t flat) const {
    const size_t es = element_bytes(type_);
    for (size_t b = 0; b < es; ++b)
        if (bytes_[flat * es + b] != 0xFF) return false;
    return true;
}

gdn_tensor HostTensor::view() const {
    gdn_tensor t{};
    t.type = type_;
    if (absent()) return t;
    t.data = bytes_.data();
    int64_t stride = static_cast<int64_t>(element_bytes(type_));
    for (int d = 0; d < 4; ++d) {
        t.ne[d] = ne_[d];
        t.nb[d] = stride;
        stride *= ne_[d];
    }
    return t;
}

HostTensor gather(const HostTensor &in, int dim, const std::vector<int64_t> &source) {
    Extents ne = in.ne();
    ne[dim] = static_cast<int64_t>(source.size());
    HostTensor out(in.type(), ne);
    for (int64_t i3 = 0; i3 < ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < ne[0]; ++i0) {
                    int64_t idx[4] = {i0, i1, i2, i3};
                    idx[dim] = source[static_cast<size_t>(idx[dim])];
                    out.put(i0, i1, i2, i3, in.at(idx[0], idx[1], idx[2], idx[3]));
                }
    return out;
}

std::vector<int64_t> range(int64_t first, int64_t last) {
    std::vector<int64_t> r;
    for (int64_t i = first; i < last; ++i) r.push_back(i);
    return r;
}

HostTensor retyped(const HostTensor &in, gdn_type type) {
    if (in.absent()) return {};
    HostTensor out(type, in.ne());
    for (int64_t i = 0; i < in.count(); ++i) out.set(i, in.get(i));
    return out;
}

HostTensor sum(const HostTensor &a, const HostTensor &b) {
    if (a.ne() != b.ne() || a.type() != b.type()) throw std::logic_error("sum of different tensors");
    HostTensor out(a.type(), a.ne());
    for (int64_t n = 0; n < a.count(); ++n) out.set(n, a.get(n) + b.get(n));
    return out;
}

gdn_problem HostProblem::view() const {
    gdn_problem p{};
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.g = g.view();
    p.beta = beta.view();
    p.state = state.view();
    p.state.type = state_type(q.type());
    p.scale = scale;
    p.head_map = sizes.heads;
    return p;
}

HostTensor random_tensor(gdn_type type, Extents ne, uint64_t seed, double sigma) {
    HostTensor t(type, ne);
    testkit::Random rng(seed);
    for (int64_t n = 0; n < t.count(); ++n) t.set(n, sigma * rng.normal());
    return t;
}

namespace {

HostTensor unit_rows(gdn_type type, Extents ne, testkit::Random &rng) {
    HostTensor t(type, ne);
    const int64_t row = ne[0];
    for (int64_t r = 0; r < t.count(); r += row) {
        std::vector<double> x(static_cast<size_t>(row));
        double norm = 0;
        for (double &e : x) {
            e = rng.normal();
            norm += e * e;
        }
        norm = std::sqrt(norm);
        for (int64_t i = 0; i < row; ++i) t.set(r + i, x[static_cast<size_t>(i)] / norm);
    }
    return t;
}

HostTensor uniform(gdn_type type, Extents ne, testkit::Random &rng, double lo, double hi) {
    HostTensor t(type, ne);
    for (int64_t n = 0; n < t.count(); ++n) t.set(n, rng.uniform(lo, hi));
    return t;
}

}  // namespace

HostProblem random_problem(const Sizes &s, gdn_type type, uint64_t seed, bool with_state) {
    testkit::Random rng(seed);
    HostProblem p;
    p.sizes = s;
    p.q = unit_rows(type, {s.Sk, s.Hk, s.T, s.Bq}, rng);
    p.k = unit_rows(type, {s.Sk, s.Hk, s.T, s.Bq}, rng);
    p.v = HostTensor(type, {s.Sv, s.Hv, s.T, s.B});
    for (int64_t n = 0; n < p.v.count(); ++n) p.v.set(n, rng.normal());
    p.g = uniform(type, {s.kda ? s.Sk : 1, s.Hv, s.T, s.B}, rng, -0.3, -0.02);
    p.beta = uniform(type, {1, s.Hv, s.T, s.B}, rng, 0.0, 1.0);
    if (with_state) {
        p.state = HostTensor(state_type(type), {s.Sk, s.Sv, s.Hv, s.B});
        for (int64_t n = 0; n < p.state.count(); ++n) p.state.set(n, 0.5 * rng.normal());
    }
    return p;
}

HostProblem token_range(const HostProblem &p, int64_t t0, int64_t t1, const HostTensor &s0) {
    HostProblem r;
    r.sizes = p.sizes;
    r.sizes.T = t1 - t0;
    const std::vector<int64_t> tokens = range(t0, t1);
    r.q = gather(p.q, 2, tokens);
    r.k = gather(p.k, 2, tokens);
    r.v = gather(p.v, 2, tokens);
    r.g = gather(p.g, 2, tokens);
    r.beta = gather(p.beta, 2, tokens);
    r.state = s0;
    r.scale = p.scale;
    return r;
}

ForwardResult forward(gdn_context *ctx, const HostProblem &p, int64_t K) {
    const Sizes &s = p.sizes;
    ForwardResult r{HostTensor(p.v.type(), {s.Sv, s.Hv, s.T, s.B}), HostTensor(state_type(p.q.type()), {s.Sk, s.Sv, s.Hv, s.B * K})};
    const gdn_problem problem = p.view();
    const gdn_tensor out = r.out.view(), states = r.states.view();
    if (gdn_forward(ctx, &problem, &out, &states) != GDN_OK)
        throw std::runtime_error(std::string("gdn_forward: ") + gdn_last_error(ctx));
    return r;
}

Gradients backward(gdn_context *ctx, const HostProblem &p, const HostTensor &d_out, const HostTensor &d_states) {
    const Sizes &s = p.sizes;
    Gradients r{HostTensor(p.q.type(), p.q.ne()), HostTensor(p.k.type(), p.k.ne()),       HostTensor(p.v.type(), p.v.ne()),
                HostTensor(p.g.type(), p.g.ne()), HostTensor(p.beta.type(), p.beta.ne()), HostTensor(state_type(p.q.type()), {s.Sk, s.Sv, s.Hv, s.B})};
    const gdn_problem problem = p.view();
    const gdn_tensor dout = d_out.view(), dstates = d_states.view();
    const gdn_grads grads{r.dq.view(), r.dk.view(), r.dv.view(), r.dg.view(), r.dbeta.view(), r.ds0.view()};
    if (gdn_backward(ctx, &problem, &dout, &dstates, &grads) != GDN_OK)
        throw std::runtime_error(std::string("gdn_backward: ") + gdn_last_error(ctx));
    return r;
}

double relative_difference(const HostTensor &a, const HostTensor &b) {
    if (a.ne() != b.ne()) return INFINITY;
    double diff = 0, scale = 0;
    for (int64_t n = 0; n < a.count(); ++n) {
        const double x = a.get(n), y = b.get(n);
        if (std::isnan(x) || std::isnan(y)) return INFINITY;
        diff = std::max(diff, std::fabs(x - y));
        scale = std::max(scale, std::fabs(y));
    }
    if (diff == 0) return 0;
    return scale > 0 ? diff / scale : INFINITY;
}

bool same_bits(const HostTensor &a, const HostTensor &b) {
    return a.type() == b.type() && a.ne() == b.ne() && a.bytes() == b.bytes();
}

BackendContext::BackendContext(const char *backend) {
    if (gdn_context_create(backend, nullptr, &ctx_) != GDN_OK)
        throw std::runtime_error(std::string("cannot create a ") + backend + " context: " + gdn_last_create_error());
}

BackendContext::~BackendContext() { gdn_context_free(ctx_); }

}  // namespace gdn::reftest
