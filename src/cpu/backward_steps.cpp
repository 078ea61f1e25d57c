// The steps of a group's chunked backward and the group schedule (chunk_drivers.h): checkpoints
// and replay of the states, the reverse walk over chunks, and where each unit's pieces of the
// group's dq, dk go (straight into the accumulators, or into the unit's slot for the reduction).
#include <algorithm>
#include <numeric>

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

void GroupBackward::resize(const Dims &d, int64_t max_chunk, const BackwardLayout &layout, bool split) {
    const bool gda = d.gate_width == 1;
    units = units_of(d);
    area = d.Sk * d.Sv;
    C = max_chunk;
    tokens = d.T;
    Sv = d.Sv;
    Sk = d.Sk;
    segments = layout.segments;
    chunks_per_segment = layout.chunks_per_segment;
    replay_slots = chunks_per_segment > 1 ? chunks_per_segment : 0;  // slot j: entry of the segment's chunk j > 0
    spares = split ? units : 1;
    slot_floats = split ? pieces_slot_floats(d, C) : 0;
    checkpoints.resize(units * segments * area);
    kept_z.resize(max_chunk <= d.Sk ? units * tokens * Sv : 0);
    kept_e.resize(max_chunk <= d.Sk && !gda ? units * tokens * Sk : 0);
    replay.resize(units * replay_slots * area);
    carries.resize((units + spares) * area);
    // Any permutation of the slabs will do (each unit's current one is zeroed by the forward
    // pass); the identity keeps every unit's slabs apart from the start.
    carry_slab.resize(units + spares);
    std::iota(carry_slab.begin(), carry_slab.end(), int64_t(0));
    gram.resize(split && gda ? chunks_per_segment * 2 * C * C : 0);
    pieces.resize(units * chunks_per_segment * slot_floats);
}

uint64_t GroupBackward::bytes() const {
    uint64_t n = carry_slab.size() * sizeof(int64_t);
    for (const auto *v : {&checkpoints, &kept_z, &kept_e, &replay, &carries, &gram, &pieces}) n += v->size() * sizeof(float);
    return n;
}

