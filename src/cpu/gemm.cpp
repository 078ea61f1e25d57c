// Run-time choice of the GEMM kernel among the builds of gemm_kernel.inc this target has.
#include "cpu/gemm.h"

#include <cstring>

#if defined(GDN_GEMM_PROFILE)
#include "cpu/gemm_profile.h"
#endif

namespace gdn::cpu {

#define GDN_DECLARE_KERNEL(ns)                                                                             \
    namespace ns {                                                                                         \
    void gemm(int64_t m, int64_t n, int64_t k, float alpha, Mat a, Mat b, float c_scale, float *c,          \
              int64_t ldc, float *pack, RowScales scales);                                                 \
    int64_t panel_width();                                                                                 \
    int64_t wide_panel_width();                                                                            \
    }
#if defined(__x86_64__)
GDN_DECLARE_KERNEL(avx512)
GDN_DECLARE_KERNEL(avx2)
GDN_DECLARE_KERNEL(sse2)
#elif defined(__aarch64__)
GDN_DECLARE_KERNEL(neon)
GDN_DECLARE_KERNEL(generic)
#else
GDN_DECLARE_KERNEL(generic)
#endif

namespace {

using Kernel = void (*)(int64_t, int64_t, int64_t, float, Mat, Mat, float, float *, int64_t, float *, RowScales);

struct Choice {
    Kernel kernel;
    int64_t (*panel_width)();
    int64_t (*wide_panel_width)();
    const char *name;
};

// The kernels built for this target, best first. SSE2 is part of x86-64 and Advanced SIMD (NEON)
// of AArch64, so the last x86 entry and both AArch64 entries run on every host of their target;
// "generic" (plain 4-float vectors, the compiler's lowering) is the fallback on any other target
// and is kept on AArch64 as the baseline the tests and the benchmark compare "neon" with.
constexpr Choice kKernels[] = {
#if defined(__x86_64__)
    {avx512::gemm, avx512::panel_width, avx512::wide_panel_width, "avx512"},
    {avx2::gemm, avx2::panel_width, avx2::wide_panel_width, "avx2"},
    {sse2::gemm, sse2::panel_width, sse2::wide_panel_width, "sse2"},
#elif defined(__aarch64__)
    {neon::gemm, neon::panel_width, neon::wide_panel_width, "neon"},
    {generic::gemm, generic::panel_width, generic::wide_panel_width, "generic"},
#else
    {generic::gemm, generic::panel_width, generic::wide_panel_width, "generic"},
#endif
};

bool host_has(const char *isa) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (std::strcmp(isa, "avx512") == 0) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    if (std::strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    (void)isa;
    return true;  // the target's baseline
}

const Choice *find(const char *isa) {
    for (const Choice &c : kKernels)
        if (isa != nullptr && std::strcmp(isa, c.name) == 0) return &c;
    return nullptr;
}

Choice best() {
    for (const Choice &c : kKernels)
        if (host_has(c.name)) return c;
    return kKernels[sizeof kKernels / sizeof kKernels[0] - 1];
}

Choice &current() {
    static Choice c = best();
    return c;
}

}  // namespace

void gemm(int64_t m, int64_t n, int64_t k, float alpha, Mat a, Mat b, float c_scale, float *c, int64_t ldc,
          float *pack, RowScales scales) {
#if defined(GDN_GEMM_PROFILE)
    const GemmProfileScope timed({m, n, k, a.col_stride != 1, b.col_stride != 1, scales.c_rows != nullptr,
                                  scales.b_rows != nullptr, scales.c_in != nullptr, c_scale != 0.0f});
#endif
    current().kernel(m, n, k, alpha, a, b, c_scale, c, ldc, pack, scales);
}

int64_t gemm_panel_width() { return current().panel_width(); }

int64_t gemm_wide_panel_width() { return current().wide_panel_width(); }

int64_t gemm_pack_floats(int64_t k) { return (k > 0 ? k : 1) * 64; }  // k x NR, NR <= 64

const char *gemm_isa() { return current().name; }

const char *gemm_best_isa() { return best().name; }

bool gemm_force_isa(const char *isa) {
    const Choice *c = find(isa);
    if (c == nullptr || !host_has(c->name)) return false;
    current() = *c;
    return true;
}

}  // namespace gdn::cpu
