#include "gguf/gguf.h"

#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "gguf/byte_source.h"

namespace gdn::gguf {

namespace {

constexpr uint32_t kMaxType = static_cast<uint32_t>(ValueType::F64);

bool is_known_type(uint32_t raw) { return raw <= kMaxType; }

// Bytes a scalar of this type occupies; 0 for STRING and ARRAY (variable length).
uint64_t fixed_size(ValueType type) {
    switch (type) {
        case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
        case ValueType::U16: case ValueType::I16: return 2;
        case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
        case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
        case ValueType::STRING: case ValueType::ARRAY: return 0;
    }
    return 0;
}

// The fewest bytes one value of this type can occupy: what a count is checked against.
uint64_t min_encoded_size(ValueType type) {
    if (type == ValueType::STRING) return 8;      // the length alone
    if (type == ValueType::ARRAY) return 4 + 8;   // element type and count
    return fixed_size(type);
}

uint64_t decode_le(const unsigned char *bytes, int n) {
    uint64_t v = 0;
    for (int b = n - 1; b >= 0; --b) v = (v << 8) | bytes[b];
    return v;
}

// A key as it appears in messages: control and non-ASCII bytes as '?', at most 200 bytes.
std::string printable(const std::string &key) {
    std::string out = key.substr(0, 200);
    for (char &c : out)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) c = '?';
    return key.size() > 200 ? out + "..." : out;
}

// Reads one GGUF key-value section from a ByteSource. Every method returns false after recording
// the first error; nothing is allocated by a count from the file before the count is checked
// against the bytes left and against Limits.
class Parser {
public:
    Parser(ByteSource &src, std::string source_name) : src_(src), name_(std::move(source_name)) {}

    bool parse(Metadata &out);
    const std::string &error() const { return error_; }

private:
    bool fail(uint64_t at, const std::string &what) {
        error_ = name_ + ": byte " + std::to_string(at);
        if (!key_.empty()) error_ += ", key '" + key_ + "'";
        error_ += ": " + what;
        return false;
    }
    bool truncated(uint64_t at, uint64_t need, const std::string &what) {
        return fail(at, what + " needs " + std::to_string(need) + " bytes but only " +
                            std::to_string(src_.size() - at) + " are left in the file");
    }

    bool read_uint(int n, uint64_t &v, const char *what);
    bool read_type(ValueType &type, const char *what);
    bool read_string_body(uint64_t at, uint64_t length, bool keep, std::string &out, const char *what);
    bool read_value(ValueType type, Value &out, int depth);
    bool read_array(Value &out, int depth);
    bool skip_items(ValueType item_type, uint64_t count, int depth);
    // Charges `bytes` of kept memory; false (and nothing charged) when over the budget.
    bool charge(uint64_t bytes) {
        if (bytes > Limits::max_kept_bytes - kept_bytes_) return false;
        kept_bytes_ += bytes;
        return true;
    }

