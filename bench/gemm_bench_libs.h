// Library GEMMs for gemm_bench (row-major C = op(A) op(B)); present when found at configure time.
#pragma once

namespace bench {
void eigen_gemm(int m, int n, int k, bool at, bool bt, const float *a, const float *b, float *c);
bool xsmm_gemm(int m, int n, int k, const float *a, const float *b, float *c);  // no transposes
}  // namespace bench
