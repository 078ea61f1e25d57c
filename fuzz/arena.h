// The memory a fuzzed call's tensors live in: one payload with guard zones on both sides, and a
// separate inaccessible region for pointers that must never be dereferenced.
//
// Under AddressSanitizer the guard zones are poisoned, so a read (not only a write) past a
// tensor's last byte into them stops the run at once. The "forbidden" region is mapped with
// PROT_NONE: a tensor pointing there may only be refused, any access faults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gdn::fuzz {

class Arena {
public:
    static constexpr size_t kGuardBytes = 256;

    explicit Arena(size_t payload_bytes);
    ~Arena();
    Arena(const Arena &) = delete;
    Arena &operator=(const Arena &) = delete;

    uint8_t *payload() { return storage_.data() + kGuardBytes; }
    const uint8_t *payload() const { return storage_.data() + kGuardBytes; }
    size_t payload_bytes() const { return payload_bytes_; }
    // Whether [p, p + bytes) lies inside the payload.
    bool holds(const void *p, uint64_t bytes) const;

    // Every byte, guards included, for before/after comparisons.
    std::vector<uint8_t> snapshot() const;
    // Offset of the first byte that differs from `before` outside the bytes marked in
    // `writable` (indexed like the payload); -1 when none. Guard bytes are never writable.
    int64_t first_change(const std::vector<uint8_t> &before, const std::vector<uint8_t> *writable) const;

    // A page-aligned region no access may touch.
    static uint8_t *forbidden();
    static constexpr size_t kForbiddenBytes = 1 << 16;

private:
    void set_guards_poisoned(bool poisoned);

    std::vector<uint8_t> storage_;
    size_t payload_bytes_;
};

}  // namespace gdn::fuzz
