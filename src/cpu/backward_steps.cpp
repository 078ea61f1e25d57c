// The steps of a group's chunked backward and the group schedule (chunk_drivers.h): checkpoints
// and replay of the states, the reverse walk over chunks, and where each unit's pieces of the
// group's dq, dk go (straight into the accumulators, or into the unit's slot for the reduction).
#include <algorithm>

#include "cpu/chunk_backward.h"
#include "cpu/chunk_vector.h"
#include "cpu/state_io.h"

namespace gdn::cpu {

BackwardLayout BackwardLayout::of(int64_t chunks, int64_t T, int64_t max_chunk) {
    const int64_t max_checkpoints = (T + max_chunk - 1) / max_chunk + 1;
    BackwardLayout l;
    l.chunks_per_segment = std::max<int64_t>(1, (chunks + max_checkpoints - 1) / max_checkpoints);
    l.segments = (chunks + l.chunks_per_segment - 1) / l.chunks_per_segment;
    return l;
}

BackwardLayout BackwardLayout::widest(const BackwardLayout &a, const BackwardLayout &b) {
    return {std::max(a.chunks_per_segment, b.chunks_per_segment), std::max(a.segments, b.segments)};
}

BackwardLayout backward_layout(const Dims &d, const std::vector<int64_t> &ends, int64_t max_chunk) {
    return BackwardLayout::of(static_cast<int64_t>(ends.size()), d.T, max_chunk);
}

void GroupBackward::resize(const Dims &d, int64_t max_chunk, const BackwardLayout &layout, BackwardItems items) {
    const bool gda = d.gate_width == 1;
    units = units_of(d);
    area = d.Sk * d.Sv;
    C = max_chunk;
    tokens = d.T;
    Sv = d.Sv;
    Sk = d.Sk;
    panels = BackwardPanels::of(d.Sv);
    segments = layout.segments;
    chunks_per_segment = layout.chunks_per_segment;
    replay_slots = chunks_per_segment > 1 ? chunks_per_segment : 0;  // slot j: entry of the segment's chunk j > 0
    const bool split = items != BackwardItems::Groups;
    segments_per_round = split ? std::max<int64_t>(1, kRoundChunks / chunks_per_segment) : 1;
    const int64_t round_chunks = segments_per_round * chunks_per_segment;
    slot_floats = split ? pieces_slot_floats(d, C) : 0;
    sums_floats = items == BackwardItems::Panels ? column_sums_floats(C, d.Sk, d.gate_width) : 0;
    checkpoints.resize(units * segments * area);
    kept_z.resize(max_chunk <= d.Sk ? units * tokens * Sv : 0);
    kept_e.resize(max_chunk <= d.Sk && !gda ? units * tokens * Sk : 0);
    replay.resize(units * replay_slots * area);
    carries.resize(2 * units * area);
    gram.resize(split && gda ? round_chunks * 2 * C * C : 0);
    pieces.resize(units * round_chunks * slot_floats);
    panel_sums.resize(units * panels.count * round_chunks * sums_floats);
}

uint64_t GroupBackward::bytes() const {
    uint64_t n = 0;
    for (const auto *v : {&checkpoints, &kept_z, &kept_e, &replay, &carries, &gram, &pieces, &panel_sums})
        n += v->size() * sizeof(float);
    return n;
}

namespace {

int64_t start_of(const std::vector<int64_t> &ends, int64_t ci) { return ci ? ends[ci - 1] : int64_t(0); }

float *checkpoint(GroupBackward &g, int64_t u, int64_t seg) { return g.checkpoints.data() + (u * g.segments + seg) * g.area; }

// Unit u's kept rows of chunk ci: the Z of its panels `r` (L rows of their columns; units x
// tokens x Sv, each unit's range of panels after the ranges before it, so that the whole range
// keeps rows of Sv and a single panel rows of its own: the forward pass and the reverse walk of
// one call take the same ranges); nullptr where none are kept. The last chunk's are not: the
// forward pass would prepare that chunk only to solve it, and the reverse walk prepares it
// anyway. kept_e_of: KDA's e of chunk ci (L x Sk), the same way.
bool kept(const AlignedVector<float> &rows, const std::vector<int64_t> &ends, int64_t ci) {
    return !rows.empty() && ci + 1 != static_cast<int64_t>(ends.size());
}
float *kept_z_of(GroupBackward &g, const std::vector<int64_t> &ends, int64_t u, PanelRange r, int64_t ci) {
    if (!kept(g.kept_z, ends, ci)) return nullptr;
    const int64_t width = (r.end - r.begin) * g.panels.width;
    return g.kept_z.data() + u * g.tokens * g.Sv + r.begin * g.panels.width * g.tokens + start_of(ends, ci) * width;
}
float *kept_e_of(GroupBackward &g, const std::vector<int64_t> &ends, int64_t u, int64_t ci) {
    if (!kept(g.kept_e, ends, ci)) return nullptr;
    return g.kept_e.data() + (u * g.tokens + start_of(ends, ci)) * g.Sk;
}
// Whether chunk ci's gates will be taken from a kept e (prepare_unit_chunk does for L > 1), so
// that its gate rows need not be asked for.
bool gates_kept(GroupBackward &g, const std::vector<int64_t> &ends, int64_t u, int64_t ci) {
    return ends[ci] - start_of(ends, ci) > 1 && kept_e_of(g, ends, u, ci) != nullptr;
}

// Panels r as a column range, and where they start in a unit's state (BackwardPanels: Sk x width
// blocks, one after another).
ColumnRange columns_of(const GroupBackward &g, PanelRange r) { return {r.begin * g.panels.width, r.end * g.panels.width}; }
int64_t state_offset(const GroupBackward &g, PanelRange r) { return r.begin * g.Sk * g.panels.width; }

// Entry state of chunk c0 + j of segment seg: the checkpoint, then replayed states.
float *entry(GroupBackward &g, int64_t u, int64_t seg, int64_t j) {
    return j == 0 ? checkpoint(g, u, seg) : g.replay.data() + (u * g.replay_slots + j) * g.area;
}

// dL/dS at the end of chunk ci of unit u (ci = chunks - 1: the end of the sequence; ci = -1:
// dL/dS0), in one of the unit's two slabs, alternating chunk by chunk: a panel's walk reads one
// and writes the other, so the panels of a unit may walk on different workers.
float *carry(GroupBackward &g, const std::vector<int64_t> &ends, int64_t u, int64_t ci) {
    const int64_t chunks = static_cast<int64_t>(ends.size());
    return g.carries.data() + (2 * u + ((chunks - 1 - ci) & 1)) * g.area;
}

// The chunks a round holds at most (its segments' widest).
int64_t round_chunks(const GroupBackward &g) { return g.segments_per_round * g.chunks_per_segment; }

// Unit u's pieces of the round's chunk j.
float *slot_of(GroupBackward &g, int64_t u, int64_t j) { return g.pieces.data() + (u * round_chunks(g) + j) * g.slot_floats; }

// Panel p's ColumnSums of unit u for the round's chunk j (split by panels).
ColumnSums sums_slot(GroupBackward &g, int64_t u, int64_t p, int64_t j) {
    float *at = g.panel_sums.data() + ((u * g.panels.count + p) * round_chunks(g) + j) * g.sums_floats;
    return column_sums_at(at, g.C, g.Sk);
}

// The round's GDA grams of its chunk j.
float *gram_of(GroupBackward &g, int64_t j) { return g.gram.data() + j * 2 * g.C * g.C; }

struct Segment {
    int64_t c0, c1;  // its chunks [c0, c1)
};

Segment segment_of(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t seg, const GroupBackward &g) {
    const int64_t per_seg = backward_layout(a.dims, ends, g.C).chunks_per_segment, c0 = seg * per_seg;
    return {c0, std::min<int64_t>(static_cast<int64_t>(ends.size()), c0 + per_seg)};
}

// Round r of the split schedules: segments [lo, hi], the r-th run of segments_per_round from the
// last, and their chunks [c0, c1) (a chunk's slots are indexed by ci - c0).
struct Round {
    int64_t lo, hi, c0, c1;
};
Round round_of(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t r, const GroupBackward &g) {
    const int64_t segments = backward_layout(a.dims, ends, g.C).segments;
    const int64_t hi = segments - 1 - r * g.segments_per_round, lo = std::max<int64_t>(0, hi - g.segments_per_round + 1);
    return {lo, hi, segment_of(a, ends, lo, g).c0, segment_of(a, ends, hi, g).c1};
}

// One chunk forward of unit u's panels `panels` (the group's chunk and K K^T loaded): s_next =
// the state after the chunk from s (the unit's; s_next may be s: updated in place). The forward
// pass solves for Dm and keeps the chunk's Z (and KDA's e) where kept_z_of (kept_e_of) has
// room, streamed out (nothing reads them before the reverse walk; replay = false); the replay
// takes Dm from that Z and the gates from that e (replay = true). Issues a share of `coming`
// after each of its kForwardChunkSteps steps.
constexpr int kForwardChunkSteps = 3;
void forward_chunk(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t ci, int64_t bq, int64_t kh,
                   int64_t u, PanelRange panels, const float *s, float *s_next, bool replay, GroupBackward &g,
                   ChunkScratch &c, PacedPrefetch &coming) {
    const ChunkUnit unit = group_unit(a.dims, bq, kh, u);
    const int64_t t0 = start_of(ends, ci), t1 = ends[ci], L = t1 - t0, at = state_offset(g, panels);
    const BackwardWindow win(a, columns_of(g, panels));
    float *kept_z = kept_z_of(g, ends, u, panels, ci), *kept_e = kept_e_of(g, ends, u, ci);
    prepare_unit_chunk(*a.g, *a.beta, a.dims, unit, t0, L, false, KnownGates{nullptr, replay ? kept_e : nullptr}, c);
    coming.step();
    c.Sv = win.dims.Sv;  // the scratch is sized for every column of the call
    c.state_panel = g.panels.width;
    const float *z = chunk_deltas(*win.v_ptr, win.dims, unit, t0, L, s + at, replay ? kept_z : nullptr, c);
    if (!replay && kept_z) store_rows_streamed(z, L, c.Sv, kept_z, c.Sv);
    if (!replay && kept_e && panels.begin == 0) store_rows_streamed(c.e.data(), L, c.gw, kept_e, c.gw);
    coming.step();
    advance_state(s + at, s_next + at, L, c);
    coming.step();
}

// Starts `coming` on the rows a forward pass over chunk ci (replay: a replay) reads of chunk
// ci + 1, paced over the forward_chunk calls of `units`: the group's K rows, then each unit's v
// (its panels' columns; not where a replay takes its Z), g (not where its gates are kept) and
// beta rows.
void queue_next_forward_rows(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t ci, int64_t bq,
                             int64_t kh, UnitRange units, PanelRange panels, bool replay, GroupBackward &g,
                             PacedPrefetch &coming) {
    coming.start(static_cast<int>((units.end - units.begin) * kForwardChunkSteps));
    if (ci + 1 >= static_cast<int64_t>(ends.size())) return;
    const int64_t t1 = ends[ci], t2 = ends[ci + 1];
    const BackwardWindow win(a, columns_of(g, panels));
    coming.add_rows(a.k, kh, t1, t2, bq, a.dims.Sk, Pages::Read);
    for (int64_t u = units.begin; u < units.end; ++u) {
        const ChunkUnit unit = group_unit(a.dims, bq, kh, u);
        const bool z_kept = replay && kept_z_of(g, ends, u, panels, ci), next_gates_kept = replay && gates_kept(g, ends, u, ci + 1);
        coming.add_rows(z_kept ? nullptr : win.v_ptr, unit.h, t1, t2, unit.b, win.dims.Sv, Pages::Read);
        coming.add_rows(next_gates_kept ? nullptr : a.g, unit.h, t1, t2, unit.b, a.dims.gate_width, Pages::Read);
        coming.add_rows(a.beta, unit.h, t1, t2, unit.b, 1, Pages::Read);
    }
}

// The entry states of the segment's chunks after its first, from its checkpoint.
void replay_segment(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, UnitRange units,
                    PanelRange panels, int64_t seg, GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const Segment s = segment_of(a, ends, seg, g);
    for (int64_t ci = s.c0; ci + 1 < s.c1; ++ci) {
        const int64_t t0 = start_of(ends, ci), j = ci - s.c0;
        load_group_chunk(*a.q, *a.k, a.dims, bq, kh, t0, ends[ci] - t0, false, c);
        queue_next_forward_rows(a, ends, ci, bq, kh, units, panels, true, g, w.coming_rows);
        for (int64_t u = units.begin; u < units.end; ++u)
            forward_chunk(a, ends, ci, bq, kh, u, panels, entry(g, u, seg, j), entry(g, u, seg, j + 1), true, g, c,
                          w.coming_rows);
        w.coming_rows.finish();
    }
}

// Unit u's backward over chunk ci, chunk j of segment seg and `slot` of its round, its panels
// `panels` (the group's rows and gram loaded): carries dL/dS from the chunk's end to its start, adding the chunk end's d_states.
// With every panel, the unit's sums are added up here (each panel's products accumulating into
// the totals) and the unit finished: returns its pieces. With one (of several), its sums go to
// its slot (sums_slot) for backward_finish_chunk to add in the same order, and no pieces. While
// it runs, the rows of the chunk before that the walk reads next are asked for: the unit's, and
// with group_rows (the first unit of the chunk's walk) the group's Q and K rows first.
UnitPieces unit_chunk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t ci,
                      int64_t u, PanelRange panels, int64_t seg, int64_t j, int64_t slot, bool group_rows,
                      GroupBackward &g, BackwardWork &w) {
    const Dims &d = a.dims;
    const ChunkUnit unit = group_unit(d, bq, kh, u);
    const int64_t t0 = start_of(ends, ci), t1 = ends[ci], L = t1 - t0, at = state_offset(g, panels);
    const int64_t prev_start = ci > 0 ? start_of(ends, ci - 1) : t0;
    const bool whole = panels.begin == 0 && panels.end == g.panels.count;
    const float *kept_z = kept_z_of(g, ends, u, panels, ci), *kept_e = kept_e_of(g, ends, u, ci);
    const bool prev_gates_kept = ci > 0 && gates_kept(g, ends, u, ci - 1);
    const BackwardWindow win(a, columns_of(g, panels));
    // The unit's rows of the chunk before (the next this walk reads), over this chunk's steps.
    w.coming_rows.start(unit_chunk_steps(panels.end - panels.begin) - (whole ? 0 : kFinishSteps));
    if (group_rows) {
        w.coming_rows.add_rows(a.q, kh, prev_start, t0, bq, d.Sk, Pages::Read);
        w.coming_rows.add_rows(a.k, kh, prev_start, t0, bq, d.Sk, Pages::Read);
    }
    w.coming_rows.add_rows(kept_z ? nullptr : win.v_ptr, unit.h, prev_start, t0, unit.b, win.dims.Sv, Pages::Read);
    w.coming_rows.add_rows(prev_gates_kept ? nullptr : a.g, unit.h, prev_start, t0, unit.b, d.gate_width, Pages::Read);
    w.coming_rows.add_rows(a.beta, unit.h, prev_start, t0, unit.b, 1, Pages::Read);
    w.coming_rows.add_rows(win.d_out_ptr, unit.h, prev_start, t0, unit.b, win.dims.Sv, Pages::Read);
    float *dsl = carry(g, ends, u, ci) + at, *ds0 = carry(g, ends, u, ci - 1) + at;
    const int64_t snapshot = d.T - t1;
    if (win.d_states_ptr && snapshot < d.written_slots()) {
        const int64_t floats = d.Sk * win.dims.Sv;
        load_state(*win.d_states_ptr, win.dims, unit.h, snapshot * d.B + unit.b, w.d_state.data(), g.panels.width);
        axpy(1.0f, w.d_state.data(), dsl, floats);
    }
    prepare_backward_unit(a, unit, t0, L, kept_e, w);
    backward_columns_chunk(win, g.panels.width, unit, t0, L, entry(g, u, seg, j) + at, kept_z, dsl, ds0,
                           whole ? unit_totals(w) : sums_slot(g, u, panels.begin, slot), w);
    UnitPieces pieces;
    if (whole) pieces = finish_backward_unit(a, unit, t0, L, w);
    w.coming_rows.finish();
    return pieces;
}

// The group's rows of chunk ci for the reverse walk (the next chunk's are asked for by the first
// unit's step: unit_chunk).
void load_reverse_rows(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t ci,
                       ChunkScratch &c) {
    const int64_t t0 = start_of(ends, ci);
    load_group_rows(*a.q, *a.k, a.dims, bq, kh, t0, ends[ci] - t0, true, c);
}

void store_ds0(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, UnitRange units,
               PanelRange panels, GroupBackward &g) {
    if (!a.ds0) return;
    const BackwardWindow win(a, columns_of(g, panels));
    for (int64_t u = units.begin; u < units.end; ++u) {
        const ChunkUnit unit = group_unit(a.dims, bq, kh, u);
        store_state(*win.ds0_ptr, win.dims, unit.h, unit.b, carry(g, ends, u, -1) + state_offset(g, panels),
                    g.panels.width);
    }
}

}  // namespace

