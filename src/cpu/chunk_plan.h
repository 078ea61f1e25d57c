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

#include <cstdint>
#include <vector>

#include "core/problem.h"

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

// Chunk ends (exclusive), ascending, the last one T.
void plan_chunks(const GroupRef &group, int64_t max_len, std::vector<int64_t> &ends);

}  // namespace gdn::cpu
