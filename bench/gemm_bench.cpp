// The small GEMMs of the chunked kernels (C = 64 tokens, head size 128), by implementation:
//   gdn/<isa>   the backend's kernel (src/cpu/gemm_kernel.inc) forced to avx512, avx2 or sse2
//               (x86-64), neon or generic (AArch64)
//   loops       a plain i-k-j loop nest, compiled for AVX-512 (x86-64; the target's baseline
//               elsewhere) by GCC's auto-vectoriser
//   refblas     Debian's reference BLAS sgemm (libblas3), when linked
//   eigen       Eigen 3 matrix products (AVX-512 build), when found
//   libxsmm     libxsmm JIT small-matrix kernels, NN only, when found
// Shapes: NN 64x128x128 (V - Kg S), TN 128x128x64 (Kl^T Dm), NT 64x64x128 (Q K^T),
// NN/NT 128x128x128 ([dO; Y] S and [dO; Y] S^T).
#include <benchmark/benchmark.h>

#include <random>

#include "cpu/aligned_vector.h"
#include "cpu/gemm.h"
#include "gemm_bench_libs.h"

#if defined(GDN_HAVE_FORTRAN_SGEMM)
extern "C" void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const float *alpha,
                       const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
                       const int *ldc);
#endif

namespace {

using gdn::cpu::Mat;

struct Problem {
    int m, n, k;
    bool a_trans, b_trans;
    // 64-byte aligned, as the chunk math's scratch is (cpu/aligned_vector.h).
    gdn::cpu::AlignedVector<float> a, b, c, pack;
    Problem(int m_, int n_, int k_, bool at, bool bt) : m(m_), n(n_), k(k_), a_trans(at), b_trans(bt) {
        std::mt19937 rng(1);
        std::uniform_real_distribution<float> u(-1, 1);
        a.resize(m * k);
        b.resize(k * n);
        c.resize(m * n);
        pack.resize(gdn::cpu::gemm_pack_floats(k));
        for (float &x : a) x = u(rng);
        for (float &x : b) x = u(rng);
    }
    // A stored m x k (or k x m when transposed), B stored k x n (or n x k).
    Mat av() const { return a_trans ? gdn::cpu::transposed(a.data(), m) : gdn::cpu::rows(a.data(), k); }
    Mat bv() const { return b_trans ? gdn::cpu::transposed(b.data(), k) : gdn::cpu::rows(b.data(), n); }
};

void finish(benchmark::State &state, const Problem &p) {
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * p.m * p.n * p.k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void bm_gdn(benchmark::State &state, const char *isa, int m, int n, int k, bool at, bool bt) {
    if (!gdn::cpu::gemm_force_isa(isa)) {
        state.SkipWithError("ISA not available on this host");
        return;
    }
    Problem p(m, n, k, at, bt);
    for (auto _ : state) {
        gdn::cpu::gemm(m, n, k, 1.0f, p.av(), p.bv(), false, p.c.data(), n, p.pack.data());
        benchmark::DoNotOptimize(p.c.data());
    }
    finish(state, p);
}

#if defined(__x86_64__)
#define GDN_LOOPS_TARGET __attribute__((target("avx512f,fma")))
#else
#define GDN_LOOPS_TARGET
#endif

GDN_LOOPS_TARGET void loops(const Problem &p, float *c) {
    const Mat a = p.av(), b = p.bv();
    for (int i = 0; i < p.m; ++i) {
        float *ci = c + i * p.n;
        for (int j = 0; j < p.n; ++j) ci[j] = 0;
        for (int kk = 0; kk < p.k; ++kk) {
            const float x = a.p[i * a.row_stride + kk * a.col_stride];
            const float *bk = b.p + kk * b.row_stride;
            if (b.col_stride == 1)
                for (int j = 0; j < p.n; ++j) ci[j] += x * bk[j];
            else
                for (int j = 0; j < p.n; ++j) ci[j] += x * bk[j * b.col_stride];
        }
    }
}

void bm_loops(benchmark::State &state, int m, int n, int k, bool at, bool bt) {
    Problem p(m, n, k, at, bt);
    for (auto _ : state) {
        loops(p, p.c.data());
        benchmark::DoNotOptimize(p.c.data());
    }
    finish(state, p);
}

#if defined(GDN_HAVE_FORTRAN_SGEMM)
void bm_refblas(benchmark::State &state, int m, int n, int k, bool at, bool bt) {
    Problem p(m, n, k, at, bt);
    // Row-major C = A B is column-major C^T = B^T A^T.
    const float one = 1, zero = 0;
    const char tb = at ? 'T' : 'N', ta = bt ? 'T' : 'N';
    const int lda = at ? m : k, ldb = bt ? k : n;
    for (auto _ : state) {
        sgemm_(&ta, &tb, &n, &m, &k, &one, p.b.data(), &ldb, p.a.data(), &lda, &zero, p.c.data(), &n);
        benchmark::DoNotOptimize(p.c.data());
    }
    finish(state, p);
}
#endif

#if defined(GDN_HAVE_EIGEN)
void bm_eigen(benchmark::State &state, int m, int n, int k, bool at, bool bt) {
    Problem p(m, n, k, at, bt);
    for (auto _ : state) {
        bench::eigen_gemm(m, n, k, at, bt, p.a.data(), p.b.data(), p.c.data());
        benchmark::DoNotOptimize(p.c.data());
    }
    finish(state, p);
}
#endif

#if defined(GDN_HAVE_LIBXSMM)
void bm_xsmm(benchmark::State &state, int m, int n, int k) {
    Problem p(m, n, k, false, false);
    for (auto _ : state) {
        if (!bench::xsmm_gemm(m, n, k, p.a.data(), p.b.data(), p.c.data())) {
            state.SkipWithError("libxsmm: no kernel for this shape");
            break;
        }
        benchmark::DoNotOptimize(p.c.data());
    }
    finish(state, p);
}
#endif

struct ShapeArg {
    const char *name;
    int m, n, k;
    bool at, bt;
};

}  // namespace

int main(int argc, char **argv) {
    const ShapeArg shapes[] = {{"NN_64x128x128", 64, 128, 128, false, false},
                               {"TN_128x128x64", 128, 128, 64, true, false},
                               {"NT_64x64x128", 64, 64, 128, false, true},
                               {"NN_128x128x128", 128, 128, 128, false, false},
                               {"NT_128x128x128", 128, 128, 128, false, true},
                               // The same products for a 32-token chunk (AVX-512 takes 12 x 32 tiles).
                               {"NN_32x128x128", 32, 128, 128, false, false},
                               {"TN_128x128x32", 128, 128, 32, true, false},
                               {"NT_32x32x128", 32, 32, 128, false, true}};
    for (const ShapeArg &s : shapes) {
#if defined(__x86_64__)
        for (const char *isa : {"avx512", "avx2", "sse2"})
#elif defined(__aarch64__)
        for (const char *isa : {"neon", "generic"})
#else
        for (const char *isa : {"generic"})
#endif
            benchmark::RegisterBenchmark((std::string("gdn_") + isa + "/" + s.name).c_str(), bm_gdn, isa, s.m, s.n, s.k,
                                         s.at, s.bt);
        benchmark::RegisterBenchmark((std::string("loops/") + s.name).c_str(), bm_loops, s.m, s.n, s.k, s.at, s.bt);
#if defined(GDN_HAVE_FORTRAN_SGEMM)
        benchmark::RegisterBenchmark((std::string("refblas/") + s.name).c_str(), bm_refblas, s.m, s.n, s.k, s.at, s.bt);
#endif
#if defined(GDN_HAVE_EIGEN)
        benchmark::RegisterBenchmark((std::string("eigen/") + s.name).c_str(), bm_eigen, s.m, s.n, s.k, s.at, s.bt);
#endif
#if defined(GDN_HAVE_LIBXSMM)
        if (!s.at && !s.bt)
            benchmark::RegisterBenchmark((std::string("libxsmm/") + s.name).c_str(), bm_xsmm, s.m, s.n, s.k);
#endif
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
