// Storage for the chunk math's scratch buffers: a std::vector whose elements start on a 64-byte
// boundary (a cache line, and one AVX-512 vector). The default allocator aligns to 16 bytes, so
// a buffer's rows of 128 floats started anywhere in a line and every 512-bit load or store of
// them touched two lines; on a 64-byte boundary a row's vectors each fall in one line. Only the
// addresses change: the arithmetic, and so the bits, are the same.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace gdn::cpu {

constexpr std::size_t kCacheLineBytes = 64;

template <class T>
struct CacheLineAllocator {
    using value_type = T;
    CacheLineAllocator() = default;
    template <class U>
    CacheLineAllocator(const CacheLineAllocator<U> &) {}
    T *allocate(std::size_t n) {
        return static_cast<T *>(::operator new(n * sizeof(T), std::align_val_t{kCacheLineBytes}));
    }
    void deallocate(T *p, std::size_t) { ::operator delete(p, std::align_val_t{kCacheLineBytes}); }
    template <class U>
    bool operator==(const CacheLineAllocator<U> &) const { return true; }
    template <class U>
    bool operator!=(const CacheLineAllocator<U> &) const { return false; }
};

// A std::vector<T> with 64-byte aligned data().
template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace gdn::cpu
