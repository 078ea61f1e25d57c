// GGML_OP_GATED_DELTA_NET on gdn: the node's sources are q, k, v, g, beta, state (src[0..5]), K
// (state slots) is op_params[0], and the result is ggml's packed [o | K state slots]. The mapping
// to a gdn call is ggml_problem.h's, shared with the custom ops of integrations/ggml.
#include <cstdint>
#include <cstring>

#include "ggml_problem.h"
#include "nodes.h"

namespace ggml_gdn {
namespace {

using namespace gdn_ggml;

int64_t slots_of(const ggml_tensor *node) {
    int32_t K;
    std::memcpy(&K, node->op_params, sizeof K);
    return K;
}

bool all_f32(const ggml_tensor *node) {
    if (node->type != GGML_TYPE_F32) return false;
    for (int i = 0; i < 6; ++i)
        if (node->src[i] == nullptr || node->src[i]->type != GGML_TYPE_F32) return false;
    return true;
}

// The forward call of a node; `placeholders`: made-up addresses (gdn_check_forward reads none).
gdn_status call_of(const ggml_tensor *node, bool placeholders, gdn_problem &p, ForwardOutputs &out, int64_t &K,
                   std::string &why) {
    const ggml_tensor *const src[6] = {node->src[0], node->src[1], node->src[2],
                                       node->src[3], node->src[4], node->src[5]};
    const gdn_status s = problem_of(src, placeholders, p, why);
    if (s != GDN_OK) return s;
    K = slots_of(node);
    if (K < 1 || node->ne[0] != p.v.ne[0] * p.v.ne[1] || node->ne[1] != packed_rows(p, K) || node->ne[2] != 1 ||
        node->ne[3] != 1 || !ggml_is_contiguous(node)) {
        why = format("result (\"%s\") [%lld, %lld, %lld, %lld] with K = %lld is not the packed [Sv*Hv, T*B + K*Sk*B]",
                     node->name, (long long)node->ne[0], (long long)node->ne[1], (long long)node->ne[2],
                     (long long)node->ne[3], (long long)K);
        return GDN_ERROR_SHAPE;
    }
    void *result = placeholders ? placeholder(6) : node->data;
    if (result == nullptr) {
        why = format("result (\"%s\") has no data", node->name);
        return GDN_ERROR_INVALID_ARGUMENT;
    }
    out = forward_outputs(p, K, static_cast<float *>(result));
    return GDN_OK;
}

gdn_status check(const gdn_problem &p, const ForwardOutputs &out, std::string &why) {
    return gdn_ggml::dry_run([&](gdn_context *ctx) { return gdn_check_forward(ctx, &p, &out.out, &out.states); }, why);
}

}  // namespace

bool delta_net_supported(const ggml_tensor *node, std::string &why) {
    if (!all_f32(node)) {
        why = "GATED_DELTA_NET: gdn's ggml backend takes F32 tensors";
        return false;
    }
    gdn_problem p;
    ForwardOutputs out;
    int64_t K;
    if (call_of(node, true, p, out, K, why) != GDN_OK) return false;
    return check(p, out, why) == GDN_OK;
}

gdn_status delta_net_prepare(ggml_tensor *node, std::string &why) {
    if (!all_f32(node)) {
        why = "GATED_DELTA_NET: gdn's ggml backend takes F32 tensors";
        return GDN_ERROR_TYPE;
    }
    gdn_problem p;
    ForwardOutputs out;
    int64_t K;
    gdn_status s = call_of(node, false, p, out, K, why);
    // The real addresses (overlaps, alignment) are checked here, before a byte is written, and
    // once: the shares then refuse only what no check sees (memory running out).
    if (s == GDN_OK) s = check(p, out, why);
    if (s == GDN_OK) zero_unwritten_slots(p, K, out);  // before the shares: they write other slots only
    return s;
}

gdn_status delta_net_share(gdn_context *ctx, ggml_tensor *node, int ith, int nth) {
    gdn_problem p;
    ForwardOutputs out;
    int64_t K;
    std::string unused;  // delta_net_prepare has judged the same call
    const gdn_status s = call_of(node, false, p, out, K, unused);
    return s != GDN_OK ? s : gdn_forward_share(ctx, &p, &out.out, &out.states, ith, nth);
}

}  // namespace ggml_gdn
