// BF16 (or F16) tensors against F32 tensors on the cpu backend, precision EXACT, at a model shape
// (by default Qwen3.5-27B's gated delta net: Hk 16, Hv 48, Sk = Sv = 128, B 1, GDA, T = 4096,
// s0 and the final state F32): the forward (out, final state) and the backward (all six
// gradients), the two calls alternated call by call (the order flipped every round) so that both
// see the same load, and the median, min and max of each printed with their ratio.
//
//   half_types [--tokens=4096] [--threads=2] [--rounds=7] [--type=bf16|f16] [--kda=0|1]
//              [--hk=16] [--hv=48] [--head=128]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gdn/gdn.h"
#include "math/elements.h"

namespace {

using Clock = std::chrono::steady_clock;

const char *text_flag(int argc, char **argv, const char *name, const char *fallback) {
    const size_t n = std::strlen(name);
    for (int i = 1; i < argc; ++i)
        if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    return fallback;
}
int64_t flag(int argc, char **argv, const char *name, int64_t fallback) {
    const char *v = text_flag(argc, argv, name, nullptr);
    return v ? std::atoll(v) : fallback;
}

struct Tensor {
    std::vector<uint8_t> bytes;
    gdn_tensor t{};
};

Tensor make(gdn_type type, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    Tensor r;
    const int64_t es = type == GDN_TYPE_F32 ? 4 : 2;
    r.bytes.assign(static_cast<size_t>(n0 * n1 * n2 * n3 * es), 0);
    r.t.data = r.bytes.data();
    r.t.type = type;
    const int64_t ne[4] = {n0, n1, n2, n3};
    int64_t stride = es;
    for (int d = 0; d < 4; ++d) {
        r.t.ne[d] = ne[d];
        r.t.nb[d] = stride;
        stride *= ne[d];
    }
    return r;
}

// Values drawn in element order and rounded to `values` (the same numbers in both calls).
void fill(Tensor &t, gdn_type values, std::mt19937 &rng, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    const int64_t n = t.t.ne[0] * t.t.ne[1] * t.t.ne[2] * t.t.ne[3];
    for (int64_t i = 0; i < n; ++i) {
        float x = static_cast<float>(u(rng));
        if (values == GDN_TYPE_BF16) x = gdn::bf16_to_float(gdn::float_to_bf16(x));
        if (values == GDN_TYPE_F16) x = gdn::f16_to_float(gdn::float_to_f16(x));
        if (t.t.type == GDN_TYPE_F32) reinterpret_cast<float *>(t.t.data)[i] = x;
        else reinterpret_cast<uint16_t *>(t.t.data)[i] = t.t.type == GDN_TYPE_BF16 ? gdn::float_to_bf16(x) : gdn::float_to_f16(x);
    }
}

struct Call {
    Tensor q, k, v, g, beta, s0, out, states, d_out, dq, dk, dv, dg, dbeta, ds0;
    gdn_problem p{};
    gdn_grads grads{};
};

Call build(gdn_type x, gdn_type values, int64_t Sk, int64_t Hk, int64_t Hv, int64_t T, bool kda) {
    std::mt19937 rng(7);
    Call c;
    const double key = 1.0 / std::sqrt(static_cast<double>(Sk));
    c.q = make(x, Sk, Hk, T, 1);
    c.k = make(x, Sk, Hk, T, 1);
    c.v = make(x, Sk, Hv, T, 1);
    c.g = make(x == GDN_TYPE_F16 ? GDN_TYPE_F32 : x, kda ? Sk : 1, Hv, T, 1);
    c.beta = make(x, 1, Hv, T, 1);
    fill(c.q, values, rng, -key, key);
    fill(c.k, values, rng, -key, key);
    fill(c.v, values, rng, -1, 1);
    fill(c.g, values == GDN_TYPE_F16 ? GDN_TYPE_F32 : values, rng, -0.3, -0.02);
    fill(c.beta, values, rng, 0, 1);
    c.s0 = make(GDN_TYPE_F32, Sk, Sk, Hv, 1);
    fill(c.s0, GDN_TYPE_F32, rng, -0.5, 0.5);
    c.out = make(x, Sk, Hv, T, 1);
    c.states = make(GDN_TYPE_F32, Sk, Sk, Hv, 1);
    c.d_out = make(x, Sk, Hv, T, 1);
    fill(c.d_out, values, rng, -1, 1);
    c.dq = make(x, Sk, Hk, T, 1);
    c.dk = make(x, Sk, Hk, T, 1);
    c.dv = make(x, Sk, Hv, T, 1);
    c.dg = make(c.g.t.type, kda ? Sk : 1, Hv, T, 1);
    c.dbeta = make(x, 1, Hv, T, 1);
    c.ds0 = make(GDN_TYPE_F32, Sk, Sk, Hv, 1);
    c.p.q = c.q.t, c.p.k = c.k.t, c.p.v = c.v.t, c.p.g = c.g.t, c.p.beta = c.beta.t, c.p.state = c.s0.t;
    c.p.head_map = GDN_HEAD_MAP_GROUPED;
    c.grads = {c.dq.t, c.dk.t, c.dv.t, c.dg.t, c.dbeta.t, c.ds0.t};
    return c;
}

double seconds(gdn_context *ctx, const Call &c, bool backward) {
    const Clock::time_point t0 = Clock::now();
    const gdn_status s = backward ? gdn_backward(ctx, &c.p, &c.d_out.t, nullptr, &c.grads) : gdn_forward(ctx, &c.p, &c.out.t, &c.states.t);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s != GDN_OK) {
        std::fprintf(stderr, "call failed: %s\n", gdn_last_error(ctx));
        std::exit(1);
    }
    return dt;
}

