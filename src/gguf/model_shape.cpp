#include "gguf/model_shape.h"

#include <array>

namespace gdn::gguf {

namespace {

// Head counts and sizes above this are refused as implausible (and so every product below stays
// far from overflow).
constexpr int64_t kMaxDim = int64_t(1) << 16;
// llama.cpp's loader uses this when {arch}.full_attention_interval is absent.
constexpr int64_t kDefaultFullAttentionInterval = 4;

// Reads {arch}.{suffix} as a positive integer no larger than `max`. `required == false`: a missing
// key leaves `value` as is and succeeds.
bool get_count(const Metadata &md, const std::string &arch, const char *suffix, bool required, int64_t min,
               int64_t max, int64_t &value, std::string &error) {
    const std::string key = arch + "." + suffix;
    const Value *v = md.find(key);
    if (!v) {
        if (!required) return true;
        error = "the metadata has no key " + key;
        return false;
    }
    const auto n = v->as_int();
    if (!n) {
        error = key + " is a " + value_type_name(v->type) + " (" + v->to_string() + "), not an integer";
        return false;
    }
    if (*n < min || *n > max) {
        error = key + " = " + std::to_string(*n) + " is outside " + std::to_string(min) + ".." + std::to_string(max);
        return false;
    }
    value = *n;
    return true;
}

}  // namespace

std::string ModelShape::dims_string() const {
    return "Sk=" + std::to_string(Sk) + ",Sv=" + std::to_string(Sv) + ",Hk=" + std::to_string(Hk) +
           ",Hv=" + std::to_string(Hv) + ",conv_dim=" + std::to_string(conv_dim);
}

bool is_delta_net_arch(const std::string &arch) {
    static const std::array<const char *, 3> known = {"qwen3next", "qwen35", "qwen35moe"};
    for (const char *k : known)
        if (arch == k) return true;
    return false;
}

bool model_shape_from_metadata(const Metadata &md, ModelShape &out, std::string &error) {
    const Value *arch_value = md.find("general.architecture");
    if (!arch_value) {
        error = "the metadata has no key general.architecture";
        return false;
    }
    const auto arch_view = arch_value->as_string();
    if (!arch_view) {
        error = "general.architecture is a " + value_type_name(arch_value->type) + ", not a string";
        return false;
    }
    const std::string arch(*arch_view);
    if (!is_delta_net_arch(arch)) {
        error = "architecture '" + arch + "' is not a gated-delta-net model this reader knows "
                "(qwen3next, qwen35, qwen35moe)";
        return false;
    }

    ModelShape s;
    s.arch = arch;
    int64_t inner_size = 0;
    if (!get_count(md, arch, "ssm.state_size", true, 1, kMaxDim, s.Sk, error) ||
        !get_count(md, arch, "ssm.group_count", true, 1, kMaxDim, s.Hk, error) ||
        !get_count(md, arch, "ssm.time_step_rank", true, 1, kMaxDim, s.Hv, error) ||
        !get_count(md, arch, "ssm.inner_size", true, 1, kMaxDim * kMaxDim, inner_size, error) ||
        !get_count(md, arch, "ssm.conv_kernel", false, 1, kMaxDim, s.conv_kernel, error))
        return false;
    if (inner_size % s.Hv != 0) {
        error = arch + ".ssm.inner_size = " + std::to_string(inner_size) + " is not a multiple of " + arch +
                ".ssm.time_step_rank = " + std::to_string(s.Hv) + " (value heads)";
        return false;
    }
    s.Sv = inner_size / s.Hv;
    if (s.Sv > kMaxDim) {
        error = "value head size " + arch + ".ssm.inner_size / " + arch + ".ssm.time_step_rank = " +
                std::to_string(s.Sv) + " is over " + std::to_string(kMaxDim);
        return false;
    }
    if (s.Hv % s.Hk != 0) {
        error = arch + ".ssm.group_count = " + std::to_string(s.Hk) + " (key heads) does not divide " + arch +
                ".ssm.time_step_rank = " + std::to_string(s.Hv) + " (value heads)";
        return false;
    }
    s.conv_dim = 2 * s.Hk * s.Sk + s.Hv * s.Sv;

    // Layer count: optional, the shape of the op does not depend on it.
    int64_t nextn_layers = 0, interval = kDefaultFullAttentionInterval;
    s.delta_net_layers = -1;
    if (!get_count(md, arch, "block_count", false, 1, kMaxDim, s.block_count, error) ||
        !get_count(md, arch, "nextn_predict_layers", false, 0, kMaxDim, nextn_layers, error) ||
        !get_count(md, arch, "full_attention_interval", false, 1, kMaxDim, interval, error))
        return false;
    if (s.block_count > 0) {
        if (nextn_layers >= s.block_count) {
            error = arch + ".nextn_predict_layers = " + std::to_string(nextn_layers) + " is not below " + arch +
                    ".block_count = " + std::to_string(s.block_count);
            return false;
        }
        const int64_t main_layers = s.block_count - nextn_layers;
        s.delta_net_layers = main_layers - main_layers / interval;  // every interval-th layer is full attention
    }

    const Value *name = md.find("general.name");
    const auto name_view = name ? name->as_string() : std::nullopt;
    s.name = name_view && !name_view->empty() ? std::string(*name_view) : arch;
    out = std::move(s);
    return true;
}

bool model_shape_from_gguf(const std::string &path, ModelShape &out, std::string &error) {
    Metadata md;
    if (!read_metadata(path, md, error)) return false;
    if (!model_shape_from_metadata(md, out, error)) {
        error = path + ": " + error;
        return false;
    }
    out.source = "GGUF metadata of " + path;
    return true;
}

}  // namespace gdn::gguf