    ByteSource &src_;
    std::string name_;
    std::string error_;
    std::string key_;  // the key being read, for messages
    uint64_t kept_bytes_ = 0;
    int inside_skipped_array_ = 0;  // > 0: arrays are walked over, not kept
};

bool Parser::read_uint(int n, uint64_t &v, const char *what) {
    const uint64_t at = src_.offset();
    unsigned char bytes[8];
    if (src_.remaining() < static_cast<uint64_t>(n)) return truncated(at, n, what);
    if (!src_.read(bytes, n)) return fail(at, std::string("read error in ") + what);
    v = decode_le(bytes, n);
    return true;
}

bool Parser::read_type(ValueType &type, const char *what) {
    const uint64_t at = src_.offset();
    uint64_t raw = 0;
    if (!read_uint(4, raw, what)) return false;
    if (!is_known_type(static_cast<uint32_t>(raw)))
        return fail(at, std::string(what) + " " + std::to_string(raw) + " is not a GGUF value type (0.." +
                            std::to_string(kMaxType) + ")");
    type = static_cast<ValueType>(raw);
    return true;
}

bool Parser::read_string_body(uint64_t at, uint64_t length, bool keep, std::string &out, const char *what) {
    if (length > src_.remaining())
        return fail(at, std::string(what) + " length " + std::to_string(length) + " runs past the end of the file (" +
                            std::to_string(src_.remaining()) + " bytes left)");
    if (!keep) {
        if (!src_.skip(length)) return fail(at, std::string("seek error in ") + what);
        return true;
    }
    out.resize(static_cast<size_t>(length));
    if (!src_.read(out.data(), length)) return fail(at, std::string("read error in ") + what);
    return true;
}

bool Parser::read_value(ValueType type, Value &out, int depth) {
    out.type = type;
    const uint64_t at = src_.offset();
    uint64_t raw = 0;
    switch (type) {
        case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64:
            if (!read_uint(static_cast<int>(fixed_size(type)), raw, "value")) return false;
            out.u = raw;
            return true;
        case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64: {
            const int n = static_cast<int>(fixed_size(type));
            if (!read_uint(n, raw, "value")) return false;
            // Sign-extend from n bytes.
            const int shift = 64 - 8 * n;
            out.i = static_cast<int64_t>(raw << shift) >> shift;
            return true;
        }
        case ValueType::F32: {
            if (!read_uint(4, raw, "value")) return false;
            const uint32_t bits = static_cast<uint32_t>(raw);
            float f;
            std::memcpy(&f, &bits, sizeof f);
            out.f = f;
            return true;
        }
        case ValueType::F64: {
            if (!read_uint(8, raw, "value")) return false;
            double d;
            std::memcpy(&d, &raw, sizeof d);
            out.f = d;
            return true;
        }
        case ValueType::BOOL:
            if (!read_uint(1, raw, "value")) return false;
            if (raw > 1) return fail(at, "bool value " + std::to_string(raw) + " is neither 0 nor 1");
            out.u = raw;
            return true;
        case ValueType::STRING: {
            uint64_t length = 0;
            if (!read_uint(8, length, "string length")) return false;
            out.length = length;
            out.kept = length <= Limits::max_kept_string_bytes && length <= src_.remaining() && charge(length);
            return read_string_body(at, length, out.kept, out.str, "string");
        }
        case ValueType::ARRAY:
            return read_array(out, depth + 1);
    }
    return fail(at, "internal error: unhandled value type");
}

bool Parser::read_array(Value &out, int depth) {
    const uint64_t at = src_.offset();
    if (depth > Limits::max_array_depth)
        return fail(at, "arrays nested more than " + std::to_string(Limits::max_array_depth) + " deep");
    if (!read_type(out.item_type, "array element type")) return false;
    uint64_t count = 0;
    if (!read_uint(8, count, "array count")) return false;
    out.length = count;
    const uint64_t item_min = min_encoded_size(out.item_type);
    if (count > src_.remaining() / item_min)
        return fail(at, "array of " + std::to_string(count) + " " + value_type_name(out.item_type) +
                            " needs at least " + (count > std::numeric_limits<uint64_t>::max() / item_min
                                                      ? std::string("2^64")
                                                      : std::to_string(count * item_min)) +
                            " bytes but only " + std::to_string(src_.remaining()) + " are left in the file");
    out.kept = inside_skipped_array_ == 0 && count <= Limits::max_kept_array_items && charge(count * sizeof(Value));
    if (!out.kept) return skip_items(out.item_type, count, depth);
    out.items.resize(static_cast<size_t>(count));
    for (Value &item : out.items)
        if (!read_value(out.item_type, item, depth)) return false;
    return true;
}

bool Parser::skip_items(ValueType item_type, uint64_t count, int depth) {
    const uint64_t at = src_.offset();
    if (const uint64_t size = fixed_size(item_type)) {
        // count * size <= remaining was checked by the caller.
        if (!src_.skip(count * size)) return fail(at, "seek error in array");
        return true;
    }
    for (uint64_t n = 0; n < count; ++n) {
        if (item_type == ValueType::STRING) {
            const uint64_t item_at = src_.offset();
            uint64_t length = 0;
            std::string unused;
            if (!read_uint(8, length, "string length") ||
                !read_string_body(item_at, length, false, unused, "string"))
                return false;
        } else {
            Value nested;  // walked, never kept (inside_skipped_array_)
            ++inside_skipped_array_;
            const bool ok = read_array(nested, depth + 1);
            --inside_skipped_array_;
            if (!ok) return false;
        }
    }
    return true;
}

bool Parser::parse(Metadata &out) {
    unsigned char magic[4];
    if (src_.remaining() < 4) return truncated(0, 4, "the magic \"GGUF\"");
    if (!src_.read(magic, 4)) return fail(0, "read error");
    if (std::memcmp(magic, "GGUF", 4) != 0) return fail(0, "not a GGUF file (the first 4 bytes are not \"GGUF\")");

    uint64_t version = 0;
    if (!read_uint(4, version, "version")) return false;
    if (version == 1)
        return fail(4, "GGUF version 1 (the 2023 draft with 32-bit counts) is not supported; "
                       "convert the model again with a current llama.cpp");
    if (version != 2 && version != 3) {
        if ((version & 0xFFFF) == 0 && (version >> 24) >= 1 && (version >> 24) <= 3)
            return fail(4, "big-endian GGUF files are not supported");
        return fail(4, "unsupported GGUF version " + std::to_string(version) + " (this reader takes 2 and 3)");
    }
    uint64_t tensor_count = 0, kv_count = 0;
    if (!read_uint(8, tensor_count, "tensor count") || !read_uint(8, kv_count, "key-value count")) return false;
    if (kv_count > Limits::max_kv_count)
        return fail(16, "key-value count " + std::to_string(kv_count) + " is over this reader's limit of " +
                            std::to_string(Limits::max_kv_count));
    const uint64_t kv_min = 8 + 4 + 1;  // empty key, type, one-byte value
    if (kv_count > src_.remaining() / kv_min)
        return fail(16, "key-value count " + std::to_string(kv_count) + " cannot fit in the " +
                            std::to_string(src_.remaining()) + " bytes left in the file");

    Metadata md;
    md.version = static_cast<uint32_t>(version);
    md.tensor_count = tensor_count;
    std::unordered_set<std::string> seen;
    for (uint64_t n = 0; n < kv_count; ++n) {
        key_.clear();
        const uint64_t at = src_.offset();
        uint64_t key_length = 0;
        if (!read_uint(8, key_length, "key length")) return false;
        if (key_length > Limits::max_key_bytes)
            return fail(at, "key " + std::to_string(n) + " has length " + std::to_string(key_length) +
                                ", over the limit of " + std::to_string(Limits::max_key_bytes));
        if (!charge(key_length + sizeof(std::pair<std::string, Value>)))
            return fail(at, "metadata over this reader's memory limit of " +
                                std::to_string(Limits::max_kept_bytes) + " bytes");
        std::string key;
        if (!read_string_body(at, key_length, true, key, "key")) return false;
        key_ = printable(key);
        if (!seen.insert(key).second) return fail(at, "duplicate key");

        ValueType type;
        if (!read_type(type, "value type")) return false;
        Value value;
        if (!read_value(type, value, 0)) return false;
        md.entries.emplace_back(std::move(key), std::move(value));
    }
    out = std::move(md);
    return true;
}

}  // namespace

