#include "case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "random.h"

namespace gdn::testkit {

const char *gate_name(Gate g) {
    switch (g) {
        case Gate::Zero: return "zero";
        case Gate::Mild: return "mild";
        case Gate::Strong: return "strong";
        case Gate::Spike: return "spike";
        case Gate::Mixed: return "mixed";
    }
    return "?";
}

const char *beta_name(BetaFill b) {
    switch (b) {
        case BetaFill::Random: return "rand";
        case BetaFill::Zero: return "0";
        case BetaFill::One: return "1";
    }
    return "?";
}

const char *state_layout_name(StateLayout l) {
    switch (l) {
        case StateLayout::KeyMajor: return "kmajor";
        case StateLayout::ValueMajor: return "vmajor";
        case StateLayout::Mixed: return "mixed";
    }
    return "?";
}

const char *slot_pattern_name(SlotPattern p) {
    switch (p) {
        case SlotPattern::InOrder: return "order";
        case SlotPattern::Gaps: return "gaps";
        case SlotPattern::Reversed: return "reversed";
        case SlotPattern::Shuffled: return "shuffled";
        case SlotPattern::Negative: return "negative";
    }
    return "?";
}

const char *type_name(gdn_type t) {
    switch (t) {
        case GDN_TYPE_F32: return "f32";
        case GDN_TYPE_F64: return "f64";
        case GDN_TYPE_BF16: return "bf16";
        case GDN_TYPE_F16: return "f16";
        case GDN_TYPE_I32: return "i32";
        case GDN_TYPE_I64: return "i64";
    }
    return "?";
}

ElementTypes ElementTypes::of(gdn_type x) {
    ElementTypes t;
    t.x = t.beta = x;
    t.g = x == GDN_TYPE_BF16 ? GDN_TYPE_BF16 : GDN_TYPE_F32;
    return t;
}

std::vector<int64_t> slot_indices(SlotPattern pattern, int64_t n, int64_t slots) {
    std::vector<int64_t> out(static_cast<size_t>(n));
    std::vector<int64_t> permutation(static_cast<size_t>(slots));
    for (int64_t s = 0; s < slots; ++s) permutation[static_cast<size_t>(s)] = s;
    Random rng(hash_string("slot_indices") + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(slots * 1000003 + n));
    for (int64_t s = slots - 1; s > 0; --s) std::swap(permutation[static_cast<size_t>(s)], permutation[static_cast<size_t>(rng.below(s + 1))]);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t spread = i * slots / n;  // distinct for slots >= n, gaps between for slots > n
        int64_t &slot = out[static_cast<size_t>(i)];
        switch (pattern) {
            case SlotPattern::InOrder: slot = i; break;
            case SlotPattern::Gaps: slot = spread; break;
            case SlotPattern::Reversed: slot = slots - 1 - spread; break;
            case SlotPattern::Shuffled: slot = permutation[static_cast<size_t>(i)]; break;
            case SlotPattern::Negative: slot = i % 3 == 1 ? -1 - i / 3 % 3 : spread; break;
        }
    }
    return out;
}

void Case::use_pool(int64_t slots, SlotPattern pattern, gdn_type index_type) {
    pool.slots = slots;
    pool.pattern = pattern;
    pool.index_type = index_type;
    pool.indices = slot_indices(pattern, state_sequences(), slots);
    pool.indices_i32.assign(pool.indices.begin(), pool.indices.end());
}

int64_t Case::sequences_with_state() const {
    if (!pooled()) return state_sequences();
    return std::count_if(pool.indices.begin(), pool.indices.end(), [](int64_t slot) { return slot >= 0; });
}

