#include "tensor_set.h"

#include <cstring>
#include <stdexcept>

#include "math/elements.h"

namespace gdn::testkit {

size_t TensorSet::type_size(gdn_type type) {
    switch (type) {
        case GDN_TYPE_F64:
        case GDN_TYPE_I64: return 8;
        case GDN_TYPE_F16:
        case GDN_TYPE_BF16: return 2;
        default: return 4;
    }
}

int TensorSet::add_buffer(size_t bytes) {
    Buffer b;
    b.bytes = bytes;
    b.storage.assign(bytes + 2 * kGuardBytes, kPoison);
    buffers_.push_back(std::move(b));
    return static_cast<int>(buffers_.size()) - 1;
}

void TensorSet::add_tensor(const std::string &name, const int64_t ne[4], bool padded, bool swap01,
                           std::optional<gdn_type> type) {
    View v;
    v.type = stored_type(type.value_or(default_type()));
    const auto es = static_cast<int64_t>(type_size(v.type));
    const int order[4] = {swap01 ? 1 : 0, swap01 ? 0 : 1, 2, 3};  // dimensions from innermost out
    v.nb[order[0]] = es;
    int64_t stride = ne[order[0]] * es + (padded ? 3 * es : 0);
    for (int d = 1; d < 4; ++d) {
        v.nb[order[d]] = stride;
        stride = stride * ne[order[d]] + (padded ? (2 * d + 1) * es : 0);
    }
    for (int d = 0; d < 4; ++d) v.ne[d] = ne[d];
    int64_t span = es;
    for (int d = 0; d < 4; ++d) span += (ne[d] - 1) * v.nb[d];
    v.buffer = add_buffer(static_cast<size_t>(span));
    add_view(name, v);
}

void TensorSet::add_view(const std::string &name, const View &view) {
    View v = view;
    v.type = stored_type(view.type);
    views_[name] = v;
}

gdn_tensor TensorSet::at(const std::string &name, const std::vector<uint8_t *> &bases) const {
    gdn_tensor t{};
    t.type = default_type();
    auto it = views_.find(name);
    if (it == views_.end()) return t;
    const View &v = it->second;
    t.type = v.type;
    t.data = bases[v.buffer] + v.offset;
    for (int d = 0; d < 4; ++d) {
        t.ne[d] = v.ne[d];
        t.nb[d] = v.nb[d];
    }
    return t;
}

gdn_tensor TensorSet::host(const std::string &name) const {
    std::vector<uint8_t *> bases;
    for (const Buffer &b : buffers_) bases.push_back(const_cast<uint8_t *>(b.base()));
    return at(name, bases);
}

namespace {

template <class Fn>
void for_each_element(const gdn_tensor &t, Fn &&fn) {
    for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < t.ne[0]; ++i0)
                    fn(static_cast<uint8_t *>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3]);
}

}  // namespace

uint64_t TensorSet::bits_hash(const std::string &name) const {
    const gdn_tensor t = host(name);
    const size_t size = type_size(t.type);
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for_each_element(t, [&](const uint8_t *p) {
        uint64_t bits = 0;
        std::memcpy(&bits, p, size);
        h = (h ^ bits) * 0xBF58476D1CE4E5B9ull;  // a multiply-xorshift mix per element
        h ^= h >> 31;
    });
    return h;
}

std::vector<double> TensorSet::read(const std::string &name) const {
    const gdn_tensor t = host(name);
    std::vector<double> out;
    if (!t.data) return out;
    out.reserve(static_cast<size_t>(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]));
    for_each_element(t, [&](const uint8_t *p) {
        double x;
        load_elements(t.type, p, 1, &x);
        out.push_back(x);
    });
    return out;
}

void TensorSet::write(const std::string &name, const std::vector<double> &values) {
    const gdn_tensor t = host(name);
    size_t n = 0;
    for_each_element(t, [&](uint8_t *p) {
        const double x = values.at(n++);
        store_elements(t.type, p, 1, &x);
    });
}

double *TensorSet::element_f64(const std::string &name, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    if (type_ != GDN_TYPE_F64) throw std::logic_error("element_f64 on a non-F64 set");
    const gdn_tensor t = host(name);
    return reinterpret_cast<double *>(static_cast<uint8_t *>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] +
                                      i3 * t.nb[3]);
}

void TensorSet::poison() {
    for (Buffer &b : buffers_) std::memset(b.storage.data(), kPoison, b.storage.size());
}

std::string TensorSet::changed_outside_views() const {
    for (size_t bi = 0; bi < buffers_.size(); ++bi) {
        const Buffer &b = buffers_[bi];
        std::vector<bool> covered(b.storage.size(), false);
        for (const auto &[name, v] : views_) {
            if (v.buffer != static_cast<int>(bi)) continue;
            const gdn_tensor t = host(name);
            const size_t es = type_size(v.type);
            for_each_element(t, [&](const uint8_t *p) {
                const size_t at = static_cast<size_t>(p - b.storage.data());
                for (size_t k = 0; k < es; ++k) covered[at + k] = true;
            });
        }
        for (size_t i = 0; i < b.storage.size(); ++i)
            if (!covered[i] && b.storage[i] != kPoison) {
                const long long offset = static_cast<long long>(i) - static_cast<long long>(kGuardBytes);
                std::string where;
                for (const auto &[name, v] : views_)
                    if (v.buffer == static_cast<int>(bi)) where += (where.empty() ? "" : ",") + name;
                return "byte " + std::to_string(offset) + " of the buffer of " + where +
                       (offset < 0 || offset >= static_cast<long long>(b.bytes) ? " (guard zone)" : " (gap between elements)") +
                       " was written";
            }
    }
    return "";
}

Mirror::Mirror(TensorSet &set, Memory &memory) : set_(set), memory_(memory) {
    for (size_t b = 0; b < set.buffer_count(); ++b) {
        uint8_t *storage = memory.is_host() ? set.storage(static_cast<int>(b))
                                            : static_cast<uint8_t *>(memory.allocate(set.storage_bytes(static_cast<int>(b))));
        storage_.push_back(storage);
        bases_.push_back(storage + TensorSet::kGuardBytes);
    }
}

Mirror::~Mirror() {
    if (!memory_.is_host())
        for (uint8_t *p : storage_) memory_.release(p);
}

void Mirror::upload() {
    if (memory_.is_host()) return;
    for (size_t b = 0; b < storage_.size(); ++b)
        memory_.upload(storage_[b], set_.storage(static_cast<int>(b)), set_.storage_bytes(static_cast<int>(b)));
}

void Mirror::download() {
    if (memory_.is_host()) return;
    memory_.synchronize();
    for (size_t b = 0; b < storage_.size(); ++b)
        memory_.download(set_.storage(static_cast<int>(b)), storage_[b], set_.storage_bytes(static_cast<int>(b)));
}

}  // namespace gdn::testkit
