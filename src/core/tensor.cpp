#include "core/tensor.h"

#include <algorithm>
#include <array>
#include <vector>

namespace gdn {

size_t type_size(gdn_type type) {
    switch (type) {
        case GDN_TYPE_F32: return 4;
        case GDN_TYPE_F64: return 8;
        case GDN_TYPE_F16: return 2;
        case GDN_TYPE_BF16: return 2;
        case GDN_TYPE_I32: return 4;
        case GDN_TYPE_I64: return 8;
    }
    return 0;
}

const char *type_name(gdn_type type) {
    switch (type) {
        case GDN_TYPE_F32: return "F32";
        case GDN_TYPE_F64: return "F64";
        case GDN_TYPE_F16: return "F16";
        case GDN_TYPE_BF16: return "BF16";
        case GDN_TYPE_I32: return "I32";
        case GDN_TYPE_I64: return "I64";
    }
    return "unknown";
}

int64_t element_count(const gdn_tensor &t) {
    int64_t count = 1;
    for (int d = 0; d < 4; ++d) {
        if (t.ne[d] < 0 || __builtin_mul_overflow(count, t.ne[d], &count)) return -1;
    }
    return count;
}

int64_t byte_span(const gdn_tensor &t) {
    if (element_count(t) == 0) return 0;
    int64_t span = static_cast<int64_t>(type_size(t.type));
    for (int d = 0; d < 4; ++d) {
        int64_t step = 0;
        if (__builtin_mul_overflow(t.ne[d] - 1, t.nb[d], &step) || __builtin_add_overflow(span, step, &span)) return -1;
    }
    return span;
}

ByteRange byte_range(const gdn_tensor &t) {
    const auto begin = reinterpret_cast<uintptr_t>(t.data);
    return {begin, begin + static_cast<uintptr_t>(byte_span(t))};
}

namespace {

// The tensor as rows: each row is the contiguous dimension's elements (dim 0, or dim 1 of a
// value-major state), `row_bytes` long; row starts are base + sum over the other three
// dimensions of i_d * nb[d].
struct Rows {
    uintptr_t base;
    int64_t row_bytes;
    std::array<int64_t, 3> count;   // ne of the other dimensions
    std::array<int64_t, 3> stride;  // nb of the other dimensions
};

Rows rows_of(const gdn_tensor &t) {
    const int row = keys_contiguous(t) || t.nb[1] != static_cast<int64_t>(type_size(t.type)) ? 0 : 1, other = 1 - row;
    return {reinterpret_cast<uintptr_t>(t.data), t.ne[row] * static_cast<int64_t>(type_size(t.type)),
            {t.ne[other], t.ne[2], t.ne[3]}, {t.nb[other], t.nb[2], t.nb[3]}};
}

// With the outer dimensions sorted by stride, each stride at least the span of the dimensions
// inside it: a sufficient condition for rows not to overlap.
bool nested_without_overlap(const Rows &r) {
    std::array<int, 3> order = {0, 1, 2};
    std::sort(order.begin(), order.end(), [&](int a, int b) { return r.stride[a] < r.stride[b]; });
    int64_t inner_span = r.row_bytes;
    for (int d : order) {
        if (r.count[d] == 1) continue;
        if (r.stride[d] < inner_span) return false;
        inner_span += (r.count[d] - 1) * r.stride[d];
    }
    return true;
}

constexpr int64_t kMaxEnumeratedRows = int64_t{1} << 22;

int64_t row_count(const Rows &r) { return r.count[0] * r.count[1] * r.count[2]; }

struct Interval {
    uintptr_t begin, end;
    int owner;
};

void append_rows(const Rows &r, int owner, std::vector<Interval> &out) {
    for (int64_t i3 = 0; i3 < r.count[2]; ++i3)
        for (int64_t i2 = 0; i2 < r.count[1]; ++i2)
            for (int64_t i1 = 0; i1 < r.count[0]; ++i1) {
                const uintptr_t begin = r.base + i1 * r.stride[0] + i2 * r.stride[1] + i3 * r.stride[2];
                out.push_back({begin, begin + static_cast<uintptr_t>(r.row_bytes), owner});
            }
}

// Whether two intervals with the given owners intersect (owner -1 matches any pair).
bool any_intersection(std::vector<Interval> &rows, bool across_owners_only) {
    std::sort(rows.begin(), rows.end(), [](const Interval &a, const Interval &b) { return a.begin < b.begin; });
    // Track the furthest end reached by each owner so far: an interval overlaps an earlier one
    // exactly when it starts before that earlier one's end.
    uintptr_t reach[2] = {0, 0};
    bool seen[2] = {false, false};
    for (const Interval &iv : rows) {
        for (int o = 0; o < 2; ++o) {
            if (!seen[o]) continue;
            if (across_owners_only && o == iv.owner) continue;
            if (iv.begin < reach[o]) return true;
        }
        reach[iv.owner] = seen[iv.owner] ? std::max(reach[iv.owner], iv.end) : iv.end;
        seen[iv.owner] = true;
    }
    return false;
}

// The tensor folded modulo `period`: the arc [start, start + length) on a circle of that
// circumference that holds every byte, when every stride that is not a multiple of the period
// stays inside one period.
bool fold(const Rows &r, int64_t period, int64_t &start, int64_t &length) {
    int64_t span = r.row_bytes;
    for (int d = 0; d < 3; ++d) {
        if (r.count[d] == 1 || r.stride[d] % period == 0) continue;
        span += (r.count[d] - 1) * r.stride[d];
    }
    if (span > period) return false;
    start = static_cast<int64_t>(r.base % static_cast<uintptr_t>(period));
    length = span;
    return true;
}

bool arcs_intersect(int64_t a, int64_t a_len, int64_t b, int64_t b_len, int64_t period) {
    // Distance from a forward to b on the circle, and from b forward to a.
    const int64_t a_to_b = ((b - a) % period + period) % period;
    const int64_t b_to_a = ((a - b) % period + period) % period;
    return a_to_b < a_len || b_to_a < b_len;
}

}  // namespace

bool self_overlaps(const gdn_tensor &t) {
    if (element_count(t) == 0) return false;
    const Rows r = rows_of(t);
    if (nested_without_overlap(r)) return false;
    if (row_count(r) > kMaxEnumeratedRows) return true;
    std::vector<Interval> rows;
    append_rows(r, 0, rows);
    return any_intersection(rows, false);
}

bool overlaps(const gdn_tensor &a, const gdn_tensor &b) {
    if (element_count(a) == 0 || element_count(b) == 0) return false;
    const ByteRange ra = byte_range(a), rb = byte_range(b);
    if (ra.end <= rb.begin || rb.end <= ra.begin) return false;
    const Rows rows_a = rows_of(a), rows_b = rows_of(b);
    // Views into one packed buffer share their outer strides: fold both at each candidate period.
    for (const Rows *r : {&rows_a, &rows_b}) {
        for (int d = 0; d < 3; ++d) {
            const int64_t period = r->stride[d];
            if (period <= 0) continue;
            int64_t sa, la, sb, lb;
            if (fold(rows_a, period, sa, la) && fold(rows_b, period, sb, lb) &&
                !arcs_intersect(sa, la, sb, lb, period))
                return false;
        }
    }
    const int64_t count_a = row_count(rows_a), count_b = row_count(rows_b);  // each below 2^63, not their sum
    if (count_a > kMaxEnumeratedRows || count_b > kMaxEnumeratedRows - count_a) return true;
    std::vector<Interval> rows;
    rows.reserve(static_cast<size_t>(count_a + count_b));
    append_rows(rows_a, 0, rows);
    append_rows(rows_b, 1, rows);
    return any_intersection(rows, true);
}

}  // namespace gdn
