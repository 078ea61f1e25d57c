// GGML_OP_L2_NORM: y = x * (1 / max(sqrt(sum x^2), eps)) per row (ggml's definition, eps in
// op_params[0]). The sum of the rounded squares is accumulated in double and its square root
// taken in float, as ggml's CPU backend does, so the two give the same bits.
#include <cmath>
#include <cstring>

#include "nodes.h"

namespace ggml_gdn {

bool l2_norm_supported(const ggml_tensor *node) {
    const ggml_tensor *x = node->src[0];
    if (x == nullptr || x->type != GGML_TYPE_F32 || node->type != GGML_TYPE_F32) return false;
    for (int d = 0; d < 4; ++d)
        if (x->ne[d] != node->ne[d]) return false;
    float eps;
    std::memcpy(&eps, node->op_params, sizeof eps);
    return eps >= 0.0f;
}

void l2_norm_share(ggml_tensor *node, int ith, int nth) {
    const ggml_tensor *x = node->src[0];
    float eps;
    std::memcpy(&eps, node->op_params, sizeof eps);
    const int64_t n = x->ne[0], rows = x->ne[1] * x->ne[2] * x->ne[3];
    for (int64_t row = ith; row < rows; row += nth) {
        const int64_t i1 = row % x->ne[1], i2 = row / x->ne[1] % x->ne[2], i3 = row / (x->ne[1] * x->ne[2]);
        const char *in = static_cast<const char *>(x->data) + i1 * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3];
        char *out = static_cast<char *>(node->data) + i1 * node->nb[1] + i2 * node->nb[2] + i3 * node->nb[3];
        const auto element = [&](int64_t i0) { return *reinterpret_cast<const float *>(in + i0 * x->nb[0]); };
        double sum = 0.0;
        for (int64_t i0 = 0; i0 < n; ++i0) sum += static_cast<double>(element(i0) * element(i0));
        const float scale = 1.0f / std::fmax(std::sqrt(static_cast<float>(sum)), eps);
        for (int64_t i0 = 0; i0 < n; ++i0) *reinterpret_cast<float *>(out + i0 * node->nb[0]) = element(i0) * scale;
    }
}

}  // namespace ggml_gdn
