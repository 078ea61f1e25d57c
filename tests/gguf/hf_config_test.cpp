// Model shapes from a Hugging Face config.json: the Qwen3-Next layout (keys at the top level) and
// the Qwen3.5 one (under text_config) give the presets' shapes; a config that is not a gated
// delta net, or whose values are missing, mistyped or inconsistent, is refused naming the key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gguf/hf_config.h"
#include "gguf/presets.h"
#include "hf_configs.h"
#include "shape_expectations.h"
#include "test_files.h"

namespace gdn::gguf {
namespace {

using testing::layer_types;
using testing::qwen35_config;
using testing::qwen3_next_config;

bool shape_of(const std::string &text, ModelShape &out, std::string &error) {
    json::Value config;
    if (!json::parse(text, config, error)) return false;
    return model_shape_from_hf_config(config, out, error);
}

TEST(HfConfig, Qwen3NextAtTheTopLevel) {
    ModelShape s;
    std::string error;
    ASSERT_TRUE(shape_of(qwen3_next_config(), s, error)) << error;
    expect_same_op_shape(s, *find_preset("qwen3-next-80b-a3b"));
    EXPECT_EQ(s.name, "Qwen3NextForCausalLM");
    EXPECT_EQ(s.arch, "qwen3_next");
}

TEST(HfConfig, Qwen35UnderTextConfig) {
    ModelShape s;
    std::string error;
    ASSERT_TRUE(shape_of(qwen35_config(), s, error)) << error;
    expect_same_op_shape(s, *find_preset("qwen3.5-27b"));
    EXPECT_EQ(s.arch, "qwen3_5_text");
    EXPECT_EQ(s.name, "qwen3_5");
}

TEST(HfConfig, LayerTypesCountTheDeltaNetLayers) {
    ModelShape s;
    std::string error;
    // layer_types wins over the interval: here every other layer is full attention.
    ASSERT_TRUE(shape_of(qwen3_next_config("  \"layer_types\": " + layer_types(48, 2) + ",\n"), s, error)) << error;
    EXPECT_EQ(s.delta_net_layers, 24);
    // Neither layer_types nor num_hidden_layers: unknown (-1), the op's shape is still there.
    ASSERT_TRUE(shape_of("{\"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 8, "
                         "\"linear_value_head_dim\": 16}",
                         s, error))
        << error;
    EXPECT_EQ(s.delta_net_layers, -1);
    EXPECT_EQ(s.conv_dim, 2 * 2 * 8 + 4 * 16);
    EXPECT_EQ(s.name, "config.json");
}

TEST(HfConfig, RefusedNamingTheKey) {
    const std::string next = qwen3_next_config();
    auto with = [&](const std::string &key, const std::string &value) {
        std::string text = next;
        const size_t at = text.find("\"" + key + "\": ");
        const size_t start = at + key.size() + 4, end = text.find_first_of(",\n", start);
        return text.replace(start, end - start, value);
    };
    auto without = [&](const std::string &key) {
        std::string text = next;
        const size_t at = text.find("  \"" + key + "\"");
        return text.erase(at, text.find('\n', at) + 1 - at);
    };
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"[1, 2]", "the config is an array, not an object"},
        {"{\"model_type\": \"llama\", \"num_hidden_layers\": 32}",
         "the config has no key linear_num_key_heads: not a gated-delta-net model"},
        {"{\"text_config\": {\"model_type\": \"llama\"}}",
         "no key linear_num_key_heads (nor text_config.linear_num_key_heads)"},
        {without("linear_value_head_dim"), "the config has no key linear_value_head_dim"},
        {with("linear_num_value_heads", "\"32\""), "linear_num_value_heads is a string, not an integer"},
        {with("linear_key_head_dim", "128.5"), "linear_key_head_dim is a number (128.5), not an integer"},
        {with("linear_key_head_dim", "[128]"), "linear_key_head_dim is an array, not an integer"},
        {with("linear_num_key_heads", "0"), "linear_num_key_heads = 0 is outside 1..65536"},
        {with("linear_num_key_heads", "-16"), "linear_num_key_heads = -16 is outside 1..65536"},
        {with("linear_value_head_dim", "65537"), "linear_value_head_dim = 65537 is outside 1..65536"},
        {with("linear_value_head_dim", "99999999999999999999"), "linear_value_head_dim is a number (99999999999999999999), not an integer"},
        {with("linear_num_key_heads", "12"), "linear_num_key_heads = 12 does not divide linear_num_value_heads = 32"},
        {with("num_hidden_layers", "true"), "num_hidden_layers is a boolean, not an integer"},
        {with("full_attention_interval", "0"), "full_attention_interval = 0 is outside 1..65536"},
        {qwen3_next_config("  \"layer_types\": \"linear_attention\",\n"), "layer_types is a string, not an array"},
        {qwen3_next_config("  \"layer_types\": [\"linear_attention\", 1],\n"), "layer_types has a number among its entries"},
        {qwen3_next_config("  \"layer_types\": " + layer_types(47, 4) + ",\n"), "layer_types has 47 entries for num_hidden_layers = 48"},
        {qwen35_config("    \"linear_num_value_heads\": 48,\n"), "line 12, column 5: duplicate key \"linear_num_value_heads\""},
    };
    for (const auto &[text, expected] : cases) {
        ModelShape s;
        s.name = "untouched";
        std::string error;
        EXPECT_FALSE(shape_of(text, s, error)) << text;
        EXPECT_NE(error.find(expected), std::string::npos) << "expected: " << expected << "\nerror: " << error;
        EXPECT_EQ(s.name, "untouched");
    }
    // Nested: the key is named with its prefix.
    std::string text = qwen35_config();
    text.replace(text.find("\"linear_value_head_dim\": 128"), 28, "\"linear_value_head_dim\": null");
    ModelShape s;
    std::string error;
    EXPECT_FALSE(shape_of(text, s, error));
    EXPECT_EQ(error, "the config has no key text_config.linear_value_head_dim");
}

TEST(HfConfig, FromAFile) {
    testing::TempFile file(".json");
    const std::string text = qwen35_config();
    file.write(std::vector<uint8_t>(text.begin(), text.end()));
    ModelShape s;
    std::string error;
    ASSERT_TRUE(model_shape_from_hf_config_file(file.path(), s, error)) << error;
    EXPECT_EQ(s.source, "Hugging Face config of " + file.path());
    EXPECT_EQ(s.Hv, 48);

    const std::string broken = text.substr(0, text.size() / 2);
    file.write(std::vector<uint8_t>(broken.begin(), broken.end()));
    EXPECT_FALSE(model_shape_from_hf_config_file(file.path(), s, error));
    EXPECT_EQ(error.rfind(file.path() + ": line ", 0), 0u) << error;
}

}  // namespace
}  // namespace gdn::gguf
