// Built-in model shapes for the hybrid models whose numbers are public, so that gdn-ops can run at
// a real model's sizes without a GGUF file at hand (gdn-ops --preset NAME, gdn-ops list --preset).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gguf/model_shape.h"

namespace gdn::gguf {

// Every preset, in a fixed order; each has its `source`.
const std::vector<ModelShape> &presets();

// The preset of that name or alias, case-insensitive, '_' and ' ' read as '-' and a leading "qwen/"
// ignored: "qwen3.5-27b", "Qwen/Qwen3.5-27B", "qwen3_next_80b_a3b", "qwen3-next". nullptr if none.
const ModelShape *find_preset(std::string_view name);

// "qwen3.5-27b, qwen3-next-80b-a3b": for error messages and --help.
std::string preset_names();

}  // namespace gdn::gguf
