// The chunked forward and backward of one group (q/k sequence bq, key head kh): every unit that
// reads the group's key head, chunk by chunk, sharing the group's Q K^T and K K^T (GDA). dq and
// dk are summed over the group's units in a fixed order (b ascending, then value heads), so the
// result does not depend on which worker ran the group.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "cpu/chunk_core.h"

namespace gdn::cpu {

// Units of a group, in the fixed order.
inline ChunkUnit group_unit(const Dims &d, int64_t bq, int64_t kh, int64_t u) {
    const int64_t per_kh = d.value_heads_per_key_head();
    return {bq * d.sequences_per_qk_sequence() + u / per_kh, d.value_head_of(kh, u % per_kh)};
}

struct ForwardWork {
    ChunkScratch chunk;
    std::vector<float> states;  // units x Sk x Sv: the running states
    void resize(const Dims &d, int64_t max_chunk);
    uint64_t bytes() const;
};

// Units [unit_begin, unit_end) of the group (all of them, or a slice when there are fewer groups
// than threads: the units of a forward are independent, and each slice computes the group's
// Q K^T, K K^T itself, so the bits do not depend on the slicing).
void forward_group(const ForwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                   int64_t unit_begin, int64_t unit_end, ForwardWork &w);

// The backward stores the entry state of the first chunk of every segment of `chunks_per_segment`
// chunks, then replays one segment at a time (chunks_per_segment is 1 unless snapshots or KDA
// spans cut the tokens into many more chunks than T / max_chunk).
struct BackwardLayout {
    int64_t chunks_per_segment = 1, segments = 0;
    static BackwardLayout of(int64_t chunks, int64_t T, int64_t max_chunk);
};

struct BackwardWork {
    ChunkScratch chunk;
    std::vector<float> checkpoints;  // segments x units x area
    std::vector<float> replay;       // units x max(3, chunks_per_segment) x area (chunks_per_segment > 1)
    std::vector<float> carries;      // (units + 1) x area: dL/dS at the current chunk end, and a spare
    std::vector<int64_t> carry_slab; // units + 1: which slab of carries is unit u's; the last is the spare
    std::vector<float> d_state;      // area
    std::vector<float> doy;          // 2C x Sv: scale * dO, then -beta o Y
    std::vector<float> y, ddm;       // C x Sv
    std::vector<float> dqkg;         // 2C x Sk: dQg, then dKg
    std::vector<float> dkl, dkinv;   // C x Sk
    std::vector<float> dpm;          // 2C x C: dP, then dM
    std::vector<float> gp, gm;       // C x C: GDA sums over the group's units of dP o Gam, dM o Gam
    std::vector<float> gm_pair;      // C x 2C: [GP^T, GM + GM^T]
    std::vector<float> dq, dk;       // C x Sk: the group's dq, dk rows of the chunk
    std::vector<double> single, link, pair, acc, dgam;  // C x gw: gate-gradient pieces
    std::vector<double> wterm;       // gw: the gL term of the gate gradient
    void resize(const Dims &d, int64_t max_chunk, const BackwardLayout &layout);
    uint64_t bytes() const;
};

void backward_group(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                    BackwardWork &w);

}  // namespace gdn::cpu
