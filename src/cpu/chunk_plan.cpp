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

GDN_VECTORIZED void span_add(double *__restrict sum, double *__restrict lo, double *__restrict hi,
                             const float *__restrict gate, int64_t width) {
    for (int64_t i = 0; i < width; ++i) {
        const double s = sum[i] + clamp_gate(gate[i]);
        sum[i] = s;
        lo[i] = s < lo[i] ? s : lo[i];
        hi[i] = hi[i] < s ? s : hi[i];
    }
}

// Per-channel running prefix sums and their min/max since the chunk start, for every unit.
struct SpanTracker {
    int64_t width = 0;
    std::vector<double> sum, lo, hi;

    void reset() {
        std::fill(sum.begin(), sum.end(), 0.0);
        std::fill(lo.begin(), lo.end(), 0.0);
        std::fill(hi.begin(), hi.end(), 0.0);
    }
    // Would adding these gates keep every channel within the limit? Updates only when yes.
    bool try_add(const std::vector<const float *> &gates) {
        for (size_t u = 0; u < gates.size(); ++u)
            if (!span_fits(&sum[u * width], &lo[u * width], &hi[u * width], gates[u], width)) return false;
        for (size_t u = 0; u < gates.size(); ++u)
            span_add(&sum[u * width], &lo[u * width], &hi[u * width], gates[u], width);
        return true;
    }
};

}  // namespace

void plan_chunks(const GroupRef &group, int64_t max_len, std::vector<int64_t> &ends) {
    const Dims &d = *group.dims;
    ends.clear();
    const int64_t first_snapshot_end = d.T - d.written_slots() + 1;  // chunks end at every t >= this
    const bool per_channel = d.gate_width != 1;
    const int64_t per_kh = d.value_heads_per_key_head(), per_bq = d.sequences_per_qk_sequence();
    SpanTracker span;
    std::vector<const float *> gates;
    if (per_channel) {
        span.width = d.gate_width;
        const size_t n = static_cast<size_t>(per_kh * per_bq * d.gate_width);
        span.sum.resize(n);
        span.lo.resize(n);
        span.hi.resize(n);
        gates.resize(per_kh * per_bq);
    }
    int64_t start = 0;
    while (start < d.T) {
        int64_t end = std::min(d.T, start + max_len);
        if (end > first_snapshot_end) end = std::max(start + 1, first_snapshot_end);
        if (per_channel) {
            span.reset();
            for (int64_t t = start; t < end; ++t) {
                for (int64_t u = 0; u < per_kh * per_bq; ++u) {
                    const int64_t b = group.bq * per_bq + u / per_kh, h = d.value_head_of(group.kh, u % per_kh);
                    gates[u] = reinterpret_cast<const float *>(element_ptr(*group.g, 0, h, t, b));
                    if (t + rows_ahead < d.T)
                        prefetch_rows(group.g, h, t + rows_ahead, t + rows_ahead + 1, b, d.gate_width);
                }
                if (!span.try_add(gates)) {
                    end = t == start ? start + 1 : t;  // a token alone may exceed the limit
                    break;
                }
            }
        }
        ends.push_back(end);
        start = end;
    }
}

}  // namespace gdn::cpu
