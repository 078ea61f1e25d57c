// Model shapes from the GGUF metadata reader, the config.json reader and the preset table (src/gguf).
#include "model_source.h"

#include <cstdio>

#include "gguf/hf_config.h"
#include "gguf/model_shape.h"
#include "gguf/presets.h"
#include "report.h"

namespace gdn::ops {

namespace {

ModelShape to_options_shape(const gguf::ModelShape &m) {
    ModelShape out{m.name, m.Sk, m.Sv, m.Hk, m.Hv, {}};
    out.description = m.name + " (" + m.arch + "): " + m.dims_string();
    if (m.delta_net_layers >= 0) out.description += ", " + std::to_string(m.delta_net_layers) + " delta-net layers";
    out.description += "; from " + m.source;
    return out;
}

}  // namespace

bool model_from_preset(const std::string &name, ModelShape &out, std::string &error) {
    const gguf::ModelShape *preset = gguf::find_preset(name);
    if (!preset) {
        error = "unknown preset \"" + name + "\" (presets: " + gguf::preset_names() + "; gdn-ops list --preset)";
        return false;
    }
    gguf::ModelShape shape = *preset;
    shape.source = "preset " + shape.name;
    out = to_options_shape(shape);
    return true;
}

bool model_from_gguf(const std::string &path, ModelShape &out, std::string &error) {
    gguf::ModelShape shape;
    if (!gguf::model_shape_from_gguf(path, shape, error)) {
        error = "--gguf " + error;
        return false;
    }
    out = to_options_shape(shape);
    return true;
}

bool model_from_hf_config(const std::string &path, ModelShape &out, std::string &error) {
    gguf::ModelShape shape;
    if (!gguf::model_shape_from_hf_config_file(path, shape, error)) {
        error = "--hf-config " + error;
        return false;
    }
    out = to_options_shape(shape);
    out.heads = GDN_HEAD_MAP_GROUPED;  // transformers' layout; llama.cpp reorders to tiled when converting
    return true;
}

void print_presets(Output output) {
    const std::vector<gguf::ModelShape> &presets = gguf::presets();
    if (output == Output::Json) {
        std::printf("{\"mode\": \"list\", \"presets\": [");
        for (size_t i = 0; i < presets.size(); ++i) {
            const gguf::ModelShape &m = presets[i];
            std::printf("%s\n  {\"name\": %s, \"Sk\": %lld, \"Sv\": %lld, \"Hk\": %lld, \"Hv\": %lld, \"conv_dim\": %lld, "
                        "\"delta_net_layers\": %lld, \"block_count\": %lld, \"source\": %s}",
                        i ? "," : "", json_string(m.name).c_str(), (long long)m.Sk, (long long)m.Sv, (long long)m.Hk,
                        (long long)m.Hv, (long long)m.conv_dim, (long long)m.delta_net_layers, (long long)m.block_count,
                        json_string(m.source).c_str());
        }
        std::printf("\n]}\n");
        return;
    }
    if (output == Output::Csv) {
        std::printf("mode,preset,Sk,Sv,Hk,Hv,conv_dim,delta_net_layers,block_count,source\n");
        for (const gguf::ModelShape &m : presets)
            std::printf("list,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%s\n", csv_field(m.name).c_str(), (long long)m.Sk,
                        (long long)m.Sv, (long long)m.Hk, (long long)m.Hv, (long long)m.conv_dim,
                        (long long)m.delta_net_layers, (long long)m.block_count, csv_field(m.source).c_str());
        return;
    }
    for (const gguf::ModelShape &m : presets) {
        std::printf("%-20s %s, %lld delta-net layers of %lld\n", m.name.c_str(), m.dims_string().c_str(),
                    static_cast<long long>(m.delta_net_layers), static_cast<long long>(m.block_count));
        std::printf("%-20s source: %s\n", "", m.source.c_str());
    }
}

}  // namespace gdn::ops
