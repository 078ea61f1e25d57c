#include "cpu/chunk_plan.h"

#include <algorithm>

#include "core/tensor.h"
#include "cpu/chunk_core.h"
#include "cpu/vectorized.h"

namespace gdn::cpu {

namespace {

// One unit's channels: would adding these gates keep every running sum within the limit of its
// chunk's min and max? No early exit, so the loop vectorises (the planner reads every gate of a
// KDA call once; it was a tenth of the forward's instructions with a branch per channel).
GDN_VECTORIZED bool span_fits(const double *__restrict sum, const double *__restrict lo, const double *__restrict hi,
                              const float *__restrict gate, int64_t width) {
    int64_t exceeds = 0;  // as wide as a double, so the comparisons count in vector lanes
    for (int64_t i = 0; i < width; ++i) {
        // std::max and std::min on values, not references into the arrays: a conditional load
        // is control flow the vectoriser refuses; a NaN gate compares false here as there.
        const double s = sum[i] + clamp_gate(gate[i]), top = hi[i] < s ? s : hi[i], bottom = s < lo[i] ? s : lo[i];
        exceeds += top - bottom <= kda_span_limit ? 0 : 1;
    }
    return exceeds == 0;
}

// Channels whose spans are tracked: a KDA gate's (Sk), none for a scalar gate.
int64_t tracked_channels(const Dims &d) { return d.gate_width != 1 ? d.gate_width : 0; }

// Adds the gates to the running sums (and keeps the new sums in row when it is given).
GDN_VECTORIZED void span_add(double *__restrict sum, double *__restrict lo, double *__restrict hi,
                             const float *__restrict gate, double *__restrict row, int64_t width) {
    for (int64_t i = 0; i < width; ++i) {
        const double s = sum[i] + clamp_gate(gate[i]);
        sum[i] = s;
        lo[i] = s < lo[i] ? s : lo[i];
        hi[i] = hi[i] < s ? s : hi[i];
    }
    if (row != nullptr)
        for (int64_t i = 0; i < width; ++i) row[i] = sum[i];
}

}  // namespace

void ChunkPlanner::resize(const Dims &d) {
    const int64_t units = units_of(d), width = tracked_channels(d);
    sum_.resize(units * width);
    lo_.resize(units * width);
    hi_.resize(units * width);
    gates_.resize(width > 0 ? units : 0);  // scalar gates cut by length and slots only
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
    return (sum_.size() + lo_.size() + hi_.size()) * sizeof(double) + gates_.size() * sizeof(const float *);
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
            gates_[u] = reinterpret_cast<const float *>(element_ptr(*group_.g, 0, h, t, b));
            if (t + rows_ahead < d.T) prefetch_rows(group_.g, h, t + rows_ahead, t + rows_ahead + 1, b, width_);
        }
        // Would adding token t's gates keep every channel of every unit within the limit? Added
        // only when yes; a token alone may exceed it.
        bool fits = true;
        for (int64_t u = 0; u < units_ && fits; ++u)
            fits = span_fits(&sum_[u * width_], &lo_[u * width_], &hi_[u * width_], gates_[u], width_);
        if (!fits && t > start) return t;
        for (int64_t u = 0; u < units_; ++u)
            span_add(&sum_[u * width_], &lo_[u * width_], &hi_[u * width_], gates_[u],
                     sums ? sums + (u * max_len_ + t - start) * width_ : nullptr, width_);
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