std::string Case::label() const {
    char buf[384];
    const Shape &s = shape;
    std::snprintf(buf, sizeof buf,
                  "%s(Sk=%lld,Sv=%lld,Hk=%lld,Hv=%lld,T=%lld,B=%lld,Bq=%lld,gate=%s,heads=%s,qk=%s,s0=%d,K=%lld,g=%s,beta=%s)",
                  op_name(), (long long)s.Sk, (long long)s.Sv, (long long)s.Hk, (long long)s.Hv, (long long)s.T,
                  (long long)s.B, (long long)s.Bq, kda ? "channel" : "scalar",
                  heads == GDN_HEAD_MAP_TILED ? "tiled" : "grouped", strided ? "strided" : "contig", s0 ? 1 : 0,
                  (long long)s.K, gate_name(gate), beta_name(beta));
    std::string out = buf;
    if (!cu_seqlens.empty()) {  // seqs=N: the lengths follow from (T, N), see packed_offsets
        out.pop_back();
        out += ",seqs=" + std::to_string(sequences()) + ")";
    }
    // The serving options only where they apply, so that every other case keeps its label (and
    // so its data, see seed()).
    std::string serving;
    if (state_layout != StateLayout::KeyMajor) serving += std::string(",state=") + state_layout_name(state_layout);
    if (pooled())
        serving += ",slots=" + std::to_string(pool.slots) + ",idx=" + slot_pattern_name(pool.pattern) +
                   (pool.index_type == GDN_TYPE_I32 ? ":i32" : "");
    if (in_place) serving += ",inplace=1";
    if (!serving.empty()) out.insert(out.size() - 1, serving);
    // The element types and precision, likewise only where they are not the default.
    std::string types_text;
    const ElementTypes defaults = ElementTypes::of(types.x);
    if (types.x != GDN_TYPE_F32) types_text += std::string(",type=") + type_name(types.x);
    if (types.beta != defaults.beta) types_text += std::string(",beta_type=") + type_name(types.beta);
    if (types.g != defaults.g) types_text += std::string(",g_type=") + type_name(types.g);
    if (precision == GDN_PRECISION_BF16) types_text += ",precision=bf16";
    if (!types_text.empty()) out.insert(out.size() - 1, types_text);
    return out;
}

void Case::pack(int64_t n) {
    shape.B = shape.Bq = 1;
    cu_seqlens = packed_offsets(shape.T, n);
}

std::vector<int64_t> packed_offsets(int64_t T, int64_t N) {
    Random rng(hash_string("packed_offsets") + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(T * 1000003 + N));
    std::vector<double> weights(static_cast<size_t>(N));
    double total = 0;
    for (double &w : weights) total += w = std::exp(rng.uniform(0.0, std::log(static_cast<double>(T))));
    // Every sequence gets one token, the other T - N are shared in proportion to the weights
    // (floors, then the remainder one by one from the first sequence on).
    std::vector<int64_t> lengths(static_cast<size_t>(N), 1);
    int64_t left = T - N;
    for (size_t n = 0; n < lengths.size(); ++n) {
        const auto share = static_cast<int64_t>(std::floor(static_cast<double>(T - N) * weights[n] / total));
        lengths[n] += share;
        left -= share;
    }
    for (size_t n = 0; left > 0; n = (n + 1) % lengths.size(), --left) ++lengths[n];
    std::vector<int64_t> offsets(1, 0);
    for (int64_t len : lengths) offsets.push_back(offsets.back() + len);
    return offsets;
}

uint64_t Case::seed(uint64_t run_seed) const {
    // The op is not part of the data: both ops of one shape see the same inputs.
    std::string data_label = label();
    data_label.erase(0, data_label.find('('));
    return hash_string(data_label.c_str()) + 0x9E3779B97F4A7C15ull * run_seed;
}

double Case::canonical_flops() const {
    const double per = (op == Op::Forward ? 8.0 : 24.0) * shape.Sk * shape.Sv;
    return per * shape.Hv * shape.T * shape.B;
}

bool Case::state_bound() const { return op == Op::Forward && shape.T <= 16 && forward_state_bytes() > 0; }

double Case::forward_state_bytes() const {
    const double state = sizeof(float) * static_cast<double>(shape.Sk * shape.Sv * shape.Hv * sequences_with_state());
    const int64_t slots = std::min(shape.K, shape.T);  // packed: the slots of sequences at least K long
    return state * ((s0 ? 1 : 0) + static_cast<double>(slots));
}

