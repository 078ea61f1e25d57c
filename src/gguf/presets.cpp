#include "gguf/presets.h"

#include <array>
#include <cctype>

namespace gdn::gguf {

namespace {

// The GGUF mapping every source below relies on, confirmed in llama.cpp's converter
// (convert_hf_to_gguf.py / conversion/qwen.py, Qwen3NextModel.set_gguf_parameters, inherited by
// Qwen3_5TextModel and Qwen3_5MoeTextModel through _LinearAttentionVReorderBase):
//   ssm.state_size = linear_key_head_dim, ssm.group_count = linear_num_key_heads,
//   ssm.time_step_rank = linear_num_value_heads, ssm.inner_size = linear_value_head_dim *
//   linear_num_value_heads, ssm.conv_kernel = linear_conv_kernel_dim;
// and the delta-net layer rule in llama.cpp's loader: layer i (below block_count minus the
// nextn/MTP layers) is recurrent when (i + 1) % full_attention_interval != 0.
// For qwen35/qwen35moe the converter also reorders the value heads from grouped to tiled order,
// so those GGUF models use the tiled head map (SPEC section 2).
ModelShape make(const char *name, const char *arch, int64_t Hk, int64_t Hv, int64_t Sk, int64_t Sv,
                int64_t conv_kernel, int64_t layers, int64_t full_attention_interval, const char *source) {
    ModelShape s;
    s.name = name;
    s.arch = arch;
    s.Sk = Sk;
    s.Sv = Sv;
    s.Hk = Hk;
    s.Hv = Hv;
    s.conv_dim = 2 * Hk * Sk + Hv * Sv;
    s.conv_kernel = conv_kernel;
    s.block_count = layers;
    s.delta_net_layers = layers - layers / full_attention_interval;
    s.source = source;
    return s;
}

// Lower case, '_' and ' ' as '-', a leading "qwen/" dropped.
std::string normalise(std::string_view name) {
    std::string s;
    for (char c : name) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        s += (c == '_' || c == ' ') ? '-' : c;
    }
    if (s.rfind("qwen/", 0) == 0) s.erase(0, 5);
    return s;
}

struct Alias {
    const char *alias;
    const char *preset;
};
constexpr std::array<Alias, 6> kAliases = {{
    {"qwen3.5-27b", "qwen3.5-27b"},
    {"qwen35-27b", "qwen3.5-27b"},
    {"qwen3-next-80b-a3b", "qwen3-next-80b-a3b"},
    {"qwen3-next", "qwen3-next-80b-a3b"},
    {"qwen3next-80b-a3b", "qwen3-next-80b-a3b"},
    {"qwen3.5-35b-a3b", "qwen3.5-35b-a3b"},
}};

}  // namespace

const std::vector<ModelShape> &presets() {
    static const std::vector<ModelShape> table = {
        make("qwen3.5-27b", "qwen35", 16, 48, 128, 128, 4, 64, 4,
             "Qwen/Qwen3.5-27B config.json text_config: linear_num_key_heads 16, linear_num_value_heads 48, "
             "linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4, num_hidden_layers 64, "
             "full_attention_interval 4 (48 Gated DeltaNet + 16 full-attention layers, plus 1 MTP layer); "
             "as GGUF (llama.cpp convert, arch qwen35): qwen35.ssm.group_count 16, ssm.time_step_rank 48, "
             "ssm.state_size 128, ssm.inner_size 6144, ssm.conv_kernel 4, full_attention_interval 4"),
        make("qwen3-next-80b-a3b", "qwen3next", 16, 32, 128, 128, 4, 48, 4,
             "Qwen/Qwen3-Next-80B-A3B config.json: linear_num_key_heads 16, linear_num_value_heads 32, "
             "linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4, num_hidden_layers 48, "
             "full_attention_interval 4 (36 Gated DeltaNet + 12 full-attention layers); as GGUF (llama.cpp "
             "convert, arch qwen3next): qwen3next.ssm.group_count 16, ssm.time_step_rank 32, ssm.state_size 128, "
             "ssm.inner_size 4096, ssm.conv_kernel 4, full_attention_interval 4"),
        make("qwen3.5-35b-a3b", "qwen35moe", 16, 32, 128, 128, 4, 40, 4,
             "Qwen/Qwen3.5-35B-A3B config.json text_config: linear_num_key_heads 16, linear_num_value_heads 32, "
             "linear_key_head_dim 128, linear_value_head_dim 128, linear_conv_kernel_dim 4, num_hidden_layers 40, "
             "full_attention_interval 4 (30 Gated DeltaNet + 10 full-attention layers, plus 1 MTP layer); "
             "as GGUF (llama.cpp convert, arch qwen35moe): qwen35moe.ssm.group_count 16, ssm.time_step_rank 32, "
             "ssm.state_size 128, ssm.inner_size 4096, ssm.conv_kernel 4, full_attention_interval 4"),
    };
    return table;
}

const ModelShape *find_preset(std::string_view name) {
    const std::string wanted = normalise(name);
    for (const Alias &a : kAliases) {
        if (wanted != a.alias) continue;
        for (const ModelShape &s : presets())
            if (s.name == a.preset) return &s;
    }
    return nullptr;
}

std::string preset_names() {
    std::string names;
    for (const ModelShape &s : presets()) names += (names.empty() ? "" : ", ") + s.name;
    return names;
}

}  // namespace gdn::gguf
