// A tiny GGUF writer for tests: metadata only (tensor_count says what you tell it, no tensor infos
// or data follow). Well-formed files come from the typed adders; malformed ones from begin_kv plus
// the raw_* appenders (or from editing the bytes finish() returns). Header-only, depends on nothing
// but the standard library, so the fuzzing seed corpus and the gdn-ops harness tests can use it.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace gdn::gguf::testing {

// GGUF value type numbers (ggml's enum gguf_type).
enum : uint32_t {
    kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
    kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

class GgufWriter {
public:
    explicit GgufWriter(uint32_t version = 3) : version_(version) {}

    GgufWriter &set_tensor_count(uint64_t n) { tensor_count_ = n; return *this; }
    // Overrides the kv count written in the header (default: the number of begin_kv calls).
    GgufWriter &set_kv_count(uint64_t n) { kv_count_override_ = n; has_override_ = true; return *this; }

    // Typed key-value pairs.
    GgufWriter &u8(const std::string &k, uint8_t v) { begin_kv(k, kU8); return raw_le(v, 1); }
    GgufWriter &i8(const std::string &k, int8_t v) { begin_kv(k, kI8); return raw_le(uint8_t(v), 1); }
    GgufWriter &u16(const std::string &k, uint16_t v) { begin_kv(k, kU16); return raw_le(v, 2); }
    GgufWriter &i16(const std::string &k, int16_t v) { begin_kv(k, kI16); return raw_le(uint16_t(v), 2); }
    GgufWriter &u32(const std::string &k, uint32_t v) { begin_kv(k, kU32); return raw_le(v, 4); }
    GgufWriter &i32(const std::string &k, int32_t v) { begin_kv(k, kI32); return raw_le(uint32_t(v), 4); }
    GgufWriter &u64(const std::string &k, uint64_t v) { begin_kv(k, kU64); return raw_le(v, 8); }
    GgufWriter &i64(const std::string &k, int64_t v) { begin_kv(k, kI64); return raw_le(uint64_t(v), 8); }
    GgufWriter &f32(const std::string &k, float v) { begin_kv(k, kF32); return raw_f32(v); }
    GgufWriter &f64(const std::string &k, double v) { begin_kv(k, kF64); return raw_f64(v); }
    GgufWriter &boolean(const std::string &k, bool v) { begin_kv(k, kBool); return raw_le(uint8_t(v ? 1 : 0), 1); }
    GgufWriter &str(const std::string &k, const std::string &v) { begin_kv(k, kString); return raw_string(v); }

    GgufWriter &array_u32(const std::string &k, const std::vector<uint32_t> &items) {
        begin_kv(k, kArray);
        raw_le(kU32, 4).raw_le(items.size(), 8);
        for (uint32_t v : items) raw_le(v, 4);
        return *this;
    }
    GgufWriter &array_i32(const std::string &k, const std::vector<int32_t> &items) {
        begin_kv(k, kArray);
        raw_le(kI32, 4).raw_le(items.size(), 8);
        for (int32_t v : items) raw_le(uint32_t(v), 4);
        return *this;
    }
    GgufWriter &array_f32(const std::string &k, const std::vector<float> &items) {
        begin_kv(k, kArray);
        raw_le(kF32, 4).raw_le(items.size(), 8);
        for (float v : items) raw_f32(v);
        return *this;
    }
    GgufWriter &array_string(const std::string &k, const std::vector<std::string> &items) {
        begin_kv(k, kArray);
        raw_le(kString, 4).raw_le(items.size(), 8);
        for (const std::string &s : items) raw_string(s);
        return *this;
    }

    // Starts a key-value pair: the key and the value type; the value is up to the caller.
    GgufWriter &begin_kv(const std::string &key, uint32_t type) {
        ++kv_count_;
        raw_string(key);
        return raw_le(type, 4);
    }
    // Raw little-endian appenders for hand-made (often malformed) values.
    GgufWriter &raw_le(uint64_t v, int n) {
        for (int b = 0; b < n; ++b) body_.push_back(static_cast<uint8_t>(v >> (8 * b)));
        return *this;
    }
    GgufWriter &raw_f32(float v) { uint32_t b; std::memcpy(&b, &v, 4); return raw_le(b, 4); }
    GgufWriter &raw_f64(double v) { uint64_t b; std::memcpy(&b, &v, 8); return raw_le(b, 8); }
    GgufWriter &raw_string(const std::string &s) {
        raw_le(s.size(), 8);
        body_.insert(body_.end(), s.begin(), s.end());
        return *this;
    }
    GgufWriter &raw_bytes(const std::vector<uint8_t> &bytes) {
        body_.insert(body_.end(), bytes.begin(), bytes.end());
        return *this;
    }

