#include "arena.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define GDN_FUZZ_ASAN 1
#  endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#  define GDN_FUZZ_ASAN 1
#endif
#ifdef GDN_FUZZ_ASAN
#  include <sanitizer/asan_interface.h>
#endif

namespace gdn::fuzz {

Arena::Arena(size_t payload_bytes) : storage_(payload_bytes + 2 * kGuardBytes, 0xA5), payload_bytes_(payload_bytes) {
    set_guards_poisoned(true);
}

Arena::~Arena() { set_guards_poisoned(false); }

void Arena::set_guards_poisoned(bool poisoned) {
#ifdef GDN_FUZZ_ASAN
    uint8_t *front = storage_.data(), *back = storage_.data() + kGuardBytes + payload_bytes_;
    if (poisoned) {
        ASAN_POISON_MEMORY_REGION(front, kGuardBytes);
        ASAN_POISON_MEMORY_REGION(back, kGuardBytes);
    } else {
        ASAN_UNPOISON_MEMORY_REGION(front, kGuardBytes);
        ASAN_UNPOISON_MEMORY_REGION(back, kGuardBytes);
    }
#else
    (void)poisoned;
#endif
}

bool Arena::holds(const void *p, uint64_t bytes) const {
    const auto begin = reinterpret_cast<uintptr_t>(payload());
    const auto at = reinterpret_cast<uintptr_t>(p);
    return at >= begin && bytes <= payload_bytes_ && at - begin <= payload_bytes_ - bytes;
}

std::vector<uint8_t> Arena::snapshot() const {
    // The guards are poisoned under ASan: read them through an unpoisoned window.
    const_cast<Arena *>(this)->set_guards_poisoned(false);
    std::vector<uint8_t> copy = storage_;
    const_cast<Arena *>(this)->set_guards_poisoned(true);
    return copy;
}

int64_t Arena::first_change(const std::vector<uint8_t> &before, const std::vector<uint8_t> *writable) const {
    const std::vector<uint8_t> now = snapshot();
    for (size_t i = 0; i < now.size(); ++i) {
        if (now[i] == before[i]) continue;
        const bool in_payload = i >= kGuardBytes && i < kGuardBytes + payload_bytes_;
        if (in_payload && writable != nullptr && (*writable)[i - kGuardBytes]) continue;
        return static_cast<int64_t>(i) - static_cast<int64_t>(kGuardBytes);
    }
    return -1;
}

uint8_t *Arena::forbidden() {
    static uint8_t *region = [] {
        void *p = mmap(nullptr, kForbiddenBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            std::perror("mmap");
            std::abort();
        }
        return static_cast<uint8_t *>(p);
    }();
    return region;
}

}  // namespace gdn::fuzz
