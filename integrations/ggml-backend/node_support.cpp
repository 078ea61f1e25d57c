// Which nodes libggml-gdn takes. The scheduler gives the backend exactly these; every other op
// of a graph stays on ggml's CPU backend.
#include "nodes.h"

namespace ggml_gdn {

bool is_layout_only(const ggml_tensor *node) {
    switch (node->op) {
        case GGML_OP_NONE:
        case GGML_OP_RESHAPE:
        case GGML_OP_VIEW:
        case GGML_OP_PERMUTE:
        case GGML_OP_TRANSPOSE:
            return true;
        default:
            return false;
    }
}

bool supports(const ggml_tensor *node) {
    if (node == nullptr) return false;
    if (is_layout_only(node)) return true;
    switch (node->op) {
        case GGML_OP_GATED_DELTA_NET: {
            std::string why;
            return delta_net_supported(node, why);
        }
        case GGML_OP_L2_NORM:
            return l2_norm_supported(node);
        default:
            return false;
    }
}

}  // namespace ggml_gdn
