// Named tensors laid out in host buffers with guard zones, the way a harness run needs them:
// contiguous or strided views (several may share one packed buffer), poisoned before a call
// and checked after it, and mirrored into another memory (a CUDA device) byte for byte.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cpu/aligned_vector.h"
#include "gdn/gdn.h"
#include "memory.h"

namespace gdn::testkit {

struct View {
    gdn_type type = GDN_TYPE_F32;  // the element type of this tensor
    int buffer = 0;
    size_t offset = 0;  // bytes from the buffer's start
    int64_t ne[4] = {1, 1, 1, 1};
    int64_t nb[4] = {0, 0, 0, 0};
};

class TensorSet {
public:
    static constexpr size_t kGuardBytes = 64;
    static constexpr uint8_t kPoison = 0xFF;  // all-ones: a NaN in F32, F64, BF16 and F16

    // `type`: what the set holds. F64: every tensor F64 (the oracle's twin of a case); any other:
    // each tensor in the element type it is added with (by default F32).
    explicit TensorSet(gdn_type type) : type_(type) {}

    gdn_type type() const { return type_; }
    // Bytes of an element of the set's default type (8 for F64, else 4).
    size_t element_size() const { return type_size(default_type()); }
    static size_t type_size(gdn_type type);
    // The type a tensor gets when none is given: F64 in an F64 set, else F32.
    gdn_type default_type() const { return type_ == GDN_TYPE_F64 ? GDN_TYPE_F64 : GDN_TYPE_F32; }
    // The type a tensor that a case wants in `wanted` gets in this set: F64 in an F64 set.
    gdn_type stored_type(gdn_type wanted) const { return type_ == GDN_TYPE_F64 ? GDN_TYPE_F64 : wanted; }

    int add_buffer(size_t bytes);
    // A tensor in a buffer of its own: contiguous, or with gaps after every row and outer
    // dimension when `padded` (so that strides differ from a contiguous layout). `swap01`: the
    // first two dimensions in the other order in memory (nb[1] = element size: a state tensor
    // [Sk, Sv, Hv, *] value-major). `type`: its element type (default_type() when not given;
    // an F64 set stores F64 whatever is asked).
    void add_tensor(const std::string &name, const int64_t ne[4], bool padded, bool swap01 = false,
                    std::optional<gdn_type> type = std::nullopt);
    void add_view(const std::string &name, const View &view);

    bool has(const std::string &name) const { return views_.count(name) != 0; }
    // The tensor at its host address; absent names give a tensor with data == NULL.
    gdn_tensor host(const std::string &name) const;
    gdn_tensor at(const std::string &name, const std::vector<uint8_t *> &buffer_bases) const;

    gdn_type type_of(const std::string &name) const { return views_.at(name).type; }

    // Element access on the host copy, in ne order (i0 fastest), as doubles: BF16 and F16 read
    // exactly, written rounded once to nearest (src/math/elements.h, the library's definition).
    std::vector<double> read(const std::string &name) const;
    // A 64-bit hash of the tensor's element bits in ne order (equal bits, equal hashes; any change
    // to an element's bits changes it but with negligible chance), without a copy of the values.
    uint64_t bits_hash(const std::string &name) const;
    void write(const std::string &name, const std::vector<double> &values);
    double *element_f64(const std::string &name, int64_t i0, int64_t i1, int64_t i2, int64_t i3);

    void poison();
    // Describes the first byte outside every view (guard zones and gaps) that is no longer
    // poison; "" when all are intact. Call after poison() and a call that wrote the views.
    std::string changed_outside_views() const;

    size_t buffer_count() const { return buffers_.size(); }
    size_t buffer_bytes(int b) const { return buffers_[b].bytes; }
    uint8_t *buffer_data(int b) { return buffers_[b].base(); }
    const uint8_t *buffer_data(int b) const { return buffers_[b].base(); }
    // Storage including the guard zones, for mirroring.
    uint8_t *storage(int b) { return buffers_[b].storage.data(); }
    size_t storage_bytes(int b) const { return buffers_[b].storage.size(); }
    const std::map<std::string, View> &views() const { return views_; }

private:
    struct Buffer {
        // guard | bytes | guard, on a 64-byte boundary (and kGuardBytes is 64): the tensors start
        // where an ML framework's allocations do, so that a backend is timed and tested on the
        // alignment real callers give it (malloc's 16 bytes put every 512-bit row access across
        // two cache lines).
        cpu::AlignedVector<uint8_t> storage;
        size_t bytes = 0;
        uint8_t *base() { return storage.data() + kGuardBytes; }
        const uint8_t *base() const { return storage.data() + kGuardBytes; }
    };
    gdn_type type_;
    std::vector<Buffer> buffers_;
    std::map<std::string, View> views_;
};

// A TensorSet's buffers in some memory: for host memory the same bytes, else copies.
class Mirror {
public:
    Mirror(TensorSet &set, Memory &memory);
    ~Mirror();
    Mirror(const Mirror &) = delete;
    Mirror &operator=(const Mirror &) = delete;

    gdn_tensor tensor(const std::string &name) const { return set_.at(name, bases_); }
    void upload();    // host -> memory (whole buffers with guards)
    void download();  // memory -> host

private:
    TensorSet &set_;
    Memory &memory_;
    std::vector<uint8_t *> storage_;  // per buffer, in memory_
    std::vector<uint8_t *> bases_;    // storage + guard
};

}  // namespace gdn::testkit
