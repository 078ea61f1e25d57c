// The next chunk's token rows asked for a few cache lines at a time while this chunk computes.
//
// The rows of the caller's q/k/v/g/beta tensors are a token stride apart (24-40 KiB at the model
// shapes), so no hardware prefetcher follows them, and asking for a whole chunk's rows at once
// (about 1500 lines for a 32-token chunk of the 27B forward) issues far more prefetches than the
// core has line-fill buffers: most wait or are dropped, and the burst stalls the product that
// runs beside it. Queued here and issued in equal shares at the steps of the chunk's work, the
// same lines arrive with a few in flight at any time. Prefetches change no values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/chunk_core.h"  // Pages
#include "gdn/gdn.h"

namespace gdn::cpu {

class PacedPrefetch {
public:
    // Room for `rows` queued rows, so that queueing allocates nothing during a call.
    void reserve(int64_t rows) { rows_.reserve(static_cast<size_t>(rows)); }
    uint64_t bytes() const { return rows_.capacity() * sizeof(Row); }
    // Empties the queue; the next `steps` calls of step() issue it (the last one all that is left).
    void start(int steps);
    // Queues every cache line of rows [t_begin, t_end) of tensor t (nullptr: none) at (i1, i3),
    // row_elements elements each, in that order. Pages::Read: as prefetch_rows (chunk_core.h), a
    // row's first line on a page new to the queue is read, not prefetched, when its turn comes.
    void add_rows(const gdn_tensor *t, int64_t i1, int64_t t_begin, int64_t t_end, int64_t i3, int64_t row_elements,
                  Pages pages = Pages::Prefetched);
    // Issues the next share of the queue: what is left over the steps left.
    void step();
    // Issues whatever is left.
    void finish();

private:
    // A row's lines: `lines` of them from `first` (a line address); with `read` set, the row's
    // first element (at `read`, element-aligned) is read instead of its first line prefetched.
    struct Row {
        uintptr_t first, read;
        int64_t lines;
    };
    std::vector<Row> rows_;
    int64_t queued_ = 0, issued_ = 0;  // lines
    size_t row_ = 0;                   // the row the next line is in
    int64_t line_ = 0;                 // and its index there
    uintptr_t last_page_ = 0;
    int steps_left_ = 0;
    void issue(int64_t lines);
};

}  // namespace gdn::cpu
