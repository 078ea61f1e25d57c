#include "cpu/paced_prefetch.h"

#include "core/tensor.h"
#include "cpu/typed_rows.h"

namespace gdn::cpu {

void PacedPrefetch::start(int steps) {
    lines_.clear();
    next_ = 0;
    steps_left_ = steps > 0 ? steps : 1;
}

void PacedPrefetch::add_rows(const gdn_tensor *t, int64_t i1, int64_t t_begin, int64_t t_end, int64_t i3,
                             int64_t row_elements) {
    if (t == nullptr) return;
    constexpr uintptr_t line = 64;
    const int64_t bytes = row_bytes(*t, row_elements);
    for (int64_t r = t_begin; r < t_end; ++r) {
        // Every line the row touches: it need not start on a line boundary.
        const uintptr_t p = reinterpret_cast<uintptr_t>(element_ptr(*t, 0, i1, r, i3));
        for (uintptr_t a = p & ~(line - 1); a < p + static_cast<uintptr_t>(bytes); a += line)
            lines_.push_back(reinterpret_cast<const char *>(a));
    }
}

void PacedPrefetch::step() {
    const size_t left = lines_.size() - next_;
    const size_t share = steps_left_ > 1 ? (left + steps_left_ - 1) / steps_left_ : left;
    for (size_t i = 0; i < share; ++i) __builtin_prefetch(lines_[next_ + i], 0, 3);
    next_ += share;
    if (steps_left_ > 1) --steps_left_;
}

void PacedPrefetch::finish() {
    for (; next_ < lines_.size(); ++next_) __builtin_prefetch(lines_[next_], 0, 3);
}

}  // namespace gdn::cpu
