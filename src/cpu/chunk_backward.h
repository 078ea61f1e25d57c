// One unit's backward over one chunk, and its share of the group's dq, dk (chunk_backward.cpp);
// the steps and schedules that call these are in chunk_drivers.h.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "cpu/chunk_drivers.h"
#include "cpu/value_columns.h"

namespace gdn::cpu {

// What one unit adds to its group's dq, dk (and GDA's GP, GM) for one chunk of L tokens: the
// operands add_unit_share reads, not their products, so that adding copies of them later (the
// split schedule) gives the bits that adding them at once (the group schedule) gives.
struct UnitPieces {
    const float *e = nullptr, *f = nullptr;                       // GDA: L; KDA: L x Sk
    const float *dqg = nullptr, *dkg = nullptr, *dkl = nullptr;   // L x Sk (KDA: with the Kinv product added)
    const float *dp = nullptr, *dm = nullptr, *gam_mat = nullptr;  // GDA: L x L
    const float *dp_diag = nullptr;                               // KDA: L
    const float *einv = nullptr, *dkinv = nullptr;                // KDA: L x Sk
};

// What one panel of a unit's value columns (BackwardPanels) adds to the chunk's sums over value
// columns, each from zero: [dQg; dKg] (2L x Sk), dKl (L x Sk), [dP; dM] (2L x L, zero above
// the triangles), dbeta's dots Y_r . Z_r (L), and the gL term's sums dSL . S0 (gw, before the
// factor gL). A unit's sums are its panels' added in panel order (add_column_sums), whoever
// computed them.
struct ColumnSums {
    float *dqkg, *dkl, *dpm, *dbeta;
    double *wterm;
};
// A ColumnSums of chunks up to C tokens laid out in `floats` (column_sums_floats of them).
int64_t column_sums_floats(int64_t C, int64_t Sk, int64_t gw);
ColumnSums column_sums_at(float *floats, int64_t C, int64_t Sk);
// The unit's sums in w (dqkg, dkl, dpm, dbeta_dots, wterm).
ColumnSums unit_totals(BackwardWork &w);
// into += from (L tokens); copy: into = from: a split by panels adds its panels' sums so, with
// the bits of the products that accumulate them on one worker (backward_columns_chunk).
void add_column_sums(int64_t L, int64_t Sk, int64_t gw, const ColumnSums &from, const ColumnSums &into);
void copy_column_sums(int64_t L, int64_t Sk, int64_t gw, const ColumnSums &from, const ColumnSums &into);

// A unit's backward over chunk [t0, t0 + L) in three parts (the formulas in chunk_backward.cpp):
//   prepare_backward_unit   its gates, P and M (the key side every panel reads; KDA's gate
//                           factors e as the forward pass kept them, nullptr: from the g rows);
//   backward_columns_chunk  the gradients of whole panels of its value columns: all of them, or
//                           one (the call narrowed to them: window), from their entry state s0
//                           and their Z (L rows of the window's width, nullptr: solved again):
//                           dsl = dL/dS_L in, ds0 = dL/dS0 out (states in panels of `panel`
//                           columns, StatePanels), their dv rows written, and their ColumnSums
//                           into `sums`, panel by panel, each panel's products adding to the
//                           panels' before (the bits of add_column_sums, without a pass of its
//                           own);
//   finish_backward_unit    from the unit's ColumnSums in w (unit_totals): the dg and dbeta rows,
//                           and the pieces of the group's dq, dk.
// The group's Q, K rows (and GDA's gram) are loaded in w.chunk. The pieces point into w (valid
// until its next call). Between its steps each part issues a share of w.coming_rows
// (PacedPrefetch): unit_chunk_steps(panels) in all (0 panels: prepare and finish alone; less
// kFinishSteps without the finish).
void prepare_backward_unit(const BackwardArgs &a, ChunkUnit unit, int64_t t0, int64_t L, const float *e,
                           BackwardWork &w);
void backward_columns_chunk(const BackwardWindow &window, int64_t panel, ChunkUnit unit, int64_t t0, int64_t L,
                            const float *s0, const float *z, const float *dsl, float *ds0, const ColumnSums &sums,
                            BackwardWork &w);
UnitPieces finish_backward_unit(const BackwardArgs &a, ChunkUnit unit, int64_t t0, int64_t L, BackwardWork &w);
constexpr int kFinishSteps = 2;
constexpr int unit_chunk_steps(int64_t panels) {
    return 1 + kFinishSteps + (panels > 0 ? 4 + 3 * static_cast<int>(panels) : 0);
}

// The group's accumulators w.dq, w.dk (GDA: w.gp, w.gm) set to zero for a chunk of L tokens.
void start_group_chunk(int64_t L, BackwardWork &w);
// Adds one unit's pieces to the accumulators (KDA reads the group's Q, K rows in w.chunk).
void add_unit_share(int64_t L, const UnitPieces &p, BackwardWork &w);
// GDA: dQ += GP K, dK += [GP^T, GM + GM^T] [Q; K] (Q, K rows loaded); then dq, dk rows written.
void finish_group_chunk(const BackwardArgs &a, int64_t bq, int64_t kh, int64_t t0, int64_t L, BackwardWork &w);

// Slots of the split schedule: one unit's pieces of one chunk, copied (regions sized for C).
int64_t pieces_slot_floats(const Dims &d, int64_t max_chunk);
void store_pieces(int64_t L, const UnitPieces &p, bool kda, int64_t Sk, int64_t C, float *slot);
UnitPieces stored_pieces(int64_t L, bool kda, int64_t Sk, int64_t C, const float *slot);

}  // namespace gdn::cpu
