// cuda_precision_bench: the cuda backend at the Qwen3.5-27B shape (Sk = Sv = 128, Hk = 16,
// Hv = 48, B = 1, q/k/v row views of the packed conv buffer; beta, g and the states F32), three
// ways on the same inputs (every value a bf16 value, so that all three see the same numbers):
//   f32       F32 tensors, GDN_PRECISION_EXACT
//   bf16      BF16 q/k/v, out, d_out, dq/dk/dv, GDN_PRECISION_EXACT
//   bf16-mma  BF16 tensors as above, GDN_PRECISION_BF16 (bf16 tensor-core chunk products)
// Per T: the median time of the forward (out and final state) and of the backward (every
// gradient), and for T up to the reference limit (default 512, GDN_PRECISION_BENCH_REF_T) the
// NMSE of out, the final state and each gradient against ref on the host (double). The
// EXACT rows must meet the harness's limits (forward 1e-10 and backward 1e-9 for f32; bf16
// tensors add the rounding of each output once, about u^2 / 3 = 5e-6 with u = 2^-8).
//
//   cuda_precision_bench [T ...]        default: 512 4096
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_support.h"
#include "gdn/gdn.h"
#include "math/elements.h"

namespace {

using namespace gdn_bench;

constexpr int Sk = 128, Sv = 128, Hk = 16, Hv = 48, B = 1;
constexpr int64_t conv_dim = 2 * Hk * Sk + Hv * Sv;

std::vector<float> bf16_valued(std::vector<float> x) {
    for (float &v : x) v = gdn::bf16_to_float(gdn::float_to_bf16(v));
    return x;
}
std::vector<uint16_t> bf16_bits(const std::vector<float> &x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = gdn::float_to_bf16(x[i]);
    return h;
}

double nmse(const std::vector<float> &got, const std::vector<float> &want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += double(want[i]) * want[i];
    }
    return den > 0 ? num / den : num;
}

// The host inputs of one T, every value bf16-representable.
struct HostInputs {
    int64_t T;
    std::vector<float> qkv, g, beta, s0, d_out;
    explicit HostInputs(int64_t t)
        : T(t),
          qkv(bf16_valued(uniform(static_cast<size_t>(conv_dim * T * B), -0.1f, 0.1f, 1))),
          g(uniform(static_cast<size_t>(Hv * T * B), -0.3f, -0.02f, 2)),
          beta(uniform(static_cast<size_t>(Hv * T * B), 0.0f, 1.0f, 3)),
          s0(uniform(static_cast<size_t>(Sk) * Sv * Hv * B, -0.5f, 0.5f, 4)),
          d_out(bf16_valued(uniform(static_cast<size_t>(Sv) * Hv * T * B, -1.0f, 1.0f, 7))) {}
};

// One way of calling: the tensors' element type X (F32 or BF16) and their buffers, in device
// memory (or host memory, for ref).
struct Call {
    gdn_type x;
    int64_t xb;  // bytes per element of X
    gdn_problem p{};
    gdn_tensor out{}, state{}, d_out{};
    gdn_grads grads{};
    void *qkv, *out_buf, *d_out_buf, *dqk, *dv;
    float *g, *beta, *s0, *state_buf, *dgb, *ds0;

