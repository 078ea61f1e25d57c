// The portable kernel of gemm_bf16: plain C++ computing the "avx512bf16" result definition
// exactly (gemm_bf16.h): per pair of k, the odd term then the even one, each a fused multiply-add
// with subnormal bf16 operands read as zero and subnormal sums flushed to zero. It runs on hosts
// without AVX512_BF16 (at a fraction of gemm's speed: a bf16 product mode is for hosts that have
// it, gemm_bf16_native()) and is the tests' model of the vector kernels' bits.
#include <cmath>

#include "cpu/gemm_bf16_pack.h"

namespace gdn::cpu::bf16_generic {

using namespace bf16_detail;

namespace {

constexpr int NR = 64;

// A bf16 operand as vdpbf16ps reads it: a subnormal is zero.
inline float operand_value(uint16_t x) { return (x & 0x7f80u) == 0 ? 0.0f : widen(x); }
// A sum as vdpbf16ps writes it: a subnormal is flushed to zero of its sign.
inline float flush(float x) { return std::fabs(x) < 1.17549435e-38f ? std::copysign(0.0f, x) : x; }

}  // namespace

void gemm(const Problem &pr, void *pack) {
    const Scratch s = scratch(pack, pr.m, pr.k);
    const int64_t lda = round_up(pr.k, 2), pairs = lda / 2;
    pack_a(pr.m, pr.k, pr.a, pr.m, lda, s.a);
    const RowScales &sc = pr.scales;
    const bool read_c = pr.c_scale != 0.0f;
    for (int64_t j0 = 0; j0 < pr.n; j0 += NR) {
        const int cols = static_cast<int>(pr.n - j0 < NR ? pr.n - j0 : NR);
        pack_b_panel<NR>(pr.k, lda, pr.b, j0, cols, sc.b_rows, s.panel);
        for (int64_t i = 0; i < pr.m; ++i) {
            const uint16_t *a = s.a + i * lda;
            const float row_alpha = sc.c_rows ? pr.alpha * sc.c_rows[i] : pr.alpha;
            const float row_c_scale = sc.c_in ? pr.c_scale * sc.c_in[i] : pr.c_scale;
            for (int j = 0; j < cols; ++j) {
                float sum = 0.0f;
                for (int64_t p = 0; p < pairs; ++p) {
                    const uint16_t *b = s.panel + (p * NR + j) * 2;
                    sum = flush(std::fma(operand_value(a[2 * p + 1]), operand_value(b[1]), sum));
                    sum = flush(std::fma(operand_value(a[2 * p]), operand_value(b[0]), sum));
                }
                float *c = pr.c + i * pr.ldc + j0 + j;
                *c = finish(sum, row_alpha, row_c_scale, read_c, read_c ? *c : 0.0f);
            }
        }
    }
}

}  // namespace gdn::cpu::bf16_generic
