// Calls of several independent sequences (packed sequences, docs/VARLEN.md; state pools) on the
// cuda backend. Each sequence is a SequenceEntry: where its tokens sit in the token tensors and
// which state indices it reads and writes. A kernel given a SequenceTable finds the entry of its
// block (blockIdx.z) and walks it as an unpacked call of one sequence (B = Bq = 1, T = its
// length) on views of the call's tensors, so one launch covers every sequence of a group; the
// host makes the same views for a sequence walked by launches of its own (the chunked kernels).
// Plain arithmetic on views, host and device: the backend, the kernels and the emulation tests
// (tests/cuda/emulated_varlen_test.cpp, emulated_batch_test.cpp) share it.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/device_views.h"

namespace gdn::cuda {

struct SequenceEntry {
    int64_t begin = 0, length = 0;  // tokens [begin, begin + length) along dim 2 of the token tensors
    int64_t rows = 0;               // where its partial gradient rows start in a packed group (partial_rows.cuh)
    int64_t read = 0;   // dim-3 index of its initial state in s0 and of that state's gradient in ds0; -1: zero, ds0 not written
    int64_t write = 0;  // dim-3 index of its final state in states and of its gradient in d_states; -1: neither
    int b = 0, bq = 0;  // dim-3 index of its rows in the value-side (v, g, beta, out) and q/k token tensors
};

// What a launch covering several sequences reads. No entries: sequence z of an unpacked call
// (b = z, T tokens, states at index z), the launch covering all B.
struct SequenceTable {
    const SequenceEntry *entries = nullptr;  // device memory, one per blockIdx.z
    int count = 0;                           // entries
    int64_t longest = 0, tokens = 0;         // tokens of the longest entry, of all
    int64_t snapshot_step = 1;  // dim-3 distance between one sequence's snapshot slots (N packed: slot s*N + n)
    bool packed = false;        // the entries are spans of one packed stream (B = Bq = 1): per-entry reductions
};

GDN_HD SequenceEntry sequence_entry(const SequenceTable &table, const Sizes &n, int z) {
    if (table.entries != nullptr) return table.entries[z];
    SequenceEntry e;
    e.length = n.T;
    e.read = e.write = e.b = z;
    e.bq = n.qk_sequence(z);
    return e;
}

// Blocks along z of a launch over the table's sequences (also before `entries` points anywhere:
// the plans are made before the table is copied).
GDN_HD int sequence_count(const SequenceTable &table, const Sizes &n) { return table.count > 0 ? table.count : n.B; }
GDN_HD int64_t snapshot_step(const SequenceTable &table, const Sizes &n) {
    return table.entries != nullptr ? table.snapshot_step : n.B;
}

GDN_HD View token_rows(View v, int64_t begin, int batch) {
    return v.shifted(begin * v.s2 + batch * v.s3);
}

// Index `index` of a state tensor; absent for a negative index.
GDN_HD View state_at(View v, int64_t index) {
    if (index < 0) return View{};
    return v.shifted(index * v.s3);
}

// The snapshot slots of one sequence from `index` on, `step` apart.
GDN_HD View slots_at(View v, int64_t index, int64_t step) {
    v = state_at(v, index);
    v.s3 *= step;
    return v;
}

GDN_HD Sizes sequence_sizes(Sizes n, const SequenceEntry &e) {
    n.T = e.length;
    n.B = n.Bq = 1;
    return n;
}

GDN_HD ForwardViews sequence_views(const ForwardViews &w, const SequenceEntry &e, int64_t step) {
    ForwardViews v = w;
    v.q = token_rows(w.q, e.begin, e.bq), v.k = token_rows(w.k, e.begin, e.bq), v.v = token_rows(w.v, e.begin, e.b);
    v.g = token_rows(w.g, e.begin, e.b), v.beta = token_rows(w.beta, e.begin, e.b);
    v.s0 = state_at(w.s0, e.read);
    v.out = token_rows(w.out, e.begin, e.b);
    v.states = slots_at(w.states, e.write, step);
    return v;
}

GDN_HD BackwardViews sequence_views(const BackwardViews &w, const SequenceEntry &e, int64_t step) {
    BackwardViews v = w;
    v.q = token_rows(w.q, e.begin, e.bq), v.k = token_rows(w.k, e.begin, e.bq), v.v = token_rows(w.v, e.begin, e.b);
    v.g = token_rows(w.g, e.begin, e.b), v.beta = token_rows(w.beta, e.begin, e.b);
    v.s0 = state_at(w.s0, e.read);
    v.d_out = token_rows(w.d_out, e.begin, e.b);
    v.d_states = slots_at(w.d_states, e.write, step);
    v.dq = token_rows(w.dq, e.begin, e.bq), v.dk = token_rows(w.dk, e.begin, e.bq), v.dv = token_rows(w.dv, e.begin, e.b);
    v.dg = token_rows(w.dg, e.begin, e.b), v.dbeta = token_rows(w.dbeta, e.begin, e.b);
    v.ds0 = state_at(w.ds0, e.read);
    return v;
}

// The sequences of a call with tokens (an empty one's state is moved by the C API,
// core/empty_sequences.h): packed (offsets: N + 1 token offsets) or B sequences of T tokens;
// `slots`: one state slot per sequence (-1: none) for a pool, or empty (sequence n reads s0
// index n and writes states n + s N, or s B + b unpacked).
inline std::vector<SequenceEntry> sequence_entries(const Sizes &n, const std::vector<int64_t> &offsets,
                                                   const std::vector<int64_t> &slots) {
    std::vector<SequenceEntry> entries;
    const bool packed = !offsets.empty();
    const int64_t count = packed ? static_cast<int64_t>(offsets.size()) - 1 : n.B;
    for (int64_t i = 0; i < count; ++i) {
        SequenceEntry e;
        e.begin = packed ? offsets[i] : 0;
        e.length = packed ? offsets[i + 1] - offsets[i] : n.T;
        if (e.length == 0) continue;
        e.read = e.write = slots.empty() ? i : slots[i];
        e.b = packed ? 0 : static_cast<int>(i);
        e.bq = packed ? 0 : n.qk_sequence(static_cast<int>(i));
        entries.push_back(e);
    }
    return entries;
}

// Sequences walked by one launch chain: entries [first, first + table.count) of a call's
// entries, table.entries to be pointed at them where the kernels read them.
struct SequenceGroup {
    size_t first = 0;
    SequenceTable table;
};

// Splits `entries` (the sequences a call walks with the per-token kernels) into groups of
// consecutive entries, each one launch chain: at most `max_count` sequences and, packed, only
// as many as `fits(table)` accepts for the grown group's table (the backward: its workspace
// within kGroupBudget), at least one; unpacked (sequences of one length, windows of tokens
// instead) all in one. Sets each entry's `rows` (its place in its group's partial rows).
template <class Fits>
std::vector<SequenceGroup> sequence_groups(std::vector<SequenceEntry> &entries, bool packed, int64_t snapshot_step, int max_count,
                                           Fits fits) {
    std::vector<SequenceGroup> groups;
    for (size_t i = 0; i < entries.size(); ++i) {
        SequenceEntry &e = entries[i];
        const auto grown = [&](SequenceTable t) {
            t.count += 1;
            t.tokens += e.length;
            t.longest = t.longest > e.length ? t.longest : e.length;
            return t;
        };
        const bool joins = !groups.empty() && groups.back().table.count < max_count && (!packed || fits(grown(groups.back().table)));
        if (!joins) {
            SequenceGroup g;
            g.first = i;
            g.table.snapshot_step = snapshot_step;
            g.table.packed = packed;
            groups.push_back(g);
        }
        SequenceTable &t = groups.back().table;
        e.rows = packed ? t.tokens : 0;
        t = grown(t);
    }
    return groups;
}

// A sequence walked by launches of its own: its views and sizes, worked out on the host.
template <class Views>
struct SequenceCall {
    Views views;
    Sizes sizes;
};

template <class Views>
SequenceCall<Views> sequence_call(const Views &w, const Sizes &n, const SequenceEntry &e, int64_t step) {
    return {sequence_views(w, e, step), sequence_sizes(n, e)};
}

}  // namespace gdn::cuda