PanelRange all_panels(const GroupBackward &g) { return {0, g.panels.count}; }

void backward_checkpoints(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                          UnitRange units, PanelRange panels, GroupBackward &g, BackwardWork &w) {
    const Dims &d = a.dims;
    const int64_t chunks = static_cast<int64_t>(ends.size());
    const int64_t per_seg = backward_layout(d, ends, g.C).chunks_per_segment;
    const BackwardWindow win(a, columns_of(g, panels));
    const int64_t first = state_offset(g, panels), floats = d.Sk * win.dims.Sv;
    // The state runs in the unit's carry slab for the last chunk (hot in cache, updated in place;
    // only that slab's panels of the range: other ranges of the group may run on other workers at
    // once); each segment's entry state is streamed out to its checkpoint, which the reverse
    // walk reads only much later.
    auto running = [&](int64_t u) { return carry(g, ends, u, chunks - 1); };
    for (int64_t u = units.begin; u < units.end; ++u) {
        const ChunkUnit unit = group_unit(d, bq, kh, u);
        float *s = checkpoint(g, u, 0) + first;
        if (win.s0_ptr) load_state(*win.s0_ptr, win.dims, unit.h, unit.b, s, g.panels.width);
        else std::fill_n(s, floats, 0.0f);
    }
    for (int64_t ci = 0; ci + 1 < chunks; ++ci) {
        const int64_t t0 = start_of(ends, ci);
        load_group_chunk(*a.q, *a.k, d, bq, kh, t0, ends[ci] - t0, false, w.chunk);
        queue_next_forward_rows(a, ends, ci, bq, kh, units, panels, false, g, w.coming_rows);
        for (int64_t u = units.begin; u < units.end; ++u) {
            forward_chunk(a, ends, ci, bq, kh, u, panels, ci == 0 ? checkpoint(g, u, 0) : running(u), running(u), false,
                          g, w.chunk, w.coming_rows);
            if ((ci + 1) % per_seg == 0)
                store_rows_streamed(running(u) + first, 1, floats, checkpoint(g, u, (ci + 1) / per_seg) + first, 0);
        }
        w.coming_rows.finish();
    }
    for (int64_t u = units.begin; u < units.end; ++u) std::fill_n(running(u) + first, floats, 0.0f);
}

