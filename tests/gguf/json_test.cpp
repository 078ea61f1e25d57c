// The JSON reader behind --hf-config: every kind of value, escapes, integers kept exact, and
// malformed or hostile text refused with the line and column of the fault, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/json.h"
#include "test_files.h"

namespace gdn::json {
namespace {

Value parsed(const std::string &text) {
    Value v;
    std::string error;
    EXPECT_TRUE(parse(text, v, error)) << text << ": " << error;
    return v;
}

std::string error_of(const std::string &text) {
    Value v;
    std::string error;
    EXPECT_FALSE(parse(text, v, error)) << "accepted: " << text;
    return error;
}

std::vector<uint8_t> bytes_of(const std::string &s) { return {s.begin(), s.end()}; }

TEST(Json, ParsesEveryKindInOrder) {
    const Value v = parsed(" {\"b\": [1, -2.5e1, 0], \"a\": {\"t\": true, \"f\": false, \"n\": null}, \"s\": \"x\"}\n");
    ASSERT_EQ(v.kind, Kind::Object);
    ASSERT_EQ(v.keys.size(), 3u);
    ASSERT_EQ(v.items.size(), 3u);
    EXPECT_EQ(v.keys[0], "b");  // the text's order, not sorted
    EXPECT_EQ(v.keys[1], "a");
    const Value *b = v.find("b");
    ASSERT_TRUE(b && b->kind == Kind::Array && b->items.size() == 3);
    EXPECT_EQ(b->items[0].as_int(), 1);
    EXPECT_EQ(b->items[1].number, -25.0);
    EXPECT_EQ(b->items[1].as_int(), std::nullopt);
    EXPECT_EQ(b->items[2].as_int(), 0);
    const Value *a = v.find("a");
    ASSERT_TRUE(a && a->kind == Kind::Object);
    EXPECT_TRUE(a->find("t")->boolean);
    EXPECT_EQ(a->find("f")->kind, Kind::Bool);
    EXPECT_FALSE(a->find("f")->boolean);
    EXPECT_EQ(a->find("n")->kind, Kind::Null);
    EXPECT_EQ(v.find("s")->text, "x");
    EXPECT_EQ(v.find("missing"), nullptr);
    EXPECT_EQ(b->find("b"), nullptr);  // not an object
    EXPECT_EQ(parsed("[]").items.size(), 0u);
    EXPECT_EQ(parsed("{}").keys.size(), 0u);
    EXPECT_EQ(parsed("7").as_int(), 7);
}

TEST(Json, IntegersAreExactOrRefused) {
    EXPECT_EQ(parsed("9223372036854775807").as_int(), INT64_MAX);
    EXPECT_EQ(parsed("-9223372036854775808").as_int(), INT64_MIN);
    EXPECT_EQ(parsed("9223372036854775808").as_int(), std::nullopt);  // does not fit
    EXPECT_EQ(parsed("128.0").as_int(), std::nullopt);                // written as a fraction
    EXPECT_EQ(parsed("1e2").as_int(), std::nullopt);
    EXPECT_EQ(parsed("\"128\"").as_int(), std::nullopt);              // a string
    EXPECT_EQ(parsed("1e400").number, HUGE_VAL);                     // valid JSON, out of double's range
}

TEST(Json, StringEscapes) {
    EXPECT_EQ(parsed(R"("a\"b\\c\/d\b\f\n\r\t")").text, "a\"b\\c/d\b\f\n\r\t");
    EXPECT_EQ(parsed(R"("\u0041\u00e9\u20AC")").text, "A\xc3\xa9\xe2\x82\xac");
    EXPECT_EQ(parsed(R"("\ud83d\ude00")").text, "\xf0\x9f\x98\x80");  // a surrogate pair: one code point
    EXPECT_EQ(parsed("\"caf\xc3\xa9\"").text, "caf\xc3\xa9");          // UTF-8 passes through
}

TEST(Json, MalformedTextSaysWhatAndWhere) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"", "line 1, column 1: the text ends where a value should be"},
        {"   \n  ", "line 2, column 3: the text ends where a value should be"},
        {"{", "line 1, column 2: expected a key (a string) in the object"},
        {"{\"a\"", "line 1, column 5: expected ':' after the key \"a\""},
        {"{\"a\":}", "line 1, column 6: unexpected '}' where a value should be"},
        {"{\n  \"a\": 1,\n  \"b\": ,\n}", "line 3, column 8: unexpected ',' where a value should be"},
        {"{\"a\":1 \"b\":2}", "line 1, column 8: expected ',' or '}' in the object"},
        {"{a:1}", "line 1, column 2: expected a key (a string) in the object"},
        {"{\"a\":1,}", "line 1, column 8: expected a key (a string) in the object"},
        {"[1,]", "line 1, column 4: unexpected ']' where a value should be"},
        {"[1 2]", "line 1, column 4: expected ',' or ']' in the array"},
        {"[1", "line 1, column 3: expected ',' or ']' in the array"},
        {"\"abc", "line 1, column 5: a string is not closed"},
        {"\"a\\", "line 1, column 4: a string is not closed"},
        {"\"a\nb\"", "line 1, column 3: a control character inside a string"},
        {"\"\\x\"", "line 1, column 3: unknown escape \\'x'"},
        {"\"\\u12\"", "a \\u escape needs four hex digits"},
        {"\"\\u12g4\"", "a \\u escape needs four hex digits"},
        {"\"\\ud83d\"", "a \\u escape of a high surrogate without its low surrogate"},
        {"\"\\ud83d\\u0041\"", "a \\u escape of a high surrogate without its low surrogate"},
        {"\"\\ude00\"", "a \\u escape of a lone low surrogate"},
        {"tru", "line 1, column 1: unexpected 't' where a value should be"},
        {"nul", "unexpected 'n' where a value should be"},
        {"NaN", "unexpected 'N' where a value should be"},
        {"-", "line 1, column 2: a number needs digits"},
        {"1.", "line 1, column 3: a number needs digits after '.'"},
        {"1e+", "line 1, column 4: a number needs digits in its exponent"},
        {"01", "line 1, column 2: unexpected text after the value"},
        {"{} {}", "line 1, column 4: unexpected text after the value"},
        {"{\"a\": 1, \"a\": 2}", "line 1, column 10: duplicate key \"a\""},
        {"\xef\xbb\xbf{}", "line 1, column 1: unexpected byte 0xef where a value should be"},
        {std::string("[\0]", 3), "line 1, column 2: unexpected byte 0x00 where a value should be"},
    };
    for (const auto &[text, expected] : cases) {
        const std::string error = error_of(text);
        EXPECT_NE(error.find(expected), std::string::npos) << "text: " << text << "\nerror: " << error;
    }
}