namespace {

int64_t start_of(const std::vector<int64_t> &ends, int64_t ci) { return ci ? ends[ci - 1] : int64_t(0); }

float *checkpoint(GroupBackward &g, int64_t u, int64_t seg) { return g.checkpoints.data() + (u * g.segments + seg) * g.area; }

// Unit u's kept rows (units x tokens x width) of chunk ci: its Z (width Sv) or KDA's e (width
// Sk); nullptr where none are kept. The last chunk's are not: the forward pass would prepare that
// chunk only to solve it, and the reverse walk prepares it anyway.
float *kept_rows_of(AlignedVector<float> &kept, int64_t width, const GroupBackward &g, const std::vector<int64_t> &ends,
                    int64_t u, int64_t ci) {
    if (kept.empty() || ci + 1 == static_cast<int64_t>(ends.size())) return nullptr;
    return kept.data() + (u * g.tokens + start_of(ends, ci)) * width;
}
float *kept_z_of(GroupBackward &g, const std::vector<int64_t> &ends, int64_t u, int64_t ci) {
    return kept_rows_of(g.kept_z, g.Sv, g, ends, u, ci);
}
float *kept_e_of(GroupBackward &g, const std::vector<int64_t> &ends, int64_t u, int64_t ci) {
    return kept_rows_of(g.kept_e, g.Sk, g, ends, u, ci);
}
// Whether chunk ci's gates will be taken from a kept e (prepare_unit_chunk does for L > 1), so
// that its gate rows need not be asked for.
bool gates_kept(GroupBackward &g, const std::vector<int64_t> &ends, int64_t u, int64_t ci) {
    return ends[ci] - start_of(ends, ci) > 1 && kept_e_of(g, ends, u, ci) != nullptr;
}

// Entry state of chunk c0 + j of segment seg: the checkpoint, then replayed states.
float *entry(GroupBackward &g, int64_t u, int64_t seg, int64_t j) {
    return j == 0 ? checkpoint(g, u, seg) : g.replay.data() + (u * g.replay_slots + j) * g.area;
}

int64_t spare_of(const GroupBackward &g, int64_t u) { return g.units + (g.spares == 1 ? 0 : u); }

float *slot_of(GroupBackward &g, int64_t u, int64_t j) {
    return g.pieces.data() + (u * g.chunks_per_segment + j) * g.slot_floats;
}

struct Segment {
    int64_t c0, c1;  // its chunks [c0, c1)
};

Segment segment_of(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t seg, const GroupBackward &g) {
    const int64_t per_seg = backward_layout(a.dims, ends, g.C).chunks_per_segment, c0 = seg * per_seg;
    return {c0, std::min<int64_t>(static_cast<int64_t>(ends.size()), c0 + per_seg)};
}

// One chunk forward of unit u (the group's chunk and K K^T loaded): s_next = the state after the
// chunk from s (s_next may be s: updated in place). The forward pass solves for Dm and keeps the
// chunk's Z (and KDA's e) where kept_z_of (kept_e_of) has room, streamed out (nothing reads them
// before the reverse walk; replay = false); the replay takes Dm from that Z and the gates from
// that e (replay = true). Issues a share of `coming` after each of its kForwardChunkSteps steps.
constexpr int kForwardChunkSteps = 3;
void forward_chunk(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t ci, int64_t bq, int64_t kh,
                   int64_t u, const float *s, float *s_next, bool replay, GroupBackward &g, ChunkScratch &c,
                   PacedPrefetch &coming) {
    const ChunkUnit unit = group_unit(a.dims, bq, kh, u);
    const int64_t t0 = start_of(ends, ci), t1 = ends[ci], L = t1 - t0;
    float *kept_z = kept_z_of(g, ends, u, ci), *kept_e = kept_e_of(g, ends, u, ci);
    prepare_unit_chunk(*a.g, *a.beta, a.dims, unit, t0, L, false, KnownGates{nullptr, replay ? kept_e : nullptr}, c);
    coming.step();
    const float *z = chunk_deltas(*a.v, a.dims, unit, t0, L, s, replay ? kept_z : nullptr, c);
    if (!replay && kept_z) store_rows_streamed(z, L, g.Sv, kept_z, g.Sv);
    if (!replay && kept_e) store_rows_streamed(c.e.data(), L, c.gw, kept_e, c.gw);
    coming.step();
    advance_state(s, s_next, L, c);
    coming.step();
}

// Starts `coming` on the rows a forward pass over chunk ci (replay: a replay) reads of chunk
// ci + 1, paced over the forward_chunk calls of `units`: the group's K rows, then each unit's v
// (not where a replay takes its Z), g (not where its gates are kept) and beta rows.
void queue_next_forward_rows(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t ci, int64_t bq,
                             int64_t kh, UnitRange units, bool replay, GroupBackward &g, PacedPrefetch &coming) {
    coming.start(static_cast<int>((units.end - units.begin) * kForwardChunkSteps));
    if (ci + 1 >= static_cast<int64_t>(ends.size())) return;
    const int64_t t1 = ends[ci], t2 = ends[ci + 1];
    coming.add_rows(a.k, kh, t1, t2, bq, a.dims.Sk, Pages::Read);
    for (int64_t u = units.begin; u < units.end; ++u) {
        const ChunkUnit unit = group_unit(a.dims, bq, kh, u);
        const bool z_kept = replay && kept_z_of(g, ends, u, ci), next_gates_kept = replay && gates_kept(g, ends, u, ci + 1);
        coming.add_rows(z_kept ? nullptr : a.v, unit.h, t1, t2, unit.b, a.dims.Sv, Pages::Read);
        coming.add_rows(next_gates_kept ? nullptr : a.g, unit.h, t1, t2, unit.b, a.dims.gate_width, Pages::Read);
        coming.add_rows(a.beta, unit.h, t1, t2, unit.b, 1, Pages::Read);
    }
}

// The entry states of the segment's chunks after its first, from its checkpoint.
void replay_segment(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, UnitRange units,
                    int64_t seg, GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const Segment s = segment_of(a, ends, seg, g);
    for (int64_t ci = s.c0; ci + 1 < s.c1; ++ci) {
        const int64_t t0 = start_of(ends, ci), j = ci - s.c0;
        load_group_chunk(*a.q, *a.k, a.dims, bq, kh, t0, ends[ci] - t0, false, c);
        queue_next_forward_rows(a, ends, ci, bq, kh, units, true, g, w.coming_rows);
        for (int64_t u = units.begin; u < units.end; ++u)
            forward_chunk(a, ends, ci, bq, kh, u, entry(g, u, seg, j), entry(g, u, seg, j + 1), true, g, c,
                          w.coming_rows);
        w.coming_rows.finish();
    }
}

// Unit u's backward over chunk ci of segment seg (the group's rows and gram loaded): carries
// dL/dS from the chunk's end to its start, adding the chunk end's d_states. While it runs, the
// rows of the chunk before that the walk reads next are asked for: the unit's, and with
// group_rows (the first unit of the chunk's walk) the group's Q and K rows first.
UnitPieces unit_chunk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t ci,
                      int64_t u, int64_t seg, int64_t j, bool group_rows, GroupBackward &g, BackwardWork &w) {
    const Dims &d = a.dims;
    const ChunkUnit unit = group_unit(d, bq, kh, u);
    const int64_t t0 = start_of(ends, ci), t1 = ends[ci], L = t1 - t0;
    const int64_t prev_start = ci > 0 ? start_of(ends, ci - 1) : t0;
    const float *kept_z = kept_z_of(g, ends, u, ci), *kept_e = kept_e_of(g, ends, u, ci);
    const bool prev_gates_kept = ci > 0 && gates_kept(g, ends, u, ci - 1);
    // The unit's rows of the chunk before (the next this walk reads), over this chunk's steps.
    w.coming_rows.start(kUnitChunkSteps);
    if (group_rows) {
        w.coming_rows.add_rows(a.q, kh, prev_start, t0, bq, d.Sk, Pages::Read);
        w.coming_rows.add_rows(a.k, kh, prev_start, t0, bq, d.Sk, Pages::Read);
    }
    w.coming_rows.add_rows(kept_z ? nullptr : a.v, unit.h, prev_start, t0, unit.b, d.Sv, Pages::Read);
    w.coming_rows.add_rows(prev_gates_kept ? nullptr : a.g, unit.h, prev_start, t0, unit.b, d.gate_width, Pages::Read);
    w.coming_rows.add_rows(a.beta, unit.h, prev_start, t0, unit.b, 1, Pages::Read);
    w.coming_rows.add_rows(a.d_out, unit.h, prev_start, t0, unit.b, d.Sv, Pages::Read);
    int64_t &current = g.carry_slab[u], &spare = g.carry_slab[spare_of(g, u)];
    float *dsl = g.carries.data() + current * g.area, *ds0 = g.carries.data() + spare * g.area;
    const int64_t slot = d.T - t1;
    if (a.d_states && slot < d.written_slots()) {
        load_state(*a.d_states, d, unit.h, slot * d.B + unit.b, w.d_state.data(), d.Sv);
        axpy(1.0f, w.d_state.data(), dsl, g.area);
    }
    const UnitPieces p = backward_unit_chunk(a, unit, t0, L, entry(g, u, seg, j), kept_z, kept_e, dsl, ds0, w);
    w.coming_rows.finish();
    std::swap(current, spare);
    return p;
}

