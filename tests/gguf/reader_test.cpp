// The GGUF metadata reader on well-formed files: every value type, both versions, kept and
// summarised arrays and strings, and a huge (sparse) file that must open without being read.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "gguf/gguf.h"
#include "gguf_writer.h"
#include "test_files.h"

namespace gdn::gguf {
namespace {

using testing::GgufWriter;
using testing::TempFile;

Metadata read_ok(const GgufWriter &w) {
    TempFile file;
    file.write(w.finish());
    Metadata md;
    std::string error;
    EXPECT_TRUE(read_metadata(file.path(), md, error)) << error;
    EXPECT_TRUE(error.empty()) << error;
    return md;
}

const Value &get(const Metadata &md, const std::string &key) {
    static const Value missing{};
    const Value *v = md.find(key);
    EXPECT_NE(v, nullptr) << "no key " << key;
    return v ? *v : missing;
}

class ReaderVersions : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ReaderVersions, EveryScalarTypeRoundTrips) {
    GgufWriter w(GetParam());
    w.set_tensor_count(7)
        .u8("t.u8", 250)
        .i8("t.i8", -120)
        .u16("t.u16", 65000)
        .i16("t.i16", -32000)
        .u32("t.u32", 4000000000u)
        .i32("t.i32", -2000000000)
        .f32("t.f32", 0.15625f)
        .boolean("t.bool_true", true)
        .boolean("t.bool_false", false)
        .str("t.string", "qwen35")
        .str("t.empty", "")
        .u64("t.u64", std::numeric_limits<uint64_t>::max())
        .i64("t.i64", std::numeric_limits<int64_t>::min())
        .f64("t.f64", -1.0 / 3.0);
    const Metadata md = read_ok(w);
    EXPECT_EQ(md.version, GetParam());
    EXPECT_EQ(md.tensor_count, 7u);
    ASSERT_EQ(md.entries.size(), 14u);
    EXPECT_EQ(md.entries.front().first, "t.u8");  // file order kept
    EXPECT_EQ(md.entries.back().first, "t.f64");

