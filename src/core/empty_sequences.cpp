#include "core/empty_sequences.h"

#include <cstring>

#include "core/backend.h"
#include "core/tensor.h"

namespace gdn {
namespace {

int64_t length_of(const Dims &d, const std::vector<int64_t> &offsets, int64_t n) {
    return d.packed ? offsets[n + 1] - offsets[n] : d.T;
}

// The state at `index` of dim 3 of a [Sk, Sv, Hv, *] tensor: sequence n's state, its pool slot,
// or its snapshot slot 0 (slot 0 of every sequence comes first: index n either way).
gdn_tensor state_at(const gdn_tensor *t, int64_t index) {
    gdn_tensor view{};
    if (t == nullptr) return view;
    view = *t;
    view.data = static_cast<char *>(t->data) + index * t->nb[3];
    view.ne[3] = 1;
    return view;
}

template <class Args>
std::vector<StateCopy> copies(const Args &a, const gdn_tensor *src, const gdn_tensor *dst) {
    std::vector<StateCopy> result;
    const Dims &d = a.dims;
    if (dst == nullptr) return result;
    for (int64_t n = 0; n < d.state_sequences(); ++n) {
        const int64_t index = state_index(a, n);
        if (length_of(d, a.offsets, n) > 0 || index < 0) continue;  // a negative pool index writes nothing
        StateCopy c{state_at(src, index), state_at(dst, index)};
        if (c.src.data == c.dst.data && src != nullptr && same_layout(c.src, c.dst)) continue;  // in place: already there
        result.push_back(c);
    }
    return result;
}

}  // namespace

bool same_layout(const gdn_tensor &a, const gdn_tensor &b) { return keys_contiguous(a) == keys_contiguous(b); }

int64_t sequences_with_tokens(const Dims &d, const std::vector<int64_t> &offsets) {
    if (!d.packed) return d.T > 0 ? d.B : 0;  // B may be huge when nothing is written: no loop over it
    int64_t count = 0;
    for (int64_t n = 0; n < d.state_sequences(); ++n) count += length_of(d, offsets, n) > 0 ? 1 : 0;
    return count;
}

std::vector<StateCopy> empty_sequence_copies(const ForwardArgs &a) { return copies(a, a.s0, a.states); }

std::vector<StateCopy> empty_sequence_copies(const BackwardArgs &a) {
    return copies(a, a.d_states, a.ds0);
}

void copy_host_state(const StateCopy &c) {
    const gdn_tensor &dst = c.dst;
    const auto elem = static_cast<int64_t>(type_size(dst.type));
    if (c.src.data != nullptr && !same_layout(c.src, dst)) {  // one key-major, the other value-major
        for (int64_t h = 0; h < dst.ne[2]; ++h)
            for (int64_t j = 0; j < dst.ne[1]; ++j)
                for (int64_t i = 0; i < dst.ne[0]; ++i) std::memcpy(element_ptr(dst, i, j, h, 0), element_ptr(c.src, i, j, h, 0), elem);
        return;
    }
    // Contiguous rows along the layout's contiguous dimension.
    const bool keys = keys_contiguous(dst);
    const int64_t rows = keys ? dst.ne[1] : dst.ne[0];
    const auto row_bytes = static_cast<size_t>((keys ? dst.ne[0] : dst.ne[1]) * elem);
    for (int64_t h = 0; h < dst.ne[2]; ++h)
        for (int64_t r = 0; r < rows; ++r) {
            char *to = keys ? element_ptr(dst, 0, r, h, 0) : element_ptr(dst, r, 0, h, 0);
            if (c.src.data == nullptr) std::memset(to, 0, row_bytes);  // all-zero bits are +0.0 in F32 and F64
            else std::memmove(to, keys ? element_ptr(c.src, 0, r, h, 0) : element_ptr(c.src, r, 0, h, 0), row_bytes);
        }
}

Status Backend::copy_state(const StateCopy &c) {
    copy_host_state(c);
    return {};
}

}  // namespace gdn
