// One unit's backward over one chunk, and its share of the group's dq, dk (chunk_backward.cpp);
// the steps and schedules that call these are in chunk_drivers.h.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "cpu/chunk_drivers.h"

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

// The unit's backward over chunk [t0, t0 + L) from its entry state s0, its Z (L x Sv) and KDA's
// gate factors e (L x Sk), as the forward pass kept them (nullptr: solved again, chunk_deltas;
// computed again from the g rows): dsl = dL/dS_L in, ds0 = dL/dS0 out; writes the unit's dv, dg,
// dbeta rows. The group's Q, K rows (and GDA's gram) are loaded in w.chunk. The pieces point
// into w (valid until its next call). Between its steps it issues shares of w.coming_rows
// (PacedPrefetch), started for kUnitChunkSteps steps.
constexpr int kUnitChunkSteps = 10;
UnitPieces backward_unit_chunk(const BackwardArgs &a, ChunkUnit unit, int64_t t0, int64_t L, const float *s0,
                               const float *z, const float *e, const float *dsl, float *ds0, BackwardWork &w);

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