// The group's rows of chunk ci for the reverse walk (the next chunk's are asked for by the first
// unit's step: unit_chunk).
void load_reverse_rows(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t ci,
                       ChunkScratch &c) {
    const int64_t t0 = start_of(ends, ci);
    load_group_rows(*a.q, *a.k, a.dims, bq, kh, t0, ends[ci] - t0, true, c);
}

void store_ds0(const BackwardArgs &a, int64_t bq, int64_t kh, UnitRange units, GroupBackward &g) {
    if (!a.ds0) return;
    for (int64_t u = units.begin; u < units.end; ++u) {
        const ChunkUnit unit = group_unit(a.dims, bq, kh, u);
        store_state(*a.ds0, a.dims, unit.h, unit.b, g.carries.data() + g.carry_slab[u] * g.area, a.dims.Sv);
    }
}

}  // namespace

void backward_checkpoints(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                          UnitRange units, GroupBackward &g, BackwardWork &w) {
    const Dims &d = a.dims;
    const int64_t chunks = static_cast<int64_t>(ends.size());
    const int64_t per_seg = backward_layout(d, ends, g.C).chunks_per_segment;
    // The state runs in the unit's own carry slab (hot in cache, updated in place; only that slab:
    // ranges of one group's units may run on several workers at once); each segment's entry state
    // is streamed out to its checkpoint, which the reverse walk reads only much later.
    auto running = [&](int64_t u) { return g.carries.data() + g.carry_slab[u] * g.area; };
    for (int64_t u = units.begin; u < units.end; ++u) {
        const ChunkUnit unit = group_unit(d, bq, kh, u);
        float *first = checkpoint(g, u, 0);
        if (a.s0) load_state(*a.s0, d, unit.h, unit.b, first, d.Sv);
        else std::fill(first, first + g.area, 0.0f);
    }
    for (int64_t ci = 0; ci + 1 < chunks; ++ci) {
        const int64_t t0 = start_of(ends, ci);
        load_group_chunk(*a.q, *a.k, d, bq, kh, t0, ends[ci] - t0, false, w.chunk);
        queue_next_forward_rows(a, ends, ci, bq, kh, units, false, g, w.coming_rows);
        for (int64_t u = units.begin; u < units.end; ++u) {
            forward_chunk(a, ends, ci, bq, kh, u, ci == 0 ? checkpoint(g, u, 0) : running(u), running(u), false, g,
                          w.chunk, w.coming_rows);
            if ((ci + 1) % per_seg == 0) store_rows_streamed(running(u), 1, g.area, checkpoint(g, u, (ci + 1) / per_seg), 0);
        }
        w.coming_rows.finish();
    }
    for (int64_t u = units.begin; u < units.end; ++u) std::fill_n(running(u), g.area, 0.0f);
}

