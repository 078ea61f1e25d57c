// Where a model's shape comes from: a built-in preset, a GGUF file's metadata or a Hugging Face
// config.json.
#pragma once

#include <string>

#include "options.h"

namespace gdn::ops {

bool model_from_preset(const std::string &name, ModelShape &out, std::string &error);
bool model_from_gguf(const std::string &path, ModelShape &out, std::string &error);
bool model_from_hf_config(const std::string &path, ModelShape &out, std::string &error);
// Prints the presets with where their numbers come from (gdn-ops list --preset), as text, one
// JSON document or a CSV table.
void print_presets(Output output);

}  // namespace gdn::ops
