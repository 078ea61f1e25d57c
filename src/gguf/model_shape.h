// The gated-delta-net shape of a model: what gdn-ops needs to run the op at a real model's sizes,
// from GGUF metadata (model_shape_from_metadata) or from the built-in table (presets.h).
#pragma once

#include <cstdint>
#include <string>

#include "gguf/gguf.h"

namespace gdn::gguf {

struct ModelShape {
    std::string name;    // "qwen3.5-27b", or general.name / the architecture for a GGUF file
    std::string source;  // where the numbers come from
    std::string arch;    // GGUF general.architecture: "qwen35", "qwen35moe", "qwen3next"
    int64_t Sk = 0, Sv = 0;        // key and value head sizes
    int64_t Hk = 0, Hv = 0;        // key heads, value heads
    int64_t conv_dim = 0;          // floats per token of the packed q|k|v buffer: 2*Hk*Sk + Hv*Sv
    int64_t conv_kernel = 0;       // the short convolution's width (not used by the op; reported)
    int64_t block_count = 0;       // all layers of the main stack
    int64_t delta_net_layers = 0;  // the gated-delta-net layers among them; -1 when the metadata does not say

    // "Sk=128,Sv=128,Hk=16,Hv=48,conv_dim=10240" (the form gdn-ops prints).
    std::string dims_string() const;
};

// The GGUF architectures whose {arch}.ssm.* keys describe a gated delta net, as llama.cpp's
// converter writes them (convert_hf_to_gguf.py, Qwen3NextModel.set_gguf_parameters, which the
// Qwen3.5 dense and MoE converters inherit):
//   {arch}.ssm.state_size     = linear_key_head_dim                          -> Sk
//   {arch}.ssm.group_count    = linear_num_key_heads                         -> Hk
//   {arch}.ssm.time_step_rank = linear_num_value_heads                       -> Hv
//   {arch}.ssm.inner_size     = linear_value_head_dim * linear_num_value_heads -> Sv = inner_size / Hv
//   {arch}.ssm.conv_kernel    = linear_conv_kernel_dim
// and the delta-net layers are those i < block_count - nextn_predict_layers with
// (i + 1) % full_attention_interval != 0 (llama.cpp's loader; the interval defaults to 4 there).
// Other architectures with ssm.* keys (Mamba 2 and friends) mean something else by them and are
// refused rather than misread.
bool is_delta_net_arch(const std::string &arch);

// Derives the shape from the metadata. On failure returns false with a message naming the missing
// or inconsistent key and its value.
bool model_shape_from_metadata(const Metadata &md, ModelShape &out, std::string &error);

// Reads the file and derives the shape (read_metadata + model_shape_from_metadata); `source`
// becomes "GGUF metadata of PATH".
bool model_shape_from_gguf(const std::string &path, ModelShape &out, std::string &error);

}  // namespace gdn::gguf