    // Buffers allocated by `alloc(bytes)` (device or host), inputs copied by `put(dst, src, bytes)`.
    template <class Alloc, class Put>
    Call(const HostInputs &in, gdn_type type, gdn_precision precision, Alloc alloc, Put put) : x(type), xb(type == GDN_TYPE_F32 ? 4 : 2) {
        const int64_t T = in.T;
        const size_t tokens_v = static_cast<size_t>(Sv) * Hv * T * B, state_n = static_cast<size_t>(Sk) * Sv * Hv * B;
        qkv = alloc(in.qkv.size() * xb);
        d_out_buf = alloc(tokens_v * xb);
        if (x == GDN_TYPE_F32) {
            put(qkv, in.qkv.data(), in.qkv.size() * 4);
            put(d_out_buf, in.d_out.data(), tokens_v * 4);
        } else {
            const std::vector<uint16_t> a = bf16_bits(in.qkv), b = bf16_bits(in.d_out);
            put(qkv, a.data(), a.size() * 2);
            put(d_out_buf, b.data(), b.size() * 2);
        }
        g = static_cast<float *>(alloc(in.g.size() * 4)), beta = static_cast<float *>(alloc(in.beta.size() * 4));
        s0 = static_cast<float *>(alloc(state_n * 4));
        put(g, in.g.data(), in.g.size() * 4), put(beta, in.beta.data(), in.beta.size() * 4), put(s0, in.s0.data(), state_n * 4);
        out_buf = alloc(tokens_v * xb), state_buf = static_cast<float *>(alloc(state_n * 4));
        dqk = alloc(static_cast<size_t>(2) * Sk * Hk * T * B * xb), dv = alloc(tokens_v * xb);
        dgb = static_cast<float *>(alloc(static_cast<size_t>(2) * Hv * T * B * 4)), ds0 = static_cast<float *>(alloc(state_n * 4));

        char *qkv_bytes = static_cast<char *>(qkv);
        p.q = tensor(qkv_bytes, x, xb, Sk, Hk, T, B, Sk, conv_dim);
        p.k = tensor(qkv_bytes + xb * Hk * Sk, x, xb, Sk, Hk, T, B, Sk, conv_dim);
        p.v = tensor(qkv_bytes + xb * 2 * Hk * Sk, x, xb, Sv, Hv, T, B, Sv, conv_dim);
        p.g = tensor(g, GDN_TYPE_F32, 4, 1, Hv, T, B, 1, Hv);
        p.beta = tensor(beta, GDN_TYPE_F32, 4, 1, Hv, T, B, 1, Hv);
        p.state = state_tensor(s0);
        p.precision = precision;
        out = tensor(out_buf, x, xb, Sv, Hv, T, B, Sv, Sv * Hv);
        state = state_tensor(state_buf);
        d_out = tensor(d_out_buf, x, xb, Sv, Hv, T, B, Sv, Sv * Hv);
        grads.q = tensor(dqk, x, xb, Sk, Hk, T, B, Sk, Sk * Hk);
        grads.k = tensor(static_cast<char *>(dqk) + xb * Sk * Hk * T * B, x, xb, Sk, Hk, T, B, Sk, Sk * Hk);
        grads.v = tensor(dv, x, xb, Sv, Hv, T, B, Sv, Sv * Hv);
        grads.g = tensor(dgb, GDN_TYPE_F32, 4, 1, Hv, T, B, 1, Hv);
        grads.beta = tensor(dgb + Hv * T * B, GDN_TYPE_F32, 4, 1, Hv, T, B, 1, Hv);
        grads.state = state_tensor(ds0);
    }
    static gdn_tensor state_tensor(float *data) {
        gdn_tensor t = tensor(data, GDN_TYPE_F32, 4, Sk, Sv, Hv, B, Sk, Sk * Sv);
        t.nb[3] = 4LL * Sk * Sv * Hv;
        return t;
    }
};

// A tensor's elements (contiguous, `count`) as floats, from device memory.
std::vector<float> fetch(const void *data, gdn_type type, size_t count) {
    if (type == GDN_TYPE_F32) return to_host(static_cast<const float *>(data), count);
    const std::vector<uint16_t> bits = to_host(static_cast<const uint16_t *>(data), count);
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = gdn::bf16_to_float(bits[i]);
    return x;
}

