// Tensor geometry: element sizes, byte extents, and whether strided views overlap.
// Pure pointer arithmetic: nothing here reads tensor data, so it serves device pointers too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gdn/gdn.h"

namespace gdn {

// Bytes per element; 0 for a value outside the gdn_type enum.
size_t type_size(gdn_type type);
const char *type_name(gdn_type type);

inline bool present(const gdn_tensor *t) { return t != nullptr && t->data != nullptr; }

// Whether dim 0 is the contiguous one (nb[0] == element size). Every tensor's rows are, except
// a value-major state ([Sk, Sv, Hv, *] with nb[1] == element size: PyTorch's [..., K, V]).
inline bool keys_contiguous(const gdn_tensor &t) { return t.nb[0] == static_cast<int64_t>(type_size(t.type)); }

// Number of elements (0 when a count is 0), or -1 when a count is negative or the product
// overflows int64.
int64_t element_count(const gdn_tensor &t);

// Byte range [begin, end) that the tensor's elements span. Only meaningful for a tensor whose
// counts and strides are positive and whose span fits in int64 (validate checks this first).
struct ByteRange {
    uintptr_t begin = 0, end = 0;
};
ByteRange byte_range(const gdn_tensor &t);

// Span in bytes of the tensor's elements (0 for an empty tensor), or -1 when it overflows int64
// (non-negative ne and positive nb assumed).
int64_t byte_span(const gdn_tensor &t);

// The overlap tests see a tensor as rows along its contiguous dimension: dim 0, or dim 1 for a
// value-major state (then dims 0 and 1 trade places; the bytes are the same).
// True when two distinct elements of t share a byte (never for an empty tensor).
bool self_overlaps(const gdn_tensor &t);

// True when some element of a shares a byte with some element of b. Exact for the layouts
// models produce (disjoint ranges, views interleaved at a common period such as the columns of
// a packed projection buffer); otherwise exact by enumerating rows when there are few enough,
// and conservatively true beyond that.
bool overlaps(const gdn_tensor &a, const gdn_tensor &b);

// Byte address of element (i0, i1, i2, i3).
inline char *element_ptr(const gdn_tensor &t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return static_cast<char *>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

}  // namespace gdn
