// A GGUF metadata reader: the header and the key-value section of a GGUF file (versions 2 and 3,
// little-endian), never the tensor infos or the tensor data, so a 50 GB model opens at once.
//
// Every count and length in the file is checked against the bytes left in the file and against a
// fixed cap before anything is allocated for it: a malformed, truncated or hostile file gives an
// error message, never a crash or a huge allocation. Large arrays (the tokenizer's vocabulary) are
// walked over and summarised (element type and count), not kept.
//
// Format (ggml's docs/gguf.md): "GGUF", uint32 version, uint64 tensor_count, uint64 kv_count, then
// kv_count times { string key, uint32 value_type, value }, where a string is a uint64 byte length
// and the bytes, and an array is a uint32 element type, a uint64 count and the elements.
// Version 1 (2023, 32-bit counts and lengths) is refused with a message saying so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gdn::gguf {

enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

// "u32", "string", ... ; "type 42" for a number that is not a GGUF type.
std::string value_type_name(ValueType type);

// Limits of what the reader accepts or keeps (a real model stays far inside all of them).
struct Limits {
    static constexpr uint64_t max_key_bytes = 64 * 1024;        // longer keys: refused
    static constexpr uint64_t max_kept_string_bytes = 1 << 20;  // longer strings: skipped, length kept
    static constexpr uint64_t max_kept_array_items = 4096;      // longer arrays: skipped, count kept
    static constexpr int max_array_depth = 4;                   // arrays of arrays nested deeper: refused
    static constexpr uint64_t max_kv_count = 1 << 20;           // more key-value pairs: refused
    // Memory kept for keys, strings and array items together; past it, strings and arrays are
    // summarised instead of kept (so memory stays bounded whatever the file's size).
    static constexpr uint64_t max_kept_bytes = 256ull << 20;
};

// One metadata value. Scalars live in the field their type says; arrays keep their element type
// and count always and their items only when they are short (`items_kept`).
struct Value {
    ValueType type = ValueType::U8;
    uint64_t u = 0;       // U8, U16, U32, U64, BOOL (0 or 1)
    int64_t i = 0;        // I8, I16, I32, I64
    double f = 0.0;       // F32, F64
    std::string str;      // STRING, when kept
    uint64_t length = 0;  // STRING: byte length; ARRAY: element count
    bool kept = true;     // false: a STRING or ARRAY too long to keep (only `length` is known)
    ValueType item_type = ValueType::U8;  // ARRAY only
    std::vector<Value> items;             // ARRAY only, when kept

    // The value as an integer when it is one of the integer types and fits int64_t.
    std::optional<int64_t> as_int() const;
    // The value as a number when it is an integer or float type.
    std::optional<double> as_double() const;
    // The value of a kept STRING.
    std::optional<std::string_view> as_string() const;
    // Short human-readable form: `16`, `"qwen35"`, `[u32 x 64: 0, 1, ...]`.
    std::string to_string() const;
};

struct Metadata {
    uint32_t version = 0;
    uint64_t tensor_count = 0;                          // as the header says; tensor infos are not read
    std::vector<std::pair<std::string, Value>> entries;  // in file order; keys are unique

    const Value *find(std::string_view key) const;
};

// Reads the header and key-value section of the GGUF file at `path` into `out`. On failure returns
// false, leaves `out` empty and puts in `error` a message naming the file, the byte offset, the key
// (when there is one) and what is wrong.
bool read_metadata(const std::string &path, Metadata &out, std::string &error);

// The same from bytes in memory (`source_name` is used in messages).
bool read_metadata_from_bytes(const void *data, size_t size, const std::string &source_name, Metadata &out,
                              std::string &error);

}  // namespace gdn::gguf