namespace {

Case make(const std::string &group, Shape s, bool kda, bool strided) {
    Case c;
    c.group = group;
    c.shape = s;
    c.kda = kda;
    c.strided = strided && s.B == s.Bq;
    return c;
}

void add_both_ops(std::vector<Case> &out, Case c) {
    c.op = Op::Forward;
    out.push_back(c);
    c.op = Op::Backward;
    c.in_place = false;  // a forward's option: the backward writes no states
    out.push_back(c);
}

void seed_group(std::vector<Case> &out) {
    // The 27B-like ingredients no public backward test had, crossed in a Latin-square pattern
    // rather than a full product: every token count meets every head size once, and value-head
    // repeat, sequence count, gate kind and layout rotate through them.
    const int64_t tokens[] = {1, 33, 64, 65, 130};
    const int64_t sizes[] = {16, 32, 64, 128};
    for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 4; ++j) {
            Shape s;
            s.Sk = s.Sv = sizes[j];
            s.Hk = 2;
            s.Hv = s.Hk * (2 + (i + j) % 2);
            s.T = tokens[i];
            s.B = s.Bq = 1 + (i + j / 2) % 2;
            Case c = make("seed", s, (i + j) % 3 == 0, (i * 4 + j) % 4 != 3);
            add_both_ops(out, c);
        }
}

void model_group(std::vector<Case> &out) {
    for (const Case &c : model_cases("qwen3.5-27b", 128, 128, 16, 48, {1, 64, 130}, "model")) out.push_back(c);
    for (const Case &c : model_cases("qwen3-next-80b-a3b", 128, 128, 16, 32, {65}, "model")) out.push_back(c);
}

// Head sizes off every width the cpu kernels work in (edge group): key sizes that are not a
// multiple of 4 (the leftover rows of the state's 4 x 4 transposes in load_state / store_state)
// nor of 8 (the per-token rows' padding), value sizes that fill several state panels (128: the
// forward's panels of 8, 16 or 64 columns, read in place) or end in a partial one (72, 100:
// above 64, and not a multiple of 16 or 64), and per-token states whose last group of four
// columns is partial, alone (Sv = 18: five groups) or in a pair (Sv = 30: eight). Chunked
// (T = 70, 130: across chunk boundaries) and per-token forwards (T <= 16); the backward of every
// shape; with and without s0, both gate kinds, snapshots stored through the same leftover paths.
void awkward_sizes(std::vector<Case> &out) {
    struct Awkward {
        int64_t Sk, Sv, T, K;
        bool kda, s0;
    };
    const Awkward shapes[] = {
        {67, 128, 70, 1, false, true}, {67, 128, 70, 3, true, true},  // chunked: leftover rows, several panels
        {50, 72, 130, 2, false, true}, {45, 100, 70, 1, true, false},  // chunked: a partial last panel
        {32, 18, 5, 2, false, true},   {45, 30, 16, 1, true, true},    // per-token: a partial last group
        {20, 21, 1, 1, false, true},   {45, 30, 9, 2, false, false},
    };
    for (const Awkward &a : shapes) {
        Shape s;
        s.Sk = a.Sk;
        s.Sv = a.Sv;
        s.Hk = 1;
        s.Hv = 2;
        s.T = a.T;
        s.K = a.K;
        Case c = make("edge", s, a.kda, true);
        c.s0 = a.s0;
        add_both_ops(out, c);
    }
}

