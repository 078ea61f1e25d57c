// Model shapes from GGUF metadata: the two presets' metadata reproduced as llama.cpp writes it,
// the layer-count rule, other integer types, and metadata that must be refused with a clear reason.
#include <gtest/gtest.h>

#include "gguf/model_shape.h"
#include "gguf/presets.h"
#include "gguf_writer.h"
#include "shape_expectations.h"
#include "test_files.h"

namespace gdn::gguf {
namespace {

using testing::DeltaNetKeys;
using testing::GgufWriter;
using testing::TempFile;

bool shape_of(const GgufWriter &w, ModelShape &shape, std::string &error) {
    const auto bytes = w.finish();
    Metadata md;
    if (!read_metadata_from_bytes(bytes.data(), bytes.size(), "test.gguf", md, error)) return false;
    return model_shape_from_metadata(md, shape, error);
}

ModelShape shape_ok(const GgufWriter &w) {
    ModelShape shape;
    std::string error;
    EXPECT_TRUE(shape_of(w, shape, error)) << error;
    return shape;
}

std::string shape_error(const GgufWriter &w) {
    ModelShape shape;
    std::string error;
    EXPECT_FALSE(shape_of(w, shape, error));
    return error;
}

void expect_same_shape(const ModelShape &got, const ModelShape &want) {
    EXPECT_EQ(got.arch, want.arch);
    expect_same_op_shape(got, want);
}

class ShapeVersions : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ShapeVersions, Qwen35_27bMetadataGivesThePreset) {
    TempFile file;
    file.write(testing::qwen35_27b_metadata(GetParam()).finish());
    ModelShape shape;
    std::string error;
    ASSERT_TRUE(model_shape_from_gguf(file.path(), shape, error)) << error;
    EXPECT_EQ(shape.name, "Qwen3.5-27B");
    EXPECT_EQ(shape.source, "GGUF metadata of " + file.path());
    EXPECT_EQ(shape.Hk, 16);
    EXPECT_EQ(shape.Hv, 48);
    EXPECT_EQ(shape.Sk, 128);
    EXPECT_EQ(shape.Sv, 128);
    EXPECT_EQ(shape.conv_dim, 10240);
    EXPECT_EQ(shape.delta_net_layers, 48);
    EXPECT_EQ(shape.dims_string(), "Sk=128,Sv=128,Hk=16,Hv=48,conv_dim=10240");
    const ModelShape *preset = find_preset("qwen3.5-27b");
    ASSERT_NE(preset, nullptr);
    expect_same_shape(shape, *preset);
}

TEST_P(ShapeVersions, Qwen3Next80bA3bMetadataGivesThePreset) {
    const ModelShape shape = shape_ok(testing::qwen3_next_80b_a3b_metadata(GetParam()));
    EXPECT_EQ(shape.Hk, 16);
    EXPECT_EQ(shape.Hv, 32);
    EXPECT_EQ(shape.Sk, 128);
    EXPECT_EQ(shape.Sv, 128);
    EXPECT_EQ(shape.conv_dim, 8192);
    EXPECT_EQ(shape.delta_net_layers, 36);
    const ModelShape *preset = find_preset("qwen3-next-80b-a3b");
    ASSERT_NE(preset, nullptr);
    expect_same_shape(shape, *preset);
}

INSTANTIATE_TEST_SUITE_P(Gguf, ShapeVersions, ::testing::Values(2u, 3u));

TEST(ModelShape, FileWrittenByLlamaCppsPythonWriterGivesThePreset) {
    ModelShape shape;
    std::string error;
    ASSERT_TRUE(model_shape_from_gguf(std::string(GDN_GGUF_TEST_DATA) + "/reference_qwen35.gguf", shape, error))
        << error;
    expect_same_shape(shape, *find_preset("qwen3.5-27b"));
}

TEST(ModelShape, Qwen35_35bA3bMoeMetadataGivesThePreset) {
    GgufWriter w;
    testing::write_delta_net_keys(w, {"qwen35moe", "", 16, 32, 128, 32 * 128, 4, 41, 1, 4});
    const ModelShape shape = shape_ok(w);
    EXPECT_EQ(shape.name, "qwen35moe");  // no general.name: the architecture
    const ModelShape *preset = find_preset("qwen3.5-35b-a3b");
    ASSERT_NE(preset, nullptr);
    ModelShape want = *preset;
    want.block_count = 41;  // 40 + the MTP block
    expect_same_shape(shape, want);
}

TEST(ModelShape, MtpLayersAreNotDeltaNetLayers) {
    // Newer conversions count the MTP block in block_count and say so in nextn_predict_layers.
    GgufWriter w;
    testing::write_delta_net_keys(w, {"qwen35", "", 16, 48, 128, 6144, 4, 65, 1, 4});
    EXPECT_EQ(shape_ok(w).delta_net_layers, 48);
}

TEST(ModelShape, LayerRuleFollowsTheInterval) {
    for (const auto &[layers, interval, expected] :
         std::vector<std::tuple<uint32_t, uint32_t, int64_t>>{{64, 4, 48}, {10, 4, 8}, {7, 2, 4}, {5, 1, 0}, {3, 8, 3}}) {
        GgufWriter w;
        testing::write_delta_net_keys(w, {"qwen35", "", 16, 48, 128, 6144, 4, layers, 0, interval});
        EXPECT_EQ(shape_ok(w).delta_net_layers, expected) << layers << " layers, interval " << interval;
    }
    GgufWriter no_interval;  // llama.cpp's default: 4
    testing::write_delta_net_keys(no_interval, {"qwen35", "", 16, 48, 128, 6144, 4, 64, 0, 0});
    EXPECT_EQ(shape_ok(no_interval).delta_net_layers, 48);
    GgufWriter no_layers;
    no_layers.str("general.architecture", "qwen3next").u32("qwen3next.ssm.state_size", 128)
        .u32("qwen3next.ssm.group_count", 16).u32("qwen3next.ssm.time_step_rank", 32)
        .u32("qwen3next.ssm.inner_size", 4096);
    const ModelShape shape = shape_ok(no_layers);
    EXPECT_EQ(shape.delta_net_layers, -1);
    EXPECT_EQ(shape.conv_kernel, 0);
    EXPECT_EQ(shape.conv_dim, 8192);
}

TEST(ModelShape, ValueHeadSizeDiffersFromKeyHeadSize) {
    GgufWriter w;
    testing::write_delta_net_keys(w, {"qwen35", "", 4, 8, 64, 8 * 96, 4, 8, 0, 4});
    const ModelShape shape = shape_ok(w);
    EXPECT_EQ(shape.Sk, 64);
    EXPECT_EQ(shape.Sv, 96);
    EXPECT_EQ(shape.conv_dim, 2 * 4 * 64 + 8 * 96);
}

TEST(ModelShape, AnyIntegerTypeIsTaken) {
    GgufWriter w;
    w.str("general.architecture", "qwen35").u64("qwen35.ssm.state_size", 128).i32("qwen35.ssm.group_count", 16)
        .u16("qwen35.ssm.time_step_rank", 48).i64("qwen35.ssm.inner_size", 6144).u8("qwen35.ssm.conv_kernel", 4)
        .i16("qwen35.block_count", 64);
    const ModelShape shape = shape_ok(w);
    EXPECT_EQ(shape.conv_dim, 10240);
    EXPECT_EQ(shape.delta_net_layers, 48);
}

GgufWriter qwen35_with(const std::string &key_to_change, uint64_t value) {
    GgufWriter w;
    w.str("general.architecture", "qwen35");
    for (const auto &[key, v] : std::vector<std::pair<std::string, uint64_t>>{
             {"qwen35.ssm.state_size", 128}, {"qwen35.ssm.group_count", 16}, {"qwen35.ssm.time_step_rank", 48},
             {"qwen35.ssm.inner_size", 6144}, {"qwen35.block_count", 64}})
        w.u64(key, key == key_to_change ? value : v);
    return w;
}

TEST(ModelShape, InconsistentMetadataIsRefusedWithTheKeyNamed) {
    EXPECT_EQ(shape_error(qwen35_with("qwen35.ssm.group_count", 0)), "qwen35.ssm.group_count = 0 is outside 1..65536");
    EXPECT_EQ(shape_error(qwen35_with("qwen35.ssm.state_size", uint64_t(1) << 40)),
              "qwen35.ssm.state_size = 1099511627776 is outside 1..65536");
    EXPECT_EQ(shape_error(qwen35_with("qwen35.ssm.time_step_rank", ~uint64_t(0))),
              "qwen35.ssm.time_step_rank is a u64 (18446744073709551615), not an integer");
    EXPECT_EQ(shape_error(qwen35_with("qwen35.ssm.inner_size", 6145)),
              "qwen35.ssm.inner_size = 6145 is not a multiple of qwen35.ssm.time_step_rank = 48 (value heads)");
    EXPECT_EQ(shape_error(qwen35_with("qwen35.ssm.group_count", 5)),
              "qwen35.ssm.group_count = 5 (key heads) does not divide qwen35.ssm.time_step_rank = 48 (value heads)");
    EXPECT_EQ(shape_error(qwen35_with("qwen35.ssm.inner_size", 48ull * 70000)),
              "value head size qwen35.ssm.inner_size / qwen35.ssm.time_step_rank = 70000 is over 65536");
}

TEST(ModelShape, MissingOrMistypedKeysAreRefused) {
    EXPECT_EQ(shape_error(GgufWriter().u32("qwen35.ssm.state_size", 128)), "the metadata has no key general.architecture");
    EXPECT_EQ(shape_error(GgufWriter().u32("general.architecture", 3)), "general.architecture is a u32, not a string");
    EXPECT_EQ(shape_error(GgufWriter().str("general.architecture", "mamba2").u32("mamba2.ssm.state_size", 128)),
              "architecture 'mamba2' is not a gated-delta-net model this reader knows (qwen3next, qwen35, qwen35moe)");
    EXPECT_EQ(shape_error(GgufWriter().str("general.architecture", "qwen35").u32("qwen35.ssm.state_size", 128)),
              "the metadata has no key qwen35.ssm.group_count");
    GgufWriter float_key;
    float_key.str("general.architecture", "qwen35").f32("qwen35.ssm.state_size", 128.0f);
    EXPECT_EQ(shape_error(float_key), "qwen35.ssm.state_size is a f32 (128), not an integer");
    GgufWriter bad_nextn = qwen35_with("", 0);
    bad_nextn.u32("qwen35.nextn_predict_layers", 64);
    EXPECT_EQ(shape_error(bad_nextn), "qwen35.nextn_predict_layers = 64 is not below qwen35.block_count = 64");
}

TEST(ModelShape, FileErrorsNameTheFile) {
    TempFile file;
    file.write(GgufWriter().str("general.architecture", "llama").finish());
    ModelShape shape;
    std::string error;
    EXPECT_FALSE(model_shape_from_gguf(file.path(), shape, error));
    EXPECT_EQ(error, file.path() + ": architecture 'llama' is not a gated-delta-net model this reader knows "
                                   "(qwen3next, qwen35, qwen35moe)");
    EXPECT_FALSE(model_shape_from_gguf(file.path() + ".missing", shape, error));
    EXPECT_EQ(error, file.path() + ".missing: no such file");
}

}  // namespace
}  // namespace gdn::gguf
