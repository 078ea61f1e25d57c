// The cpu backend: F32 arithmetic, all cores, deterministic.
//
// Element types (SPEC 3.1): q/k/v F32, BF16 or F16 (beta that or F32, g F32 or BF16) with F32
// states. Tensors are read and written in place in their types: rows are converted as they are
// gathered into the chunk's (or the token block's) float buffers and rounded once as results are
// stored (cpu/typed_rows.h), so a half call gives the bits of the F32 call on the converted
// inputs with each output rounded once.
//
// Work is split by group = (q/k sequence, key head): a group's units (every sequence and value
// head that reads that key head) share its Q K^T and K K^T, and dq and dk are summed over them in
// a fixed order, without atomics, so every thread count gives the same bits. When whole groups
// would leave threads waiting, the forward cuts groups into slices of units (they are
// independent; cpu/forward_schedule.h) and, where even single units would, their value columns
// into blocks (independent too: cpu/value_columns.h); the backward runs its per-unit steps in
// rounds over all groups' units, the per-group sums between them; with more groups than threads
// that do not divide them, the last groups' forward passes run unit by unit to fill the gaps the
// whole groups leave (cpu/backward_schedule.h; the same steps and sums either way).
// Packed sequences (cu_seqlens) are calls of their own on views (core/sequences.h): the work
// items are (sequence, group), handed to free threads longest first (ThreadPool::run_weighted),
// so many short sequences fill the gaps the long ones leave, and a chunk never crosses a
// sequence boundary; a decoding step's items (per-token units of one length: pooled or packed
// sequences too) are all alike and split statically instead. Long inputs use the chunked (WY)
// form (chunk_*.cpp); decoding-size inputs (T up to a measured crossover, when chunk_size is 0) and
// chunk_size = 1 use the per-token recurrence: cpu/token_forward.cpp (vectorised) forward,
// src/math/token_driver.h in float backward.
//
// Everything a call needs is allocated (and kept for the next call) before any output is written.
#include <algorithm>
#include <system_error>
#include <utility>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/sequences.h"
#include "core/tensor.h"
#include "core/validate.h"
#include "cpu/backward_schedule.h"
#include "cpu/cache_control.h"
#include "cpu/chunk_drivers.h"
#include "cpu/chunk_plan.h"
#include "cpu/forward_schedule.h"
#include "cpu/gemm.h"
#include "cpu/state_io.h"
#include "cpu/thread_pool.h"
#include "cpu/token_forward.h"
#include "math/token_driver.h"

namespace gdn {
namespace {

using cpu::BackwardLayout;

// Up to this many tokens the per-token form is at least as fast (measured: docs/PERF.md; the
// chunked backward is already as fast at T = 1).
constexpr int64_t per_token_max_tokens_forward = 16;
constexpr int64_t per_token_max_tokens_backward = 0;

// A bound on the floats one worker's scratch holds for a call, or -1 where the count overflows
// int64: a group's running states and the chunk scratch, and for the backward its checkpoints and
// replays (a few states per chunk at most) and the token rows it keeps (Z, KDA's e);
// cpu/chunk_core.h, chunk_drivers.h and backward_steps.cpp size them exactly once the call is
// accepted. Loose by a small factor, and checked before anything is sized, so that sizes no
// machine holds are refused instead of overflowing.
int64_t worker_scratch_floats_bound(const Dims &d, int64_t chunk, bool backward) {
    struct Checked {
        int64_t value;
        bool overflow = false;
        Checked times(Checked x) const {
            Checked r = *this;
            r.overflow |= x.overflow || __builtin_mul_overflow(value, x.value, &r.value);
            return r;
        }
        Checked plus(Checked x) const {
            Checked r = *this;
            r.overflow |= x.overflow || __builtin_add_overflow(value, x.value, &r.value);
            return r;
        }
    };
    const Checked units{d.value_heads_per_key_head() * d.sequences_per_qk_sequence()};  // (a ratio of counts)
    const int64_t C = std::max<int64_t>(chunk, 1);  // at most T, or 1
    const Checked row = Checked{d.Sk}.plus({d.Sv}).plus({d.gate_width}).plus({C});  // a token's k, v, g; a chunk row
    const Checked states_per_unit =
        backward ? Checked{d.T / C + 1}.times({2}).plus({4}) : Checked{cpu::kMaxForwardGroups + 4};
    const Checked states = Checked{d.Sk}.times({d.Sv}).times(states_per_unit).times(units);
    const Checked kept_rows = backward ? Checked{d.T}.times(units).times(row) : Checked{0};
    const Checked chunk_rows = Checked{C}.times({16 * cpu::kRoundChunks}).times(units).times(row);
    const Checked packing = Checked{std::max({d.Sk, d.Sv, C})}.times({128});
    const Checked total = states.plus(kept_rows).plus(chunk_rows).plus(packing);
    return total.overflow ? -1 : total.value;
}

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(const gdn_context_params &p)
        : pool_(threads_for(p)), chunk_size_(p.chunk_size) {}

