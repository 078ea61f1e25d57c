// Where the chunked kernels cut the T tokens of a group into chunks.
//
// A chunk is at most max_len tokens. It also ends
//  - after every token whose state is a snapshot slot (slot s = state after token T-1-s), so
//    that snapshot states and their gradients sit on chunk boundaries, and
//  - for per-channel gates (KDA), before the cumulative gate of any unit of the group spans more
//    than kda_span_limit inside the chunk (max - min over the chunk's prefix sums, per channel):
//    the KDA form factors exp(gam_r - gam_s) as exp(gam_r) * exp(-gam_s), which must stay
//    finite. A single token is always a chunk, whatever its gate.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "cpu/gemm.h"

namespace gdn::cpu {

constexpr double kda_span_limit = 60.0;  // exp(60) ~ 1e26: products of two such factors stay < FLT_MAX

// Gates below this are clamped: exp() is 0 in float either way, and finite prefix sums keep every
// difference gam_r - gam_s a number (-inf - -inf would be NaN).
constexpr double gate_floor = -1.0e4;

inline double clamp_gate(double g) { return g < gate_floor ? gate_floor : g; }  // NaN stays NaN

struct GroupRef {
    const gdn_tensor *g;
    const Dims *dims;
    int64_t bq, kh;
};

// The default chunk length, at least one GEMM kernel panel so that the L x L products fill whole
// panels. Measured on AVX2 (16-column panels; docs/PERF.md, "Design findings"), 32 tokens against
// 64: forward 0.93-0.99 of the time, KDA backward 0.84-0.92 (its L x L products are per unit,
// not per group). A backward keeps a state per chunk and unit, so 32 doubles those checkpoints:
// worth it for KDA, not for the GDA backward (0.96-1.05), which keeps 64. 16 is no faster than
// 32. With AVX-512 the same choice (with 12 x 32 tiles for the products with a side of 32)
// measured forward 0.94-1.00 (a noisy host) and KDA backward 0.94 of 64 tokens with 6 x 64 tiles.
// With bf16 products (AMX) the KDA backward keeps 64 too: its products with a side of 32 are the
// AMX kernel's weakest (one tile step per block); 64 measured 0.91 of 32's time on the 27B shape
// (docs/PERF.md), while the forward gained nothing (1.62x against 1.66x the F32 call's rate).
inline int64_t default_chunk(bool backward, bool kda, bool bf16_products = false) {
    return std::max<int64_t>(backward && (!kda || bf16_products) ? 64 : 32, gemm_panel_width());
}

// Units (sequence, value head) that read one group's key head.
inline int64_t units_of(const Dims &d) { return d.value_heads_per_key_head() * d.sequences_per_qk_sequence(); }

// Plans a group's chunks front to back, one at a time: plan_chunks runs it over all T tokens
// (the backward needs every end before it starts), the forward as it goes, so that the forward
// reads a KDA chunk's gate rows once (once per slice when a group's units are split over
// workers: each slice plans every unit): the prefix sums that decide where the chunk ends are
// the ones compute_gates would add up again (the same additions in the same order), and are kept.
class ChunkPlanner {
public:
    // Allocates for groups of calls like d (reset and next_end allocate nothing: the forward
    // plans on its workers, and allocation stays with the caller's thread).
    void resize(const Dims &d);
    // Starts planning the group's tokens (its dims no wider than those of resize).
    void reset(const GroupRef &group, int64_t max_len);
    // The end (exclusive) of the chunk that starts at `start` < T. For per-channel gates with
    // sums given: unit u's prefix sums of the chunk's gates (restarted at start) in row r of
    // sums + u * max_len * gate_width (rows of gate_width doubles, r < end - start).
    int64_t next_end(int64_t start, double *sums);
    uint64_t bytes() const;

private:
    GroupRef group_{};
    int64_t max_len_ = 0, first_snapshot_end_ = 0, width_ = 0, units_ = 0;
    std::vector<double> sum_, lo_, hi_;  // units x width: running sums since the chunk start, their min and max
    std::vector<const float *> gates_;   // units: the gate rows of the token being added
    std::vector<float> converted_;       // units x width: those rows of a BF16 g, as floats
};

// Chunk ends (exclusive), ascending, the last one T, planned with `planner` (resized by the
// caller for dims at least as wide; ends allocates only past its capacity).
void plan_chunks(ChunkPlanner &planner, const GroupRef &group, int64_t max_len, std::vector<int64_t> &ends);
// The same with a planner of its own.
void plan_chunks(const GroupRef &group, int64_t max_len, std::vector<int64_t> &ends);

}  // namespace gdn::cpu
