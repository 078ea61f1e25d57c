// decode_layouts: batched decoding on the cpu backend with the states key-major (ggml's layout)
// or value-major (PyTorch's [..., K, V], the layout of serving frameworks' state pools), updated
// in place. Per layout: the state bytes moved per second (each state read once and written
// once) against memcpy's bandwidth at the same size and thread count (gdn-ops perf's %copy).
// The layouts' runs alternate, so that both see the same load on a shared host; the median and
// range over the rounds are printed.
//
//   decode_layouts [--threads N] [--batch B] [--tokens T] [--rounds R] [--calls C] [--kda]
//
// Default: the Qwen3.5-27B shape (Hk 16, Hv 48, Sk = Sv = 128), 2 threads, B = 16, T = 1.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/validate.h"
#include "peak.h"

namespace {

using namespace gdn;

struct Options {
    int threads = 2, rounds = 7, calls = 40;
    int64_t batch = 16, tokens = 1;
    bool kda = false;
};

void fill(std::vector<float> &v, float lo, float hi, unsigned seed) {
    for (float &x : v) {
        seed = seed * 1664525u + 1013904223u;
        x = lo + (hi - lo) * static_cast<float>(seed >> 8) / static_cast<float>(1u << 24);
    }
}

gdn_tensor contiguous(std::vector<float> &v, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    v.resize(static_cast<size_t>(n0 * n1 * n2 * n3));
    const int64_t f = sizeof(float);
    return {v.data(), GDN_TYPE_F32, {n0, n1, n2, n3}, {f, n0 * f, n0 * n1 * f, n0 * n1 * n2 * f}};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int run(const Options &o) {
    constexpr int64_t Sk = 128, Sv = 128, Hk = 16, Hv = 48;
    const int64_t T = o.tokens, B = o.batch;
    std::vector<float> q, k, v, g, beta, out, key_major, value_major;
    gdn_problem p{};
    p.q = contiguous(q, Sk, Hk, T, B);
    p.k = contiguous(k, Sk, Hk, T, B);
    p.v = contiguous(v, Sv, Hv, T, B);
    p.g = contiguous(g, o.kda ? Sk : 1, Hv, T, B);
    p.beta = contiguous(beta, 1, Hv, T, B);
    p.state = contiguous(key_major, Sk, Sv, Hv, B);
    const gdn_tensor out_t = contiguous(out, Sv, Hv, T, B);
    fill(q, -0.3f, 0.3f, 1);
    fill(k, -0.3f, 0.3f, 2);
    fill(v, -1, 1, 3);
    fill(g, -0.2f, -0.01f, 4);
    fill(beta, 0, 1, 5);
    fill(key_major, -1, 1, 6);
    gdn_tensor vm = contiguous(value_major, Sk, Sv, Hv, B);
    vm.nb[1] = sizeof(float);
    vm.nb[0] = Sv * vm.nb[1];
    value_major = key_major;  // values do not matter for timing; both stay bounded (|decay| < 1)

    ForwardArgs args;
    const Status valid = validate_forward(&p, &out_t, &p.state, args);
    if (!valid.ok()) return std::fprintf(stderr, "%s\n", valid.message.c_str()), 1;
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = o.threads;
    std::unique_ptr<Backend> cpu;
    if (!make_cpu_backend(params, cpu).ok()) return std::fprintf(stderr, "no cpu backend\n"), 1;

    const gdn_tensor *layouts[2] = {&p.state, &vm};
    const char *names[2] = {"key-major", "value-major"};
    const double state_bytes = 2.0 * sizeof(float) * Sk * Sv * Hv * B;  // read and written
    std::vector<double> gbps[2], percent[2];
    for (int round = 0; round < o.rounds; ++round)
        for (int l = 0; l < 2; ++l) {
            const double copy = ops::measure_copy_gbps(o.threads, static_cast<int64_t>(state_bytes / 2), 0.05);
            args.s0 = args.states = layouts[l];
            (void)cpu->forward(args);  // warm-up
            std::vector<double> times;
            for (int c = 0; c < o.calls; ++c) {
                const auto start = std::chrono::steady_clock::now();
                (void)cpu->forward(args);
                times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
            }
            const double rate = state_bytes / median(times) / 1e9;
            gbps[l].push_back(rate);
            percent[l].push_back(100.0 * rate / copy);
        }
    std::printf("Sk=Sv=128 Hk=16 Hv=48 T=%lld B=%lld %s, %d threads, in place; %d rounds of %d calls\n",
                static_cast<long long>(T), static_cast<long long>(B), o.kda ? "KDA" : "GDA", o.threads, o.rounds,
                o.calls);
    for (int l = 0; l < 2; ++l) {
        const auto [lo, hi] = std::minmax_element(gbps[l].begin(), gbps[l].end());
        const auto [plo, phi] = std::minmax_element(percent[l].begin(), percent[l].end());
        std::printf("  %-11s state_GB/s median %.1f (%.1f-%.1f)  %%copy median %.1f (%.1f-%.1f)\n", names[l],
                    median(gbps[l]), *lo, *hi, median(percent[l]), *plo, *phi);
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0; };
        if (a == "--threads") o.threads = static_cast<int>(next());
        else if (a == "--batch") o.batch = next();
        else if (a == "--tokens") o.tokens = next();
        else if (a == "--rounds") o.rounds = static_cast<int>(next());
        else if (a == "--calls") o.calls = static_cast<int>(next());
        else if (a == "--kda") o.kda = true;
        else return std::fprintf(stderr, "usage: decode_layouts [--threads N] [--batch B] [--tokens T] [--rounds R] [--calls C] [--kda]\n"), 2;
    }
    if (o.threads < 1 || o.batch < 1 || o.tokens < 1 || o.rounds < 1 || o.calls < 1)
        return std::fprintf(stderr, "every count must be at least 1\n"), 2;
    return run(o);
}