    static int threads_for(const gdn_context_params &p) {
        if (p.n_threads > 0) return p.n_threads;
        return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, static_cast<unsigned>(GDN_MAX_THREADS)));
    }

    const char *name() const override { return "cpu"; }

    // Every combination of SPEC 3.1 with F32 states (validate has checked the rule); not an F64
    // call. precision = BF16 runs the chunk products on gemm_bf16 where its kernel is AMX (the
    // chunked form only: cpu/chunk_core.h, bf16_products); elsewhere, and in the per-token form,
    // it computes as EXACT, which SPEC 3.1 allows.
    // Sizes whose scratch no machine holds (a worker's over 2^40 bytes, or a count past int64)
    // are refused before anything is sized, as ref refuses them.
    Status supports(const Dims &d, bool backward) const override {
        if (d.state_type != GDN_TYPE_F32 || d.type == GDN_TYPE_F64)
            return fail(GDN_ERROR_TYPE,
                        "the cpu backend computes in F32: it takes q/k/v F32, BF16 or F16 with F32 states (SPEC 3.1); "
                        "this call has q/k/v %s, beta %s, g %s, states %s",
                        type_name(d.type), type_name(d.beta_type), type_name(d.gate_type), type_name(d.state_type));
        // (A bound in floats, held as doubles: room for the few double arrays among them.)
        return refuse_past_host_scratch(d, worker_scratch_floats_bound(d, chunk_length(d, backward), backward),
                                        sizeof(double), "the cpu backend's scratch per thread");
    }

    Status forward(const ForwardArgs &packed) override {
        const std::vector<const ForwardArgs *> &calls = forward_calls_.split(packed);
        const Dims widest = longest(calls);
        const int threads = pool_.size();
        const int64_t max_chunk = chunk_length(widest, false);
        const int64_t units = widest.value_heads_per_key_head() * widest.sequences_per_qk_sequence();
        // Work items: a per-token unit (b, h) of a short call, or a slice of a group of a chunked
        // one (cpu/forward_schedule.h: which groups are cut into slices of their units).
        int64_t chunk_groups = 0;
        for (const ForwardArgs *a : calls)
            if (!per_token(a->dims, per_token_max_tokens_forward)) chunk_groups += a->dims.Bq * a->dims.Hk;
        const cpu::ForwardSplit split = cpu::forward_split(chunk_groups, units, threads, calls.size() == 1);
        const int64_t Sv = widest.Sv, quantum = cpu::gemm_panel_width();
        const int64_t blocks = cpu::forward_column_blocks(split, chunk_groups, units, Sv, quantum, threads);
        // Whole groups several to an item where that keeps the workers as busy (packed sequences
        // too: each item takes neighbouring groups of one sequence).
        const int64_t group_state_bytes = units * widest.Sk * widest.Sv * int64_t(sizeof(float));
        const int64_t grouped = cpu::forward_groups_per_item(split, chunk_groups, widest.Hk, blocks, threads,
                                                             group_state_bytes, cpu::l2_cache_bytes());
        items_.clear();
        for (size_t c = 0; c < calls.size(); ++c) {
            const Dims &d = calls[c]->dims;
            if (per_token(d, per_token_max_tokens_forward)) {
                for (int64_t unit = 0; unit < d.B * d.Hv; ++unit) items_.push_back({c, unit, -1, 0, 1, {0, Sv}, d.T});
            } else {
                for (int64_t group = 0; group < d.Bq * d.Hk; group += grouped) {
                    const int64_t slices = group >= split.first_group ? split.slices : 1;
                    for (int64_t slice = 0; slice < slices; ++slice) {
                        const cpu::UnitRange r = cpu::slice_units(units, slices, slice);
                        for (int64_t block = 0; block < blocks; ++block)
                            items_.push_back({c, group, group, r.begin, r.end,
                                              cpu::column_block(Sv, quantum, blocks, block), d.T, grouped});
                    }
                }
            }
        }
        token_forward_.resize(threads);
        forward_.resize(threads);
        workspace_ = 0;
        for (int w = 0; w < threads; ++w) {
            token_forward_[w].resize(widest);
            workspace_ += token_forward_[w].bytes();
            if (chunk_groups > 0) {
                forward_[w].resize(widest, max_chunk, grouped);
                workspace_ += forward_[w].bytes();
            }
        }
        // Decoding (every item a per-token unit of the same length): items of equal cost, so each
        // worker takes a contiguous share, the same heads of the same sequences call after call.
        // Those states stay in the worker's own cache between calls (each worker writes the
        // states it read), and no item is handed out through a shared counter.
        const bool shares = equal_token_items();
        const int64_t count = static_cast<int64_t>(items_.size());
        const auto run_item = [&](int64_t i, int worker) {
            const WorkItem &item = items_[i];
            const ForwardArgs &a = *calls[item.call];
            const Dims &d = a.dims;
            // The initial state of this worker's next unit, in its share, asked for by the kernel
            // while its last pass runs (token_forward.h); else packed sequences' next item's
            // initial states asked for at once (each item of a packed batch starts from states
            // cold in memory; items of one sequence weigh the same, so item i + 1 is usually the
            // next one handed out).
            cpu::InitialState next_state{};
            if (shares && i + 1 < cpu::share_begin(count, worker + 1, threads)) {
                const WorkItem &next = items_[i + 1];
                const ForwardArgs &next_call = *calls[next.call];
                next_state = cpu::token_forward_initial(next_call, next.group / next_call.dims.Hv, next.group % next_call.dims.Hv);
            }
            if (packed.dims.N > 0 && i + 1 < count && next_state.lines.base == nullptr)
                prefetch_initial_states(calls, items_[i + 1]);
            if (item.plan < 0) {
                cpu::token_forward_unit(a, item.group / d.Hv, item.group % d.Hv, token_forward_[worker], next_state);
            } else {
                const int64_t kh = item.group % d.Hk;
                cpu::forward_group(a, item.group / d.Hk, {kh, kh + item.groups}, max_chunk, item.unit_begin,
                                   item.unit_end, item.columns, forward_[worker]);
            }
        };
        if (shares) pool_.run(count, run_item);
        else pool_.run_weighted(item_weights(), run_item);
        return {};
    }

    Status backward(const BackwardArgs &packed) override {
        const std::vector<const BackwardArgs *> &calls = backward_calls_.split(packed);
        const Dims widest = longest(calls);
        const int threads = pool_.size();
        const bool tokens = per_token(widest, per_token_max_tokens_backward);  // chunk_size = 1: every call
        items_.clear();
        for (size_t c = 0; c < calls.size(); ++c) {
            const Dims &d = calls[c]->dims;
            for (int64_t group = 0; group < d.Bq * d.Hk; ++group)
                items_.push_back({c, group, tokens ? -1 : group, 0, 0, {0, d.Sv}, d.T});
        }
        if (tokens) {
            token_backward_.resize(threads);
            workspace_ = 0;
            for (auto &s : token_backward_) {
                s.resize(widest, token::default_segment(widest.T));  // fits every call's T
                workspace_ += s.bytes();
            }
            pool_.run_weighted(item_weights(), [&](int64_t i, int worker) {
                const WorkItem &item = items_[i];
                const BackwardArgs &a = *calls[item.call];
                token::backward_group(a, item.group / a.dims.Hk, item.group % a.dims.Hk, token_backward_[worker]);
            });
            return {};
        }
        const int64_t max_chunk = chunk_length(widest, true);
        plan(calls, max_chunk);
        BackwardLayout widest_layout;
        for (const WorkItem &item : items_)
            widest_layout = BackwardLayout::widest(
                widest_layout, cpu::backward_layout(calls[item.call]->dims, plans_[plan_index(item)], max_chunk));
        // One call whose groups would leave workers idle runs split over its units, or its
        // units' panels of value columns (backward_items); the sequences of a packed or pooled
        // call keep (sequence, group) items, which already fill the workers. Otherwise the last
        // groups of one call run as a tail (backward_tail_groups). Both schedules run one call
        // (they index its groups), so they are for one call only.
        const int64_t groups = static_cast<int64_t>(items_.size());
        const bool one_call = calls.size() == 1;
        const cpu::BackwardItems work_items =
            one_call ? cpu::backward_items(groups, cpu::units_of(widest), cpu::BackwardPanels::of(widest.Sv).count,
                                           threads)
                     : cpu::BackwardItems::Groups;
        const bool split = work_items != cpu::BackwardItems::Groups;
        const int64_t tail = one_call && !split ? cpu::backward_tail_groups(groups, threads) : 0;
        backward_.resize(threads);
        group_backward_.resize(split ? groups : threads + tail);
        workspace_ = plan_bytes();
        for (auto &w : backward_) {
            w.resize(widest, max_chunk);
            workspace_ += w.bytes();
        }
        for (auto &g : group_backward_) {
            g.resize(widest, max_chunk, widest_layout, work_items);
            workspace_ += g.bytes();
        }
        const cpu::GroupPlans plans = [&](int64_t group) -> const std::vector<int64_t> & {
            return plans_[plan_of_item_[group]];
        };
        if (split) {
            cpu::backward_in_rounds(pool_, *calls.front(), plans, work_items, group_backward_, backward_);
            return {};
        }
        if (tail > 0) {
            cpu::backward_with_tail(pool_, *calls.front(), plans, tail, group_backward_, backward_);
            return {};
        }
        pool_.run_weighted(item_weights(), [&](int64_t i, int worker) {
            const WorkItem &item = items_[i];
            const BackwardArgs &a = *calls[item.call];
            cpu::backward_group(a, item.group / a.dims.Hk, item.group % a.dims.Hk, plans_[plan_index(item)],
                                group_backward_[worker], backward_[worker]);
        });
        return {};
    }

    uint64_t workspace_bytes() const override { return workspace_; }

    // The scratch of the context's own workers (the shares' scratch belongs to the calling threads).
    void release_workspace() override {
        plans_ = {};
        planners_ = {};
        forward_ = {};
        backward_ = {};
        group_backward_ = {};
        token_forward_ = {};
        token_backward_ = {};
        workspace_ = 0;
    }

    // Caller-provided threads (gdn_forward_share): the call's items for nth workers (groups cut
    // into slices only when fewer than nth: forward_slices), this share's static part of them, on
    // scratch that belongs to the calling thread. Everything is
    // allocated (and, for the backward, this share's groups planned) before anything is written.
    Status forward_share(const ForwardArgs &a, int ith, int nth) override {
        const Dims &d = a.dims;
        if (d.N > 0 || d.pooled) return sequence_shares_unsupported();
        ShareScratch &s = share_scratch();
        if (per_token(d, per_token_max_tokens_forward)) {
            s.token_forward.resize(d);
            const int64_t units = d.B * d.Hv;
            const int64_t end = cpu::share_begin(units, ith + 1, nth);
            for (int64_t unit = cpu::share_begin(units, ith, nth); unit < end; ++unit) {
                const cpu::InitialState next =
                    unit + 1 < end ? cpu::token_forward_initial(a, (unit + 1) / d.Hv, (unit + 1) % d.Hv) : cpu::InitialState{};
                cpu::token_forward_unit(a, unit / d.Hv, unit % d.Hv, s.token_forward, next);
            }
            return {};
        }
        const int64_t max_chunk = chunk_length(d, false);
        const ShareCut cut = share_cut(d, nth);
        const int64_t items = d.Bq * d.Hk * cut.slices * cut.blocks;
        const int64_t begin = cpu::share_begin(items, ith, nth), end = cpu::share_begin(items, ith + 1, nth);
        s.forward.resize(d, max_chunk);
        for (int64_t item = begin; item < end; ++item) run_forward_item(a, item, cut, max_chunk, s.forward);
        return {};
    }

    Status backward_share(const BackwardArgs &a, int ith, int nth) override {
        const Dims &d = a.dims;
        if (d.N > 0 || d.pooled) return sequence_shares_unsupported();
        ShareScratch &s = share_scratch();
        const int64_t groups = d.Bq * d.Hk;
        const int64_t begin = cpu::share_begin(groups, ith, nth), end = cpu::share_begin(groups, ith + 1, nth);
        if (per_token(d, per_token_max_tokens_backward)) {
            s.token_backward.resize(d, token::default_segment(d.T));
            for (int64_t group = begin; group < end; ++group)
                token::backward_group(a, group / d.Hk, group % d.Hk, s.token_backward);
            return {};
        }
        const int64_t max_chunk = chunk_length(d, true);
        s.plan_groups(d, *a.g, max_chunk, begin, end);
        s.backward.resize(d, max_chunk);
        s.group_backward.resize(d, max_chunk, widest_layout_of(s.plans, d, max_chunk), cpu::BackwardItems::Groups);
        for (int64_t group = begin; group < end; ++group)
            cpu::backward_group(a, group / d.Hk, group % d.Hk, s.plan_of(group), s.group_backward, s.backward);
        return {};
    }