TEST(Json, NestingIsCapped) {
    const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
    EXPECT_EQ(parsed(nested(Limits::max_depth)).kind, Kind::Array);
    EXPECT_NE(error_of(nested(Limits::max_depth + 1)).find("nested deeper than 64"), std::string::npos);
    // Far deeper than a stack would take unbounded: refused at the cap, no recursion past it.
    EXPECT_NE(error_of(std::string(1000000, '[')).find("nested deeper than 64"), std::string::npos);
    EXPECT_NE(error_of(std::string(100000, '{')).find("expected a key"), std::string::npos);
}

TEST(Json, FailureLeavesTheValueAsItWas) {
    Value v = parsed("{\"kept\": 1}");
    std::string error;
    EXPECT_FALSE(parse("{\"kept\": 2, ", v, error));
    EXPECT_EQ(v.find("kept")->as_int(), 1);
}

TEST(Json, EveryTruncationIsAnErrorNotACrash) {
    const std::string text =
        "{\"text_config\": {\"linear_num_key_heads\": 16, \"layer_types\": [\"linear_attention\", "
        "\"full_attention\"], \"name\": \"caf\\u00e9 \\ud83d\\ude00\", \"rope\": {\"theta\": 1e7, \"f\": -0.5}}, "
        "\"flags\": [true, false, null]}";
    parsed(text);
    for (size_t n = 0; n < text.size(); ++n) {
        Value v;
        std::string error;
        EXPECT_FALSE(parse(text.substr(0, n), v, error)) << n;
        EXPECT_EQ(error.rfind("line 1, column ", 0), 0u) << n << ": " << error;
    }
}

TEST(Json, Files) {
    gguf::testing::TempFile file(".json");
    file.write(bytes_of("{\n  \"a\": [1, 2]\n}\n"));
    Value v;
    std::string error;
    ASSERT_TRUE(parse_file(file.path(), v, error)) << error;
    EXPECT_EQ(v.find("a")->items[1].as_int(), 2);

    file.write(bytes_of("{\n  \"a\": [1, 2\n}\n"));
    EXPECT_FALSE(parse_file(file.path(), v, error));
    EXPECT_EQ(error, file.path() + ": line 3, column 1: expected ',' or ']' in the array");

    EXPECT_FALSE(parse_file(file.path() + ".missing", v, error));
    EXPECT_EQ(error, file.path() + ".missing: no such file");

    const std::string dir = std::filesystem::temp_directory_path().string();
    EXPECT_FALSE(parse_file(dir, v, error));
    EXPECT_EQ(error, dir + ": not a regular file");

    // Too large to be a configuration file: refused before a byte is read (a sparse file).
    std::filesystem::resize_file(file.path(), Limits::max_file_bytes + 1);
    EXPECT_FALSE(parse_file(file.path(), v, error));
    EXPECT_NE(error.find("more than the 16777216 a configuration file may have"), std::string::npos) << error;
}

}  // namespace
}  // namespace gdn::json
