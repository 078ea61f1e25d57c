// Cuts along the value columns, for the work items of a call whose units are fewer than the
// workers (one long prefill or training sequence, B = 1, on a many-core host).
//
// The columns of a state evolve independently: column j of S is updated from column j of V and
// of S alone (S' = diag(a) S, d_j = beta (v_j - S'[:, j] . k), S[:, j] = S'[:, j] + k d_j), and
// every product of the chunked forward sums over keys or tokens, never over value columns
// (chunk_core.h). A block of columns is therefore the forward of a narrower call on views of v,
// out and the states (ValueWindow), and computes every one of its columns with the bits the
// whole call gives it: the forward's cut may follow the thread count. Each block repeats its
// group's key side (Q K^T, K K^T, the gates, the q/k rows), the cost forward_schedule.h weighs.
//
// The backward's dv and dS0 are column-local too, but its dq, dk, dg and dbeta sum over the value
// columns. So the backward always takes those sums in fixed panels (BackwardPanels: 64 columns),
// each panel's from zero, added in panel order: on one worker panel after panel, on many each
// panel a work item of its own, the same adds either way (cpu/chunk_backward.h).
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

// t narrowed to columns c along dim (a view with t's strides; nullptr stays nullptr), into view.
inline const gdn_tensor *narrow_columns(const gdn_tensor *t, int dim, ColumnRange c, gdn_tensor &view) {
    if (t == nullptr) return nullptr;
    view = *t;
    view.ne[dim] = c.end - c.begin;
    if (view.data != nullptr) view.data = static_cast<char *>(view.data) + c.begin * view.nb[dim];
    return &view;
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
        v_ptr = narrow_columns(a.v, 0, c, v);
        out_ptr = narrow_columns(a.out, 0, c, out);
        s0_ptr = narrow_columns(a.s0, 1, c, s0);
        states_ptr = narrow_columns(a.states, 1, c, states);
    }
    ValueWindow(const ValueWindow &) = delete;
    ValueWindow &operator=(const ValueWindow &) = delete;
};

// The backward's panels of value columns: `width` columns each, `count` of them (one panel of
// every column where 64 does not divide Sv or Sv is no wider). A unit's states in the backward's
// workspace are kept in these panels (StatePanels of `width`: each panel an Sk x width row-major
// block), so that a panel's state is a plain state of its own.
constexpr int64_t kBackwardPanelColumns = 64;
struct BackwardPanels {
    int64_t width, count;
    static BackwardPanels of(int64_t Sv) {
        const int64_t w = kBackwardPanelColumns;
        return Sv > w && Sv % w == 0 ? BackwardPanels{w, Sv / w} : BackwardPanels{Sv, 1};
    }
};

// The backward call narrowed to value columns c (whole panels): v, d_out and dv (dim 0), s0,
// d_states and ds0 (dim 1), Sv their count. Holds its views: not copied.
struct BackwardWindow {
    Dims dims;
    gdn_tensor v{}, d_out{}, dv{}, s0{}, d_states{}, ds0{};
    const gdn_tensor *v_ptr, *d_out_ptr, *dv_ptr, *s0_ptr, *d_states_ptr, *ds0_ptr;  // nullptr where the call has none

    BackwardWindow(const BackwardArgs &a, ColumnRange c) : dims(a.dims) {
        dims.Sv = c.end - c.begin;
        v_ptr = narrow_columns(a.v, 0, c, v);
        d_out_ptr = narrow_columns(a.d_out, 0, c, d_out);
        dv_ptr = narrow_columns(a.dv, 0, c, dv);
        s0_ptr = narrow_columns(a.s0, 1, c, s0);
        d_states_ptr = narrow_columns(a.d_states, 1, c, d_states);
        ds0_ptr = narrow_columns(a.ds0, 1, c, ds0);
    }
    BackwardWindow(const BackwardWindow &) = delete;
    BackwardWindow &operator=(const BackwardWindow &) = delete;
};

}  // namespace gdn::cpu
