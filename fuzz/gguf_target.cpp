#include "gguf_target.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "gguf/gguf.h"
#include "gguf/model_shape.h"

namespace gdn::fuzz {
namespace {

GgufTally g_tally;

[[noreturn]] void finding(const std::string &what) {
    std::fprintf(stderr, "\n==== gdn gguf fuzz finding: %s\n", what.c_str());
    std::fflush(stderr);
    std::abort();
}

using gguf::Limits;
using gguf::Value;
using gguf::ValueType;

// Bytes a value keeps, and checks on what an array keeps. `depth`: arrays enclosing v, v included.
uint64_t kept_bytes(const Value &v, int depth) {
    if (v.type == ValueType::ARRAY && depth > Limits::max_array_depth) finding("arrays nested deeper than max_array_depth were kept");
    (void)v.to_string();  // must be printable whatever it holds
    uint64_t bytes = v.str.size();
    if (v.type == ValueType::STRING && v.kept && v.str.size() != v.length) finding("a kept string's length differs from its bytes");
    if (v.type == ValueType::ARRAY) {
        if (v.kept && v.items.size() != v.length) finding("a kept array's count differs from its items");
        if (v.items.size() > Limits::max_kept_array_items) finding("an array longer than max_kept_array_items was kept");
        for (const Value &item : v.items) {
            if (item.type != v.item_type) finding("an array item's type differs from the array's item type");
            bytes += sizeof(Value) + kept_bytes(item, item.type == ValueType::ARRAY ? depth + 1 : depth);
        }
    }
    return bytes;
}

}  // namespace

const GgufTally &gguf_tally() { return g_tally; }

void run_gguf_input(const uint8_t *data, size_t size) {
    ++g_tally.inputs;
    gguf::Metadata md;
    std::string error;
    if (!gguf::read_metadata_from_bytes(data, size, "fuzz-input", md, error)) {
        if (error.empty()) finding("read_metadata failed without a message");
        if (!md.entries.empty() || md.version != 0) finding("read_metadata failed but left metadata behind: " + error);
        ++g_tally.refused;
        return;
    }
    ++g_tally.read;
    if (md.version != 2 && md.version != 3) finding("accepted GGUF version " + std::to_string(md.version));
    if (md.entries.size() > Limits::max_kv_count) finding("more entries than max_kv_count");
    std::set<std::string> keys;
    uint64_t bytes = 0;
    for (const auto &[key, value] : md.entries) {
        if (key.size() > Limits::max_key_bytes) finding("a key longer than max_key_bytes");
        if (!keys.insert(key).second) finding("duplicate key kept: " + key);
        if (md.find(key) != &value) finding("find() does not return the entry for " + key);
        bytes += key.size() + kept_bytes(value, value.type == ValueType::ARRAY ? 1 : 0);
    }
    // Summaries past the cap may each add a little; an order of magnitude over is a broken cap.
    if (bytes > 2 * Limits::max_kept_bytes) finding("kept " + std::to_string(bytes) + " bytes, over max_kept_bytes");
    // Every kept item or byte stands for at least one byte of the file.
    if (bytes > (sizeof(Value) + 16) * size + 4096) finding("kept " + std::to_string(bytes) + " bytes from a " + std::to_string(size) + "-byte input");

    gguf::ModelShape shape;
    std::string why;
    if (!gguf::model_shape_from_metadata(md, shape, why)) {
        if (why.empty()) finding("model_shape_from_metadata failed without a message");
        return;
    }
    if (shape.Sk < 1 || shape.Sv < 1 || shape.Hk < 1 || shape.Hv < 1 || shape.Hv % shape.Hk != 0)
        finding("derived an impossible shape " + shape.dims_string());
    if (shape.conv_dim != 2 * shape.Hk * shape.Sk + shape.Hv * shape.Sv) finding("conv_dim inconsistent: " + shape.dims_string());
    (void)shape.dims_string();
    ++g_tally.shapes;
}

}  // namespace gdn::fuzz
