// Throughput probes for gemm_bf16_bench: the host's peak of F32 FMAs (vfmadd231ps), bf16 dot
// products (vdpbf16ps) and AMX tiles (tdpbf16ps) on one core, each from independent chains in
// registers (no loads), as FLOP/s. Compiled with -mavx512bf16 -mamx-tile -mamx-bf16 where the host
// has them (bench/CMakeLists.txt); called only after gemm_bf16_force_isa found the instruction.
#include "bf16_peak.h"

#include <immintrin.h>

#include <cstdint>

namespace bench {

namespace {
// 24 independent accumulators (zmm0 .. zmm23) fed by zmm30 and zmm31: more chains than latency x
// ports of either unit. Written in assembly: as C++, GCC kept the 24 sums in memory.
#define GDN_CHAINS(op)                                                                                      \
    op " %%zmm30, %%zmm31, %%zmm0\n\t" op " %%zmm30, %%zmm31, %%zmm1\n\t" op " %%zmm30, %%zmm31, %%zmm2\n\t"     \
    op " %%zmm30, %%zmm31, %%zmm3\n\t" op " %%zmm30, %%zmm31, %%zmm4\n\t" op " %%zmm30, %%zmm31, %%zmm5\n\t"     \
    op " %%zmm30, %%zmm31, %%zmm6\n\t" op " %%zmm30, %%zmm31, %%zmm7\n\t" op " %%zmm30, %%zmm31, %%zmm8\n\t"     \
    op " %%zmm30, %%zmm31, %%zmm9\n\t" op " %%zmm30, %%zmm31, %%zmm10\n\t" op " %%zmm30, %%zmm31, %%zmm11\n\t"   \
    op " %%zmm30, %%zmm31, %%zmm12\n\t" op " %%zmm30, %%zmm31, %%zmm13\n\t" op " %%zmm30, %%zmm31, %%zmm14\n\t"  \
    op " %%zmm30, %%zmm31, %%zmm15\n\t" op " %%zmm30, %%zmm31, %%zmm16\n\t" op " %%zmm30, %%zmm31, %%zmm17\n\t"  \
    op " %%zmm30, %%zmm31, %%zmm18\n\t" op " %%zmm30, %%zmm31, %%zmm19\n\t" op " %%zmm30, %%zmm31, %%zmm20\n\t"  \
    op " %%zmm30, %%zmm31, %%zmm21\n\t" op " %%zmm30, %%zmm31, %%zmm22\n\t" op " %%zmm30, %%zmm31, %%zmm23\n\t"
#define GDN_ZMM_CLOBBERS                                                                                     \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
        "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23",      \
        "xmm30", "xmm31"
constexpr int kChains = 24;
}  // namespace

__attribute__((target("avx512f"))) double fma_f32_flops(int64_t iterations) {
    __asm__ volatile("vxorps %%xmm30, %%xmm30, %%xmm30\n\tvxorps %%xmm31, %%xmm31, %%xmm31" ::: "xmm30", "xmm31");
    for (int64_t it = 0; it < iterations; ++it) __asm__ volatile(GDN_CHAINS("vfmadd231ps") ::: GDN_ZMM_CLOBBERS);
    return double(iterations) * kChains * 16 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) double dpbf16_flops(int64_t iterations) {
    __asm__ volatile("vxorps %%xmm30, %%xmm30, %%xmm30\n\tvxorps %%xmm31, %%xmm31, %%xmm31" ::: "xmm30", "xmm31");
    for (int64_t it = 0; it < iterations; ++it) __asm__ volatile(GDN_CHAINS("vdpbf16ps") ::: GDN_ZMM_CLOBBERS);
    return double(iterations) * kChains * 16 * 2 * 2;  // 16 lanes, 2 products, multiply + add
}

#if defined(GDN_BENCH_AMX)
namespace {
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
}  // namespace

__attribute__((target("amx-tile,amx-bf16"))) double tdpbf16_flops(int64_t iterations) {
    static const TileConfig config;
    alignas(64) static uint16_t operand[16 * 32];
    alignas(64) static float out[16 * 16];
    for (uint16_t &x : operand) x = 0x3000;
    _tile_loadconfig(&config);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, operand, 64);
    _tile_loadd(5, operand, 64);
    _tile_loadd(6, operand, 64);
    _tile_loadd(7, operand, 64);
    for (int64_t it = 0; it < iterations; ++it) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    __asm__ volatile("" ::"r"(out) : "memory");
    return double(iterations) * 4 * 16 * 16 * 32 * 2;
}
#else
double tdpbf16_flops(int64_t) { return 0; }
#endif

}  // namespace bench
