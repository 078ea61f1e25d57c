// Run-time choice of the bf16 GEMM kernel (gemm_bf16.h) from CPUID, and the entry points.
#include "cpu/gemm_bf16.h"

#include <cstring>

#include "cpu/gemm_bf16_pack.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gdn::cpu {

namespace bf16_generic {
void gemm(const bf16_detail::Problem &pr, void *pack);
}
#if defined(GDN_BF16_AVX512)
namespace bf16_avx512 {
void gemm(const bf16_detail::Problem &pr, void *pack);
void round_to_bf16(const float *src, uint16_t *dst, int64_t n);
}
#endif
#if defined(GDN_BF16_AMX)
namespace bf16_amx {
void gemm(const bf16_detail::Problem &pr, void *pack);
}
#endif

namespace {

using Kernel = void (*)(const bf16_detail::Problem &, void *);

struct Choice {
    Kernel kernel;
    const char *name;
};

// Best first. AMX leads: at the chunk shapes it ran 2.5-4x gemm's F32 AVX-512 rate, while
// vdpbf16ps issues at half the rate of F32 FMAs on the Xeons measured (its peak in flops is about
// half of F32's), so "avx512bf16" is slower than gemm there; it is kept for hosts where the
// instruction runs at full rate and for tests (docs/PERF.md, "bf16 GEMM kernels").
constexpr Choice kKernels[] = {
#if defined(GDN_BF16_AMX)
    {bf16_amx::gemm, "amx"},
#endif
#if defined(GDN_BF16_AVX512)
    {bf16_avx512::gemm, "avx512bf16"},
#endif
    {bf16_generic::gemm, "generic"},
};

#if defined(__x86_64__)
struct Cpuid {
    bool avx512_bf16 = false, amx_bf16 = false;
    Cpuid() {
        unsigned a, b, c, d;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
        const unsigned max_subleaf = a;
        // Leaf 7.0: EDX bit 22 AMX-BF16, bit 24 AMX-TILE. Leaf 7.1: EAX bit 5 AVX512_BF16.
        amx_bf16 = (d >> 22 & 1) && (d >> 24 & 1);
        if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) avx512_bf16 = a >> 5 & 1;
        // __builtin_cpu_supports checks that the OS saves the AVX-512 state too.
        __builtin_cpu_init();
        const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl");
        avx512_bf16 = avx512_bf16 && avx512;
        amx_bf16 = amx_bf16 && avx512;
    }
};

const Cpuid &cpuid() {
    static const Cpuid c;
    return c;
}

// Linux hands the AMX tile data state (XTILEDATA, feature 18) to a process only on request; the
// request is made once, and AMX is used only where it was granted.
bool amx_permitted() {
    static const bool granted = [] {
        constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
        return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
    }();
    return granted;
}
#endif

bool host_has(const char *isa) {
#if defined(__x86_64__)
    if (std::strcmp(isa, "avx512bf16") == 0) return cpuid().avx512_bf16;
    if (std::strcmp(isa, "amx") == 0) return cpuid().amx_bf16 && amx_permitted();
#endif
    return std::strcmp(isa, "generic") == 0;
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

void run(int64_t m, int64_t n, int64_t k, float alpha, bf16_detail::Operand a, bf16_detail::Operand b,
         float c_scale, float *c, int64_t ldc, void *pack, RowScales scales) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) return bf16_detail::scale_c_only(m, n, c_scale, c, ldc, scales.c_in);
    current().kernel({m, n, k, alpha, a, b, c_scale, c, ldc, scales}, pack);
}

}  // namespace

void gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, Mat a, Mat b, float c_scale, float *c, int64_t ldc,
               void *pack, RowScales scales) {
    run(m, n, k, alpha, bf16_detail::operand(a), bf16_detail::operand(b), c_scale, c, ldc, pack, scales);
}

void gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, MatBf16 a, MatBf16 b, float c_scale, float *c,
               int64_t ldc, void *pack, RowScales scales) {
    run(m, n, k, alpha, bf16_detail::operand(a), bf16_detail::operand(b), c_scale, c, ldc, pack, scales);
}

void gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, MatBf16 a, Mat b, float c_scale, float *c, int64_t ldc,
               void *pack, RowScales scales) {
    run(m, n, k, alpha, bf16_detail::operand(a), bf16_detail::operand(b), c_scale, c, ldc, pack, scales);
}

void gemm_bf16(int64_t m, int64_t n, int64_t k, float alpha, Mat a, MatBf16 b, float c_scale, float *c, int64_t ldc,
               void *pack, RowScales scales) {
    run(m, n, k, alpha, bf16_detail::operand(a), bf16_detail::operand(b), c_scale, c, ldc, pack, scales);
}

int64_t gemm_bf16_pack_bytes(int64_t m, int64_t k) { return bf16_detail::pack_bytes(m, k); }

uint16_t to_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return bf16_detail::round_nearest_even_bits(u);
}
float from_bf16(uint16_t x) { return bf16_detail::widen(x); }
void round_to_bf16(const float *src, uint16_t *dst, int64_t n) {
#if defined(GDN_BF16_AVX512)
    // The same bits as to_bf16, so whichever kernel is in use, a host with AVX-512 takes it.
    static const bool vector = host_has("avx512bf16");
    if (vector) return bf16_avx512::round_to_bf16(src, dst, n);
#endif
    for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

const char *gemm_bf16_isa() { return current().name; }
const char *gemm_bf16_best_isa() { return best().name; }
bool gemm_bf16_native() { return std::strcmp(best().name, "generic") != 0; }

bool gemm_bf16_force_isa(const char *isa) {
    for (const Choice &c : kKernels)
        if (isa != nullptr && std::strcmp(isa, c.name) == 0 && host_has(c.name)) {
            current() = c;
            return true;
        }
    return false;
}

}  // namespace gdn::cpu
