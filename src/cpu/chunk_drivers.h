// The chunked forward and backward of one group (q/k sequence bq, key head kh): every unit that
// reads the group's key head, chunk by chunk, sharing the group's Q K^T and K K^T (GDA). dq and
// dk are summed over the group's units in a fixed order (b ascending, then value heads), so the
// result does not depend on which worker ran the group or its units. A forward work item may
// take several neighbouring groups, which go chunk by chunk in turn (forward_group).
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "cpu/chunk_core.h"
#include "cpu/chunk_plan.h"
#include "cpu/paced_prefetch.h"
#include "cpu/value_columns.h"  // BackwardPanels

namespace gdn::cpu {

// Units of a group, in the fixed order.
inline ChunkUnit group_unit(const Dims &d, int64_t bq, int64_t kh, int64_t u) {
    const int64_t per_kh = d.value_heads_per_key_head();
    return {bq * d.sequences_per_qk_sequence() + u / per_kh, d.value_head_of(kh, u % per_kh)};
}

// The most groups (neighbouring key heads of one q/k sequence) a forward work item takes.
constexpr int64_t kMaxForwardGroups = 4;

// Key heads [begin, end) of a q/k sequence (forward_group: at most kMaxForwardGroups).
struct KeyHeads {
    int64_t begin, end;
};

struct ForwardWork {
    ChunkScratch chunk;
    AlignedVector<float> states;  // groups x units x Sk x Sv: the running states
    std::vector<ChunkPlanner> planners;  // one per group of an item
    AlignedVector<double> planned_gam;  // KDA: units x C x gw, the chunk's prefix sums its planner kept
    PacedPrefetch next_rows;           // the next chunk's token rows, asked for over this one's steps
    // For items of up to `groups` groups (forward_group's heads).
    void resize(const Dims &d, int64_t max_chunk, int64_t groups = 1);
    uint64_t bytes() const;
};

// The groups of key heads `heads` of q/k sequence bq (one, or several going chunk by chunk in
// turn: forward_groups_per_item in cpu/forward_schedule.h; each group's arithmetic is the same
// either way): units [unit_begin, unit_end) of each group (all of them, or a slice where whole groups would
// leave threads waiting, cpu/forward_schedule.h: the units of a forward are independent, and each
// slice computes the group's Q K^T, K K^T itself, so the bits do not depend on the slicing), and
// of each unit the value columns `columns` (all of them, or a block where even single units
// would leave threads waiting: cpu/value_columns.h, the same bits again). Chunks of at most
// max_chunk tokens, cut where plan_chunks cuts them, planned as the forward goes.
void forward_group(const ForwardArgs &call, int64_t bq, KeyHeads heads, int64_t max_chunk, int64_t unit_begin,
                   int64_t unit_end, ColumnRange columns, ForwardWork &w);

// The backward stores the entry state of the first chunk of every segment of `chunks_per_segment`
// chunks, then replays one segment at a time (chunks_per_segment is 1 unless snapshots or KDA
// spans cut the tokens into many more chunks than T / max_chunk).
struct BackwardLayout {
    int64_t chunks_per_segment = 1, segments = 0;
    static BackwardLayout of(int64_t chunks, int64_t T, int64_t max_chunk);
    static BackwardLayout widest(const BackwardLayout &a, const BackwardLayout &b);
};

// The backward of a group, chunks in reverse (chunk_backward.cpp: one unit's chunk; backward_steps.cpp:
// the steps). Per chunk each unit computes its own gradients (dv, dg, dbeta; ds0 after the first
// chunk) and the pieces of its share of the group's dq, dk (UnitPieces, chunk_backward.h), which
// are added to the group's accumulators unit by unit in unit order. A unit's chunk runs panel by
// panel of its value columns (BackwardPanels): the column-local gradients (dv, dS0) and each
// panel's ColumnSums, which are added in panel order before the unit's dg, dbeta and pieces are
// made from them. Three schedules run the same arithmetic in the same order:
//   group schedule (backward_group): one worker runs a group's steps, and adds each unit's
//     pieces the moment the unit has computed them, while they are in cache (no copies);
//   split schedules (backward_schedule.h: rounds over all groups' units, or their panels) from
//   these steps:
//     backward_checkpoints     (unit)   the forward pass: the unit's state at every segment start,
//                              (panel)  and (when kept) the chunks' prediction errors Z
//     backward_gram   (group, chunk)  GDA: [Q; K] K^T of round 0's chunks (the last ones)
//     then per round (a run of segments), last to first:
//       backward_unit_round   (unit)   replay each segment, walk its chunks backwards: the unit's
//                                      own gradients, and its pieces copied into its slot;
//                             (panel)  or the panel's gradients and ColumnSums into its slot
//       backward_finish_chunk (unit, chunk)   split by panels: the panels' sums added in panel
//                                      order, the unit's dg, dbeta, and its pieces into its slot
//       backward_reduce_chunk (group, chunk)  the slots' pieces added in unit order (the same
//                                      function on copies of the same operands), the group
//                                      products (GDA), dq, dk rows written
//       backward_gram   (group, chunk)  beside them, the grams of the next round (the chunks
//                                      before; read by its unit steps and finishes)
// The forward pass keeps every chunk's Z but the last's (chunk_core.h: Dm = diag(beta) Z) where a
// chunk's Z is no larger than a state (C <= Sk; so the workspace stays within two states per
// chunk), and the replay and the reverse walk take Dm from it instead of solving again (V - Kg S0
// and the substitution: about a tenth of the backward's products at the models' shapes); the
// same bits either way.
// A unit step reads only its own unit's state and the group's inputs, and a panel step only its
// columns of them, so the units of a group, and the panels of a unit, may run on different
// workers. Either way each chunk's accumulators start at zero and take the panels' sums in panel
// order and the units' pieces in unit order through the same (not inlined) functions, so the bits
// do not depend on the schedule or the thread count. The forward pass and replay compute K K^T
// per chunk where they run (once per group in the group schedule, once per unit or panel in the
// split ones; the same product either way); the reverse walk's [Q; K] K^T is the same call in all.

// Per-worker scratch of the steps.
struct BackwardWork {
    ChunkScratch chunk;
    AlignedVector<float> d_state;      // area
    AlignedVector<float> doy;          // 2C x Sv: scale * dO, then -beta o Y
    AlignedVector<float> y;            // C x Sv: dDm, then Y in its place
    AlignedVector<float> dqkg;         // 2C x Sk: dQg, then dKg
    AlignedVector<float> dkl, dkinv;   // C x Sk
    AlignedVector<float> dpm_kinv;     // KDA: 2C x Sk, [dP; dM] Kinv
    AlignedVector<float> dpm;          // 2C x C: dP, then dM
    AlignedVector<float> dp_diag;      // KDA: C, the diagonal of dP (zeroed in dpm before its products)
    AlignedVector<float> dg_rows;      // KDA: C x gw, the chunk's dg rows before they are streamed out
    AlignedVector<float> dq, dk;       // C x Sk: the group's chunk accumulators
    AlignedVector<float> gp, gm;       // GDA: C x C, sum over units of dP o Gam, dM o Gam
    AlignedVector<float> gm_pair;      // C x 2C: [GP^T, GM + GM^T]
    AlignedVector<double> single, link, pair, dgam;  // C x gw: gate-gradient pieces
    AlignedVector<double> acc;         // GDA: C column sums of the pairs; then 2 gw running sums
    AlignedVector<double> wterm;       // gw: the gL term of the gate gradient
    AlignedVector<float> dbeta_dots;   // C: Y_r . Z_r
    AlignedVector<double> panel_wterm; // gw: one panel's part of wterm's sums
    // dqkg, dkl, dpm, dbeta_dots and wterm are a unit's ColumnSums (chunk_backward.h).
    PacedPrefetch coming_rows;         // token rows of the chunk the steps read next, asked for over this one's
    void resize(const Dims &d, int64_t max_chunk);
    uint64_t bytes() const;
};

// Which work items a call's backward runs (backward_schedule.h): whole groups, or split into
// units, or into units' panels of value columns (BackwardPanels).
enum class BackwardItems { Groups, Units, Panels };

// What a group's backward keeps between its steps. Sized for the widest call and layout; the
// split schedules (one per group) also keep a round's grams and every unit's pieces per chunk
// of the round, and split by panels every panel's ColumnSums per chunk; the group schedule
// (one per worker, and one per tail group) none of these. A unit's states are in its panels
// (BackwardPanels: Sk x width blocks); its kept Z in rows of Sv, or split by panels panel after
// panel.
// The split schedules run a round's segments (segments_per_round of them, about kRoundChunks
// chunks) between two waits for all workers: a round of one chunk would wait once per 64 tokens.
constexpr int64_t kRoundChunks = 4;
struct GroupBackward {
    int64_t units = 0, area = 0, C = 0, segments = 0, chunks_per_segment = 1, replay_slots = 0, segments_per_round = 1;
    int64_t slot_floats = 0, sums_floats = 0, tokens = 0, Sv = 0, Sk = 0;
    BackwardPanels panels{0, 1};
    AlignedVector<float> checkpoints;  // units x segments x area
    AlignedVector<float> kept_z;       // units x tokens x Sv: the chunks' Z (when C <= Sk, else empty)
    AlignedVector<float> kept_e;       // KDA: units x tokens x Sk, the chunks' exp(gam) (as kept_z)
    AlignedVector<float> replay;       // units x chunks_per_segment x area (chunks_per_segment > 1)
    AlignedVector<float> carries;      // units x 2 x area: dL/dS at a chunk's end and start (carry in backward_steps.cpp)
    // Per chunk of a round (segments_per_round x chunks_per_segment):
    AlignedVector<float> gram;         // split, GDA: 2C x C, [Q; K] K^T
    AlignedVector<float> pieces;       // split: units x slot_floats (UnitPieces)
    AlignedVector<float> panel_sums;   // split by panels: units x panels x sums_floats
    void resize(const Dims &d, int64_t max_chunk, const BackwardLayout &layout, BackwardItems items);
    uint64_t bytes() const;
};

BackwardLayout backward_layout(const Dims &d, const std::vector<int64_t> &ends, int64_t max_chunk);

// The unit steps take a range of the group's units and of their panels, chunk by chunk and unit
// by unit inside a chunk (one load of the chunk's rows for all of them); each unit's and each
// panel's arithmetic is the same whatever the ranges.
struct UnitRange {
    int64_t begin, end;
};
struct PanelRange {
    int64_t begin, end;
};
PanelRange all_panels(const GroupBackward &g);
void backward_checkpoints(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                          UnitRange units, PanelRange panels, GroupBackward &g, BackwardWork &w);
// The split schedules' steps (g sized with their BackwardItems), round by round from round 0,
// the last segments (backward_rounds of them, backward_round_chunks chunks each: 0 past the
// last; a round's tokens weigh its unit steps). The steps after the units' take one chunk j of a
// round each: its chunks are independent there.
int64_t backward_rounds(const BackwardArgs &a, const std::vector<int64_t> &ends, const GroupBackward &g);
int64_t backward_round_chunks(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t round,
                              const GroupBackward &g);
int64_t backward_round_tokens(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t round,
                              const GroupBackward &g);
void backward_gram(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t round,
                   int64_t j, GroupBackward &g, BackwardWork &w);
// With every panel the units' pieces go to their slots; with some, the panels' ColumnSums, which
// backward_finish_chunk (unit u, once every panel's step of the round is done) adds up in panel
// order into the unit's dg, dbeta and pieces.
void backward_unit_round(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                         UnitRange units, PanelRange panels, int64_t round, GroupBackward &g, BackwardWork &w);
void backward_finish_chunk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t u,
                           int64_t round, int64_t j, GroupBackward &g, BackwardWork &w);
void backward_reduce_chunk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                           int64_t round, int64_t j, GroupBackward &g, BackwardWork &w);

// The group schedule: the whole backward of one group on one worker, backward_checkpoints over
// all its units and then backward_reverse_walk. The two may run apart (backward_schedule.h: a
// call's last groups take their forward pass unit by unit on any worker, then the walk), the
// walk after every unit's checkpoints, on a GroupBackward sized with BackwardItems::Groups.
void backward_reverse_walk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                           GroupBackward &g, BackwardWork &w);
void backward_group(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, GroupBackward &g,
                    BackwardWork &w);

}  // namespace gdn::cpu
