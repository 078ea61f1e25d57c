// Malformed, truncated and hostile GGUF files: each is refused with a message that says what is
// wrong, without a crash and without allocating by a count the file claims (run these under
// GDN_SANITIZE=ON to check the "without a crash" part for memory errors too).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "gguf/gguf.h"
#include "gguf_writer.h"
#include "test_files.h"

namespace gdn::gguf {
namespace {

using testing::GgufWriter;
using testing::TempFile;

// Refused, and the message contains `expected`.
void expect_refused(const std::vector<uint8_t> &bytes, const std::string &expected) {
    Metadata md;
    md.version = 99;  // must be reset on failure
    std::string error;
    EXPECT_FALSE(read_metadata_from_bytes(bytes.data(), bytes.size(), "bad.gguf", md, error));
    EXPECT_NE(error.find(expected), std::string::npos) << "message: " << error;
    EXPECT_EQ(error.rfind("bad.gguf: ", 0), 0u) << "message does not name the file: " << error;
    EXPECT_EQ(md.version, 0u);
    EXPECT_TRUE(md.entries.empty());
}

std::vector<uint8_t> header(uint32_t version, uint64_t tensor_count, uint64_t kv_count) {
    return GgufWriter(version).set_tensor_count(tensor_count).set_kv_count(kv_count).finish();
}

TEST(GgufMalformed, EmptyAndShortFiles) {
    expect_refused({}, "the magic \"GGUF\" needs 4 bytes but only 0 are left");
    expect_refused({'G', 'G'}, "needs 4 bytes but only 2 are left");
}

TEST(GgufMalformed, WrongMagic) {
    auto bytes = testing::qwen35_27b_metadata().finish();
    bytes[3] = 'X';
    expect_refused(bytes, "not a GGUF file");
}

TEST(GgufMalformed, UnsupportedVersions) {
    expect_refused(header(1, 0, 0), "GGUF version 1");
    expect_refused(header(0, 0, 0), "unsupported GGUF version 0");
    expect_refused(header(4, 0, 0), "unsupported GGUF version 4");
    expect_refused(header(0x03000000u, 0, 0), "big-endian");
}

TEST(GgufMalformed, HugeKeyValueCounts) {
    expect_refused(header(3, 0, ~uint64_t(0)), "over this reader's limit");
    expect_refused(header(3, 0, 1000), "key-value count 1000 cannot fit in the 0 bytes left");
}

TEST(GgufMalformed, EveryTruncationOfARealHeaderIsRefused) {
    const auto whole = testing::qwen35_27b_metadata().finish();
    for (size_t n = 0; n < whole.size(); ++n) {
        const std::vector<uint8_t> prefix(whole.begin(), whole.begin() + n);
        Metadata md;
        std::string error;
        EXPECT_FALSE(read_metadata_from_bytes(prefix.data(), prefix.size(), "cut.gguf", md, error)) << n;
        EXPECT_FALSE(error.empty()) << n;
    }
}

TEST(GgufMalformed, TruncatedFileOnDisk) {
    auto bytes = testing::qwen35_27b_metadata().finish();
    bytes.resize(bytes.size() - 3);
    TempFile file;
    file.write(bytes);
    Metadata md;
    std::string error;
    EXPECT_FALSE(read_metadata(file.path(), md, error));
    EXPECT_NE(error.find(file.path() + ": byte "), std::string::npos) << error;
    EXPECT_NE(error.find("are left in the file"), std::string::npos) << error;
}

TEST(GgufMalformed, KeyLengths) {
    auto bytes = GgufWriter().set_kv_count(1).raw_le(~uint64_t(0), 8).raw_le(0, 8).finish();
    expect_refused(bytes, "key 0 has length 18446744073709551615, over the limit");
    bytes = GgufWriter().set_kv_count(1).raw_le(100, 8).raw_bytes(std::vector<uint8_t>(20, 'a')).finish();
    expect_refused(bytes, "key length 100 runs past the end of the file");
    const std::string long_key(Limits::max_key_bytes + 1, 'k');
    expect_refused(GgufWriter().u8(long_key, 1).finish(), "over the limit of 65536");
}

TEST(GgufMalformed, BadValueTypes) {
    expect_refused(GgufWriter().begin_kv("k", 13).raw_le(0, 8).finish(), "value type 13 is not a GGUF value type");
    auto bytes = GgufWriter().begin_kv("k", 0xFFFFFFFFu).raw_le(0, 8).finish();
    expect_refused(bytes, "key 'k': value type 4294967295 is not a GGUF value type");
    bytes = GgufWriter().begin_kv("arr", testing::kArray).raw_le(77, 4).raw_le(0, 8).finish();
    expect_refused(bytes, "key 'arr': array element type 77 is not a GGUF value type");
}

TEST(GgufMalformed, BoolOtherThanZeroOrOne) {
    expect_refused(GgufWriter().begin_kv("b", testing::kBool).raw_le(2, 1).finish(), "bool value 2 is neither 0 nor 1");
}

TEST(GgufMalformed, StringsPastTheEnd) {
    auto bytes = GgufWriter().begin_kv("s", testing::kString).raw_le(~uint64_t(0), 8).finish();
    expect_refused(bytes, "key 's': string length 18446744073709551615 runs past the end of the file (0 bytes left)");
    bytes = GgufWriter().begin_kv("s", testing::kString).raw_le(10, 8).raw_bytes({'a', 'b'}).finish();
    expect_refused(bytes, "string length 10 runs past the end of the file (2 bytes left)");
    // A string inside a skipped (long) array.
    GgufWriter w;
    w.begin_kv("tokens", testing::kArray).raw_le(testing::kString, 4).raw_le(Limits::max_kept_array_items + 1, 8);
    for (uint64_t n = 0; n < Limits::max_kept_array_items; ++n) w.raw_string("t");
    w.raw_le(1000, 8);
    expect_refused(w.finish(), "string length 1000 runs past the end");
}

TEST(GgufMalformed, HugeArrayCounts) {
    // Counts that would need exabytes: refused by the bytes-left check before any allocation.
    for (uint32_t item_type : {testing::kU8, testing::kU64, testing::kString, testing::kArray}) {
        auto bytes = GgufWriter().begin_kv("a", testing::kArray).raw_le(item_type, 4).raw_le(uint64_t(1) << 62, 8)
                         .raw_le(0, 8).finish();
        expect_refused(bytes, "array of 4611686018427387904");
    }
    auto bytes = GgufWriter().begin_kv("a", testing::kArray).raw_le(testing::kU64, 4).raw_le(~uint64_t(0), 8).finish();
    expect_refused(bytes, "needs at least 2^64 bytes");
    // A count just above what the bytes left can hold.
    bytes = GgufWriter().begin_kv("a", testing::kArray).raw_le(testing::kU32, 4).raw_le(3, 8).raw_le(0, 8).finish();
    expect_refused(bytes, "array of 3 u32 needs at least 12 bytes but only 8 are left");
}

TEST(GgufMalformed, NestingDepth) {
    // Arrays nested `depth` deep, the innermost holding one u8.
    auto nested = [](int depth) {
        GgufWriter w;
        w.begin_kv("deep", testing::kArray);
        for (int d = 1; d < depth; ++d) w.raw_le(testing::kArray, 4).raw_le(1, 8);
        w.raw_le(testing::kU8, 4).raw_le(1, 8).raw_le(5, 1);
        return w.finish();
    };
    Metadata md;
    std::string error;
    const auto ok = nested(Limits::max_array_depth);
    EXPECT_TRUE(read_metadata_from_bytes(ok.data(), ok.size(), "ok", md, error)) << error;
    expect_refused(nested(Limits::max_array_depth + 1), "arrays nested more than 4 deep");
    expect_refused(nested(1000), "arrays nested more than 4 deep");
}

TEST(GgufMalformed, DuplicateKeys) {
    expect_refused(GgufWriter().u32("general.alignment", 32).u32("general.alignment", 64).finish(),
                   "key 'general.alignment': duplicate key");
}

TEST(GgufMalformed, KeysInMessagesArePrintable) {
    const std::string hostile = "evil\n\x1b[2J" + std::string(300, 'k');
    auto bytes = GgufWriter().begin_kv(hostile, 99).finish();
    expect_refused(bytes, "key 'evil??[2J" + std::string(191, 'k') + "...': value type 99");
}

TEST(GgufMalformed, MissingAndOddPaths) {
    Metadata md;
    std::string error;
    EXPECT_FALSE(read_metadata("/nonexistent/dir/model.gguf", md, error));
    EXPECT_EQ(error, "/nonexistent/dir/model.gguf: no such file");
    const std::string dir = std::filesystem::temp_directory_path().string();
    EXPECT_FALSE(read_metadata(dir, md, error));
    EXPECT_EQ(error, dir + ": not a regular file");
}

TEST(GgufMalformed, RandomCorruptionNeverCrashes) {
    // Flip, overwrite and cut bytes of a real header: every outcome is a clean success or a
    // clean error (the fuzzing issue covers this far more thoroughly).
    const auto whole = testing::qwen35_27b_metadata().finish();
    std::mt19937_64 rng(20261130);
    int refused = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        auto bytes = whole;
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            const size_t at = rng() % bytes.size();
            switch (rng() % 3) {
                case 0: bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
                case 1: bytes[at] = static_cast<uint8_t>(rng()); break;
                default: bytes[at] = 0xFF; break;
            }
        }
        if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
        Metadata md;
        std::string error;
        if (!read_metadata_from_bytes(bytes.data(), bytes.size(), "fuzz", md, error)) {
            EXPECT_FALSE(error.empty());
            ++refused;
        }
    }
    EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace gdn::gguf
