// A forward cut along the value columns: the work items of a chunked forward whose units are
// fewer than the workers (one long prefill, B = 1, on a many-core host).
//
// The columns of a state evolve independently: column j of S is updated from column j of V and
// of S alone (S' = diag(a) S, d_j = beta (v_j - S'[:, j] . k), S[:, j] = S'[:, j] + k d_j), and
// every product of the chunked forward sums over keys or tokens, never over value columns
// (chunk_core.h). A block of columns is therefore the forward of a narrower call on views of v,
// out and the states (ValueWindow), and computes every one of its columns with the bits the
// whole call gives it: the cut may follow the thread count. Each block repeats its group's key
// side (Q K^T, K K^T, the gates, the q/k rows), the cost forward_schedule.h weighs. The backward
// is not cut so: its dq, dk, dg and dbeta sum over the value columns.
#pragma once

#include <cstdint>

#include "core/problem.h"

namespace gdn::cpu {

// Value columns [begin, end).
struct ColumnRange {
    int64_t begin, end;
};

// Block i of `columns` cut into `blocks` blocks of whole quanta (the GEMM kernel's narrowest
// tile, gemm_panel_width), as even as the quanta allow: quanta [i q / n, (i + 1) q / n). One
// block is every column, whatever the quantum.
inline ColumnRange column_block(int64_t columns, int64_t quantum, int64_t blocks, int64_t i) {
    if (blocks <= 1) return {0, columns};
    const int64_t quanta = columns / quantum;
    return {i * quanta / blocks * quantum, i + 1 == blocks ? columns : (i + 1) * quanta / blocks * quantum};
}

// The call narrowed to value columns c: v and out (dim 0) and the states s0 and states (dim 1)
// as views of those columns with the call's strides, Sv their count. Holds its tensors: not
// copied.
struct ValueWindow {
    Dims dims;
    gdn_tensor v{}, out{}, s0{}, states{};
    const gdn_tensor *v_ptr, *out_ptr, *s0_ptr, *states_ptr;  // nullptr where the call has none

    ValueWindow(const ForwardArgs &a, ColumnRange c) : dims(a.dims) {
        dims.Sv = c.end - c.begin;
        v_ptr = narrow(a.v, 0, c, v);
        out_ptr = narrow(a.out, 0, c, out);
        s0_ptr = narrow(a.s0, 1, c, s0);
        states_ptr = narrow(a.states, 1, c, states);
    }
    ValueWindow(const ValueWindow &) = delete;
    ValueWindow &operator=(const ValueWindow &) = delete;

private:
    static const gdn_tensor *narrow(const gdn_tensor *t, int dim, ColumnRange c, gdn_tensor &view) {
        if (t == nullptr) return nullptr;
        view = *t;
        view.ne[dim] = c.end - c.begin;
        if (view.data != nullptr) view.data = static_cast<char *>(view.data) + c.begin * view.nb[dim];
        return &view;
    }
};

}  // namespace gdn::cpu