int64_t backward_rounds(const BackwardArgs &a, const std::vector<int64_t> &ends, const GroupBackward &g) {
    const int64_t segments = backward_layout(a.dims, ends, g.C).segments;
    return (segments + g.segments_per_round - 1) / g.segments_per_round;
}

int64_t backward_round_chunks(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t r,
                              const GroupBackward &g) {
    if (r >= backward_rounds(a, ends, g)) return 0;
    const Round round = round_of(a, ends, r, g);
    return round.c1 - round.c0;
}

int64_t backward_round_tokens(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t r,
                              const GroupBackward &g) {
    const Round round = round_of(a, ends, r, g);
    return ends[round.c1 - 1] - start_of(ends, round.c0);
}

void backward_gram(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t r,
                   int64_t j, GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    if (c.kda) return;
    const int64_t ci = round_of(a, ends, r, g).c0 + j, t0 = start_of(ends, ci), L = ends[ci] - t0;
    load_group_rows(*a.q, *a.k, a.dims, bq, kh, t0, L, true, c);
    group_gram(L, true, c, gram_of(g, j));
}

void backward_unit_round(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                         UnitRange units, PanelRange panels, int64_t r, GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const Round round = round_of(a, ends, r, g);
    const bool whole = panels.begin == 0 && panels.end == g.panels.count;
    for (int64_t seg = round.hi; seg >= round.lo; --seg) {
        const Segment s = segment_of(a, ends, seg, g);
        replay_segment(a, bq, kh, ends, units, panels, seg, g, w);
        for (int64_t ci = s.c1 - 1; ci >= s.c0; --ci) {
            const int64_t slot = ci - round.c0, L = ends[ci] - start_of(ends, ci);
            load_reverse_rows(a, bq, kh, ends, ci, c);
            if (!c.kda) c.gram_view = gram_of(g, slot);
            for (int64_t u = units.begin; u < units.end; ++u) {
                const UnitPieces p = unit_chunk(a, bq, kh, ends, ci, u, panels, seg, ci - s.c0, slot, u == units.begin, g, w);
                if (whole) store_pieces(L, p, c.kda, c.Sk, g.C, slot_of(g, u, slot));
            }
        }
    }
    if (round.lo == 0) store_ds0(a, bq, kh, ends, units, panels, g);
}

