// The gated-delta-net shape of a model from its Hugging Face config.json, the keys llama.cpp's
// converter reads to write the GGUF keys of model_shape.h (README, "Model shapes"):
//   linear_key_head_dim -> Sk, linear_value_head_dim -> Sv,
//   linear_num_key_heads -> Hk, linear_num_value_heads -> Hv,
//   linear_conv_kernel_dim (reported), and the delta-net layers: the "linear_attention" entries of
//   layer_types, or else num_hidden_layers less every full_attention_interval-th layer (4 when absent).
// Qwen3-Next keeps them at the top level; Qwen3.5 (a vision-language model) under "text_config",
// which is read when the top level has no linear_num_key_heads.
#pragma once

#include <string>

#include "gguf/json.h"
#include "gguf/model_shape.h"

namespace gdn::gguf {

// Derives the shape from a parsed config. On failure returns false with a message naming the key
// (with its "text_config." prefix where it was nested) and what is wrong with its value.
bool model_shape_from_hf_config(const json::Value &config, ModelShape &out, std::string &error);

// Reads the file and derives the shape; `source` becomes "Hugging Face config of PATH".
bool model_shape_from_hf_config_file(const std::string &path, ModelShape &out, std::string &error);

}  // namespace gdn::gguf
