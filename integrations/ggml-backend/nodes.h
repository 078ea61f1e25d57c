// The graph nodes libggml-gdn computes, and how (one file per op: delta_net_node.cpp,
// l2_norm_node.cpp; which nodes it takes: node_support.cpp).
#pragma once

#include <string>

#include <ggml.h>

#include "gdn/gdn.h"

namespace ggml_gdn {

// Whether the backend computes `node`: GATED_DELTA_NET where gdn computes the same function,
// L2_NORM on F32 (test-backend-ops builds the q/k normalisation into every delta-net case, and a
// backend must take every node of a case), and the layout-only ops (no data is touched).
bool supports(const ggml_tensor *node);

// Whether the node only names memory (views, reshapes, leaves): nothing to compute.
bool is_layout_only(const ggml_tensor *node);

// GGML_OP_GATED_DELTA_NET: checks the node as gdn would compute it (addresses need not exist).
bool delta_net_supported(const ggml_tensor *node, std::string &why);
// Before the shares of a node: checks what only its memory shows and zeroes the state slots
// that T < K leaves unwritten.
gdn_status delta_net_prepare(ggml_tensor *node, std::string &why);
// Share ith of nth of the node's forward (gdn_forward_share on `ctx`, a cpu context): the node is
// computed once every share has returned GDN_OK, the same bits for every nth. A failed share's
// message is ctx's last error, to be read once the team has joined (the shares write it in turn).
gdn_status delta_net_share(gdn_context *ctx, ggml_tensor *node, int ith, int nth);

// GGML_OP_L2_NORM: y = x / max(||x||, eps) per row, computed as ggml's CPU backend does (the
// sum of squares in double), so the bits are the same.
bool l2_norm_supported(const ggml_tensor *node);
// Rows ith, ith + nth, ... of the node.
void l2_norm_share(ggml_tensor *node, int ith, int nth);

}  // namespace ggml_gdn
