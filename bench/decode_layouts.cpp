// decode_layouts: batched decoding on the cpu backend, each state updated in place, with the
// states
//   key-major    [Sk, Sv, Hv, B] with nb[0] = 4 (ggml's layout),
//   value-major  the same with nb[1] = 4 (PyTorch's [B, Hv, K, V]),
//   pool         value-major slots of a pool of 2B, named by state_indices (a serving
//                framework's state pool; the library runs one call per sequence).
// Per configuration: the state bytes moved per second (each state read once and written once)
// against memcpy's bandwidth at the same size and thread count, measured just before (gdn-ops
// perf's %copy). The configurations' runs alternate, so that all see the same load on a shared
// host; the median and range over the rounds are printed, and each layout's rate over
// key-major's round by round, and then call by call (the layouts alternated call by call).
//
//   decode_layouts [--threads N] [--batch B] [--tokens T] [--rounds R] [--calls C] [--kda]
//                  [--state-offset BYTES]
//
// The state buffers start on a cache line, as PyTorch's allocator and ggml's buffers place them;
// --state-offset 16 starts them where malloc puts a large block (rows of a value-major state then
// straddle one more line per strip: docs/PERF.md).
// Default: the Qwen3.5-27B shape (Hk 16, Hv 48, Sk = Sv = 128), 2 threads, B = 16, T = 1.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gdn/gdn.h"
#include "peak.h"

