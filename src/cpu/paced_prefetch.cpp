#include "cpu/paced_prefetch.h"

#include "core/tensor.h"
#include "cpu/typed_rows.h"

namespace gdn::cpu {

void PacedPrefetch::start(int steps) {
    lines_.clear();
    next_ = 0;
    steps_left_ = steps > 0 ? steps : 1;
    last_page_ = 0;
}

void PacedPrefetch::add_rows(const gdn_tensor *t, int64_t i1, int64_t t_begin, int64_t t_end, int64_t i3,
                             int64_t row_elements, Pages pages) {
    if (t == nullptr) return;
    constexpr uintptr_t line = 64;
    constexpr int page_bits = 12;  // 4 KiB pages
    const int64_t bytes = row_bytes(*t, row_elements);
    for (int64_t r = t_begin; r < t_end; ++r) {
        // Every line the row touches: it need not start on a line boundary.
        const uintptr_t p = reinterpret_cast<uintptr_t>(element_ptr(*t, 0, i1, r, i3)), first = p & ~(line - 1);
        const uintptr_t page = p >> page_bits;
        const bool read = pages == Pages::Read && page != last_page_;
        last_page_ = page;
        // The read is of the row's first element, not its line's start, which may lie before the
        // tensor (p is element-aligned, so bit 0 is free to mark it).
        for (uintptr_t a = first; a < p + static_cast<uintptr_t>(bytes); a += line)
            lines_.push_back(a == first && read ? p | 1 : a);
    }
}

namespace {
void issue(uintptr_t a) {
    // A read waits on memory, and so puts the page's translation in the TLB for the prefetches
    // of the row's other lines (a prefetch that misses the TLB was seen not to bring its line).
    if (a & 1) (void)*reinterpret_cast<const volatile char *>(a & ~uintptr_t{1});
    else __builtin_prefetch(reinterpret_cast<const char *>(a), 0, 3);
}
}  // namespace

void PacedPrefetch::step() {
    const size_t left = lines_.size() - next_;
    const size_t share = steps_left_ > 1 ? (left + steps_left_ - 1) / steps_left_ : left;
    for (size_t i = 0; i < share; ++i) issue(lines_[next_ + i]);
    next_ += share;
    if (steps_left_ > 1) --steps_left_;
}

void PacedPrefetch::finish() {
    for (; next_ < lines_.size(); ++next_) issue(lines_[next_]);
}

}  // namespace gdn::cpu
