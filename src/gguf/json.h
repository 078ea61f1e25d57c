// A small JSON reader (RFC 8259) for model configuration files such as a Hugging Face
// config.json: the whole text parsed into a tree, or an error that says what is wrong and where
// ("line 3, column 17: ..."). Malformed or hostile input gives that error, never a crash: nesting
// is capped (no recursion without bound), the file's size is capped before it is read, duplicate
// keys are refused rather than silently resolved.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gdn::json {

enum class Kind { Null, Bool, Number, String, Array, Object };

// "null", "a boolean", "a number", "a string", "an array", "an object": for error messages.
const char *kind_name(Kind kind);

struct Value {
    Kind kind = Kind::Null;
    bool boolean = false;                                 // Bool
    double number = 0.0;                                  // Number
    std::string text;                                     // String: the decoded text; Number: the literal
    std::vector<Value> items;                             // Array; Object: the members' values
    std::vector<std::string> keys;                        // Object: items[i]'s key, in the text's order

    // The member of an object with that key, nullptr when absent (or not an object).
    const Value *find(std::string_view key) const;
    // A number written as an integer (no fraction, no exponent) that fits int64_t.
    std::optional<int64_t> as_int() const;
};

struct Limits {
    static constexpr int max_depth = 64;                    // arrays and objects nested deeper: refused
    static constexpr uint64_t max_file_bytes = 16u << 20;  // larger files: refused before reading
};

// Parses `text` (one JSON value, whitespace around it) into `out`. On failure returns false with
// "line L, column C: what" in `error` and leaves `out` unchanged.
bool parse(std::string_view text, Value &out, std::string &error);

// Reads and parses a file; errors start with the path.
bool parse_file(const std::string &path, Value &out, std::string &error);

}  // namespace gdn::json
