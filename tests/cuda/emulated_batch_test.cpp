// Serving batches on the per-token cuda kernels, emulated on CPU threads (fake_cuda.h): packed
// sequences and state pools walked as cuda_backend.cu walks them, every short sequence of a
// call in one launch chain over a sequence table (src/cuda/sequence_views.h), against ref's
// packed or pooled call; the same bits as launches of one sequence each; the launches counted.
// Pools: slots with gaps, in reverse, negative indices (zero initial state, nothing written),
// in place and not, value-major.
#include "fake_cuda.h"
// The kernels, compiled by the host compiler.
#include "cuda/chunk_backward_kernel.cuh"
#include "cuda/chunk_forward_kernel.cuh"
#include "cuda/sequence_views.h"
#include "cuda/token_backward_kernel.cuh"
#include "cuda/token_forward_kernel.cuh"
#include "emulation_support.h"

namespace gdn::cuda {
namespace {  // the kernels' `extern __shared__ float shared[]`, in their (this file's) namespace
alignas(32) float shared[1 << 16];  // the block's dynamic shared memory (blocks run one at a time)
}  // namespace
}  // namespace gdn::cuda

namespace {

using namespace gdn::cuda;
using namespace gdn_emulation;

constexpr size_t kSharedLimit = sizeof(gdn::cuda::shared);
constexpr int64_t kChunkedFrom = 64;  // cuda_backend.cu's kChunkedFromTokens

gdn_tensor index_tensor(const std::vector<int64_t> &values) {
    gdn_tensor t{};
    t.data = const_cast<int64_t *>(values.data());
    t.type = GDN_TYPE_I64;
    t.ne[0] = static_cast<int64_t>(values.size());
    t.ne[1] = t.ne[2] = t.ne[3] = 1;
    t.nb[0] = 8;
    t.nb[1] = t.nb[2] = t.nb[3] = 8 * t.ne[0];
    return t;
}

// One call: packed (lengths) or B sequences of s.T tokens; pooled when slots is not empty.
struct Batch {
    Shape s;                       // packed: B = Bq = 1, T = all tokens
    std::vector<int64_t> offsets;  // N + 1, or empty
    std::vector<int64_t> slots;    // one per sequence, or empty
    int64_t pool = 0;              // slots of the pools
    bool in_place = true;          // the forward's states are s0's pool
    bool value_major = false;      // every state tensor
    std::string name;

