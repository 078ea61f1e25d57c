// BF16 (or F16) tensors against F32 tensors on the cpu backend at a model shape (by default
// Qwen3.5-27B's gated delta net: Hk 16, Hv 48, Sk = Sv = 128, B 1, GDA, T = 4096, s0 and the
// final state F32): the forward (out, final state) and the backward (all six gradients) of F32
// tensors (precision EXACT), half tensors (EXACT) and, for bf16, BF16 tensors with precision BF16
// (the bf16 products where the host has AMX), alternated call by call (the order rotated every
// round) so that all see the same load; the median, min and max of each printed, and per round
// the F32 call's time over each call's (its tokens/s over F32's).
//
// --accuracy=1 instead compares each of those calls with ref on F32 tensors holding the same
// values (ref computes in double: within 2^-24 of exact): NMSE and the worst element
// |a - b| / (|b| + rms(b)) of out, the final state and the six gradients.
//
//   half_types [--tokens=4096] [--threads=2] [--rounds=7] [--type=bf16|f16] [--kda=0|1]
//              [--hk=16] [--hv=48] [--head=128] [--accuracy=0|1] [--only=i]
// --only=i runs the i-th call alone (0 F32, 1 half EXACT, 2 bf16 products), for a profiler;
// --op=forward or --op=backward only that operation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
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

// The calls compared: tensors of `type` at `precision`.
struct Variant {
    const char *name;
    const Call *call;
    gdn_precision precision;
};

double seconds(gdn_context *ctx, const Call &c, bool backward, gdn_precision precision = GDN_PRECISION_EXACT) {
    gdn_problem p = c.p;
    p.precision = precision;
    const Clock::time_point t0 = Clock::now();
    const gdn_status s = backward ? gdn_backward(ctx, &p, &c.d_out.t, nullptr, &c.grads) : gdn_forward(ctx, &p, &c.out.t, &c.states.t);
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

double element(const gdn_tensor &t, int64_t i) {
    if (t.type == GDN_TYPE_F32) return reinterpret_cast<const float *>(t.data)[i];
    const uint16_t h = reinterpret_cast<const uint16_t *>(t.data)[i];
    return t.type == GDN_TYPE_BF16 ? gdn::bf16_to_float(h) : gdn::f16_to_float(h);
}

// NMSE and worst |a - b| / (|b| + rms(b)) of a against the oracle b (contiguous tensors of one shape).
std::pair<double, double> error_of(const gdn_tensor &a, const gdn_tensor &b) {
    const int64_t n = b.ne[0] * b.ne[1] * b.ne[2] * b.ne[3];
    double diff2 = 0, ref2 = 0, worst = 0;
    for (int64_t i = 0; i < n; ++i) ref2 += element(b, i) * element(b, i);
    const double rms = std::sqrt(ref2 / static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) {
        const double x = element(a, i), y = element(b, i);
        diff2 += (x - y) * (x - y);
        worst = std::max(worst, std::fabs(x - y) / (std::fabs(y) + rms));
    }
    return {diff2 / ref2, worst};
}

int accuracy(gdn_context *ctx, const std::vector<Variant> &variants, const Call &oracle) {
    gdn_context *ref = nullptr;
    if (gdn_context_create("ref", nullptr, &ref) != GDN_OK) return 1;
    seconds(ref, oracle, false);
    seconds(ref, oracle, true);
    std::printf("| tensor |");
    for (const Variant &v : variants) std::printf(" %s NMSE | %s worst |", v.name, v.name);
    std::printf("\n");
    const char *outputs[] = {"out", "state", "dq", "dk", "dv", "dg", "dbeta", "ds0"};
    std::vector<std::vector<std::pair<double, double>>> errors(std::size(outputs));
    for (const Variant &v : variants) {
        seconds(ctx, *v.call, false, v.precision);
        seconds(ctx, *v.call, true, v.precision);
        const Call &c = *v.call;
        const Tensor *mine[] = {&c.out, &c.states, &c.dq, &c.dk, &c.dv, &c.dg, &c.dbeta, &c.ds0};
        const Tensor *theirs[] = {&oracle.out, &oracle.states, &oracle.dq, &oracle.dk, &oracle.dv, &oracle.dg, &oracle.dbeta, &oracle.ds0};
        for (size_t i = 0; i < std::size(outputs); ++i) errors[i].push_back(error_of(mine[i]->t, theirs[i]->t));
    }
    for (size_t i = 0; i < std::size(outputs); ++i) {
        std::printf("| %s |", outputs[i]);
        for (const auto &[nmse, worst] : errors[i]) std::printf(" %.1e | %.1e |", nmse, worst);
        std::printf("\n");
    }
    gdn_context_free(ref);
    return 0;
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
    const std::string half_exact = type + " EXACT", half_products = type + " BF16-products";
    std::vector<Variant> variants = {{"F32 EXACT", &f32, GDN_PRECISION_EXACT}, {half_exact.c_str(), &h, GDN_PRECISION_EXACT}};
    Call h2;
    if (half == GDN_TYPE_BF16) {
        h2 = build(half, half, S, Hk, Hv, T, kda);
        variants.push_back({half_products.c_str(), &h2, GDN_PRECISION_BF16});
    }
    const bool accuracy_only = flag(argc, argv, "--accuracy", 0) != 0;
    std::printf("cpu, %d threads, Hk %lld Hv %lld head %lld T %lld %s, %s\n", params.n_threads, (long long)Hk,
                (long long)Hv, (long long)S, (long long)T, kda ? "KDA" : "GDA",
                accuracy_only ? "against ref on the same values" : (std::to_string(rounds) + " rounds alternated").c_str());
    if (accuracy_only) {
        const Call oracle = build(GDN_TYPE_F32, half, S, Hk, Hv, T, kda);
        const int status = accuracy(ctx, variants, oracle);
        gdn_context_free(ctx);
        return status;
    }
    const int64_t only = flag(argc, argv, "--only", -1);
    if (only >= 0 && only < static_cast<int64_t>(variants.size())) variants = {variants[only]};
    const size_t n = variants.size();
    const std::string op = text_flag(argc, argv, "--op", "both");
    for (bool backward : {false, true}) {
        if (op == (backward ? "forward" : "backward")) continue;
        for (const Variant &v : variants) seconds(ctx, *v.call, backward, v.precision);  // warm-up: workspace, page faults
        std::vector<std::vector<double>> times(n), speedup(n);
        for (int64_t r = 0; r < rounds; ++r) {
            std::vector<double> t(n);
            for (size_t i = 0; i < n; ++i) {
                const size_t v = (i + static_cast<size_t>(r)) % n;  // each variant first in turn
                t[v] = seconds(ctx, *variants[v].call, backward, variants[v].precision);
            }
            for (size_t v = 0; v < n; ++v) {
                times[v].push_back(t[v]);
                speedup[v].push_back(t[0] / t[v]);
            }
        }
        for (size_t v = 0; v < n; ++v) {
            const Stats st = stats(times[v]), sp = stats(speedup[v]);
            std::printf("%-8s %-20s median %.3f s [%.3f, %.3f]  F32 time / this, per round: median %.3f [%.3f, %.3f]\n",
                        backward ? "backward" : "forward", variants[v].name, st.median, st.lo, st.hi, sp.median, sp.lo,
                        sp.hi);
        }
    }
    gdn_context_free(ctx);
    return 0;
}
