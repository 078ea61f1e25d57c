// Run-time choice of the GEMM kernel.
#include "cpu/gemm.h"

#include <cstring>
#include <initializer_list>

namespace gdn::cpu {

#define GDN_DECLARE_KERNEL(ns)                                                                             \
    namespace ns {                                                                                         \
    void gemm(int64_t m, int64_t n, int64_t k, float alpha, Mat a, Mat b, float c_scale, float *c,          \
              int64_t ldc, float *pack);                                                                   \
    }
GDN_DECLARE_KERNEL(sse2)
#if defined(__x86_64__)
GDN_DECLARE_KERNEL(avx2)
GDN_DECLARE_KERNEL(avx512)
#endif

namespace {

using Kernel = void (*)(int64_t, int64_t, int64_t, float, Mat, Mat, float, float *, int64_t, float *);

struct Choice {
    Kernel kernel;
    const char *name;
};

bool host_has(const char *isa) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (std::strcmp(isa, "avx512") == 0) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    if (std::strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return std::strcmp(isa, "sse2") == 0;
}

Choice choice_for(const char *isa) {
#if defined(__x86_64__)
    if (std::strcmp(isa, "avx512") == 0) return {avx512::gemm, "avx512"};
    if (std::strcmp(isa, "avx2") == 0) return {avx2::gemm, "avx2"};
#endif
    (void)isa;
    return {sse2::gemm, "sse2"};
}

Choice best() {
    for (const char *isa : {"avx512", "avx2"})
        if (host_has(isa)) return choice_for(isa);
    return choice_for("sse2");
}

Choice &current() {
    static Choice c = best();
    return c;
}

}  // namespace

void gemm(int64_t m, int64_t n, int64_t k, float alpha, Mat a, Mat b, float c_scale, float *c, int64_t ldc,
          float *pack) {
    current().kernel(m, n, k, alpha, a, b, c_scale, c, ldc, pack);
}

int64_t gemm_pack_floats(int64_t k) { return (k > 0 ? k : 1) * 64; }  // k x NR, NR <= 64

const char *gemm_isa() { return current().name; }

bool gemm_force_isa(const char *isa) {
    if (!host_has(isa)) return false;
    current() = choice_for(isa);
    return true;
}

}  // namespace gdn::cpu