// out, state, dq+dk, dv, dg+dbeta, ds0 of one call, as floats.
std::vector<std::vector<float>> results(const Call &c, int64_t T, bool on_device) {
    const size_t tokens_v = static_cast<size_t>(Sv) * Hv * T * B, state_n = static_cast<size_t>(Sk) * Sv * Hv * B;
    const size_t qk = static_cast<size_t>(2) * Sk * Hk * T * B, gb = static_cast<size_t>(2) * Hv * T * B;
    if (on_device)
        return {fetch(c.out_buf, c.x, tokens_v), fetch(c.state_buf, GDN_TYPE_F32, state_n), fetch(c.dqk, c.x, qk),
                fetch(c.dv, c.x, tokens_v),      fetch(c.dgb, GDN_TYPE_F32, gb),           fetch(c.ds0, GDN_TYPE_F32, state_n)};
    const auto host = [](const void *p, size_t n) { return std::vector<float>(static_cast<const float *>(p), static_cast<const float *>(p) + n); };
    return {host(c.out_buf, tokens_v), host(c.state_buf, state_n), host(c.dqk, qk), host(c.dv, tokens_v), host(c.dgb, gb), host(c.ds0, state_n)};
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<int64_t> Ts;
    for (int i = 1; i < argc; ++i) Ts.push_back(std::atoll(argv[i]));
    if (Ts.empty()) Ts = {512, 4096};
    const char *ref_env = std::getenv("GDN_PRECISION_BENCH_REF_T");
    const int64_t ref_limit = ref_env != nullptr ? std::atoll(ref_env) : 512;
    gdn_context *ctx = nullptr, *ref = nullptr;
    if (gdn_context_create("cuda", nullptr, &ctx) != GDN_OK || gdn_context_create("ref", nullptr, &ref) != GDN_OK) {
        std::fprintf(stderr, "cuda_precision_bench: %s\n", gdn_last_create_error());
        return 2;
    }
    std::printf("%-9s %-6s %10s %10s   %-s\n", "mode", "T", "fwd_ms", "bwd_ms", "NMSE vs ref: out state dqk dv dgb ds0");
    int failures = 0;
    const auto device_alloc = [](size_t bytes) {
        void *p = nullptr;
        check(cudaMalloc(&p, bytes), "cudaMalloc");
        return p;
    };
    const auto device_put = [](void *dst, const void *src, size_t bytes) { check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy"); };
    for (int64_t T : Ts) {
        const HostInputs in(T);
        std::vector<std::vector<float>> want;
        std::vector<std::vector<char>> host_buffers;
        if (T <= ref_limit) {
            const auto host_alloc = [&](size_t bytes) {
                host_buffers.emplace_back(bytes);
                return static_cast<void *>(host_buffers.back().data());
            };
            const auto host_put = [](void *dst, const void *src, size_t bytes) { std::memcpy(dst, src, bytes); };
            Call r(in, GDN_TYPE_F32, GDN_PRECISION_EXACT, host_alloc, host_put);
            if (gdn_forward(ref, &r.p, &r.out, &r.state) != GDN_OK || gdn_backward(ref, &r.p, &r.d_out, nullptr, &r.grads) != GDN_OK) {
                std::fprintf(stderr, "ref T=%" PRId64 ": %s\n", T, gdn_last_error(ref));
                return 2;
            }
            want = results(r, T, false);
        }
        const struct {
            const char *name;
            gdn_type type;
            gdn_precision precision;
        } modes[] = {{"f32", GDN_TYPE_F32, GDN_PRECISION_EXACT}, {"bf16", GDN_TYPE_BF16, GDN_PRECISION_EXACT},
                     {"bf16-mma", GDN_TYPE_BF16, GDN_PRECISION_BF16}};
        for (const auto &m : modes) {
            Call c(in, m.type, m.precision, device_alloc, device_put);
            gdn_status status = GDN_OK;
            const double fwd = median_ms([&] { status = status != GDN_OK ? status : gdn_forward(ctx, &c.p, &c.out, &c.state); });
            const double bwd = median_ms([&] { status = status != GDN_OK ? status : gdn_backward(ctx, &c.p, &c.d_out, nullptr, &c.grads); });
            check(cudaDeviceSynchronize(), "after the timed calls");
            if (status != GDN_OK) {
                std::fprintf(stderr, "%s T=%" PRId64 ": %s\n", m.name, T, gdn_last_error(ctx));
                ++failures;
                continue;
            }
            std::string errors = "-";
            if (!want.empty()) {
                // The timed calls ran again and again on the same inputs: one more of each for the results.
                if (gdn_forward(ctx, &c.p, &c.out, &c.state) != GDN_OK || gdn_backward(ctx, &c.p, &c.d_out, nullptr, &c.grads) != GDN_OK) ++failures;
                const auto got = results(c, T, true);
                errors.clear();
                for (size_t i = 0; i < got.size(); ++i) {
                    char buf[32];
                    std::snprintf(buf, sizeof buf, "%s%.2e", i ? " " : "", nmse(got[i], want[i]));
                    errors += buf;
                }
            }
            std::printf("%-9s %-6" PRId64 " %10.4f %10.4f   %s\n", m.name, T, fwd, bwd, errors.c_str());
            for (void *p : {c.qkv, c.out_buf, c.d_out_buf, c.dqk, c.dv, static_cast<void *>(c.g), static_cast<void *>(c.beta),
                            static_cast<void *>(c.s0), static_cast<void *>(c.state_buf), static_cast<void *>(c.dgb), static_cast<void *>(c.ds0)})
                cudaFree(p);
        }
    }
    gdn_context_free(ctx);
    gdn_context_free(ref);
    return failures == 0 ? 0 : 1;
}
