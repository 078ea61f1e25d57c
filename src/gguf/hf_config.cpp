#include "gguf/hf_config.h"

namespace gdn::gguf {

namespace {

// Head counts and sizes above this are refused as implausible, as for GGUF files.
constexpr int64_t kMaxDim = int64_t(1) << 16;
// What transformers' Qwen3-Next and Qwen3.5 configs default to, as llama.cpp's loader does.
constexpr int64_t kDefaultFullAttentionInterval = 4;

// The object holding the keys, and how its keys are named in messages.
struct Section {
    const json::Value &object;
    std::string prefix;  // "" or "text_config."
};

// Reads section.key as an integer in min..max. `required == false`: a missing key (or null)
// leaves `value` as is and succeeds.
bool get_count(const Section &s, const char *key, bool required, int64_t min, int64_t max, int64_t &value,
               std::string &error) {
    const json::Value *v = s.object.find(key);
    if (!v || v->kind == json::Kind::Null) {
        if (!required) return true;
        error = "the config has no key " + s.prefix + key;
        return false;
    }
    const auto n = v->as_int();
    if (!n) {
        error = s.prefix + key + " is " + json::kind_name(v->kind) + (v->kind == json::Kind::Number ? " (" + v->text + ")" : "") +
                ", not an integer";
        return false;
    }
    if (*n < min || *n > max) {
        error = s.prefix + key + " = " + std::to_string(*n) + " is outside " + std::to_string(min) + ".." + std::to_string(max);
        return false;
    }
    value = *n;
    return true;
}

// The first non-empty string among these keys of the object, "" when none.
std::string first_string(const json::Value &object, std::initializer_list<const char *> keys) {
    for (const char *key : keys) {
        const json::Value *v = object.find(key);
        if (v && v->kind == json::Kind::Array && !v->items.empty()) v = &v->items.front();  // "architectures"
        if (v && v->kind == json::Kind::String && !v->text.empty()) return v->text;
    }
    return "";
}

// Delta-net layers from layer_types when present, else from the layer count and interval; -1 when
// the config says neither.
bool delta_net_layers(const Section &s, ModelShape &shape, std::string &error) {
    int64_t interval = kDefaultFullAttentionInterval;
    if (!get_count(s, "num_hidden_layers", false, 1, kMaxDim, shape.block_count, error) ||
        !get_count(s, "full_attention_interval", false, 1, kMaxDim, interval, error))
        return false;
    const json::Value *types = s.object.find("layer_types");
    if (types && types->kind != json::Kind::Null) {
        if (types->kind != json::Kind::Array) {
            error = s.prefix + "layer_types is " + json::kind_name(types->kind) + ", not an array";
            return false;
        }
        int64_t linear = 0;
        for (const json::Value &t : types->items) {
            if (t.kind != json::Kind::String) {
                error = s.prefix + "layer_types has " + json::kind_name(t.kind) + " among its entries, not only strings";
                return false;
            }
            linear += t.text == "linear_attention";
        }
        if (shape.block_count > 0 && static_cast<int64_t>(types->items.size()) != shape.block_count) {
            error = s.prefix + "layer_types has " + std::to_string(types->items.size()) + " entries for " + s.prefix +
                    "num_hidden_layers = " + std::to_string(shape.block_count);
            return false;
        }
        shape.block_count = static_cast<int64_t>(types->items.size());
        shape.delta_net_layers = linear;
        return true;
    }
    shape.delta_net_layers = shape.block_count > 0 ? shape.block_count - shape.block_count / interval : -1;
    return true;
}

}  // namespace

bool model_shape_from_hf_config(const json::Value &config, ModelShape &out, std::string &error) {
    if (config.kind != json::Kind::Object) {
        error = std::string("the config is ") + json::kind_name(config.kind) + ", not an object";
        return false;
    }
    const json::Value *text_config = config.find("text_config");
    const bool nested = !config.find("linear_num_key_heads") && text_config && text_config->kind == json::Kind::Object;
    const Section s{nested ? *text_config : config, nested ? "text_config." : ""};
    if (!s.object.find("linear_num_key_heads")) {
        error = std::string("the config has no key linear_num_key_heads") +
                (text_config ? " (nor text_config.linear_num_key_heads)" : "") +
                ": not a gated-delta-net model (Qwen3-Next, Qwen3.5)";
        return false;
    }
    ModelShape shape;
    if (!get_count(s, "linear_num_key_heads", true, 1, kMaxDim, shape.Hk, error) ||
        !get_count(s, "linear_num_value_heads", true, 1, kMaxDim, shape.Hv, error) ||
        !get_count(s, "linear_key_head_dim", true, 1, kMaxDim, shape.Sk, error) ||
        !get_count(s, "linear_value_head_dim", true, 1, kMaxDim, shape.Sv, error) ||
        !get_count(s, "linear_conv_kernel_dim", false, 1, kMaxDim, shape.conv_kernel, error))
        return false;
    if (shape.Hv % shape.Hk != 0) {
        error = s.prefix + "linear_num_key_heads = " + std::to_string(shape.Hk) + " does not divide " + s.prefix +
                "linear_num_value_heads = " + std::to_string(shape.Hv);
        return false;
    }
    shape.conv_dim = 2 * shape.Hk * shape.Sk + shape.Hv * shape.Sv;
    if (!delta_net_layers(s, shape, error)) return false;
    shape.arch = first_string(s.object, {"model_type"});
    if (shape.arch.empty()) shape.arch = first_string(config, {"model_type"});
    if (shape.arch.empty()) shape.arch = "config.json";
    shape.name = first_string(config, {"_name_or_path", "architectures", "model_type"});
    if (shape.name.empty()) shape.name = shape.arch;
    out = std::move(shape);
    return true;
}

bool model_shape_from_hf_config_file(const std::string &path, ModelShape &out, std::string &error) {
    json::Value config;
    if (!json::parse_file(path, config, error)) return false;
    if (!model_shape_from_hf_config(config, out, error)) {
        error = path + ": " + error;
        return false;
    }
    out.source = "Hugging Face config of " + path;
    return true;
}

}  // namespace gdn::gguf
