#include "cuda_fixture.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

namespace gdn_cuda_test {

bool device_available(std::string &why) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        why = std::string("no CUDA device: cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
        cudaGetLastError();
        return false;
    }
    if (count == 0) {
        why = "no CUDA device: cudaGetDeviceCount returned 0";
        return false;
    }
    return true;
}

static void check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

Mirror::Mirror(size_t count, float fill) : host(count, fill) {
    check(cudaMalloc(reinterpret_cast<void **>(&device), count * sizeof(float)), "cudaMalloc");
    upload();
}
Mirror::~Mirror() { cudaFree(device); }
void Mirror::upload() { check(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "upload"); }
void Mirror::download() { check(cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost), "download"); }

static Tensor view(std::shared_ptr<Mirror> buffer, int64_t offset, const int64_t ne[4], const int64_t nb[4]) {
    Tensor t;
    t.buffer = std::move(buffer);
    for (int d = 0; d < 4; ++d) {
        t.host.ne[d] = t.device.ne[d] = ne[d];
        t.host.nb[d] = t.device.nb[d] = nb[d];
    }
    t.host.type = t.device.type = GDN_TYPE_F32;
    t.host.data = t.buffer->host.data() + offset;
    t.device.data = t.buffer->device + offset;
    return t;
}

static Tensor strided(int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, int64_t row, float fill) {
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    const int64_t nb[4] = {4, 4 * row, 4 * row * ne1, 4 * row * ne1 * ne2};
    return view(std::make_shared<Mirror>(static_cast<size_t>(row * ne1 * ne2 * ne3), fill), 0, ne, nb);
}

Tensor make_tensor(int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, float fill) { return strided(ne0, ne1, ne2, ne3, ne0, fill); }
Tensor make_padded_tensor(int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, float fill) {
    return strided(ne0, ne1, ne2, ne3, ne0 + 1, fill);
}

std::string Case::name() const {
    std::ostringstream s;
    s << "Sk=" << Sk << ",Sv=" << Sv << ",Hk=" << Hk << ",Hv=" << Hv << ",T=" << T << ",B=" << B << ",Bq=" << Bq << ",K=" << K
      << ",gate=" << (per_channel ? "kda" : "gda") << ",heads=" << (grouped ? "grouped" : "tiled") << ",s0=" << with_s0
      << ",qkv=" << (packed_qkv ? "packed" : "plain") << ",g=[" << g_lo << "," << g_hi << "]";
    return s.str();
}

static gdn_problem problem_of(const Problem &p, bool device) {
    gdn_problem r{};
    auto pick = [&](const Tensor &t) { return t.present() ? (device ? t.device : t.host) : gdn_tensor{}; };
    r.q = pick(p.q);
    r.k = pick(p.k);
    r.v = pick(p.v);
    r.g = pick(p.g);
    r.beta = pick(p.beta);
    r.state = pick(p.s0);
    r.scale = 0.0f;
    r.head_map = p.c.grouped ? GDN_HEAD_MAP_GROUPED : GDN_HEAD_MAP_TILED;
    return r;
}
gdn_problem Problem::host() const { return problem_of(*this, false); }
gdn_problem Problem::device() const { return problem_of(*this, true); }

// Element (i0, i1, i2, i3) of a host view.
static float &at(const gdn_tensor &t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return *reinterpret_cast<float *>(static_cast<char *>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3]);
}

template <class Fn>
static void for_each(const gdn_tensor &t, Fn &&fn) {
    for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) fn(i0, i1, i2, i3);
}

