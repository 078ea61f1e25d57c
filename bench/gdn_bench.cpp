// Forward and backward of the gated delta rule on the cpu backend at model shapes (the harness's
// perf cases: Qwen3.5-27B at T = 1, 512, 4096 with q/k/v as views into the packed conv buffer,
// Qwen3-Next-80B at T = 4096, a KDA case): "auto" is the backend's own choice (chunked, per-token
// at decoding sizes), "per_token" forces the per-token form (chunk_size = 1); and the crossover
// between the two at T = 1 .. 64 ("crossover/.../chunked" forces chunk_size = 64); and decoding
// (T = 1) with 3, 12 and 48 value heads ("decode/"): states of 192 KiB, 768 KiB and 3 MiB (the
// 27B layer's), read and written once each, so that state_GB/s can be compared across the cache
// levels the states fit in.
//
//   gdn_bench [--threads=N] [google benchmark flags, e.g. --benchmark_repetitions=5]
//
// Counters: GFLOP/s on the canonical count (SPEC section 8: 8*Sk*Sv forward, 24*Sk*Sv backward
// per token and value head), tokens/s, workspace_MiB; forward cases of up to 16 tokens also
// state_GB/s (the states read and written per second).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "case.h"
#include "problem_data.h"
#include "runner.h"

namespace {

using namespace gdn::testkit;

int g_threads = 2;

// One case's data and a context, built once per benchmark run.
struct Fixture {
    Case c;
    std::unique_ptr<BackendSession> session;
    TensorSet inputs{GDN_TYPE_F32}, outputs{GDN_TYPE_F32};
    std::unique_ptr<Mirror> in, out;

    Fixture(const Case &cs, int chunk) : c(cs) {
        session = std::make_unique<BackendSession>(BackendSpec{"CPU", "cpu", 0}, g_threads, chunk);
        inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
        outputs = make_outputs(c, GDN_TYPE_F32);
        in = std::make_unique<Mirror>(inputs, session->memory());
        out = std::make_unique<Mirror>(outputs, session->memory());
    }
    gdn_status run() {
        const gdn_problem p = problem_of(c, *in);
        if (c.op == Op::Forward) {
            const gdn_tensor o = out->tensor("out"), states = out->tensor("states");
            return gdn_forward(session->context(), &p, &o, &states);
        }
        const gdn_tensor d_out = in->tensor("d_out"), d_states = in->tensor("d_states");
        const gdn_grads grads = grads_of(*out);
        return gdn_backward(session->context(), &p, &d_out, &d_states, &grads);
    }
};

void bench_case(benchmark::State &state, const Case &c, int chunk) {
    Fixture f(c, chunk);
    if (!f.session->ok()) {
        state.SkipWithError(f.session->error().c_str());
        return;
    }
    if (f.run() != GDN_OK) {  // warm-up: workspace, caches
        state.SkipWithError(gdn_last_error(f.session->context()));
        return;
    }
    for (auto _ : state) {
        const gdn_status s = f.run();
        if (s != GDN_OK) state.SkipWithError(gdn_last_error(f.session->context()));
    }
    const double tokens = static_cast<double>(c.shape.T * c.shape.B);
    state.counters["GFLOP/s"] = benchmark::Counter(c.canonical_flops() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["tok/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
    if (c.state_bound())
        state.counters["state_GB/s"] =
            benchmark::Counter(c.forward_state_bytes() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["workspace_MiB"] =
        static_cast<double>(gdn_context_workspace_bytes(f.session->context())) / (1 << 20);
}

// The fastest repetition: on a shared machine the closest to what a dedicated one gives.
double fastest(const std::vector<double> &v) { return *std::min_element(v.begin(), v.end()); }

std::string short_label(const Case &c) {
    std::string s = c.op == Op::Forward ? "fwd" : "bwd";
    s += c.model.empty() ? "" : "/" + c.model;
    s += "/Hv=" + std::to_string(c.shape.Hv) + "/T=" + std::to_string(c.shape.T);
    s += c.kda ? "/kda" : "/gda";
    if (c.types.x != GDN_TYPE_F32) s += std::string("/") + type_name(c.types.x);
    if (c.precision == GDN_PRECISION_BF16) s += "/bf16_products";
    return s;
}

}  // namespace

int main(int argc, char **argv) {
    for (int i = 1; i < argc; ++i)
        if (std::strncmp(argv[i], "--threads=", 10) == 0) {
            g_threads = std::atoi(argv[i] + 10);
            for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
            --argc;
            break;
        }
    for (const Case &c : perf_cases()) {
        benchmark::RegisterBenchmark((short_label(c) + "/auto").c_str(), bench_case, c, 0)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MeasureProcessCPUTime()
            ->ComputeStatistics("min", fastest);
        // The per-token form (chunk_size = 1), the baseline of the chunked speed-up (the 27B
        // backward at T = 4096 takes about 7 s per call on 2 cores).
        benchmark::RegisterBenchmark((short_label(c) + "/per_token").c_str(), bench_case, c, 1)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MeasureProcessCPUTime()
            ->ComputeStatistics("min", fastest);
    }
    // The per-token / chunked crossover at decoding sizes (27B shape, T = 1 .. 64): chunk_size 1
    // forces per-token, chunk_size 64 forces the chunked form even where the backend would not.
    for (const Case &c : model_cases("qwen3.5-27b", 128, 128, 16, 48, {1, 2, 4, 8, 16, 32, 64}, "crossover"))
        for (int chunk : {1, 64})
            benchmark::RegisterBenchmark(("crossover/" + short_label(c) + (chunk == 1 ? "/per_token" : "/chunked")).c_str(),
                                         bench_case, c, chunk)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime()
                ->MeasureProcessCPUTime()
            ->ComputeStatistics("min", fastest);
    // Decoding with the 27B layer's key/value head ratio and fewer heads: 2 x 192 KiB of state
    // (in L2 on a 512 KiB L2), 2 x 768 KiB, 2 x 3 MiB.
    for (int64_t heads : {3, 12, 48})
        for (const Case &c : model_cases("", 128, 128, heads / 3, heads, {1}, "decode"))
            if (c.op == Op::Forward)
                benchmark::RegisterBenchmark(("decode/" + short_label(c)).c_str(), bench_case, c, 0)
                    ->Unit(benchmark::kMicrosecond)
                    ->UseRealTime()
                    ->MeasureProcessCPUTime()
                    ->ComputeStatistics("min", fastest);
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
