// The bf16 GEMM kernels (src/cpu/gemm_bf16.h) against the F32 kernel at the chunk products'
// shapes (C = 64 tokens, head size 128), GFLOP/s on one thread:
//   f32/<isa>          gemm (src/cpu/gemm.h), the kernel forced to <isa> (avx512)
//   bf16/<isa>         gemm_bf16 on F32 operands (rounded as packed), kernel avx512bf16 or amx
//   bf16_stored/<isa>  gemm_bf16 on operands already stored as bf16 (packing copies them)
// Each shape's variants are registered one after another, so with --benchmark_repetitions and
// --benchmark_enable_random_interleaving they alternate in one run. And the host's peaks:
//   peak/fma_f32, peak/vdpbf16ps, peak/tdpbf16ps (AMX): independent products in registers.
// Shapes: NN 64x128x128 (V - Kg S), NN 128x64x128, TN 128x128x64 (Kl^T Dm), NT 64x64x128 (Q K^T),
// NN/NT 128x128x128 ([Qg; Kg] S0, [dO; Y] S and [dO; Y] S^T); TN 128x128x32 and NT 64x32x128 for
// 32-token chunks.
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "bf16_peak.h"
#include "cpu/aligned_vector.h"
#include "cpu/gemm.h"
#include "cpu/gemm_bf16.h"

namespace {

using gdn::cpu::Mat;
using gdn::cpu::MatBf16;

struct Problem {
    int m, n, k;
    bool a_trans, b_trans;
    // 64-byte aligned, as the chunk math's scratch is (cpu/aligned_vector.h): with 16 bytes a
    // 512-bit load splits two cache lines.
    gdn::cpu::AlignedVector<float> a, b, c, pack;
    gdn::cpu::AlignedVector<uint16_t> a16, b16;
    gdn::cpu::AlignedVector<unsigned char> pack16;
    Problem(int m_, int n_, int k_, bool at, bool bt) : m(m_), n(n_), k(k_), a_trans(at), b_trans(bt) {
        std::mt19937 rng(1);
        std::uniform_real_distribution<float> u(-1, 1);
        a.resize(m * k);
        b.resize(k * n);
        c.resize(m * n);
        for (float &x : a) x = u(rng);
        for (float &x : b) x = u(rng);
        a16.resize(a.size());
        b16.resize(b.size());
        gdn::cpu::round_to_bf16(a.data(), a16.data(), int64_t(a.size()));
        gdn::cpu::round_to_bf16(b.data(), b16.data(), int64_t(b.size()));
        pack.resize(gdn::cpu::gemm_pack_floats(k));
        pack16.resize(gdn::cpu::gemm_bf16_pack_bytes(m, k));
    }
    // A stored m x k (or k x m when transposed), B stored k x n (or n x k).
    Mat av() const { return a_trans ? gdn::cpu::transposed(a.data(), m) : gdn::cpu::rows(a.data(), k); }
    Mat bv() const { return b_trans ? gdn::cpu::transposed(b.data(), k) : gdn::cpu::rows(b.data(), n); }
    MatBf16 av16() const { return a_trans ? gdn::cpu::transposed(a16.data(), m) : gdn::cpu::rows(a16.data(), k); }
    MatBf16 bv16() const { return b_trans ? gdn::cpu::transposed(b16.data(), k) : gdn::cpu::rows(b16.data(), n); }
};

void finish(benchmark::State &state, const Problem &p) {
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * p.m * p.n * p.k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_f32(benchmark::State &state, const char *isa, int m, int n, int k, bool at, bool bt) {
    if (!gdn::cpu::gemm_force_isa(isa)) return state.SkipWithError("ISA not available on this host");
    Problem p(m, n, k, at, bt);
    for (auto _ : state) {
        gdn::cpu::gemm(m, n, k, 1.0f, p.av(), p.bv(), 0.0f, p.c.data(), n, p.pack.data());
        benchmark::DoNotOptimize(p.c.data());
    }
    finish(state, p);
}

void bm_bf16(benchmark::State &state, const char *isa, bool stored, int m, int n, int k, bool at, bool bt) {
    if (!gdn::cpu::gemm_bf16_force_isa(isa)) return state.SkipWithError("kernel not available on this host");
    Problem p(m, n, k, at, bt);
    for (auto _ : state) {
        if (stored)
            gdn::cpu::gemm_bf16(m, n, k, 1.0f, p.av16(), p.bv16(), 0.0f, p.c.data(), n, p.pack16.data());
        else
            gdn::cpu::gemm_bf16(m, n, k, 1.0f, p.av(), p.bv(), 0.0f, p.c.data(), n, p.pack16.data());
        benchmark::DoNotOptimize(p.c.data());
    }
    finish(state, p);
}

void bm_peak(benchmark::State &state, const char *needs, double (*probe)(int64_t)) {
    if (needs && !gdn::cpu::gemm_bf16_force_isa(needs)) return state.SkipWithError("not available on this host");
    double flops = 0;
    for (auto _ : state) flops += probe(1 << 16);
    state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}

struct ShapeArg {
    const char *name;
    int m, n, k;
    bool at, bt;
};

}  // namespace

int main(int argc, char **argv) {
    const ShapeArg shapes[] = {{"NN_64x128x128", 64, 128, 128, false, false},
                               {"NN_128x64x128", 128, 64, 128, false, false},
                               {"TN_128x128x64", 128, 128, 64, true, false},
                               {"NT_64x64x128", 64, 64, 128, false, true},
                               {"NN_128x128x128", 128, 128, 128, false, false},
                               {"NT_128x128x128", 128, 128, 128, false, true},
                               // 32-token chunks (the F32 forward's length): the update and the grams.
                               {"TN_128x128x32", 128, 128, 32, true, false},
                               {"NT_64x32x128", 64, 32, 128, false, true}};
    for (const ShapeArg &s : shapes) {
        benchmark::RegisterBenchmark((std::string("f32/avx512/") + s.name).c_str(), bm_f32, "avx512", s.m, s.n, s.k,
                                     s.at, s.bt);
        for (const char *isa : {"avx512bf16", "amx"})
            for (bool stored : {false, true})
                benchmark::RegisterBenchmark(
                    (std::string(stored ? "bf16_stored/" : "bf16/") + isa + "/" + s.name).c_str(), bm_bf16, isa,
                    stored, s.m, s.n, s.k, s.at, s.bt);
    }
    benchmark::RegisterBenchmark("peak/fma_f32", bm_peak, nullptr, bench::fma_f32_flops);
    benchmark::RegisterBenchmark("peak/vdpbf16ps", bm_peak, "avx512bf16", bench::dpbf16_flops);
    benchmark::RegisterBenchmark("peak/tdpbf16ps", bm_peak, "amx", bench::tdpbf16_flops);
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
