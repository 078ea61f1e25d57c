// The cpu backend: F32, all cores, deterministic.
//
// Work is split by group = (q/k sequence, key head): a group's units (every sequence and value
// head that reads that key head) run on one worker, in a fixed order, so dq and dk are summed
// without atomics and every thread count gives the same bits. (The forward, whose units are
// independent, also splits groups into slices of units when there are fewer groups than threads.) Long inputs use the chunked (WY)
// form (chunk_*.cpp); decoding-size inputs (T up to a measured crossover, when chunk_size is 0) and
// chunk_size = 1 use the per-token recurrence: cpu/token_forward.cpp (vectorised) forward,
// src/math/token_driver.h in float backward.
//
// Everything a call needs is allocated (and kept for the next call) before any output is written.
#include <algorithm>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "cpu/chunk_drivers.h"
#include "cpu/chunk_plan.h"
#include "cpu/thread_pool.h"
#include "cpu/token_forward.h"
#include "math/token_driver.h"

namespace gdn {
namespace {

using cpu::BackwardLayout;

constexpr int64_t default_chunk_gda = 64;
constexpr int64_t default_chunk_kda = 64;
// Up to this many tokens the per-token form is at least as fast (measured: docs/PERF.md; the
// chunked backward is already as fast at T = 1).
constexpr int64_t per_token_max_tokens_forward = 4;
constexpr int64_t per_token_max_tokens_backward = 0;

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(const gdn_context_params &p)
        : pool_(p.n_threads > 0 ? p.n_threads : std::max(1u, std::thread::hardware_concurrency())),
          chunk_size_(p.chunk_size) {}

    const char *name() const override { return "cpu"; }

    Status supports(const Dims &d, bool) const override {
        if (d.type != GDN_TYPE_F32)
            return fail(GDN_ERROR_TYPE, "the cpu backend takes F32 tensors, not %s", type_name(d.type));
        return {};
    }

    Status forward(const ForwardArgs &a) override {
        const Dims &d = a.dims;
        const int threads = pool_.size();
        if (per_token(d, per_token_max_tokens_forward)) {
            token_forward_.resize(threads);
            workspace_ = 0;
            for (auto &s : token_forward_) {
                s.resize(d);
                workspace_ += s.bytes();
            }
            pool_.run(d.B * d.Hv, [&](int64_t unit, int worker) {
                cpu::token_forward_unit(a, unit / d.Hv, unit % d.Hv, token_forward_[worker]);
            });
            return {};
        }
        const int64_t max_chunk = chunk_length(d);
        plan(d, *a.g, max_chunk);
        forward_.resize(threads);
        workspace_ = plan_bytes();
        for (auto &w : forward_) {
            w.resize(d, max_chunk);
            workspace_ += w.bytes();
        }
        // Fewer groups than threads: split each group's units into slices so every thread works.
        const int64_t groups = d.Bq * d.Hk, units = d.value_heads_per_key_head() * d.sequences_per_qk_sequence();
        const int64_t slices = groups >= threads ? 1 : std::min<int64_t>(units, (threads + groups - 1) / groups);
        pool_.run(groups * slices, [&](int64_t item, int worker) {
            const int64_t group = item / slices, slice = item % slices;
            cpu::forward_group(a, group / d.Hk, group % d.Hk, plans_[group], slice * units / slices,
                               (slice + 1) * units / slices, forward_[worker]);
        });
        return {};
    }

    Status backward(const BackwardArgs &a) override {
        const Dims &d = a.dims;
        const int threads = pool_.size();
        if (per_token(d, per_token_max_tokens_backward)) {
            token_backward_.resize(threads);
            workspace_ = 0;
            for (auto &s : token_backward_) {
                s.resize(d, token::default_segment(d.T));
                workspace_ += s.bytes();
            }
            pool_.run(d.Bq * d.Hk, [&](int64_t group, int worker) {
                token::backward_group(a, group / d.Hk, group % d.Hk, token_backward_[worker]);
            });
            return {};
        }
        const int64_t max_chunk = chunk_length(d);
        plan(d, *a.g, max_chunk);
        BackwardLayout widest;
        for (const auto &ends : plans_) {
            const BackwardLayout l = BackwardLayout::of(static_cast<int64_t>(ends.size()), d.T, max_chunk);
            widest.chunks_per_segment = std::max(widest.chunks_per_segment, l.chunks_per_segment);
            widest.segments = std::max(widest.segments, l.segments);
        }
        backward_.resize(threads);
        workspace_ = plan_bytes();
        for (auto &w : backward_) {
            w.resize(d, max_chunk, widest);
            workspace_ += w.bytes();
        }
        pool_.run(d.Bq * d.Hk, [&](int64_t group, int worker) {
            cpu::backward_group(a, group / d.Hk, group % d.Hk, plans_[group], backward_[worker]);
        });
        return {};
    }

    uint64_t workspace_bytes() const override { return workspace_; }

private:
    // chunk_size 1 forces the per-token form, any other explicit size the chunked one; 0 picks by T.
    bool per_token(const Dims &d, int64_t max_tokens) const {
        return chunk_size_ == 1 || (chunk_size_ == 0 && d.T <= max_tokens);
    }

    int64_t chunk_length(const Dims &d) const {
        const int64_t c = chunk_size_ > 1 ? chunk_size_ : (d.gate_width == 1 ? default_chunk_gda : default_chunk_kda);
        return std::min(c, d.T);
    }

    // Chunk ends of every group; the vectors are sized first, so the parallel planning allocates nothing.
    void plan(const Dims &d, const gdn_tensor &g, int64_t max_chunk) {
        plans_.resize(d.Bq * d.Hk);
        for (auto &p : plans_) p.reserve(d.T);
        pool_.run(d.Bq * d.Hk, [&](int64_t group, int) {
            cpu::plan_chunks(cpu::GroupRef{&g, &d, group / d.Hk, group % d.Hk}, max_chunk, plans_[group]);
        });
    }

    uint64_t plan_bytes() const {
        uint64_t n = 0;
        for (const auto &p : plans_) n += p.capacity() * sizeof(int64_t);
        return n;
    }

    cpu::ThreadPool pool_;
    int chunk_size_;
    std::vector<std::vector<int64_t>> plans_;
    std::vector<cpu::ForwardWork> forward_;
    std::vector<cpu::BackwardWork> backward_;
    std::vector<cpu::TokenForwardScratch> token_forward_;
    std::vector<token::BackwardScratch<float, float>> token_backward_;
    uint64_t workspace_ = 0;
};

}  // namespace

Status make_cpu_backend(const gdn_context_params &params, std::unique_ptr<Backend> &out) {
    out = std::make_unique<CpuBackend>(params);
    return {};
}

}  // namespace gdn
