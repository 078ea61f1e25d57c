// Hugging Face config.json texts for the tests of --hf-config: Qwen3-Next's layout (the keys at
// the top level) and Qwen3.5's (under text_config), with room for extra keys.
#pragma once

#include <string>

namespace gdn::gguf::testing {

// The keys the reader uses, laid out as the published configs lay them out (abridged), with
// the values presets.cpp cites.
inline std::string qwen3_next_config(const std::string &extra = "") {
    return "{\n"
           "  \"architectures\": [\"Qwen3NextForCausalLM\"],\n"
           "  \"model_type\": \"qwen3_next\",\n"
           "  \"full_attention_interval\": 4,\n"
           "  \"hidden_size\": 2048,\n"
           "  \"linear_conv_kernel_dim\": 4,\n"
           "  \"linear_key_head_dim\": 128,\n"
           "  \"linear_num_key_heads\": 16,\n"
           "  \"linear_num_value_heads\": 32,\n"
           "  \"linear_value_head_dim\": 128,\n" +
           extra +
           "  \"num_hidden_layers\": 48\n"
           "}\n";
}

inline std::string layer_types(int layers, int interval) {
    std::string out = "[";
    for (int i = 0; i < layers; ++i)
        out += std::string(i ? ", " : "") + ((i + 1) % interval == 0 ? "\"full_attention\"" : "\"linear_attention\"");
    return out + "]";
}

inline std::string qwen35_config(const std::string &text_config_extra = "") {
    return "{\n"
           "  \"model_type\": \"qwen3_5\",\n"
           "  \"text_config\": {\n"
           "    \"model_type\": \"qwen3_5_text\",\n"
           "    \"full_attention_interval\": 4,\n"
           "    \"layer_types\": " +
           layer_types(64, 4) +
           ",\n"
           "    \"linear_conv_kernel_dim\": 4,\n"
           "    \"linear_key_head_dim\": 128,\n"
           "    \"linear_num_key_heads\": 16,\n"
           "    \"linear_num_value_heads\": 48,\n"
           "    \"linear_value_head_dim\": 128,\n" +
           text_config_extra +
           "    \"num_hidden_layers\": 64\n"
           "  },\n"
           "  \"vision_config\": {\"depth\": 27}\n"
           "}\n";
}

}  // namespace gdn::gguf::testing