    // The whole file: "GGUF", version, tensor count, kv count, the key-value pairs.
    std::vector<uint8_t> finish() const {
        GgufWriter header(version_);
        header.body_ = {'G', 'G', 'U', 'F'};
        header.raw_le(version_, 4).raw_le(tensor_count_, 8).raw_le(has_override_ ? kv_count_override_ : kv_count_, 8);
        std::vector<uint8_t> out = header.body_;
        out.insert(out.end(), body_.begin(), body_.end());
        return out;
    }

    bool write_file(const std::string &path) const { return write_bytes(path, finish()); }

    static bool write_bytes(const std::string &path, const std::vector<uint8_t> &bytes) {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        return static_cast<bool>(f);
    }

private:
    uint32_t version_;
    uint64_t tensor_count_ = 0;
    uint64_t kv_count_ = 0;
    uint64_t kv_count_override_ = 0;
    bool has_override_ = false;
    std::vector<uint8_t> body_;
};

// The metadata a llama.cpp conversion writes for a gated-delta-net model's linear-attention
// geometry (the keys of Qwen3NextModel.set_gguf_parameters), with the values given literally.
struct DeltaNetKeys {
    std::string arch;                 // "qwen35", "qwen3next", "qwen35moe"
    std::string name;                 // general.name
    uint32_t group_count = 0;         // linear_num_key_heads
    uint32_t time_step_rank = 0;      // linear_num_value_heads
    uint32_t state_size = 0;          // linear_key_head_dim
    uint32_t inner_size = 0;          // linear_value_head_dim * linear_num_value_heads
    uint32_t conv_kernel = 0;         // linear_conv_kernel_dim
    uint32_t block_count = 0;         // num_hidden_layers (+ nextn_predict_layers)
    uint32_t nextn_predict_layers = 0;  // 0: key not written
    uint32_t full_attention_interval = 0;  // 0: key not written
};

inline GgufWriter &write_delta_net_keys(GgufWriter &w, const DeltaNetKeys &m) {
    const std::string a = m.arch + ".";
    w.str("general.architecture", m.arch);
    if (!m.name.empty()) w.str("general.name", m.name);
    w.u32(a + "block_count", m.block_count);
    if (m.nextn_predict_layers) w.u32(a + "nextn_predict_layers", m.nextn_predict_layers);
    w.u32(a + "ssm.conv_kernel", m.conv_kernel);
    w.u32(a + "ssm.state_size", m.state_size);
    w.u32(a + "ssm.group_count", m.group_count);
    w.u32(a + "ssm.time_step_rank", m.time_step_rank);
    w.u32(a + "ssm.inner_size", m.inner_size);
    if (m.full_attention_interval) w.u32(a + "full_attention_interval", m.full_attention_interval);
    return w;
}

// Qwen3.5-27B as llama.cpp converts it (config.json: 16 key heads, 48 value heads, head dims 128,
// conv kernel 4, 64 layers, full attention every 4th), plus a few keys of other types around it
// the way a real file has them.
inline GgufWriter qwen35_27b_metadata(uint32_t version = 3) {
    GgufWriter w(version);
    w.u32("general.alignment", 32);
    write_delta_net_keys(w, {"qwen35", "Qwen3.5-27B", 16, 48, 128, 48 * 128, 4, 64, 0, 4});
    w.u32("qwen35.embedding_length", 5120);
    w.f32("qwen35.attention.layer_norm_rms_epsilon", 1e-6f);
    w.array_i32("qwen35.rope.dimension_sections", {11, 11, 10, 0});
    return w;
}

// Qwen3-Next-80B-A3B as llama.cpp converts it (16 key heads, 32 value heads, head dims 128,
// conv kernel 4, 48 layers, full attention every 4th).
inline GgufWriter qwen3_next_80b_a3b_metadata(uint32_t version = 3) {
    GgufWriter w(version);
    write_delta_net_keys(w, {"qwen3next", "Qwen3-Next-80B-A3B-Instruct", 16, 32, 128, 32 * 128, 4, 48, 0, 4});
    w.u32("qwen3next.expert_count", 512);
    return w;
}

}  // namespace gdn::gguf::testing