void edge_group(std::vector<Case> &out) {
    Shape base;
    base.Sk = base.Sv = 16;
    base.Hk = 2;
    base.Hv = 4;
    base.T = 65;
    base.B = base.Bq = 2;
    auto edge = [&](Shape s, bool kda = false) { return make("edge", s, kda, true); };

    for (Gate g : {Gate::Zero, Gate::Mild, Gate::Strong, Gate::Spike})
        for (bool kda : {false, true}) {
            Case c = edge(base, kda);
            c.gate = g;
            add_both_ops(out, c);
        }
    {
        Shape s = base;
        s.T = 33;
        Case c = edge(s, true);
        c.gate = Gate::Mixed;
        add_both_ops(out, c);
    }
    for (BetaFill b : {BetaFill::Zero, BetaFill::One}) {
        Case c = edge(base);
        c.beta = b;
        add_both_ops(out, c);
    }
    {
        Case c = edge(base);
        c.s0 = false;
        add_both_ops(out, c);
    }
    for (int64_t K : {2, 4}) {
        Shape s = base;
        s.K = K;
        add_both_ops(out, edge(s));
    }
    {
        Shape s = base;  // K > T: slots T..K-1 are neither written nor read
        s.T = 3;
        s.K = 4;
        add_both_ops(out, edge(s));
    }
    // Snapshots on the chunked forms (T > 4), against default chunk lengths of 32 and 64: more
    // slots than a chunk has tokens; more slots than tokens; the earliest slot exactly at the end
    // of a chunk (T = 128, K = 65: slot 64 is the state after token 63) and one token past it.
    for (auto [T, K] : {std::pair<int64_t, int64_t>{200, 100}, {65, 70}, {128, 65}, {128, 64}})
        for (bool kda : {false, true}) {
            Shape s = base;
            s.T = T;
            s.K = K;
            add_both_ops(out, edge(s, kda));
        }
    for (auto [Sk, Sv] : {std::pair<int64_t, int64_t>{32, 16}, {16, 48}}) {
        Shape s = base;
        s.Sk = Sk;
        s.Sv = Sv;
        add_both_ops(out, edge(s, Sk == 32));
    }
    {
        Shape s = base;
        s.Hv = 6;
        Case c = edge(s);
        c.heads = GDN_HEAD_MAP_GROUPED;
        add_both_ops(out, c);
    }
    for (auto [B, Bq] : {std::pair<int64_t, int64_t>{4, 2}, {2, 1}}) {
        Shape s = base;
        s.B = B;
        s.Bq = Bq;
        add_both_ops(out, edge(s));
    }
    for (int64_t size : {1, 2, 4, 256}) {
        Shape s = base;
        s.Sk = s.Sv = size;
        if (size == 256) {
            s.T = 33;
            s.Hv = 2;
            s.Hk = 1;
            s.B = s.Bq = 1;
        }
        add_both_ops(out, edge(s, size == 4));
    }
    awkward_sizes(out);
}

void fd_group(std::vector<Case> &out) {
    // Small enough for finite differences of every element class, with head size 4 (where
    // public F32 finite-difference checks flake) and every feature once.
    Shape base;
    base.Sk = base.Sv = 4;
    base.Hk = 2;
    base.Hv = 4;
    base.T = 9;
    base.B = base.Bq = 2;
    auto fd = [&](Shape s, bool kda, bool strided) { return make("fd", s, kda, strided); };
    add_both_ops(out, fd(base, false, false));
    add_both_ops(out, fd(base, true, true));
    {
        Case c = fd(base, false, true);
        c.heads = GDN_HEAD_MAP_GROUPED;
        c.gate = Gate::Spike;
        add_both_ops(out, c);
    }
    {
        Shape s = base;
        s.B = 4;
        s.Bq = 2;
        s.K = 3;
        add_both_ops(out, fd(s, false, true));
    }
    {
        Shape s = base;
        s.Sk = 4;
        s.Sv = 3;
        Case c = fd(s, true, false);
        c.s0 = false;
        c.beta = BetaFill::One;
        add_both_ops(out, c);
    }
    {
        Shape s = base;
        s.T = 1;
        s.K = 2;
        Case c = fd(s, true, true);
        c.gate = Gate::Mixed;
        add_both_ops(out, c);
    }
    {
        Shape s = base;
        s.Sk = s.Sv = 1;
        s.Hk = 1;
        s.Hv = 3;
        add_both_ops(out, fd(s, false, true));
    }
}

}  // namespace

std::vector<Case> model_cases(const std::string &model, int64_t Sk, int64_t Sv, int64_t Hk, int64_t Hv,
                              const std::vector<int64_t> &token_counts, const std::string &group) {
    std::vector<Case> out;
    for (int64_t T : token_counts) {
        Shape s;
        s.Sk = Sk;
        s.Sv = Sv;
        s.Hk = Hk;
        s.Hv = Hv;
        s.T = T;
        s.B = s.Bq = 1;
        Case c = make(group, s, false, true);
        c.model = model;
        add_both_ops(out, c);
    }
    return out;
}

