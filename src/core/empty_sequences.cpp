#include "core/empty_sequences.h"

#include <cstring>

#include "core/backend.h"
#include "core/tensor.h"

namespace gdn {
namespace {

int64_t length_of(const Dims &d, const std::vector<int64_t> &offsets, int64_t n) {
    return d.packed ? offsets[n + 1] - offsets[n] : d.T;
}

// Sequence n's state in a [Sk, Sv, Hv, sequences] tensor, or its slot 0 in a snapshot tensor
// (slot 0 of every sequence comes first: index n either way).
gdn_tensor sequence_state(const gdn_tensor *t, int64_t n) {
    gdn_tensor view{};
    if (t == nullptr) return view;
    view = *t;
    view.data = static_cast<char *>(t->data) + n * t->nb[3];
    view.ne[3] = 1;
    return view;
}

std::vector<StateCopy> copies(const Dims &d, const std::vector<int64_t> &offsets, const gdn_tensor *src,
                              const gdn_tensor *dst) {
    std::vector<StateCopy> result;
    if (dst == nullptr) return result;
    for (int64_t n = 0; n < d.state_sequences(); ++n) {
        if (length_of(d, offsets, n) > 0) continue;
        StateCopy c{sequence_state(src, n), sequence_state(dst, n)};
        if (c.src.data == c.dst.data && src != nullptr) continue;  // the in-place cache update: already there
        result.push_back(c);
    }
    return result;
}

}  // namespace

int64_t sequences_with_tokens(const Dims &d, const std::vector<int64_t> &offsets) {
    if (!d.packed) return d.T > 0 ? d.B : 0;  // B may be huge when nothing is written: no loop over it
    int64_t count = 0;
    for (int64_t n = 0; n < d.state_sequences(); ++n) count += length_of(d, offsets, n) > 0 ? 1 : 0;
    return count;
}

std::vector<StateCopy> empty_sequence_copies(const ForwardArgs &a) { return copies(a.dims, a.offsets, a.s0, a.states); }

std::vector<StateCopy> empty_sequence_copies(const BackwardArgs &a) {
    return copies(a.dims, a.offsets, a.d_states, a.ds0);
}

void copy_host_state(const StateCopy &c) {
    const gdn_tensor &dst = c.dst;
    const auto row_bytes = static_cast<size_t>(dst.ne[0]) * type_size(dst.type);
    for (int64_t h = 0; h < dst.ne[2]; ++h)
        for (int64_t j = 0; j < dst.ne[1]; ++j) {
            char *to = element_ptr(dst, 0, j, h, 0);
            if (c.src.data == nullptr) std::memset(to, 0, row_bytes);  // all-zero bits are +0.0 in F32 and F64
            else std::memmove(to, element_ptr(c.src, 0, j, h, 0), row_bytes);
        }
}

Status Backend::copy_state(const StateCopy &c) {
    copy_host_state(c);
    return {};
}

}  // namespace gdn
