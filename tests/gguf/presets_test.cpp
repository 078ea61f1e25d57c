// The built-in model shapes: the required ones with their published numbers, consistent fields,
// a source for each, and name lookup.
#include <gtest/gtest.h>

#include <set>

#include "gguf/presets.h"

namespace gdn::gguf {
namespace {

TEST(Presets, Qwen35_27b) {
    const ModelShape *s = find_preset("qwen3.5-27b");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->arch, "qwen35");
    EXPECT_EQ(s->Hk, 16);
    EXPECT_EQ(s->Hv, 48);
    EXPECT_EQ(s->Sk, 128);
    EXPECT_EQ(s->Sv, 128);
    EXPECT_EQ(s->conv_dim, 10240);
    EXPECT_EQ(s->conv_kernel, 4);
    EXPECT_EQ(s->block_count, 64);
    EXPECT_EQ(s->delta_net_layers, 48);
}

TEST(Presets, Qwen3Next80bA3b) {
    const ModelShape *s = find_preset("qwen3-next-80b-a3b");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->arch, "qwen3next");
    EXPECT_EQ(s->Hk, 16);
    EXPECT_EQ(s->Hv, 32);
    EXPECT_EQ(s->Sk, 128);
    EXPECT_EQ(s->Sv, 128);
    EXPECT_EQ(s->conv_dim, 8192);
    EXPECT_EQ(s->block_count, 48);
    EXPECT_EQ(s->delta_net_layers, 36);
}

TEST(Presets, EveryPresetIsConsistentAndSourced) {
    std::set<std::string> names;
    for (const ModelShape &s : presets()) {
        SCOPED_TRACE(s.name);
        EXPECT_TRUE(names.insert(s.name).second) << "duplicate name";
        EXPECT_EQ(find_preset(s.name), &s);
        EXPECT_TRUE(is_delta_net_arch(s.arch));
        EXPECT_GT(s.Hk, 0);
        EXPECT_EQ(s.Hv % s.Hk, 0);
        EXPECT_EQ(s.conv_dim, 2 * s.Hk * s.Sk + s.Hv * s.Sv);
        EXPECT_GT(s.delta_net_layers, 0);
        EXPECT_LT(s.delta_net_layers, s.block_count);
        // The source states the published head counts and sizes it was built from.
        EXPECT_NE(s.source.find("linear_num_key_heads " + std::to_string(s.Hk)), std::string::npos);
        EXPECT_NE(s.source.find("linear_num_value_heads " + std::to_string(s.Hv)), std::string::npos);
        EXPECT_NE(s.source.find("linear_key_head_dim " + std::to_string(s.Sk)), std::string::npos);
        EXPECT_NE(s.source.find("linear_value_head_dim " + std::to_string(s.Sv)), std::string::npos);
        EXPECT_NE(s.source.find("ssm.inner_size " + std::to_string(s.Hv * s.Sv)), std::string::npos);
        EXPECT_NE(s.source.find("num_hidden_layers " + std::to_string(s.block_count)), std::string::npos);
    }
    EXPECT_GE(names.size(), 2u);
}

TEST(Presets, NamesAndAliases) {
    const ModelShape *qwen35 = find_preset("qwen3.5-27b");
    const ModelShape *next = find_preset("qwen3-next-80b-a3b");
    ASSERT_NE(qwen35, nullptr);
    ASSERT_NE(next, nullptr);
    EXPECT_EQ(find_preset("Qwen/Qwen3.5-27B"), qwen35);
    EXPECT_EQ(find_preset("QWEN3.5_27B"), qwen35);
    EXPECT_EQ(find_preset("qwen3-next"), next);
    EXPECT_EQ(find_preset("Qwen3-Next-80B-A3B"), next);
    EXPECT_EQ(find_preset("qwen3_next_80b_a3b"), next);
    EXPECT_EQ(find_preset("qwen3.5"), nullptr);
    EXPECT_EQ(find_preset(""), nullptr);
    EXPECT_EQ(find_preset("llama-3-8b"), nullptr);
    EXPECT_EQ(preset_names(), "qwen3.5-27b, qwen3-next-80b-a3b, qwen3.5-35b-a3b");
}

}  // namespace
}  // namespace gdn::gguf