private:
    // A calling thread's scratch for shares, kept for its next share (of any context: a thread
    // runs one share at a time). plans[i] holds the chunk ends of group first_group + i.
    struct ShareScratch {
        int64_t first_group = 0;
        std::vector<std::vector<int64_t>> plans;
        cpu::ForwardWork forward;
        cpu::BackwardWork backward;
        cpu::GroupBackward group_backward;
        cpu::TokenForwardScratch token_forward;
        token::BackwardScratch<float> token_backward;

        void plan_groups(const Dims &d, const gdn_tensor &g, int64_t max_chunk, int64_t begin, int64_t end) {
            first_group = begin;
            plans.resize(static_cast<size_t>(end - begin));
            for (int64_t group = begin; group < end; ++group)
                cpu::plan_chunks(cpu::GroupRef{&g, &d, group / d.Hk, group % d.Hk}, max_chunk, plans[group - begin]);
        }
        const std::vector<int64_t> &plan_of(int64_t group) const { return plans[static_cast<size_t>(group - first_group)]; }
    };
    // Packed and pooled calls run as one call per sequence (core/sequences.h), which shares do not
    // split: refused before anything is written.
    static Status sequence_shares_unsupported() {
        return fail(GDN_ERROR_UNSUPPORTED, "packed sequences (cu_seqlens) and state pools (state_indices) are not split "
                                           "into shares yet: call gdn_forward / gdn_backward, or one share per sequence");
    }
    static ShareScratch &share_scratch() {
        thread_local ShareScratch scratch;
        return scratch;
    }

    // The caller's shares (gdn_forward_share) take items by count, so there every group is cut
    // into the same number of slices, only when there are fewer groups than workers, and every
    // slice (then a single unit) into the same number of column blocks.
    struct ShareCut {
        int64_t slices, blocks;
    };
    static ShareCut share_cut(const Dims &d, int workers) {
        const int64_t groups = d.Bq * d.Hk, units = cpu::units_of(d);
        if (groups >= workers) return {1, 1};
        const cpu::ForwardSplit split = cpu::forward_split(groups, units, workers, true);
        return {split.slices, cpu::forward_column_blocks(split, groups, units, d.Sv, cpu::gemm_panel_width(), workers)};
    }

    static void run_forward_item(const ForwardArgs &a, int64_t item, ShareCut cut, int64_t max_chunk,
                                 cpu::ForwardWork &w) {
        const Dims &d = a.dims;
        const int64_t block = item % cut.blocks, slice = item / cut.blocks % cut.slices;
        const int64_t group = item / cut.blocks / cut.slices, kh = group % d.Hk;
        const cpu::UnitRange r = cpu::slice_units(cpu::units_of(d), cut.slices, slice);
        cpu::forward_group(a, group / d.Hk, {kh, kh + 1}, max_chunk, r.begin, r.end,
                           cpu::column_block(d.Sv, cpu::gemm_panel_width(), cut.blocks, block), w);
    }

    static BackwardLayout widest_layout_of(const std::vector<std::vector<int64_t>> &plans, const Dims &d, int64_t max_chunk) {
        BackwardLayout widest;
        for (const auto &ends : plans) widest = BackwardLayout::widest(widest, cpu::backward_layout(d, ends, max_chunk));
        return widest;
    }

    // chunk_size 1 forces the per-token form, any other explicit size the chunked one; 0 picks by T.
    bool per_token(const Dims &d, int64_t max_tokens) const {
        return chunk_size_ == 1 || (chunk_size_ == 0 && d.T <= max_tokens);
    }

    int64_t chunk_length(const Dims &d, bool backward) const {
        const int64_t c = chunk_size_ > 1 ? chunk_size_ : cpu::default_chunk(backward, d.gate_width != 1, cpu::bf16_products(d.precision));
        return std::min(c, d.T);
    }

    // One unit of scheduled work: in call `call` (a packed sequence, or the whole unpacked call),
    // group = (q/k sequence, key head) for chunked items, or the unit (b, h) for a per-token
    // forward (plan < 0); units [unit_begin, unit_end) of the group, value columns `columns` of
    // each (a chunked forward's block, cpu/value_columns.h; else all); the call's tokens.
    struct WorkItem {
        size_t call;
        int64_t group, plan, unit_begin, unit_end;
        cpu::ColumnRange columns;
        int64_t tokens;
        int64_t groups = 1;  // a chunked forward's: groups group .. group + groups - 1 (forward_group)
    };

    // Weights that rank the items' costs for the longest-first schedule: tokens times units times
    // value columns, plus a per-item cost of loading and storing states and planning (about
    // kItemOverheadTokens tokens' work). The weights only balance the load; results do not depend
    // on them.
    static constexpr int64_t kItemOverheadTokens = 8;
    const std::vector<int64_t> &item_weights() {
        weights_.clear();
        for (const WorkItem &item : items_)
            weights_.push_back((item.tokens + kItemOverheadTokens) * item.groups *
                               std::max<int64_t>(1, item.unit_end - item.unit_begin) *
                               std::max<int64_t>(1, item.columns.end - item.columns.begin));
        return weights_;
    }

    // Every item is a per-token unit over the same number of tokens (a decoding step: unpacked,
    // pooled, or packed sequences of one length).
    bool equal_token_items() const {
        for (const WorkItem &item : items_)
            if (item.plan >= 0 || item.tokens != items_.front().tokens) return false;
        return true;
    }

    void prefetch_initial_states(const std::vector<const ForwardArgs *> &calls, const WorkItem &item) const {
        const ForwardArgs &a = *calls[item.call];
        const Dims &d = a.dims;
        if (a.s0 == nullptr) return;
        if (item.plan < 0) return cpu::prefetch_state(a.s0, d, item.group % d.Hv, item.group / d.Hv);
        const cpu::ValueWindow window(a, item.columns);  // a block's columns only
        for (int64_t group = item.group; group < item.group + item.groups; ++group)
            for (int64_t u = item.unit_begin; u < item.unit_end; ++u) {
                const cpu::ChunkUnit unit = cpu::group_unit(d, group / d.Hk, group % d.Hk, u);
                cpu::prefetch_state(window.s0_ptr, window.dims, unit.h, unit.b);
            }
    }

    // Plans are per (call, group); items of one group (its slices) share one.
    size_t plan_index(const WorkItem &item) const { return plan_of_item_[&item - items_.data()]; }

    // Chunk ends of every chunked (call, group); the vectors and the workers' planners are sized
    // first, so the parallel planning allocates nothing.
    template <class Args>
    void plan(const std::vector<const Args *> &calls, int64_t max_chunk) {
        plan_of_item_.resize(items_.size());
        plan_refs_.clear();
        for (size_t i = 0; i < items_.size(); ++i) {
            const WorkItem &item = items_[i];
            if (item.plan < 0) continue;
            const bool first_slice = i == 0 || items_[i - 1].call != item.call || items_[i - 1].group != item.group ||
                                     items_[i - 1].plan < 0;
            if (first_slice) plan_refs_.push_back({item.call, item.group});
            plan_of_item_[i] = plan_refs_.size() - 1;
        }
        plans_.resize(plan_refs_.size());
        std::vector<int64_t> weights(plan_refs_.size());
        for (size_t p = 0; p < plan_refs_.size(); ++p) {
            const Dims &d = calls[plan_refs_[p].first]->dims;
            plans_[p].clear();
            plans_[p].reserve(d.T);
            weights[p] = d.T + kItemOverheadTokens;
        }
        planners_.resize(pool_.size());
        for (cpu::ChunkPlanner &planner : planners_) planner.resize(longest(calls));
        pool_.run_weighted(weights, [&](int64_t p, int worker) {
            const Args &a = *calls[plan_refs_[p].first];
            const Dims &d = a.dims;
            const int64_t group = plan_refs_[p].second;
            cpu::plan_chunks(planners_[worker], cpu::GroupRef{a.g, &d, group / d.Hk, group % d.Hk},
                             std::min(max_chunk, d.T), plans_[p]);
        });
    }

    uint64_t plan_bytes() const {
        uint64_t n = 0;
        for (const auto &p : plans_) n += p.capacity() * sizeof(int64_t);
        for (const auto &planner : planners_) n += planner.bytes();
        return n;
    }

    cpu::ThreadPool pool_;
    int chunk_size_;
    ForwardSequences forward_calls_;    // views of the packed or pooled sequences of the current call
    BackwardSequences backward_calls_;
    std::vector<WorkItem> items_;
    std::vector<int64_t> weights_;  // item_weights(), kept between calls
    std::vector<size_t> plan_of_item_;
    std::vector<std::pair<size_t, int64_t>> plan_refs_;  // (call, group) of each plan
    std::vector<std::vector<int64_t>> plans_;
    std::vector<cpu::ChunkPlanner> planners_;  // one per worker
    std::vector<cpu::ForwardWork> forward_;
    std::vector<cpu::BackwardWork> backward_;          // per worker
    std::vector<cpu::GroupBackward> group_backward_;   // per worker (group schedule; then per tail group) or per group (split)
    std::vector<cpu::TokenForwardScratch> token_forward_;
    std::vector<token::BackwardScratch<float>> token_backward_;
    uint64_t workspace_ = 0;
};

}  // namespace

Status make_cpu_backend(const gdn_context_params &params, std::unique_ptr<Backend> &out) {
    try {
        out = std::make_unique<CpuBackend>(params);
    } catch (const std::system_error &e) {
        return fail(GDN_ERROR_BACKEND, "cpu: the system could not start %d threads (%s); ask for fewer with n_threads",
                    CpuBackend::threads_for(params), e.what());
    }
    return {};
}

}  // namespace gdn
