#include "cpu/chunk_plan.h"

#include <algorithm>

#include "core/tensor.h"

namespace gdn::cpu {

namespace {

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
            for (int64_t i = 0; i < width; ++i) {
                const size_t n = u * width + i;
                const double s = sum[n] + clamp_gate(gates[u][i]);
                if (!(std::max(hi[n], s) - std::min(lo[n], s) <= kda_span_limit)) return false;
            }
        for (size_t u = 0; u < gates.size(); ++u)
            for (int64_t i = 0; i < width; ++i) {
                const size_t n = u * width + i;
                sum[n] += clamp_gate(gates[u][i]);
                lo[n] = std::min(lo[n], sum[n]);
                hi[n] = std::max(hi[n], sum[n]);
            }
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