void backward_finish_chunk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t u,
                           int64_t r, int64_t j, GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const ChunkUnit unit = group_unit(a.dims, bq, kh, u);
    const int64_t gw = a.dims.gate_width, ci = round_of(a, ends, r, g).c0 + j;
    const int64_t t0 = start_of(ends, ci), L = ends[ci] - t0;
    load_reverse_rows(a, bq, kh, ends, ci, c);
    if (!c.kda) c.gram_view = gram_of(g, j);
    w.coming_rows.start(unit_chunk_steps(0));  // nothing queued: its steps issue nothing
    prepare_backward_unit(a, unit, t0, L, kept_e_of(g, ends, u, ci), w);
    const ColumnSums totals = unit_totals(w);
    copy_column_sums(L, c.Sk, gw, sums_slot(g, u, 0, j), totals);
    for (int64_t p = 1; p < g.panels.count; ++p) add_column_sums(L, c.Sk, gw, sums_slot(g, u, p, j), totals);
    store_pieces(L, finish_backward_unit(a, unit, t0, L, w), c.kda, c.Sk, g.C, slot_of(g, u, j));
}

void backward_reduce_chunk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t r,
                           int64_t j, GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const int64_t ci = round_of(a, ends, r, g).c0 + j, t0 = start_of(ends, ci), L = ends[ci] - t0;
    load_group_rows(*a.q, *a.k, a.dims, bq, kh, t0, L, true, c);
    start_group_chunk(L, w);
    for (int64_t u = 0; u < g.units; ++u) add_unit_share(L, stored_pieces(L, c.kda, c.Sk, g.C, slot_of(g, u, j)), w);
    finish_group_chunk(a, bq, kh, t0, L, w);
}