struct Stats {
    double median, lo, hi;
};
Stats stats(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char **argv) {
    const int64_t T = flag(argc, argv, "--tokens", 4096), rounds = flag(argc, argv, "--rounds", 7);
    const int64_t Hk = flag(argc, argv, "--hk", 16), Hv = flag(argc, argv, "--hv", 48), S = flag(argc, argv, "--head", 128);
    const bool kda = flag(argc, argv, "--kda", 0) != 0;
    const std::string type = text_flag(argc, argv, "--type", "bf16");
    const gdn_type half = type == "f16" ? GDN_TYPE_F16 : GDN_TYPE_BF16;
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = static_cast<int>(flag(argc, argv, "--threads", 2));
    gdn_context *ctx = nullptr;
    if (gdn_context_create("cpu", &params, &ctx) != GDN_OK) return 1;
    const Call f32 = build(GDN_TYPE_F32, half, S, Hk, Hv, T, kda), h = build(half, half, S, Hk, Hv, T, kda);
    std::printf("cpu, %d threads, Hk %lld Hv %lld head %lld T %lld %s, %s tensors vs F32 tensors, %lld rounds alternated\n",
                params.n_threads, (long long)Hk, (long long)Hv, (long long)S, (long long)T, kda ? "KDA" : "GDA", type.c_str(),
                (long long)rounds);
    for (bool backward : {false, true}) {
        seconds(ctx, f32, backward);  // warm-up: workspace, page faults
        seconds(ctx, h, backward);
        std::vector<double> a, b, ratio;
        for (int64_t r = 0; r < rounds; ++r) {
            double ta, tb;
            if (r % 2 == 0) {
                ta = seconds(ctx, f32, backward);
                tb = seconds(ctx, h, backward);
            } else {
                tb = seconds(ctx, h, backward);
                ta = seconds(ctx, f32, backward);
            }
            a.push_back(ta);
            b.push_back(tb);
            ratio.push_back(tb / ta);
        }
        const Stats sa = stats(a), sb = stats(b), sr = stats(ratio);
        std::printf("%-8s F32 median %.3f s [%.3f, %.3f]  %s median %.3f s [%.3f, %.3f]  %s/F32 per round: median %.3f [%.3f, %.3f]\n",
                    backward ? "backward" : "forward", sa.median, sa.lo, sa.hi, type.c_str(), sb.median, sb.lo, sb.hi,
                    type.c_str(), sr.median, sr.lo, sr.hi);
    }
    gdn_context_free(ctx);
    return 0;
}