    bool packed() const { return !offsets.empty(); }
    int64_t sequences() const { return packed() ? static_cast<int64_t>(offsets.size()) - 1 : s.B; }
    // Index (dim 3) count of the state tensors, and of the snapshot tensors.
    int64_t state_count() const { return slots.empty() ? sequences() : pool; }
    int64_t snapshot_count() const { return slots.empty() ? sequences() * s.K : pool; }
    int64_t snapshot_step() const { return packed() ? sequences() : s.B; }
};

void PrintTo(const Batch &b, std::ostream *os) { *os << b.name; }

Batch packed(Shape s, const std::vector<int64_t> &lengths, std::string name) {
    Batch b{s, {0}, {}, 0, true, false, std::move(name)};
    for (int64_t len : lengths) b.offsets.push_back(b.offsets.back() + len);
    b.s.T = b.offsets.back();
    b.s.B = b.s.Bq = 1;
    return b;
}

Batch pooled(Batch b, std::vector<int64_t> slots, int64_t pool, bool in_place, bool value_major) {
    b.slots = std::move(slots);
    b.pool = pool;
    b.in_place = in_place;
    b.value_major = value_major;
    b.name += std::string("_pool") + (in_place ? "_inplace" : "") + (value_major ? "_vm" : "");
    return b;
}

std::vector<int64_t> repeat(int64_t length, int count) { return std::vector<int64_t>(static_cast<size_t>(count), length); }

HostTensor random_state(const Shape &s, int64_t count, uint32_t seed, bool value_major_layout) {
    HostTensor t(s.Sk, s.Sv, s.Hv, count);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> unit(-0.5f, 0.5f);
    for (float &x : t.data) x = unit(rng);
    return value_major_layout ? value_major(t) : t;
}

HostTensor filled_state(const Shape &s, int64_t count, bool value_major_layout) {
    HostTensor t(s.Sk, s.Sv, s.Hv, count, -7.0f);
    return value_major_layout ? value_major(t) : t;
}

struct BatchInputs {
    Inputs in;
    HostTensor s0;  // [.., state_count]
    gdn_problem problem(const Batch &b) const {
        gdn_problem p = in.problem();
        p.state = s0.t;
        if (b.packed()) p.cu_seqlens = index_tensor(b.offsets);
        if (!b.slots.empty()) p.state_indices = index_tensor(b.slots);
        return p;
    }
};

BatchInputs batch_inputs(const Batch &b, uint32_t seed) {
    Shape s = b.s;
    s.s0 = false;
    return {make_inputs(s, seed), random_state(b.s, b.state_count(), seed + 5, b.value_major)};
}

// The sequences the backend walks with the per-token kernels (all of a call of short ones), and
// those the chunked kernels take one by one.
struct Walk {
    std::vector<SequenceEntry> grouped, alone;
    std::vector<SequenceGroup> groups;
};

Walk walk_of(const Batch &b, const Sizes &n, bool backward) {
    Walk walk;
    for (const SequenceEntry &e : sequence_entries(n, b.offsets, b.slots)) {
        const Sizes one = sequence_sizes(n, e);
        const bool chunked = one.T >= kChunkedFrom &&
                             (backward ? chunk_backward_eligible(one, kSharedLimit) : chunk_forward_eligible(one, kSharedLimit));
        (chunked ? walk.alone : walk.grouped).push_back(e);
    }
    const auto fits = [&](const SequenceTable &group) {
        return !backward || make_token_backward_plan(n, 16 * 1024, kWindowBudget, group).bytes <= kGroupBudget;
    };
    walk.groups = sequence_groups(walk.grouped, b.packed(), b.snapshot_step(), 65535, fits);
    return walk;
}

SequenceTable table_of(const Walk &walk, const SequenceGroup &g) {
    SequenceTable t = g.table;
    t.entries = walk.grouped.data() + g.first;
    return t;
}

// The sequences the chunked forward takes, each by launches of its own.
void forward_alone(const Batch &b, const Walk &walk, const ForwardViews &w, const Sizes &n) {
    const EmulatedLauncher launch{gdn::cuda::shared, sizeof(gdn::cuda::shared)};
    for (const SequenceEntry &e : walk.alone) {
        const SequenceCall<ForwardViews> call = sequence_call(w, n, e, b.snapshot_step());
        const ChunkForwardPlan plan = make_chunk_forward_plan(call.sizes);
        std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
        EXPECT_EQ(run_chunk_forward(launch, call.views, call.sizes, plan, workspace.data()), cudaSuccess);
    }
}

// The forward as the backend enqueues it; returns the launches of the per-token groups.
int emulate_forward(const Batch &b, const ForwardViews &w, const Sizes &n) {
    int launches = 0;
    const EmulatedLauncher launch{gdn::cuda::shared, sizeof(gdn::cuda::shared), &launches};
    const Walk walk = walk_of(b, n, false);
    forward_alone(b, walk, w, n);
    for (const SequenceGroup &g : walk.groups) EXPECT_EQ(run_token_forward(launch, w, n, table_of(walk, g)), cudaSuccess);
    return launches;
}

// The backward as the backend enqueues it; returns the launches of the per-token groups.
int emulate_backward(const Batch &b, const BackwardViews &w, const Sizes &n) {
    int launches = 0;
    const EmulatedLauncher launch{gdn::cuda::shared, sizeof(gdn::cuda::shared), &launches};
    const EmulatedLauncher uncounted{gdn::cuda::shared, sizeof(gdn::cuda::shared)};
    const Walk walk = walk_of(b, n, true);
    for (const SequenceEntry &e : walk.alone) {
        const SequenceCall<BackwardViews> call = sequence_call(w, n, e, b.snapshot_step());
        const ChunkBackwardPlan plan = make_chunk_backward_plan(call.sizes);
        std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
        EXPECT_EQ(run_chunk_backward(uncounted, call.views, call.sizes, plan, workspace.data()), cudaSuccess);
    }
    for (const SequenceGroup &g : walk.groups) {
        const SequenceTable table = table_of(walk, g);
        const TokenBackwardPlan plan = make_token_backward_plan(n, 16 * 1024, kWindowBudget, table);
        std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
        EXPECT_EQ(run_token_backward(launch, w, n, plan, workspace.data(), table), cudaSuccess);
    }
    return launches;
}

// Each sequence by launches of its own, for the bits to match.
void per_sequence_forward(const Batch &b, const ForwardViews &w, const Sizes &n) {
    const EmulatedLauncher launch{gdn::cuda::shared, sizeof(gdn::cuda::shared)};
    const Walk walk = walk_of(b, n, false);
    forward_alone(b, walk, w, n);
    for (const SequenceEntry &e : walk.grouped) {
        const SequenceCall<ForwardViews> call = sequence_call(w, n, e, b.snapshot_step());
        ASSERT_EQ(run_token_forward(launch, call.views, call.sizes), cudaSuccess);
    }
}

void per_sequence_backward(const Batch &b, const BackwardViews &w, const Sizes &n) {
    const EmulatedLauncher launch{gdn::cuda::shared, sizeof(gdn::cuda::shared)};
    for (const SequenceEntry &e : walk_of(b, n, true).grouped) {
        const SequenceCall<BackwardViews> call = sequence_call(w, n, e, b.snapshot_step());
        const TokenBackwardPlan plan = make_token_backward_plan(call.sizes, 16 * 1024);
        std::vector<float> workspace(plan.bytes / sizeof(float) + 1, std::nanf(""));
        ASSERT_EQ(run_token_backward(launch, call.views, call.sizes, plan, workspace.data()), cudaSuccess);
    }
}

// Slots of the pool no sequence names (or named by a negative index: none).
std::vector<int64_t> untouched_slots(const Batch &b) {
    std::vector<int64_t> untouched;
    for (int64_t slot = 0; slot < b.pool; ++slot)
        if (std::find(b.slots.begin(), b.slots.end(), slot) == b.slots.end()) untouched.push_back(slot);
    return untouched;
}

// Every element of slot `slot` of two state tensors the same bits.
void expect_slot_equal(HostTensor a, HostTensor b, int64_t slot, const char *what) {
    for (int64_t h = 0; h < a.t.ne[2]; ++h)
        for (int64_t j = 0; j < a.t.ne[1]; ++j)
            for (int64_t i = 0; i < a.t.ne[0]; ++i)
                if (std::memcmp(&element(a, i, j, h, slot), &element(b, i, j, h, slot), sizeof(float)) != 0) {
                    ADD_FAILURE() << what << ": slot " << slot << " changed at (" << i << ", " << j << ", " << h << ")";
                    return;
                }
}

class EmulatedBatch : public ::testing::TestWithParam<Batch> {};

TEST_P(EmulatedBatch, ForwardMatchesRefInOneLaunch) {
    const Batch b = GetParam();
    const Shape &s = b.s;
    const BatchInputs x = batch_inputs(b, 51);
    const Sizes n = x.in.sizes();
    const bool pooled = !b.slots.empty();
    const auto fresh_states = [&] { return pooled && b.in_place ? x.s0 : filled_state(s, b.snapshot_count(), b.value_major); };

    // ref: out, and the states (in place: the pool itself).
    HostTensor want_out(s.Sv, s.Hv, s.T, s.B, -7.0f), want_states = fresh_states();
    {
        RefContext ref;
        gdn_problem p = x.problem(b);
        HostTensor ref_s0 = x.s0;
        if (pooled && b.in_place) p.state = want_states.t;
        else p.state = ref_s0.t;
        ASSERT_EQ(gdn_forward(ref.ctx, &p, &want_out.t, &want_states.t), GDN_OK) << gdn_last_error(ref.ctx);
    }

    HostTensor s0 = x.s0, out(s.Sv, s.Hv, s.T, s.B, -7.0f), states = fresh_states();
    ForwardViews w{x.in.q.view(), x.in.k.view(), x.in.v.view(), x.in.g.view(), x.in.beta.view(), s0.view(), out.view(), states.view()};
    if (pooled && b.in_place) w.s0 = w.states;  // one pool, read and written
    const Walk walk = walk_of(b, n, false);
    EXPECT_EQ(emulate_forward(b, w, n), 1) << "every per-token sequence in one launch";
    EXPECT_EQ(walk.groups.size(), 1u);
    const auto long_ones = std::count_if(walk.grouped.begin(), walk.grouped.end(), [](const SequenceEntry &e) { return e.length >= kChunkedFrom; });
    EXPECT_EQ(long_ones, 0) << "a long sequence the chunked kernels take is walked by launches of its own";
    EXPECT_LT(nmse(out.data, want_out.data), 1e-10);
    EXPECT_LT(nmse(key_major(states).data, key_major(want_states).data), 1e-10);
    for (size_t i = 0; i < out.data.size(); ++i)
        if (want_out.data[i] == -7.0f) EXPECT_EQ(out.data[i], -7.0f) << i;  // rows of no sequence
    if (pooled)
        for (int64_t slot : untouched_slots(b)) expect_slot_equal(states, fresh_states(), slot, "an unnamed slot");

    // Sequence by sequence: the same bits.
    HostTensor s0_alone = x.s0, out_alone(s.Sv, s.Hv, s.T, s.B, -7.0f), states_alone = fresh_states();
    ForwardViews alone{x.in.q.view(), x.in.k.view(), x.in.v.view(), x.in.g.view(), x.in.beta.view(),
                       s0_alone.view(), out_alone.view(), states_alone.view()};
    if (pooled && b.in_place) alone.s0 = alone.states;
    per_sequence_forward(b, alone, n);
    EXPECT_EQ(out.data, out_alone.data);
    EXPECT_EQ(states.data, states_alone.data);
}

TEST_P(EmulatedBatch, BackwardMatchesRefInOneLaunchChain) {
    const Batch b = GetParam();
    const Shape &s = b.s;
    const BatchInputs x = batch_inputs(b, 52);
    const Sizes n = x.in.sizes();
    const bool pooled = !b.slots.empty();
    HostTensor d_out(s.Sv, s.Hv, s.T, s.B), d_states = random_state(s, b.snapshot_count(), 53, b.value_major);
    std::mt19937 rng(54);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    for (float &v : d_out.data) v = unit(rng);

    Grads want(s);
    want.ds0 = filled_state(s, b.state_count(), b.value_major);
    {
        RefContext ref;
        const gdn_problem p = x.problem(b);
        const gdn_grads grads{want.dq.t, want.dk.t, want.dv.t, want.dg.t, want.dbeta.t, want.ds0.t};
        ASSERT_EQ(gdn_backward(ref.ctx, &p, &d_out.t, &d_states.t, &grads), GDN_OK) << gdn_last_error(ref.ctx);
    }

    const auto views = [&](Grads &g) {
        return BackwardViews{x.in.q.view(), x.in.k.view(), x.in.v.view(),  x.in.g.view(), x.in.beta.view(),
                             x.s0.view(),   d_out.view(),  d_states.view(), g.dq.view(),   g.dk.view(),
                             g.dv.view(),   g.dg.view(),   g.dbeta.view(),  g.ds0.view()};
    };
    Grads got(s);
    got.ds0 = filled_state(s, b.state_count(), b.value_major);
    EXPECT_EQ(emulate_backward(b, views(got), n), 4) << "checkpoints, the walk back, two reductions: one chain";
    Grads got_km = got, want_km = want;
    got_km.ds0 = key_major(got.ds0), want_km.ds0 = key_major(want.ds0);
    expect_near(got_km, want_km);
    if (pooled)
        for (int64_t slot : untouched_slots(b)) expect_slot_equal(got.ds0, want.ds0, slot, "an unnamed slot of grads.state");

    // Sequence by sequence: the same bits where the checkpoints fall alike (sequences of one
    // length; a group's segments are sized for its longest, and the checkpoint pass's
    // arithmetic is not the replay's). Past 5 sequences ref's comparison suffices (emulation time).
    const std::vector<SequenceEntry> entries = sequence_entries(n, b.offsets, b.slots);
    const bool one_length = std::all_of(entries.begin(), entries.end(), [&](const SequenceEntry &e) { return e.length == entries[0].length; });
    if (!one_length || entries.size() > 5) return;
    Grads alone(s);
    alone.ds0 = filled_state(s, b.state_count(), b.value_major);
    per_sequence_backward(b, views(alone), n);
    expect_same_bits(got, alone);
}

// Sk, Sv, Hk, Hv, T, B, Bq, K, kda, grouped, s0 (the batch's own)
const Shape kSmall{16, 16, 1, 2, 0, 1, 1, 1, false, false, true};
const Shape kOneHead{16, 16, 1, 1, 0, 1, 1, 1, false, false, true};  // the larger batches (emulation time)
const Shape kChunkable{16, 32, 1, 1, 0, 1, 1, 1, false, false, true};  // Sv = 32: the chunked kernels take a long sequence
const Shape kKda{24, 20, 1, 2, 0, 1, 1, 1, true, true, true};
const Shape kSnapshots{16, 16, 1, 2, 0, 1, 1, 2, false, false, true};

Batch unpacked(Shape s, int B, int64_t T, std::string name) {
    s.B = s.Bq = B;
    s.T = T;
    return Batch{s, {}, {}, 0, true, false, std::move(name)};
}

INSTANTIATE_TEST_SUITE_P(
    Packed, EmulatedBatch,
    ::testing::Values(packed(kSmall, {1}, "one_decode"), packed(kOneHead, repeat(1, 16), "decode16"),
                      packed(kOneHead, repeat(1, 64), "decode64"), packed(kOneHead, repeat(4, 16), "spec16x4"),
                      packed(kOneHead, repeat(4, 64), "spec64x4"), packed(kKda, {3, 1, 7, 1, 12, 2}, "mixed_kda"),
                      packed(kSnapshots, {1, 5, 2, 3}, "snapshots"),
                      packed(kChunkable, {1, 70, 1, 4}, "prefill_and_decode")));  // 70: chunked, by launches of its own

INSTANTIATE_TEST_SUITE_P(
    Pools, EmulatedBatch,
    ::testing::Values(pooled(packed(kSmall, {1, 1, 1, 1, 1}, "decode5"), {6, -1, 2, 0, 4}, 8, true, false),  // gaps, unordered, negative
                      pooled(packed(kOneHead, repeat(1, 16), "decode16"), {15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, 20,
                             true, false),  // reversed
                      pooled(packed(kKda, {2, 4, 1}, "mixed_kda"), {-1, 3, 1}, 5, false, false),     // another pool
                      pooled(packed(kSmall, {1, 3, 1}, "decode3"), {4, -1, 0}, 6, true, true),        // value-major, in place
                      pooled(unpacked(kSmall, 3, 2, "unpacked_B3_T2"), {2, -1, 0}, 4, true, false),  // by batch index
                      pooled(unpacked(kSmall, 4, 1, "unpacked_B4_T1"), {3, 0, 2, 1}, 4, false, true)));

}  // namespace