Problem make_problem(const Case &c) {
    Problem p;
    p.c = c;
    std::mt19937 rng(c.seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f), gate(c.g_lo, c.g_hi), beta(0.0f, 1.0f);
    if (c.packed_qkv) {
        if (c.B != c.Bq) throw std::invalid_argument("packed q/k/v needs B == Bq");
        const int64_t conv_dim = 2 * int64_t(c.Hk) * c.Sk + int64_t(c.Hv) * c.Sv;
        auto buffer = std::make_shared<Mirror>(static_cast<size_t>(conv_dim * c.T * c.B));
        const int64_t nqk[4] = {c.Sk, c.Hk, c.T, c.Bq}, nv[4] = {c.Sv, c.Hv, c.T, c.B};
        const int64_t bqk[4] = {4, 4 * c.Sk, 4 * conv_dim, 4 * conv_dim * c.T};
        const int64_t bv[4] = {4, 4 * c.Sv, 4 * conv_dim, 4 * conv_dim * c.T};
        p.q = view(buffer, 0, nqk, bqk);
        p.k = view(buffer, int64_t(c.Hk) * c.Sk, nqk, bqk);
        p.v = view(buffer, 2 * int64_t(c.Hk) * c.Sk, nv, bv);
    } else {
        p.q = make_tensor(c.Sk, c.Hk, c.T, c.Bq);
        p.k = make_padded_tensor(c.Sk, c.Hk, c.T, c.Bq);  // strided rows on purpose
        p.v = make_tensor(c.Sv, c.Hv, c.T, c.B);
    }
    p.g = make_tensor(c.per_channel ? c.Sk : 1, c.Hv, c.T, c.B);
    p.beta = make_tensor(1, c.Hv, c.T, c.B);
    if (c.with_s0) p.s0 = make_tensor(c.Sk, c.Sv, c.Hv, c.B);

    for_each(p.q.host, [&](int64_t a, int64_t b, int64_t t, int64_t s) { at(p.q.host, a, b, t, s) = unit(rng); });
    for_each(p.v.host, [&](int64_t a, int64_t b, int64_t t, int64_t s) { at(p.v.host, a, b, t, s) = unit(rng); });
    // k rows L2-normalised, as models feed them (keeps the delta rule contractive).
    for (int64_t s = 0; s < c.Bq; ++s)
        for (int64_t t = 0; t < c.T; ++t)
            for (int64_t h = 0; h < c.Hk; ++h) {
                double norm = 0;
                for (int64_t i = 0; i < c.Sk; ++i) {
                    const float x = unit(rng);
                    at(p.k.host, i, h, t, s) = x;
                    norm += double(x) * x;
                }
                const float inv = static_cast<float>(1.0 / std::sqrt(norm + 1e-12));
                for (int64_t i = 0; i < c.Sk; ++i) at(p.k.host, i, h, t, s) *= inv;
            }
    for_each(p.g.host, [&](int64_t a, int64_t b, int64_t t, int64_t s) { at(p.g.host, a, b, t, s) = gate(rng); });
    for_each(p.beta.host, [&](int64_t a, int64_t b, int64_t t, int64_t s) { at(p.beta.host, a, b, t, s) = beta(rng); });
    if (c.with_s0)
        for_each(p.s0.host, [&](int64_t a, int64_t b, int64_t t, int64_t s) { at(p.s0.host, a, b, t, s) = 0.5f * unit(rng); });

    for (Tensor *t : {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.s0})
        if (t->present()) {
            t->buffer->upload();
            p.buffers.push_back(t->buffer);
        }
    return p;
}

double nmse(const gdn_tensor &a, const gdn_tensor &b) {
    double num = 0, den = 0;
    bool broken = false;
    for_each(b, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
        const double x = at(a, i0, i1, i2, i3), y = at(b, i0, i1, i2, i3);
        if (std::isfinite(y) && !std::isfinite(x)) broken = true;
        num += (x - y) * (x - y);
        den += y * y;
    });
    if (broken || std::isnan(num)) return 1e300;
    return den > 0 ? num / den : num;
}

Context make_context(const char *backend, void *stream, int chunk_size) {
    gdn_context_params params = gdn_context_default_params();
    params.stream = stream;
    params.chunk_size = chunk_size;
    gdn_context *ctx = nullptr;
    const gdn_status s = gdn_context_create(backend, &params, &ctx);
    if (s != GDN_OK) throw std::runtime_error(std::string("gdn_context_create(") + backend + "): " + gdn_last_create_error());
    return Context(ctx);
}

}  // namespace gdn_cuda_test
