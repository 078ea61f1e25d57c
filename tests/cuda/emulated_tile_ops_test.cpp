// The tensor-core tile operations (src/cuda/tile_ops.cuh) on CPU threads (fake_cuda.h's WMMA).
#include "fake_cuda.h"
#include "tile_ops_reference.h"

namespace {

using namespace gdn_tile_check;

TEST(EmulatedTileOps, GemmAndTriangularInverse) {
    const Inputs in = make_check_inputs();
    alignas(32) static float smem[shared_floats];  // shared memory: 32-byte aligned, as WMMA's tiles need
    std::vector<float> c(M * N), c2(M * N), c3(M * N), x(n * n), x_chunk(n_chunk * n_chunk);
    fake_cuda::launch({1, 1, 1}, 128, [&] {
        run_checks(smem, in.a.data(), in.b.data(), in.l.data(), c.data(), c2.data(), c3.data(), x.data(), x_chunk.data());
    });
    expect_checks_pass(in, c, c2, c3, x, x_chunk);
}

TEST(EmulatedTileOps, SplittingMatters) {
    // Without the tails, TF32 alone errs near 2^-11: the check above would see it.
    const float x = 1.0f + 1.0f / 3.0f;
    const float hi = nvcuda::wmma::__float_to_tf32(x);
    EXPECT_GT(std::fabs(hi - x) / x, 1e-5);
    EXPECT_LT(std::fabs(hi + nvcuda::wmma::__float_to_tf32(x - hi) - x) / x, 1e-6);
}

}  // namespace