// Packed sequences (docs/VARLEN.md): lengths from 1 up, chunks that would cross boundaries,
// snapshots, KDA, grouped heads, strided views, with and without s0; small enough for fd.
void varlen_group(std::vector<Case> &out) {
    Shape base;
    base.Sk = base.Sv = 16;
    base.Hk = 2;
    base.Hv = 4;
    base.T = 300;
    auto packed = [&](Shape s, int64_t n, bool kda, bool strided) {
        Case c = make("varlen", s, kda, strided);
        c.pack(n);
        c.strided = strided;
        return c;
    };
    add_both_ops(out, packed(base, 7, false, true));
    add_both_ops(out, packed(base, 40, true, false));
    {
        Shape s = base;
        s.K = 3;
        Case c = packed(s, 9, false, true);
        c.heads = GDN_HEAD_MAP_GROUPED;
        add_both_ops(out, c);
    }
    {
        Case c = packed(base, 300, false, true);  // every sequence one token: decoding, packed
        c.s0 = false;
        add_both_ops(out, c);
    }
    {
        Shape s = base;
        s.Sk = s.Sv = 128;
        s.Hk = 2;
        s.Hv = 6;
        s.T = 700;
        add_both_ops(out, packed(s, 5, false, true));
    }
    {  // finite differences across boundaries (grad runs the fd and varlen groups on ref)
        Shape s;
        s.Sk = s.Sv = 4;
        s.Hk = 2;
        s.Hv = 4;
        s.T = 13;
        s.K = 2;
        add_both_ops(out, packed(s, 4, false, true));
        Case c = packed(s, 3, true, false);
        c.group = "fd";
        c.heads = GDN_HEAD_MAP_GROUPED;
        add_both_ops(out, c);
    }
}

