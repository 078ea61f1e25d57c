// Library candidates for the small GEMMs, built for this host's AVX-512 (bench only):
// Eigen 3 (header-only, Debian libeigen3-dev) and libxsmm (Debian libxsmm-dev, JIT kernels).
#include "gemm_bench_libs.h"

#if defined(GDN_HAVE_EIGEN)
#include <Eigen/Core>
#endif
#if defined(GDN_HAVE_LIBXSMM)
#include <libxsmm.h>
#endif

namespace bench {

#if defined(GDN_HAVE_EIGEN)
void eigen_gemm(int m, int n, int k, bool at, bool bt, const float *a, const float *b, float *c) {
    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<RowMat> C(c, m, n);
    Eigen::Map<const RowMat> A(a, at ? k : m, at ? m : k), B(b, bt ? n : k, bt ? k : n);
    if (!at && !bt) C.noalias() = A * B;
    else if (at && !bt) C.noalias() = A.transpose() * B;
    else if (!at && bt) C.noalias() = A * B.transpose();
    else C.noalias() = A.transpose() * B.transpose();
}
#endif

#if defined(GDN_HAVE_LIBXSMM)
// Row-major C = A B is column-major C^T = B^T A^T: libxsmm's (m, n, k) = (n, m, k) with B first.
bool xsmm_gemm(int m, int n, int k, const float *a, const float *b, float *c) {
    static int ready = (libxsmm_init(), 1);
    (void)ready;
    const libxsmm_smmfunction f = libxsmm_smmdispatch(n, m, k, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    if (!f) return false;
    f(b, a, c);
    return true;
}
#endif

}  // namespace bench
