#include "big_allocations.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace {

std::atomic<size_t> g_largest{0};
std::atomic<size_t> g_refused_over{SIZE_MAX};

void note(size_t bytes) {
    size_t seen = g_largest.load(std::memory_order_relaxed);
    while (bytes > seen && !g_largest.compare_exchange_weak(seen, bytes, std::memory_order_relaxed)) {
    }
}

bool refused(size_t bytes) { return bytes > g_refused_over.load(std::memory_order_relaxed); }

void *allocate(size_t bytes) {
    note(bytes);
    if (refused(bytes)) throw std::bad_alloc();
    if (void *p = std::malloc(bytes ? bytes : 1)) return p;
    throw std::bad_alloc();
}

void *allocate_aligned(size_t bytes, std::align_val_t align) {
    note(bytes);
    if (refused(bytes)) throw std::bad_alloc();
    const auto a = static_cast<size_t>(align);
    if (void *p = std::aligned_alloc(a, (bytes + a - 1) / a * a)) return p;
    throw std::bad_alloc();
}

void *allocate_nothrow(size_t bytes) {
    note(bytes);
    return refused(bytes) ? nullptr : std::malloc(bytes ? bytes : 1);
}

}  // namespace

namespace gdn::reliability {

LargestAllocation::LargestAllocation() { g_largest.store(0); }
size_t LargestAllocation::bytes() const { return g_largest.load(); }

RefuseAllocationsOver::RefuseAllocationsOver(size_t bytes) { g_refused_over.store(bytes); }
RefuseAllocationsOver::~RefuseAllocationsOver() { g_refused_over.store(SIZE_MAX); }

}  // namespace gdn::reliability

// The replaceable global allocation functions (C++ [new.delete]).
void *operator new(size_t bytes) { return allocate(bytes); }
void *operator new[](size_t bytes) { return allocate(bytes); }
void *operator new(size_t bytes, std::align_val_t a) { return allocate_aligned(bytes, a); }
void *operator new[](size_t bytes, std::align_val_t a) { return allocate_aligned(bytes, a); }
void *operator new(size_t bytes, const std::nothrow_t &) noexcept { return allocate_nothrow(bytes); }
void *operator new[](size_t bytes, const std::nothrow_t &) noexcept { return allocate_nothrow(bytes); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, size_t) noexcept { std::free(p); }
void operator delete[](void *p, size_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, size_t, std::align_val_t) noexcept { std::free(p); }