namespace {

struct Options {
    int threads = 2, rounds = 7, calls = 40;
    int64_t batch = 16, tokens = 1;
    bool kda = false;
    int64_t state_offset = 0;  // bytes past a cache line where the state buffers start
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

// States [Sk, Sv, Hv, n] in v, starting `offset` bytes past a 64-byte boundary (0: as PyTorch's
// allocator and ggml's buffers place them; 16: where malloc puts a large block). Value-major: row
// i of state (h, s) is Sv contiguous floats; else key-major.
gdn_tensor states(std::vector<float> &v, int64_t Sk, int64_t Sv, int64_t Hv, int64_t n, bool value_major,
                  int64_t offset) {
    const int64_t f = sizeof(float), count = Sk * Sv * Hv * n;
    v.assign(static_cast<size_t>(count + (64 + offset) / f), 0.0f);
    const uintptr_t line = (reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63);
    float *first = reinterpret_cast<float *>(line + offset);
    gdn_tensor t{first, GDN_TYPE_F32, {Sk, Sv, Hv, n}, {f, Sk * f, Sk * Sv * f, Sk * Sv * Hv * f}};
    if (value_major) {
        t.nb[1] = f;
        t.nb[0] = Sv * f;
    }
    return t;
}

void fill(const gdn_tensor &t, float lo, float hi, unsigned seed) {
    float *x = static_cast<float *>(t.data);
    std::vector<float> values(static_cast<size_t>(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]));
    fill(values, lo, hi, seed);
    std::copy(values.begin(), values.end(), x);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int run(const Options &o) {
    constexpr int64_t Sk = 128, Sv = 128, Hk = 16, Hv = 48;
    const int64_t T = o.tokens, B = o.batch, slots = 2 * B;
    std::vector<float> q, k, v, g, beta, out, key_major, value_rows, pool;
    gdn_problem p{};
    p.q = contiguous(q, Sk, Hk, T, B);
    p.k = contiguous(k, Sk, Hk, T, B);
    p.v = contiguous(v, Sv, Hv, T, B);
    p.g = contiguous(g, o.kda ? Sk : 1, Hv, T, B);
    p.beta = contiguous(beta, 1, Hv, T, B);
    const gdn_tensor out_t = contiguous(out, Sv, Hv, T, B);
    fill(q, -0.3f, 0.3f, 1);
    fill(k, -0.3f, 0.3f, 2);
    fill(v, -1, 1, 3);
    fill(g, -0.2f, -0.01f, 4);
    fill(beta, 0, 1, 5);
    // The pool's sequences take every other slot, last first (as a serving batch names them).
    std::vector<int32_t> indices(static_cast<size_t>(B));
    for (int64_t n = 0; n < B; ++n) indices[static_cast<size_t>(n)] = static_cast<int32_t>(slots - 2 - 2 * n);
    const gdn_tensor indices_t{indices.data(), GDN_TYPE_I32, {B, 1, 1, 1}, {4, 4 * B, 4 * B, 4 * B}};
    struct Config {
        const char *name;
        gdn_tensor state, state_indices;
    };
    Config configs[] = {{"key-major", states(key_major, Sk, Sv, Hv, B, false, o.state_offset), {}},
                        {"value-major", states(value_rows, Sk, Sv, Hv, B, true, o.state_offset), {}},
                        {"pool", states(pool, Sk, Sv, Hv, slots, true, o.state_offset), indices_t}};
    for (const Config &c : configs) fill(c.state, -1, 1, 6);

    gdn_context_params params = gdn_context_default_params();
    params.n_threads = o.threads;
    gdn_context *ctx = nullptr;
    if (gdn_context_create("cpu", &params, &ctx) != GDN_OK) return std::fprintf(stderr, "no cpu context\n"), 1;
    const double state_bytes = 2.0 * sizeof(float) * Sk * Sv * Hv * B;  // read and written
    constexpr int n_configs = sizeof configs / sizeof configs[0];
    std::vector<double> gbps[n_configs], percent[n_configs], copies[n_configs];
    for (int round = 0; round < o.rounds; ++round)
        for (int c = 0; c < n_configs; ++c) {
            const double copy = gdn::ops::measure_copy_gbps(o.threads, static_cast<int64_t>(state_bytes / 2));
            p.state = configs[c].state;
            p.state_indices = configs[c].state_indices;
            auto call = [&] { return gdn_forward(ctx, &p, &out_t, &p.state); };
            if (call() != GDN_OK) return std::fprintf(stderr, "%s: %s\n", configs[c].name, gdn_last_error(ctx)), 1;
            std::vector<double> times;
            for (int i = 0; i < o.calls; ++i) {
                const auto start = std::chrono::steady_clock::now();
                (void)call();
                times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
            }
            const double rate = state_bytes / median(times) / 1e9;
            gbps[c].push_back(rate);
            percent[c].push_back(100.0 * rate / copy);
            copies[c].push_back(copy);
        }
    // The layouts alternated call by call (each iteration starting from the next layout), every
    // call's rate over key-major's call beside it: a descheduled vCPU slows one call, not a round.
    std::vector<double> alternated[n_configs];
    for (int i = 0; i < o.rounds * o.calls; ++i) {
        double seconds[n_configs];
        for (int n = 0; n < n_configs; ++n) {
            const int c = (i + n) % n_configs;
            p.state = configs[c].state;
            p.state_indices = configs[c].state_indices;
            const auto start = std::chrono::steady_clock::now();
            (void)gdn_forward(ctx, &p, &out_t, &p.state);
            seconds[c] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        for (int c = 1; c < n_configs; ++c) alternated[c].push_back(seconds[0] / seconds[c]);
    }
    gdn_context_free(ctx);
    std::printf("Sk=Sv=128 Hk=16 Hv=48 T=%lld B=%lld %s, %d threads, in place, states %lld bytes past a cache line; "
                "%d rounds of %d calls\n",
                static_cast<long long>(T), static_cast<long long>(B), o.kda ? "KDA" : "GDA", o.threads,
                static_cast<long long>(o.state_offset), o.rounds, o.calls);
    // The host's speed moves between rounds (on shared 2-vCPU hosts, 2-thread rounds were seen at
    // 25-30 and at 70-100 GB/s alike), so layouts are compared round by round: each round's rate
    // over key-major's in the same round.
    std::vector<double> paired[n_configs];
    for (int c = 0; c < n_configs; ++c)
        for (int round = 0; round < o.rounds; ++round) paired[c].push_back(gbps[c][round] / gbps[0][round]);
    for (int c = 0; c < n_configs; ++c) {
        const auto [lo, hi] = std::minmax_element(gbps[c].begin(), gbps[c].end());
        const auto [plo, phi] = std::minmax_element(percent[c].begin(), percent[c].end());
        const auto [clo, chi] = std::minmax_element(copies[c].begin(), copies[c].end());
        std::printf("  %-11s state_GB/s median %.1f (%.1f-%.1f)  copy_GB/s median %.1f (%.1f-%.1f)  %%copy median %.1f "
                    "(%.1f-%.1f)\n",
                    configs[c].name, median(gbps[c]), *lo, *hi, median(copies[c]), *clo, *chi, median(percent[c]), *plo,
                    *phi);
        if (c > 0) {
            const auto [rlo, rhi] = std::minmax_element(paired[c].begin(), paired[c].end());
            std::printf("  %-11s rate / key-major's in the same round: median %.3f (%.3f-%.3f)\n", configs[c].name,
                        median(paired[c]), *rlo, *rhi);
            std::vector<double> &r = alternated[c];
            std::sort(r.begin(), r.end());
            std::printf("  %-11s rate / key-major's call by call: median %.3f (quartiles %.3f-%.3f, %zu pairs)\n",
                        configs[c].name, r[r.size() / 2], r[r.size() / 4], r[r.size() * 3 / 4], r.size());
        }
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
        else if (a == "--state-offset") o.state_offset = next();
        else return std::fprintf(stderr, "usage: decode_layouts [--threads N] [--batch B] [--tokens T] [--rounds R] [--calls C] [--kda] [--state-offset BYTES]\n"), 2;
    }
    if (o.threads < 1 || o.batch < 1 || o.tokens < 1 || o.rounds < 1 || o.calls < 1)
        return std::fprintf(stderr, "every count must be at least 1\n"), 2;
    if (o.state_offset < 0 || o.state_offset % 4 != 0 || o.state_offset >= 64)
        return std::fprintf(stderr, "--state-offset is a multiple of 4 below 64\n"), 2;
    return run(o);
}
