// The chunked forward of a work item's groups (the per-chunk math is written out in chunk_core.h).
#include <algorithm>
#include <cassert>
#include <cstring>

#include "core/tensor.h"
#include "cpu/chunk_drivers.h"
#include "cpu/chunk_vector.h"
#include "cpu/gemm.h"
#include "cpu/state_io.h"
#include "cpu/typed_rows.h"
#include "cpu/value_columns.h"

namespace gdn::cpu {

void ForwardWork::resize(const Dims &d, int64_t max_chunk, int64_t groups) {
    chunk.resize(d, max_chunk);
    states.resize(groups * units_of(d) * d.Sk * d.Sv);
    planned_gam.resize(d.gate_width != 1 ? units_of(d) * max_chunk * d.gate_width : 0);
    planners.resize(static_cast<size_t>(groups));
    for (ChunkPlanner &p : planners) p.resize(d);
    // A chunk's q and k rows, and v, g and beta rows of every unit, per token.
    next_rows.reserve(max_chunk * (2 + 3 * units_of(d)));
}

uint64_t ForwardWork::bytes() const {
    uint64_t planner_bytes = 0;
    for (const ChunkPlanner &p : planners) planner_bytes += p.bytes();
    return chunk.bytes() + states.size() * sizeof(float) + planned_gam.size() * sizeof(double) + planner_bytes +
           next_rows.bytes();
}

void forward_group(const ForwardArgs &call, int64_t bq, KeyHeads heads, int64_t max_chunk, int64_t unit_begin,
                   int64_t unit_end, ColumnRange columns, ForwardWork &w) {
    // The call's value columns `columns` as a call of their own (all of them but in a cut: value_columns.h).
    const ValueWindow window(call, columns);
    const Dims &d = window.dims;
    const gdn_tensor *v = window.v_ptr, *out = window.out_ptr, *s0 = window.s0_ptr, *states = window.states_ptr;
    const int64_t Sk = d.Sk, Sv = d.Sv, area = Sk * Sv, units = units_of(d);
    const int64_t groups = heads.end - heads.begin;
    assert(groups >= 1 && groups <= kMaxForwardGroups && static_cast<size_t>(groups) <= w.planners.size());
    const float scale = static_cast<float>(d.scale);
    ChunkScratch &c = w.chunk;
    c.Sv = Sv;  // the scratch is sized for the whole call's columns
    c.state_panel = forward_state_panel(Sv, c.bf16);  // the running states in the kernel's panels (StatePanels)
    // Group i's unit u keeps its running state at state_of(i, u).
    const auto state_of = [&](int64_t i, int64_t u) { return w.states.data() + (i * units + u) * area; };
    for (int64_t i = 0; i < groups; ++i)
        for (int64_t u = unit_begin; u < unit_end; ++u) {
            const ChunkUnit unit = group_unit(d, bq, heads.begin + i, u);
            float *s = state_of(i, u);
            if (s0) load_state(*s0, d, unit.h, unit.b, s, c.state_panel);  // read before any write: states may be s0
            else std::fill(s, s + area, 0.0f);
        }
    const bool with_out = out != nullptr;
    const int64_t max_len = std::min(max_chunk, d.T);
    const bool kda = d.gate_width != 1;
    // Chunks are planned as they come (every unit of the group, whatever the slice, so that every
    // slice cuts the same chunks). The groups go chunk by chunk in turn, the one furthest behind
    // first (in step where their chunks are cut alike, as GDA's are), so that each token's rows
    // are read by all of them while their pages' translations are still in the TLB: a token's
    // rows of neighbouring key heads share pages, and the rows of the caller's tensors are a
    // token stride apart, each token's on pages of its own.
    int64_t start[kMaxForwardGroups] = {};  // each group's next chunk
    for (int64_t i = 0; i < groups; ++i)
        w.planners[i].reset(GroupRef{call.g, &call.dims, bq, heads.begin + i}, max_len);  // (the plan reads no value extent)
    const auto furthest_behind = [&]() {
        int64_t next = -1;
        for (int64_t i = 0; i < groups; ++i)
            if (start[i] < d.T && (next < 0 || start[i] < start[next])) next = i;
        return next;
    };
    for (int64_t i = furthest_behind(); i >= 0; i = furthest_behind()) {
        const int64_t kh = heads.begin + i, t0 = start[i];
        double *planned = kda ? w.planned_gam.data() : nullptr;  // this chunk's, read by its units below
        const int64_t t1 = w.planners[i].next_end(t0, planned), L = t1 - t0;
        start[i] = t1;
        load_group_chunk(*call.q, *call.k, d, bq, kh, t0, L, with_out, c);
        // The rows of the chunk run next (of the group then furthest behind), in the order it
        // reads them (asked for at its longest), paced over this chunk's unit steps
        // (PacedPrefetch: the rows of a whole chunk at once overflow the line-fill buffers).
        w.next_rows.start(static_cast<int>((unit_end - unit_begin) * (with_out ? 4 : 3)));
        if (const int64_t n = furthest_behind(); n >= 0) {
            const int64_t next_kh = heads.begin + n, n0 = start[n], n1 = std::min(d.T, n0 + max_len);
            if (with_out) w.next_rows.add_rows(call.q, next_kh, n0, n1, bq, Sk);
            w.next_rows.add_rows(call.k, next_kh, n0, n1, bq, Sk);
            for (int64_t u = unit_begin; u < unit_end; ++u) {
                const ChunkUnit unit = group_unit(d, bq, next_kh, u);
                w.next_rows.add_rows(v, unit.h, n0, n1, unit.b, Sv);
                w.next_rows.add_rows(call.g, unit.h, n0, n1, unit.b, d.gate_width);
                w.next_rows.add_rows(call.beta, unit.h, n0, n1, unit.b, 1);
            }
        }
        for (int64_t u = unit_begin; u < unit_end; ++u) {
            const ChunkUnit unit = group_unit(d, bq, kh, u);
            float *s = state_of(i, u);
            const KnownGates known{kda ? planned + u * max_len * d.gate_width : nullptr, nullptr};
            prepare_unit_chunk(*call.g, *call.beta, d, unit, t0, L, with_out, known, c);
            w.next_rows.step();
            chunk_deltas(*v, d, unit, t0, L, s, nullptr, c, with_out);
            w.next_rows.step();
            if (with_out) {
                // O = scale (Qg S0 + P Dm) in scratch (chunk_deltas wrote its first part), then
                // streamed to the unit's output rows (contiguous, a token stride apart).
                float *o = c.o(L);
                trmm(Tri::Lower, L, Sv, scale, rows(c.p(), L), c.dm.data(), Sv, 1.0f, o, Sv, c.pack.data());
                w.next_rows.step();
                store_token_rows(o, L, Sv, *out, unit.h, t0, unit.b);
            }
            advance_state(s, s, L, c);
            w.next_rows.step();
            const int64_t slot = d.T - t1;
            if (states && slot < d.K) store_state(*states, d, unit.h, slot * d.B + unit.b, s, c.state_panel);
        }
        w.next_rows.finish();
    }
}

}  // namespace gdn::cpu
