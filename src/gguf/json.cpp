#include "gguf/json.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "gguf/byte_source.h"

namespace gdn::json {

const char *kind_name(Kind kind) {
    switch (kind) {
        case Kind::Null: return "null";
        case Kind::Bool: return "a boolean";
        case Kind::Number: return "a number";
        case Kind::String: return "a string";
        case Kind::Array: return "an array";
        case Kind::Object: return "an object";
    }
    return "?";
}

const Value *Value::find(std::string_view key) const {
    if (kind != Kind::Object) return nullptr;
    for (size_t i = 0; i < keys.size(); ++i)
        if (keys[i] == key) return &items[i];
    return nullptr;
}

std::optional<int64_t> Value::as_int() const {
    if (kind != Kind::Number || text.find_first_of(".eE") != std::string::npos) return std::nullopt;
    errno = 0;
    char *end = nullptr;
    const long long n = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0') return std::nullopt;
    return static_cast<int64_t>(n);
}

namespace {

class Parser {
public:
    explicit Parser(std::string_view text) : text_(text) {}

    bool document(Value &out, std::string &error) {
        Value root;
        skip_space();
        if (!value(root, 0)) {
            error = error_;
            return false;
        }
        skip_space();
        if (at_ < text_.size()) {
            fail("unexpected text after the value");
            error = error_;
            return false;
        }
        out = std::move(root);
        return true;
    }

private:
    bool value(Value &out, int depth) {
        if (at_ >= text_.size()) return fail("the text ends where a value should be");
        const char c = text_[at_];
        if (c == '{' || c == '[') {
            if (depth >= Limits::max_depth)
                return fail("arrays and objects nested deeper than " + std::to_string(Limits::max_depth));
            return c == '{' ? object(out, depth + 1) : array(out, depth + 1);
        }
        if (c == '"') {
            out.kind = Kind::String;
            return string(out.text);
        }
        if (c == '-' || (c >= '0' && c <= '9')) return number(out);
        if (word("true")) {
            out.kind = Kind::Bool;
            out.boolean = true;
            return true;
        }
        if (word("false")) {
            out.kind = Kind::Bool;
            return true;
        }
        if (word("null")) return true;
        return fail(std::string("unexpected ") + describe(c) + " where a value should be");
    }

    bool object(Value &out, int depth) {
        out.kind = Kind::Object;
        ++at_;  // {
        skip_space();
        if (peek('}')) return ++at_, true;
        while (true) {
            skip_space();
            if (!peek('"')) return fail("expected a key (a string) in the object");
            const size_t key_at = at_;
            std::string key;
            if (!string(key)) return false;
            for (const std::string &seen : out.keys)
                if (seen == key) {
                    at_ = key_at;
                    return fail("duplicate key \"" + key + "\"");
                }
            skip_space();
            if (!peek(':')) return fail("expected ':' after the key \"" + key + "\"");
            ++at_;
            skip_space();
            Value member;
            if (!value(member, depth)) return false;
            out.keys.push_back(std::move(key));
            out.items.push_back(std::move(member));
            skip_space();
            if (peek('}')) return ++at_, true;
            if (!peek(',')) return fail("expected ',' or '}' in the object");
            ++at_;
        }
    }

    bool array(Value &out, int depth) {
        out.kind = Kind::Array;
        ++at_;  // [
        skip_space();
        if (peek(']')) return ++at_, true;
        while (true) {
            skip_space();
            Value item;
            if (!value(item, depth)) return false;
            out.items.push_back(std::move(item));
            skip_space();
            if (peek(']')) return ++at_, true;
            if (!peek(',')) return fail("expected ',' or ']' in the array");
            ++at_;
        }
    }

    // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    bool number(Value &out) {
        const size_t start = at_;
        if (peek('-')) ++at_;
        if (peek('0')) ++at_;
        else if (!digits()) return fail("a number needs digits");
        if (peek('.')) {
            ++at_;
            if (!digits()) return fail("a number needs digits after '.'");
        }
        if (peek('e') || peek('E')) {
            ++at_;
            if (peek('+') || peek('-')) ++at_;
            if (!digits()) return fail("a number needs digits in its exponent");
        }
        out.kind = Kind::Number;
        out.text = std::string(text_.substr(start, at_ - start));
        out.number = std::strtod(out.text.c_str(), nullptr);  // out of range: +-inf or 0, as strtod says
        return true;
    }

