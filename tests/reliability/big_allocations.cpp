#include "big_allocations.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

std::atomic<size_t> g_largest{0};

void note(size_t bytes) {
    size_t seen = g_largest.load(std::memory_order_relaxed);
    while (bytes > seen && !g_largest.compare_exchange_weak(seen, bytes, std::memory_order_relaxed)) {
    }
}

void *allocate(size_t bytes) {
    note(bytes);
    if (void *p = std::malloc(bytes ? bytes : 1)) return p;
    throw std::bad_alloc();
}

void *allocate_aligned(size_t bytes, std::align_val_t align) {
    note(bytes);
    const auto a = static_cast<size_t>(align);
    if (void *p = std::aligned_alloc(a, (bytes + a - 1) / a * a)) return p;
    throw std::bad_alloc();
}

}  // namespace

namespace gdn::reliability {

LargestAllocation::LargestAllocation() { g_largest.store(0); }
size_t LargestAllocation::bytes() const { return g_largest.load(); }

}  // namespace gdn::reliability

// The replaceable global allocation functions (C++ [new.delete]).
void *operator new(size_t bytes) { return allocate(bytes); }
void *operator new[](size_t bytes) { return allocate(bytes); }
void *operator new(size_t bytes, std::align_val_t a) { return allocate_aligned(bytes, a); }
void *operator new[](size_t bytes, std::align_val_t a) { return allocate_aligned(bytes, a); }
void *operator new(size_t bytes, const std::nothrow_t &) noexcept {
    note(bytes);
    return std::malloc(bytes ? bytes : 1);
}
void *operator new[](size_t bytes, const std::nothrow_t &) noexcept {
    note(bytes);
    return std::malloc(bytes ? bytes : 1);
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, size_t) noexcept { std::free(p); }
void operator delete[](void *p, size_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, size_t, std::align_val_t) noexcept { std::free(p); }