void backward_gram(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t seg,
                   GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    if (c.kda || seg < 0) return;
    const Segment s = segment_of(a, ends, seg, g);
    for (int64_t ci = s.c0; ci < s.c1; ++ci) {
        const int64_t t0 = start_of(ends, ci), L = ends[ci] - t0;
        load_group_rows(*a.q, *a.k, a.dims, bq, kh, t0, L, true, c);
        group_gram(L, true, c, g.gram.data() + (ci - s.c0) * 2 * g.C * g.C);
    }
}

void backward_unit_segment(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                           UnitRange units, int64_t seg, GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const Segment s = segment_of(a, ends, seg, g);
    replay_segment(a, bq, kh, ends, units, seg, g, w);
    for (int64_t ci = s.c1 - 1; ci >= s.c0; --ci) {
        const int64_t j = ci - s.c0, L = ends[ci] - start_of(ends, ci);
        load_reverse_rows(a, bq, kh, ends, ci, c);
        if (!c.kda) c.gram_view = g.gram.data() + j * 2 * g.C * g.C;
        for (int64_t u = units.begin; u < units.end; ++u) {
            const UnitPieces p = unit_chunk(a, bq, kh, ends, ci, u, seg, j, u == units.begin, g, w);
            store_pieces(L, p, c.kda, c.Sk, g.C, slot_of(g, u, j));
        }
    }
    if (seg == 0) store_ds0(a, bq, kh, units, g);
}

void backward_reduce_segment(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                             int64_t seg, GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const Segment s = segment_of(a, ends, seg, g);
    for (int64_t ci = s.c0; ci < s.c1; ++ci) {
        const int64_t t0 = start_of(ends, ci), L = ends[ci] - t0, j = ci - s.c0;
        load_group_rows(*a.q, *a.k, a.dims, bq, kh, t0, L, true, c);
        start_group_chunk(L, w);
        for (int64_t u = 0; u < g.units; ++u) add_unit_share(L, stored_pieces(L, c.kda, c.Sk, g.C, slot_of(g, u, j)), w);
        finish_group_chunk(a, bq, kh, t0, L, w);
    }
}

void backward_reverse_walk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                           GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const UnitRange all{0, g.units};
    const int64_t segments = backward_layout(a.dims, ends, g.C).segments;
    for (int64_t seg = segments - 1; seg >= 0; --seg) {
        const Segment s = segment_of(a, ends, seg, g);
        replay_segment(a, bq, kh, ends, all, seg, g, w);
        for (int64_t ci = s.c1 - 1; ci >= s.c0; --ci) {
            const int64_t t0 = start_of(ends, ci), L = ends[ci] - t0;
            load_reverse_rows(a, bq, kh, ends, ci, c);
            if (!c.kda) {
                group_gram(L, true, c, c.gram.data());
                c.gram_view = c.gram.data();
            }
            start_group_chunk(L, w);
            for (int64_t u = 0; u < g.units; ++u)
                add_unit_share(L, unit_chunk(a, bq, kh, ends, ci, u, seg, ci - s.c0, u == 0, g, w), w);
            finish_group_chunk(a, bq, kh, t0, L, w);
        }
    }
    store_ds0(a, bq, kh, all, g);
}

void backward_group(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, GroupBackward &g,
                    BackwardWork &w) {
    backward_checkpoints(a, bq, kh, ends, {0, g.units}, g, w);
    backward_reverse_walk(a, bq, kh, ends, g, w);
}

}  // namespace gdn::cpu