void backward_reverse_walk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                           GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const UnitRange all{0, g.units};
    const int64_t segments = backward_layout(a.dims, ends, g.C).segments;
    for (int64_t seg = segments - 1; seg >= 0; --seg) {
        const Segment s = segment_of(a, ends, seg, g);
        replay_segment(a, bq, kh, ends, all, all_panels(g), seg, g, w);
        for (int64_t ci = s.c1 - 1; ci >= s.c0; --ci) {
            const int64_t t0 = start_of(ends, ci), L = ends[ci] - t0;
            load_reverse_rows(a, bq, kh, ends, ci, c);
            if (!c.kda) {
                group_gram(L, true, c, c.gram.data());
                c.gram_view = c.gram.data();
            }
            start_group_chunk(L, w);
            for (int64_t u = 0; u < g.units; ++u)
                add_unit_share(L, unit_chunk(a, bq, kh, ends, ci, u, all_panels(g), seg, ci - s.c0, ci - s.c0, u == 0, g, w),
                               w);
            finish_group_chunk(a, bq, kh, t0, L, w);
        }
    }
    store_ds0(a, bq, kh, ends, all, all_panels(g), g);
}

void backward_group(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, GroupBackward &g,
                    BackwardWork &w) {
    backward_checkpoints(a, bq, kh, ends, {0, g.units}, all_panels(g), g, w);
    backward_reverse_walk(a, bq, kh, ends, g, w);
}

}  // namespace gdn::cpu