// Serving (docs/SPEC.md, state pools): value-major states, alone and mixed with key-major ones,
// on the per-token (T <= 16) and chunked forms and the awkward sizes; pools of every slot pattern,
// I32 and I64 indices, in place and into another pool, with and without s0, packed; one at the
// head size of real models. Small enough for 2 cores; the backward of every shape (grad checks
// the pooled gradients against finite differences).
void serving_group(std::vector<Case> &out) {
    Shape base;
    base.Sk = base.Sv = 16;
    base.Hk = 2;
    base.Hv = 4;
    base.T = 1;
    base.B = base.Bq = 4;
    auto serving = [&](Shape s, StateLayout layout, bool kda = false) {
        Case c = make("serving", s, kda, true);
        c.state_layout = layout;
        return c;
    };
    auto pooled = [&](Shape s, StateLayout layout, int64_t slots, SlotPattern pattern, bool in_place,
                      gdn_type index_type = GDN_TYPE_I64) {
        Case c = serving(s, layout);
        c.use_pool(slots, pattern, index_type);
        c.in_place = in_place;
        return c;
    };
    // Value-major without a pool: decoding, speculative decoding, a chunked prefill with
    // snapshots; the awkward sizes of the edge group; a state of one key or one value column.
    add_both_ops(out, serving(base, StateLayout::ValueMajor));
    {
        Shape s = base;
        s.T = 4;
        s.K = 2;
        add_both_ops(out, serving(s, StateLayout::ValueMajor, true));
    }
    {
        Shape s = base;
        s.T = 70;
        s.B = s.Bq = 2;
        s.K = 3;
        add_both_ops(out, serving(s, StateLayout::ValueMajor));
        add_both_ops(out, serving(s, StateLayout::Mixed, true));
    }
    for (auto [Sk, Sv, T] : {std::tuple<int64_t, int64_t, int64_t>{67, 128, 70}, {45, 30, 9}, {4, 1, 5}, {1, 4, 33}}) {
        Shape s = base;
        s.Sk = Sk;
        s.Sv = Sv;
        s.T = T;
        s.Hk = 1;
        s.Hv = 2;
        s.B = s.Bq = 1;
        add_both_ops(out, serving(s, StateLayout::ValueMajor, Sk == 45));
    }
    // Pools: each slot pattern; decoding updates in place, the others write another pool.
    add_both_ops(out, pooled(base, StateLayout::ValueMajor, 9, SlotPattern::Shuffled, true));
    add_both_ops(out, pooled(base, StateLayout::KeyMajor, 8, SlotPattern::Gaps, true, GDN_TYPE_I32));
    add_both_ops(out, pooled(base, StateLayout::Mixed, 4, SlotPattern::InOrder, false));
    {
        Shape s = base;
        s.T = 4;
        add_both_ops(out, pooled(s, StateLayout::ValueMajor, 6, SlotPattern::Reversed, true, GDN_TYPE_I32));
        s.B = s.Bq = 7;
        add_both_ops(out, pooled(s, StateLayout::ValueMajor, 10, SlotPattern::Negative, true));
        add_both_ops(out, pooled(s, StateLayout::KeyMajor, 7, SlotPattern::Negative, false));
    }
    {
        Shape s = base;  // chunked, two value heads per key head, q/k shared by two sequences
        s.T = 70;
        s.B = 4;
        s.Bq = 2;
        Case c = pooled(s, StateLayout::ValueMajor, 5, SlotPattern::Shuffled, true);
        c.heads = GDN_HEAD_MAP_GROUPED;
        add_both_ops(out, c);
        add_both_ops(out, pooled(s, StateLayout::KeyMajor, 9, SlotPattern::Gaps, false));
    }
    {
        Shape s = base;  // no initial state: every sequence starts from zero, the pool is written
        s.T = 3;
        Case c = pooled(s, StateLayout::ValueMajor, 6, SlotPattern::Negative, false);
        c.s0 = false;
        add_both_ops(out, c);
    }
    {
        Shape s = base;  // packed requests (a mixed prefill and decode batch), in place and not
        s.T = 40;
        Case c = serving(s, StateLayout::ValueMajor);
        c.pack(6);
        c.use_pool(11, SlotPattern::Negative, GDN_TYPE_I32);
        c.in_place = true;
        add_both_ops(out, c);
        c.pack(5);
        c.use_pool(5, SlotPattern::Reversed);
        c.in_place = false;
        c.state_layout = StateLayout::KeyMajor;
        add_both_ops(out, c);
    }
    {
        Shape s = base;  // real head sizes
        s.Sk = s.Sv = 128;
        s.Hk = 2;
        s.Hv = 6;
        s.B = s.Bq = 3;
        add_both_ops(out, pooled(s, StateLayout::ValueMajor, 8, SlotPattern::Shuffled, true));
        s.T = 4;
        add_both_ops(out, pooled(s, StateLayout::ValueMajor, 5, SlotPattern::Negative, true));
    }
    {
        Shape s;  // small as the fd group's: grad's finite differences sample most elements
        s.Sk = s.Sv = 4;
        s.Hk = 2;
        s.Hv = 4;
        s.T = 9;
        s.B = s.Bq = 4;
        add_both_ops(out, pooled(s, StateLayout::ValueMajor, 7, SlotPattern::Negative, false));
        s.T = 13;
        s.B = s.Bq = 1;
        Case c = serving(s, StateLayout::Mixed, true);
        c.pack(4);
        c.use_pool(6, SlotPattern::Shuffled, GDN_TYPE_I32);
        add_both_ops(out, c);
    }
}