    bool digits() {
        const size_t start = at_;
        while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
        return at_ > start;
    }

    bool string(std::string &out) {
        ++at_;  // "
        while (true) {
            if (at_ >= text_.size()) return fail("a string is not closed");
            const char c = text_[at_];
            if (c == '"') {
                ++at_;
                return true;
            }
            if (static_cast<unsigned char>(c) < 0x20) return fail("a control character inside a string");
            if (c != '\\') {
                out += c;
                ++at_;
                continue;
            }
            if (++at_ >= text_.size()) return fail("a string is not closed");
            const char e = text_[at_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    uint32_t code = 0;
                    if (!hex4(code)) return false;
                    if (code >= 0xD800 && code <= 0xDBFF) {  // a surrogate pair: the low half follows
                        uint32_t low = 0;
                        if (!word("\\u") || !hex4(low) || low < 0xDC00 || low > 0xDFFF)
                            return fail("a \\u escape of a high surrogate without its low surrogate");
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                    } else if (code >= 0xDC00 && code <= 0xDFFF) {
                        return fail("a \\u escape of a lone low surrogate");
                    }
                    append_utf8(code, out);
                    break;
                }
                default: --at_; return fail(std::string("unknown escape \\") + describe(e));
            }
        }
    }

    bool hex4(uint32_t &out) {
        if (text_.size() - at_ < 4) return fail("a \\u escape needs four hex digits");
        for (int i = 0; i < 4; ++i) {
            const int d = hex_digit(text_[at_]);
            if (d < 0) return fail("a \\u escape needs four hex digits");
            out = out * 16 + static_cast<uint32_t>(d);
            ++at_;
        }
        return true;
    }

    static int hex_digit(char h) {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        return -1;
    }

    static void append_utf8(uint32_t code, std::string &out) {
        if (code < 0x80) {
            out += static_cast<char>(code);
        } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
        } else if (code < 0x10000) {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (code >> 18));
            out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
        }
    }

    bool word(std::string_view w) {
        if (text_.substr(at_, w.size()) != w) return false;
        at_ += w.size();
        return true;
    }
    bool peek(char c) const { return at_ < text_.size() && text_[at_] == c; }
    void skip_space() {
        while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r')) ++at_;
    }

    static std::string describe(char c) {
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) {
            char buf[16];
            std::snprintf(buf, sizeof buf, "byte 0x%02x", static_cast<unsigned char>(c));
            return buf;
        }
        return std::string("'") + c + "'";
    }

    // Records "line L, column C: what" at the current position; returns false.
    bool fail(const std::string &what) {
        size_t line = 1, column = 1;
        for (size_t i = 0; i < at_ && i < text_.size(); ++i) {
            if (text_[i] == '\n') ++line, column = 1;
            else ++column;
        }
        error_ = "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what;
        return false;
    }

    std::string_view text_;
    size_t at_ = 0;
    std::string error_;
};

}  // namespace

bool parse(std::string_view text, Value &out, std::string &error) { return Parser(text).document(out, error); }

bool parse_file(const std::string &path, Value &out, std::string &error) {
    gguf::FileSource file;
    if (!file.open(path, error)) return false;
    if (file.size() > Limits::max_file_bytes) {
        error = path + ": " + std::to_string(file.size()) + " bytes, more than the " +
                std::to_string(Limits::max_file_bytes) + " a configuration file may have";
        return false;
    }
    std::string text(file.size(), '\0');
    if (!file.read(text.data(), text.size())) {
        error = path + ": cannot read its " + std::to_string(text.size()) + " bytes";
        return false;
    }
    if (!parse(text, out, error)) {
        error = path + ": " + error;
        return false;
    }
    return true;
}

}  // namespace gdn::json
