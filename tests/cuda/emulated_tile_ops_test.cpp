// The tensor-core tile operations (src/cuda/tile_ops.cuh) on CPU threads (fake_cuda.h's WMMA
// and bf16 mma).
#include "fake_cuda.h"
#include "tile_ops_reference.h"

namespace {

using namespace gdn_tile_check;

void run_emulated_checks(bool bf16_products) {
    const Inputs in = make_check_inputs();
    alignas(32) static float smem[shared_floats];  // shared memory: 32-byte aligned, as WMMA's tiles need
    std::vector<float> c(M * N), c2(M * N), c3(M * N), x(n * n), x_chunk(n_chunk * n_chunk);
    fake_cuda::launch({1, 1, 1}, 128, [&] {
        run_checks(smem, in.a.data(), in.b.data(), in.l.data(), c.data(), c2.data(), c3.data(), x.data(), x_chunk.data(),
                   bf16_products);
    });
    expect_checks_pass(in, c, c2, c3, x, x_chunk, bf16_products);
}

TEST(EmulatedTileOps, GemmAndTriangularInverse) { run_emulated_checks(false); }

// K = 24: one full m16n8k16 step and one half step (columns of K past 24 zero).
TEST(EmulatedTileOps, Bf16GemmAndTriangularInverse) { run_emulated_checks(true); }

// The emulated bf16 mma against its definition: D = C + A B with the operands rounded to bf16,
// products exact, summed in F32 from C in increasing k; here with sums that are exact in F32
// (small integers), so every order gives the same bits and the fragments' placement is all
// that is checked, element by element.
TEST(EmulatedTileOps, Bf16MmaFragmentLayout) {
    float A[16][16], B[16][8], C[16][8], D[16][8];
    for (int m = 0; m < 16; ++m)
        for (int k = 0; k < 16; ++k) A[m][k] = static_cast<float>((m * 7 + k * 3) % 11 - 5);
    for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 8; ++n) B[k][n] = static_cast<float>((k * 5 + n * 13) % 9 - 4);
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) C[m][n] = static_cast<float>(m * 8 + n);
    fake_cuda::launch({1, 1, 1}, 32, [&] {
        const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
        using gdn::cuda::pack_bf16x2;
        const uint32_t a[4] = {pack_bf16x2(A[g][2 * t], A[g][2 * t + 1]), pack_bf16x2(A[g + 8][2 * t], A[g + 8][2 * t + 1]),
                               pack_bf16x2(A[g][2 * t + 8], A[g][2 * t + 9]), pack_bf16x2(A[g + 8][2 * t + 8], A[g + 8][2 * t + 9])};
        const uint32_t b[2] = {pack_bf16x2(B[2 * t][g], B[2 * t + 1][g]), pack_bf16x2(B[2 * t + 8][g], B[2 * t + 9][g])};
        float d[4] = {C[g][2 * t], C[g][2 * t + 1], C[g + 8][2 * t], C[g + 8][2 * t + 1]};
        gdn::cuda::ptx::mma_m16n8k16_bf16(d, a, b);
        D[g][2 * t] = d[0], D[g][2 * t + 1] = d[1], D[g + 8][2 * t] = d[2], D[g + 8][2 * t + 1] = d[3];
    });
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) {
            float want = C[m][n];
            for (int k = 0; k < 16; ++k) want += A[m][k] * B[k][n];
            EXPECT_EQ(D[m][n], want) << m << "," << n;
        }
}

TEST(EmulatedTileOps, SplittingMatters) {
    // Without the tails, TF32 alone errs near 2^-11: the check above would see it.
    const float x = 1.0f + 1.0f / 3.0f;
    const float hi = nvcuda::wmma::__float_to_tf32(x);
    EXPECT_GT(std::fabs(hi - x) / x, 1e-5);
    EXPECT_LT(std::fabs(hi + nvcuda::wmma::__float_to_tf32(x - hi) - x) / x, 1e-6);
}

}  // namespace