    EXPECT_EQ(get(md, "t.u8").type, ValueType::U8);
    EXPECT_EQ(get(md, "t.u8").as_int(), 250);
    EXPECT_EQ(get(md, "t.i8").type, ValueType::I8);
    EXPECT_EQ(get(md, "t.i8").as_int(), -120);
    EXPECT_EQ(get(md, "t.u16").as_int(), 65000);
    EXPECT_EQ(get(md, "t.i16").as_int(), -32000);
    EXPECT_EQ(get(md, "t.u32").as_int(), 4000000000ll);
    EXPECT_EQ(get(md, "t.i32").as_int(), -2000000000ll);
    EXPECT_EQ(get(md, "t.f32").type, ValueType::F32);
    EXPECT_EQ(get(md, "t.f32").as_double(), 0.15625);
    EXPECT_FALSE(get(md, "t.f32").as_int().has_value());
    EXPECT_EQ(get(md, "t.bool_true").type, ValueType::BOOL);
    EXPECT_EQ(get(md, "t.bool_true").u, 1u);
    EXPECT_EQ(get(md, "t.bool_false").u, 0u);
    EXPECT_EQ(get(md, "t.string").as_string(), "qwen35");
    EXPECT_EQ(get(md, "t.empty").as_string(), "");
    EXPECT_EQ(get(md, "t.u64").u, std::numeric_limits<uint64_t>::max());
    EXPECT_FALSE(get(md, "t.u64").as_int().has_value());  // does not fit int64_t
    EXPECT_EQ(get(md, "t.i64").as_int(), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(get(md, "t.f64").as_double(), -1.0 / 3.0);
    EXPECT_EQ(md.find("t.absent"), nullptr);
}

TEST_P(ReaderVersions, ArraysOfEveryKind) {
    GgufWriter w(GetParam());
    w.array_u32("a.u32", {1, 2, 4000000000u})
        .array_i32("a.i32", {11, 11, 10, 0})
        .array_f32("a.f32", {0.5f, -2.0f})
        .array_string("a.strings", {"<s>", "", "hello"})
        .array_u32("a.empty", {});
    // An array of arrays of u8, written by hand: [[1, 2], [3]].
    w.begin_kv("a.nested", testing::kArray).raw_le(testing::kArray, 4).raw_le(2, 8);
    w.raw_le(testing::kU8, 4).raw_le(2, 8).raw_le(1, 1).raw_le(2, 1);
    w.raw_le(testing::kU8, 4).raw_le(1, 8).raw_le(3, 1);
    const Metadata md = read_ok(w);

    const Value &u = get(md, "a.u32");
    EXPECT_EQ(u.type, ValueType::ARRAY);
    EXPECT_EQ(u.item_type, ValueType::U32);
    ASSERT_TRUE(u.kept);
    ASSERT_EQ(u.items.size(), 3u);
    EXPECT_EQ(u.items[2].as_int(), 4000000000ll);
    EXPECT_EQ(u.length, 3u);

    const Value &i = get(md, "a.i32");
    ASSERT_EQ(i.items.size(), 4u);
    EXPECT_EQ(i.items[0].as_int(), 11);
    EXPECT_EQ(i.to_string(), "[i32 x 4: 11, 11, 10, 0]");

    const Value &f = get(md, "a.f32");
    ASSERT_EQ(f.items.size(), 2u);
    EXPECT_EQ(f.items[1].as_double(), -2.0);

    const Value &s = get(md, "a.strings");
    EXPECT_EQ(s.item_type, ValueType::STRING);
    ASSERT_EQ(s.items.size(), 3u);
    EXPECT_EQ(s.items[0].as_string(), "<s>");
    EXPECT_EQ(s.items[1].as_string(), "");
    EXPECT_EQ(s.items[2].as_string(), "hello");

    EXPECT_TRUE(get(md, "a.empty").kept);
    EXPECT_EQ(get(md, "a.empty").length, 0u);

    const Value &n = get(md, "a.nested");
    EXPECT_EQ(n.item_type, ValueType::ARRAY);
    ASSERT_EQ(n.items.size(), 2u);
    ASSERT_EQ(n.items[0].items.size(), 2u);
    EXPECT_EQ(n.items[0].items[1].as_int(), 2);
    ASSERT_EQ(n.items[1].items.size(), 1u);
    EXPECT_EQ(n.items[1].items[0].as_int(), 3);
}

INSTANTIATE_TEST_SUITE_P(Gguf, ReaderVersions, ::testing::Values(2u, 3u));

TEST(GgufReader, BigArraysAreSummarisedAndTheKeysAfterThemStillRead) {
    std::vector<std::string> vocab;
    for (int n = 0; n < 20000; ++n) vocab.push_back("tok" + std::to_string(n));
    std::vector<uint32_t> ids(100000, 7);
    GgufWriter w;
    w.array_string("tokenizer.ggml.tokens", vocab).array_u32("tokenizer.ggml.token_type", ids)
        .u32("after", 42);
    const Metadata md = read_ok(w);
    const Value &tokens = get(md, "tokenizer.ggml.tokens");
    EXPECT_FALSE(tokens.kept);
    EXPECT_EQ(tokens.item_type, ValueType::STRING);
    EXPECT_EQ(tokens.length, 20000u);
    EXPECT_TRUE(tokens.items.empty());
    EXPECT_EQ(tokens.to_string(), "[string x 20000, not kept]");
    const Value &types = get(md, "tokenizer.ggml.token_type");
    EXPECT_FALSE(types.kept);
    EXPECT_EQ(types.length, 100000u);
    EXPECT_EQ(get(md, "after").as_int(), 42);
}

TEST(GgufReader, ArraysAtTheKeepLimitAreKept) {
    GgufWriter w;
    w.array_u32("at", std::vector<uint32_t>(Limits::max_kept_array_items, 1))
        .array_u32("over", std::vector<uint32_t>(Limits::max_kept_array_items + 1, 1));
    const Metadata md = read_ok(w);
    EXPECT_TRUE(get(md, "at").kept);
    EXPECT_EQ(get(md, "at").items.size(), Limits::max_kept_array_items);
    EXPECT_FALSE(get(md, "over").kept);
}

TEST(GgufReader, ArraysInsideASkippedArrayAreWalkedNotKept) {
    // An array of max_kept_array_items + 1 arrays of two u16, then a key after it.
    GgufWriter w;
    w.begin_kv("outer", testing::kArray).raw_le(testing::kArray, 4).raw_le(Limits::max_kept_array_items + 1, 8);
    for (uint64_t n = 0; n <= Limits::max_kept_array_items; ++n)
        w.raw_le(testing::kU16, 4).raw_le(2, 8).raw_le(n, 2).raw_le(n + 1, 2);
    w.str("after", "ok");
    const Metadata md = read_ok(w);
    EXPECT_FALSE(get(md, "outer").kept);
    EXPECT_EQ(get(md, "outer").item_type, ValueType::ARRAY);
    EXPECT_EQ(get(md, "outer").length, Limits::max_kept_array_items + 1);
    EXPECT_EQ(get(md, "after").as_string(), "ok");
}

TEST(GgufReader, LongStringsAreSummarised) {
    const std::string template_text(Limits::max_kept_string_bytes + 1, 'x');
    GgufWriter w;
    w.str("tokenizer.chat_template", template_text).str("short", "ok");
    const Metadata md = read_ok(w);
    const Value &t = get(md, "tokenizer.chat_template");
    EXPECT_FALSE(t.kept);
    EXPECT_EQ(t.length, template_text.size());
    EXPECT_FALSE(t.as_string().has_value());
    EXPECT_EQ(get(md, "short").as_string(), "ok");
}

TEST(GgufReader, ReadsFromMemoryAsFromAFile) {
    const auto bytes = testing::qwen35_27b_metadata().finish();
    Metadata md;
    std::string error;
    ASSERT_TRUE(read_metadata_from_bytes(bytes.data(), bytes.size(), "memory", md, error)) << error;
    EXPECT_EQ(get(md, "general.architecture").as_string(), "qwen35");
    EXPECT_EQ(get(md, "qwen35.ssm.time_step_rank").as_int(), 48);
}

TEST(GgufReader, TensorDataAfterTheMetadataIsNeverRead) {
    // A 50 GiB file whose first bytes are the metadata and the rest a hole: reading the metadata
    // must not touch the rest (reading 50 GiB, even of a hole, takes many seconds).
    TempFile file;
    file.write(testing::qwen35_27b_metadata().set_tensor_count(851).finish());
    std::error_code ec;
    std::filesystem::resize_file(file.path(), uint64_t(50) << 30, ec);
    if (ec) GTEST_SKIP() << "cannot make a sparse 50 GiB file here: " << ec.message();
    const auto start = std::chrono::steady_clock::now();
    Metadata md;
    std::string error;
    ASSERT_TRUE(read_metadata(file.path(), md, error)) << error;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(md.tensor_count, 851u);
    EXPECT_EQ(get(md, "qwen35.ssm.group_count").as_int(), 16);
    EXPECT_LT(seconds, 2.0);
}

TEST(GgufReader, ReadsAFileWrittenByLlamaCppsPythonWriter) {
    // Written by gguf-py 0.19.0 (data/make_reference.py), with a tensor info and data after the
    // metadata: the reader and this file's writer share no code.
    Metadata md;
    std::string error;
    ASSERT_TRUE(read_metadata(std::string(GDN_GGUF_TEST_DATA) + "/reference_qwen35.gguf", md, error)) << error;
    EXPECT_EQ(md.version, 3u);
    EXPECT_EQ(md.tensor_count, 1u);
    EXPECT_EQ(get(md, "general.architecture").as_string(), "qwen35");
    EXPECT_EQ(get(md, "general.name").as_string(), "Qwen3.5-27B");
    EXPECT_EQ(get(md, "qwen35.ssm.group_count").type, ValueType::U32);
    EXPECT_EQ(get(md, "qwen35.ssm.group_count").as_int(), 16);
    EXPECT_EQ(get(md, "qwen35.ssm.time_step_rank").as_int(), 48);
    EXPECT_EQ(get(md, "qwen35.ssm.state_size").as_int(), 128);
    EXPECT_EQ(get(md, "qwen35.ssm.inner_size").as_int(), 6144);
    EXPECT_EQ(get(md, "qwen35.ssm.conv_kernel").as_int(), 4);
    EXPECT_EQ(get(md, "qwen35.block_count").as_int(), 64);
    EXPECT_EQ(get(md, "qwen35.full_attention_interval").as_int(), 4);
    EXPECT_EQ(get(md, "t.u8").as_int(), 250);
    EXPECT_EQ(get(md, "t.i8").as_int(), -120);
    EXPECT_EQ(get(md, "t.u16").as_int(), 65000);
    EXPECT_EQ(get(md, "t.i16").as_int(), -32000);
    EXPECT_EQ(get(md, "t.u32").as_int(), 4000000000ll);
    EXPECT_EQ(get(md, "t.i32").as_int(), -2000000000ll);
    EXPECT_EQ(get(md, "t.f32").as_double(), 0.15625);
    EXPECT_EQ(get(md, "t.bool").u, 1u);
    EXPECT_EQ(get(md, "t.str").as_string(), "h\xc3\xa9llo");
    EXPECT_EQ(get(md, "t.u64").u, std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(get(md, "t.i64").as_int(), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(get(md, "t.f64").as_double(), -0.25);
    EXPECT_EQ(get(md, "t.arr_i32").to_string(), "[i32 x 4: 11, 11, 10, 0]");
    EXPECT_EQ(get(md, "t.arr_str").to_string(), "[string x 3: \"<s>\", \"\", \"tok\"]");
    EXPECT_EQ(get(md, "tokenizer.ggml.tokens").to_string(), "[string x 3: \"<s>\", \"</s>\", \"a\"]");
    EXPECT_EQ(get(md, "t.big_u8").to_string(), "[u8 x 5000, not kept]");
    EXPECT_EQ(md.entries.size(), 25u);  // 9 model keys, 12 scalars, 4 arrays
}

TEST(GgufReader, ValueToString) {
    GgufWriter w;
    w.str("s", "qwen35").u32("n", 16).i8("m", -3).boolean("b", true).f32("f", 0.5f);
    const Metadata md = read_ok(w);
    EXPECT_EQ(get(md, "s").to_string(), "\"qwen35\"");
    EXPECT_EQ(get(md, "n").to_string(), "16");
    EXPECT_EQ(get(md, "m").to_string(), "-3");
    EXPECT_EQ(get(md, "b").to_string(), "true");
    EXPECT_EQ(get(md, "f").to_string(), "0.5");
    EXPECT_EQ(value_type_name(ValueType::F64), "f64");
    EXPECT_EQ(value_type_name(static_cast<ValueType>(42)), "type 42");
}

}  // namespace
}  // namespace gdn::gguf