std::string value_type_name(ValueType type) {
    switch (type) {
        case ValueType::U8: return "u8";
        case ValueType::I8: return "i8";
        case ValueType::U16: return "u16";
        case ValueType::I16: return "i16";
        case ValueType::U32: return "u32";
        case ValueType::I32: return "i32";
        case ValueType::F32: return "f32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::U64: return "u64";
        case ValueType::I64: return "i64";
        case ValueType::F64: return "f64";
    }
    return "type " + std::to_string(static_cast<uint32_t>(type));
}

std::optional<int64_t> Value::as_int() const {
    switch (type) {
        case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64:
            if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
            return static_cast<int64_t>(u);
        case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
            return i;
        default:
            return std::nullopt;
    }
}

std::optional<double> Value::as_double() const {
    if (type == ValueType::F32 || type == ValueType::F64) return f;
    if (type == ValueType::U8 || type == ValueType::U16 || type == ValueType::U32 || type == ValueType::U64)
        return static_cast<double>(u);
    if (auto v = as_int()) return static_cast<double>(*v);
    return std::nullopt;
}

std::optional<std::string_view> Value::as_string() const {
    if (type != ValueType::STRING || !kept) return std::nullopt;
    return std::string_view(str);
}

std::string Value::to_string() const {
    switch (type) {
        case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64:
            return std::to_string(u);
        case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
            return std::to_string(i);
        case ValueType::F32: case ValueType::F64: {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%.9g", f);
            return buf;
        }
        case ValueType::BOOL:
            return u ? "true" : "false";
        case ValueType::STRING: {
            if (!kept) return "<string of " + std::to_string(length) + " bytes>";
            std::string quoted = "\"";  // built piecewise: GCC 12 warns falsely on "\"" + string
            quoted += str.size() > 80 ? str.substr(0, 77) + "..." : str;
            quoted += '"';
            return quoted;
        }
        case ValueType::ARRAY: {
            std::string s = "[";
            s += value_type_name(item_type) + " x " + std::to_string(length);
            if (!kept) return s + ", not kept]";
            for (size_t n = 0; n < items.size() && n < 4; ++n) {
                s += n ? ", " : ": ";
                s += items[n].to_string();
            }
            return s + (items.size() > 4 ? ", ...]" : "]");
        }
    }
    return "?";
}

const Value *Metadata::find(std::string_view key) const {
    for (const auto &[k, v] : entries)
        if (k == key) return &v;
    return nullptr;
}

bool read_metadata(const std::string &path, Metadata &out, std::string &error) {
    out = Metadata{};
    FileSource source;
    if (!source.open(path, error)) return false;
    Parser parser(source, path);
    if (!parser.parse(out)) {
        error = parser.error();
        return false;
    }
    return true;
}

bool read_metadata_from_bytes(const void *data, size_t size, const std::string &source_name, Metadata &out,
                              std::string &error) {
    out = Metadata{};
    MemorySource source(data, size);
    Parser parser(source, source_name);
    if (!parser.parse(out)) {
        error = parser.error();
        return false;
    }
    return true;
}

}  // namespace gdn::gguf
