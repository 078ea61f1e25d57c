#include "cpu/paced_prefetch.h"

#include <algorithm>

#include "core/tensor.h"
#include "cpu/typed_rows.h"

namespace gdn::cpu {

void PacedPrefetch::start(int steps) {
    rows_.clear();
    queued_ = issued_ = 0;
    row_ = 0;
    line_ = 0;
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
        // tensor.
        const int64_t lines = static_cast<int64_t>((p + static_cast<uintptr_t>(bytes) - first + line - 1) / line);
        rows_.push_back({first, read ? p : 0, lines});
        queued_ += lines;
    }
}

void PacedPrefetch::issue(int64_t lines) {
    constexpr uintptr_t line = 64;
    issued_ += lines;
    while (lines > 0) {
        const Row &r = rows_[row_];
        const int64_t n = std::min(lines, r.lines - line_);
        for (int64_t i = line_; i < line_ + n; ++i) {
            // A read waits on memory, and so puts the page's translation in the TLB for the
            // prefetches of the row's other lines (a prefetch that misses the TLB was seen not to
            // bring its line).
            if (i == 0 && r.read) (void)*reinterpret_cast<const volatile char *>(r.read);
            else __builtin_prefetch(reinterpret_cast<const char *>(r.first + uintptr_t(i) * line), 0, 3);
        }
        lines -= n;
        line_ += n;
        if (line_ == r.lines) {
            ++row_;
            line_ = 0;
        }
    }
}

void PacedPrefetch::step() {
    const int64_t left = queued_ - issued_;
    issue(steps_left_ > 1 ? (left + steps_left_ - 1) / steps_left_ : left);
    if (steps_left_ > 1) --steps_left_;
}

void PacedPrefetch::finish() { issue(queued_ - issued_); }

}  // namespace gdn::cpu
