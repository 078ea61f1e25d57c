// Where a model's shape comes from: a built-in preset or a GGUF file's metadata.
#pragma once

#include <string>

#include "options.h"

namespace gdn::ops {

bool model_from_preset(const std::string &name, ModelShape &out, std::string &error);
bool model_from_gguf(const std::string &path, ModelShape &out, std::string &error);
// Prints the presets with where their numbers come from (gdn-ops list --preset).
void print_presets();

}  // namespace gdn::ops