// Narrow element types and bf16 products (SPEC 3.1): the models' shapes (27B, 80B, and a KDA gate
// at the 27B shape) with q/k/v as views into one bf16 (or f16) projection buffer, beta and g as
// the rule allows and as overridden; packed sequences, a value-major state pool, and small shapes
// where grad's finite differences sample most elements. Few, since the suite runs on 2 cores.
void types_group(std::vector<Case> &out) {
    auto model = [&](const char *name, int64_t Hv, int64_t T, gdn_type x) {
        Case c = model_cases(name, 128, 128, 16, Hv, {T}, "types").front();
        c.use_type(x);
        return c;
    };
    add_both_ops(out, model("qwen3.5-27b", 48, 64, GDN_TYPE_BF16));
    {
        Case c = model("qwen3.5-27b", 48, 130, GDN_TYPE_BF16);
        c.precision = GDN_PRECISION_BF16;
        add_both_ops(out, c);
    }
    add_both_ops(out, model("qwen3-next-80b-a3b", 32, 65, GDN_TYPE_F16));
    {
        Case c = model("qwen3.5-27b", 48, 64, GDN_TYPE_BF16);  // KDA: a gate per key channel, beta in F32
        c.kda = true;
        c.types.beta = GDN_TYPE_F32;
        add_both_ops(out, c);
    }
    {
        Case c = model("qwen3.5-27b", 48, 1, GDN_TYPE_BF16);  // decoding into a value-major pool, in place
        c.shape.B = c.shape.Bq = 3;
        c.state_layout = StateLayout::ValueMajor;
        c.use_pool(5, SlotPattern::Shuffled);
        c.in_place = true;
        add_both_ops(out, c);
    }
    Shape small;
    small.Sk = small.Sv = 16;
    small.Hk = 2;
    small.Hv = 4;
    small.T = 300;
    {
        Case c = make("types", small, false, true);  // packed sequences in bf16 products
        c.pack(7);
        c.strided = true;
        c.use_type(GDN_TYPE_BF16);
        c.precision = GDN_PRECISION_BF16;
        add_both_ops(out, c);
    }
    Shape fd = small;  // the fd group's size
    fd.Sk = fd.Sv = 4;
    fd.T = 9;
    fd.B = fd.Bq = 2;
    {
        Case c = make("types", fd, true, true);
        c.use_type(GDN_TYPE_BF16);
        c.precision = GDN_PRECISION_BF16;
        add_both_ops(out, c);
    }
    {
        Case c = make("types", fd, false, true);  // f16 with a bf16 gate
        c.use_type(GDN_TYPE_F16);
        c.types.g = GDN_TYPE_BF16;
        add_both_ops(out, c);
    }
    {
        Case c = make("types", fd, false, false);  // F32 tensors, bf16 products
        c.precision = GDN_PRECISION_BF16;
        c.state_layout = StateLayout::ValueMajor;
        add_both_ops(out, c);
    }
}

std::vector<Case> default_cases() {
    std::vector<Case> out;
    seed_group(out);
    model_group(out);
    edge_group(out);
    fd_group(out);
    varlen_group(out);
    serving_group(out);
    types_group(out);
    return out;
}

std::vector<Case> perf_cases() {
    std::vector<Case> out = model_cases("qwen3.5-27b", 128, 128, 16, 48, {1, 512, 4096}, "perf");
    // Beside the F32 rows at T = 4096: bf16 tensors computed exactly, and bf16 tensors in bf16
    // products (docs/PERF.md compares the three).
    for (gdn_precision precision : {GDN_PRECISION_EXACT, GDN_PRECISION_BF16})
        for (Case c : model_cases("qwen3.5-27b", 128, 128, 16, 48, {4096}, "perf")) {
            c.use_type(GDN_TYPE_BF16);
            c.precision = precision;
            out.push_back(c);
        }
    for (const Case &c : model_cases("qwen3-next-80b-a3b", 128, 128, 16, 32, {4096}, "perf")) out.push_back(c);
    for (Case c : model_cases("qwen3.5-27b", 128, 128, 16, 48, {512}, "perf")) {
        c.kda = true;
        out.push_back(c);
    }
    // docs/VARLEN.md's criterion: 4096 tokens as 64 packed sequences against one 4096-token
    // sequence, with an initial state per sequence, and without (a packed training batch
    // starts every document from zero), the one sequence alike.
    for (Case c : model_cases("qwen3.5-27b", 128, 128, 16, 48, {4096}, "perf")) {
        c.pack(64);
        out.push_back(c);
    }
    for (Case c : model_cases("qwen3.5-27b", 128, 128, 16, 48, {4096}, "perf")) {
        c.s0 = false;
        out.push_back(c);
        c.pack(64);
        out.push_back(c);
    }
    for (const Case &c : serving_decode_cases("qwen3.5-27b", 128, 128, 16, 48, "perf")) out.push_back(c);
    return out;
}

std::vector<Case> serving_decode_cases(const std::string &model, int64_t Sk, int64_t Sv, int64_t Hk, int64_t Hv,
                                       const std::string &group) {
    std::vector<Case> out;
    for (int64_t T : {1, 4})
        for (int64_t requests : {1, 16, 64})
            for (Case c : model_cases(model, Sk, Sv, Hk, Hv, {T}, group)) {
                if (c.op != Op::Forward) continue;
                c.shape.B = c.shape.Bq = requests;
                c.state_layout = StateLayout::ValueMajor;
                c.use_pool(2 * requests, SlotPattern::Shuffled);
                c.in_place = true;
                out.push_back(c);
            }
    return out;
}

}  // namespace gdn::testkit
