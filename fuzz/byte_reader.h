// Reads a fuzz input as a stream of small integers. Past the end every read returns 0, so a
// short input is a complete description too (its missing tail means "the defaults").
#pragma once

#include <cstddef>
#include <cstdint>

namespace gdn::fuzz {

class ByteReader {
public:
    ByteReader(const uint8_t *data, size_t size) : data_(data), size_(size) {}

    uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
    uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
    uint64_t u64() {
        uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(u8()) << (8 * i);
        return v;
    }
    // A value in [0, n): n must be positive.
    int below(int n) { return u8() % n; }
    bool bit() { return (u8() & 1) != 0; }
    bool done() const { return pos_ >= size_; }

private:
    const uint8_t *data_;
    size_t size_;
    size_t pos_ = 0;
};

}  // namespace gdn::fuzz
