#include "cpu/chunk_plan.h"

#include <algorithm>

#include "core/tensor.h"
#include "cpu/chunk_core.h"
#include "cpu/typed_rows.h"
#include "cpu/vectorized.h"

namespace gdn::cpu {

namespace {

// One unit's channels: adds the gates to the running sums, their min and max (and keeps the new
// sums in row when it is given), and says whether every channel's span (max - min) is still
// within the limit. One pass over the gate row, no early exit, so the loop vectorises (the
// planner reads every gate of a KDA call; with a branch per channel it was a tenth of the
// forward's instructions, and a separate check before the additions read each row twice). When
// a token does not fit, next_end ends the chunk before it and the next call starts the sums
// again, so what this added is dropped.
GDN_VECTORIZED bool span_add_fits(double *__restrict sum, double *__restrict lo, double *__restrict hi,
                                  const float *__restrict gate, double *__restrict row, int64_t width) {
    int64_t exceeds = 0;  // as wide as a double, so the comparisons count in vector lanes
    for (int64_t i = 0; i < width; ++i) {
        // Selects on values, not std::max / std::min on references into the arrays: a
        // conditional load is control flow the vectoriser refuses. A NaN gate compares false.
        const double s = sum[i] + clamp_gate(gate[i]), top = hi[i] < s ? s : hi[i], bottom = s < lo[i] ? s : lo[i];
        sum[i] = s;
        lo[i] = bottom;
        hi[i] = top;
        exceeds += top - bottom <= kda_span_limit ? 0 : 1;
    }
    if (row != nullptr)
        for (int64_t i = 0; i < width; ++i) row[i] = sum[i];
    return exceeds == 0;
}

// Channels whose spans are tracked: a KDA gate's (Sk), none for a scalar gate.
int64_t tracked_channels(const Dims &d) { return d.gate_width != 1 ? d.gate_width : 0; }

}  // namespace

void ChunkPlanner::resize(const Dims &d) {
    const int64_t units = units_of(d), width = tracked_channels(d);
    sum_.resize(units * width);
    lo_.resize(units * width);
    hi_.resize(units * width);
    gates_.resize(width > 0 ? units : 0);  // scalar gates cut by length and slots only
    converted_.resize(d.gate_type != GDN_TYPE_F32 ? units * width : 0);
}

void ChunkPlanner::reset(const GroupRef &group, int64_t max_len) {
    const Dims &d = *group.dims;
    group_ = group;
    max_len_ = max_len;
    first_snapshot_end_ = d.T - d.written_slots() + 1;  // chunks end at every t >= this
    width_ = tracked_channels(d);
    units_ = units_of(d);
}

uint64_t ChunkPlanner::bytes() const {
    return (sum_.size() + lo_.size() + hi_.size()) * sizeof(double) + gates_.size() * sizeof(const float *) +
           converted_.size() * sizeof(float);
}

int64_t ChunkPlanner::next_end(int64_t start, double *sums) {
    const Dims &d = *group_.dims;
    int64_t end = std::min(d.T, start + max_len_);
    if (end > first_snapshot_end_) end = std::max(start + 1, first_snapshot_end_);
    if (width_ == 0) return end;
    std::fill(sum_.begin(), sum_.end(), 0.0);
    std::fill(lo_.begin(), lo_.end(), 0.0);
    std::fill(hi_.begin(), hi_.end(), 0.0);
    const int64_t per_kh = d.value_heads_per_key_head(), per_bq = d.sequences_per_qk_sequence();
    for (int64_t t = start; t < end; ++t) {
        for (int64_t u = 0; u < units_; ++u) {
            const int64_t b = group_.bq * per_bq + u / per_kh, h = d.value_head_of(group_.kh, u % per_kh);
            // converted_ is empty for an F32 g: no offset into its null data (UB even if unused).
            float *scratch = converted_.empty() ? nullptr : converted_.data() + u * width_;
            gates_[u] = row_as_floats(group_.g->type, element_ptr(*group_.g, 0, h, t, b), width_, scratch);
            if (t + rows_ahead < d.T) prefetch_rows(group_.g, h, t + rows_ahead, t + rows_ahead + 1, b, width_);
        }
        // Does adding token t's gates keep every channel of every unit within the limit? If not,
        // the chunk ends before t (its sums are those of the tokens before), or, when t is the
        // chunk's first token (a token alone may exceed it), after t.
        bool fits = true;
        for (int64_t u = 0; u < units_; ++u) {
            fits &= span_add_fits(&sum_[u * width_], &lo_[u * width_], &hi_[u * width_], gates_[u],
                                  sums ? sums + (u * max_len_ + t - start) * width_ : nullptr, width_);
            if (!fits && t > start) return t;
        }
        if (!fits) return start + 1;
    }
    return end;
}

void plan_chunks(ChunkPlanner &planner, const GroupRef &group, int64_t max_len, std::vector<int64_t> &ends) {
    planner.reset(group, max_len);
    ends.clear();
    for (int64_t start = 0; start < group.dims->T;) {
        start = planner.next_end(start, nullptr);
        ends.push_back(start);
    }
}

void plan_chunks(const GroupRef &group, int64_t max_len, std::vector<int64_t> &ends) {
    ChunkPlanner planner;
    planner.resize(*group.dims);
    plan_chunks(planner, group, max_len, ends);
}

}  // namespace gdn::cpu
