// Drivers of the per-token recurrence over whole units and key-head groups, shared by the ref
// backend (Acc = double) and the cpu backend's per-token path (Acc = float).
//
// A unit is one (sequence b, value head h). A group is one (q/k sequence bq, key head kh) with
// every unit that reads it, in a fixed order (b ascending, then value heads ascending): the
// backward owns a group so that dq and dk are summed over its units in that order, without
// atomics, and written once.
//
// The backward needs S_{t-1} and S_t in reverse order. It never walks the recurrence backwards
// (dividing by exp(g) overflows); it stores the state at the start of every segment of `seg`
// tokens, then replays one segment at a time into a small buffer. Memory per group:
// (units * (T/seg + 1) + seg + 1) * Sk * Sv accumulators, never T * Sk * Sv.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/problem.h"
#include "core/tensor.h"
#include "math/elements.h"
#include "math/token_step.h"

namespace gdn::token {

template <class Acc>
inline Shape<Acc> shape_of(const Dims &d) {
    return {d.Sk, d.Sv, d.gate_width, static_cast<Acc>(d.scale)};
}

// The rows one unit reads at token t.
struct UnitRows {
    const gdn_tensor *q, *k, *v, *g, *beta;
    int64_t b, h, kh, bq;

    UnitRows(const gdn_tensor *q_, const gdn_tensor *k_, const gdn_tensor *v_, const gdn_tensor *g_,
             const gdn_tensor *beta_, const Dims &d, int64_t b_, int64_t h_)
        : q(q_), k(k_), v(v_), g(g_), beta(beta_), b(b_), h(h_), kh(d.key_head(h_)), bq(d.qk_sequence(b_)) {}

    const char *q_row(int64_t t) const { return element_ptr(*q, 0, kh, t, bq); }
    const char *k_row(int64_t t) const { return element_ptr(*k, 0, kh, t, bq); }
    const char *v_row(int64_t t) const { return element_ptr(*v, 0, h, t, b); }
    const char *g_row(int64_t t) const { return element_ptr(*g, 0, h, t, b); }
    const char *beta_at(int64_t t) const { return element_ptr(*beta, 0, h, t, b); }
};

// Per-token inputs in Acc, loaded from the unit's rows (each converted from its tensor's type).
template <class Acc>
struct TokenBuffers {
    std::vector<Acc> q, k, v, decay;
    Acc beta = 0;

    void resize(const Dims &d) {
        q.resize(d.Sk);
        k.resize(d.Sk);
        v.resize(d.Sv);
        decay.resize(d.gate_width);
    }
    Token<Acc> load_token(const UnitRows &r, const Dims &d, int64_t t) {
        load_elements(r.q->type, r.q_row(t), d.Sk, q.data());
        load_elements(r.k->type, r.k_row(t), d.Sk, k.data());
        load_elements(r.v->type, r.v_row(t), d.Sv, v.data());
        load_elements(r.g->type, r.g_row(t), d.gate_width, decay.data());
        for (auto &a : decay) a = std::exp(a);
        load_elements(r.beta->type, r.beta_at(t), 1, &beta);
        return {q.data(), k.data(), v.data(), decay.data(), beta};
    }
};

// A state [Sk, Sv] of unit (b, h) inside a [Sk, Sv, Hv, *] tensor, at dim-3 index `index`, in
// either layout (SPEC section 3); st holds S[i][j] at i + j * Sk.
template <class Acc>
void load_state(const gdn_tensor &t, const Dims &d, int64_t h, int64_t index, Acc *st) {
    for (int64_t j = 0; j < d.Sv; ++j) {
        if (keys_contiguous(t)) {
            load_elements(t.type, element_ptr(t, 0, j, h, index), d.Sk, st + j * d.Sk);
        } else {
            for (int64_t i = 0; i < d.Sk; ++i) load_elements(t.type, element_ptr(t, i, j, h, index), 1, st + j * d.Sk + i);
        }
    }
}
template <class Acc>
void store_state(const gdn_tensor &t, const Dims &d, int64_t h, int64_t index, const Acc *st) {
    for (int64_t j = 0; j < d.Sv; ++j) {
        if (keys_contiguous(t)) {
            store_elements(t.type, element_ptr(t, 0, j, h, index), d.Sk, st + j * d.Sk);
        } else {
            for (int64_t i = 0; i < d.Sk; ++i) store_elements(t.type, element_ptr(t, i, j, h, index), 1, st + j * d.Sk + i);
        }
    }
}

template <class Acc>
struct ForwardScratch {
    std::vector<Acc> state, o;
    TokenBuffers<Acc> token;
    void resize(const Dims &d) {
        state.resize(d.Sk * d.Sv);
        o.resize(d.Sv);
        token.resize(d);
    }
};

// Runs unit (b, h) over all T tokens, writing its rows of out and its snapshot slots.
template <class Acc>
void forward_unit(const ForwardArgs &a, int64_t b, int64_t h, ForwardScratch<Acc> &w) {
    const Dims &d = a.dims;
    const Shape<Acc> s = shape_of<Acc>(d);
    const UnitRows rows(a.q, a.k, a.v, a.g, a.beta, d, b, h);
    Acc *st = w.state.data();
    if (a.s0) load_state(*a.s0, d, h, b, st);
    else std::fill(w.state.begin(), w.state.end(), Acc(0));
    for (int64_t t = 0; t < d.T; ++t) {
        const Token<Acc> x = w.token.load_token(rows, d, t);
        step_forward(s, x, st, a.out ? w.o.data() : nullptr);
        if (a.out) store_elements(a.out->type, element_ptr(*a.out, 0, h, t, b), d.Sv, w.o.data());
        const int64_t slot = d.T - 1 - t;
        if (a.states && slot < d.K) store_state(*a.states, d, h, slot * d.B + b, st);
    }
}

// Default segment length of the checkpointed backward: ceil(sqrt(T)) balances the stored
// checkpoints (T/seg) against the replayed segment (seg).
inline int64_t default_segment(int64_t T) {
    int64_t seg = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(T))));
    return seg < 1 ? 1 : seg;
}

// Accumulators the scratch of a call holds (ForwardScratch / BackwardScratch below, with the
// default segment), or -1 when the count overflows int64. A backend checks this before it
// allocates, so that absurd sizes are refused instead of overflowing an index or attempting
// an allocation no machine can satisfy.
inline int64_t scratch_elements(const Dims &d, bool backward) {
    int64_t area, total;
    if (__builtin_mul_overflow(d.Sk, d.Sv, &area) || __builtin_add_overflow(area, 3 * d.Sk + 2 * d.Sv + d.gate_width, &total))
        return -1;
    if (!backward) return total;
    const int64_t seg = default_segment(d.T), segments = (d.T + seg - 1) / seg;
    const int64_t units = d.value_heads_per_key_head() * d.sequences_per_qk_sequence();
    int64_t per_unit, all_units, replay, rows;
    if (__builtin_add_overflow(segments, 1, &per_unit) || __builtin_mul_overflow(per_unit, area, &per_unit) ||
        __builtin_mul_overflow(units, per_unit, &all_units) || __builtin_mul_overflow(seg + 1, area, &replay) ||
        __builtin_mul_overflow(2 * seg, d.Sk, &rows) || __builtin_add_overflow(total, all_units, &total) ||
        __builtin_add_overflow(total, replay, &total) || __builtin_add_overflow(total, rows, &total))
        return -1;
    return total;
}

template <class Acc>
struct BackwardScratch {
    int64_t seg = 1, segments = 1, units = 1;  // segments: capacity; a call of T tokens uses ceil(T / seg)
    std::vector<Acc> checkpoints;   // [units][segments][Sk*Sv]: state before each segment
    std::vector<Acc> carries;       // [units][Sk*Sv]: dL/dS at the current position
    std::vector<Acc> replay;        // [seg + 1][Sk*Sv]: S_{t0-1}, S_t0, ..., of one segment
    std::vector<Acc> dq, dk;        // [seg][Sk]: the group's dq, dk over one segment
    std::vector<Acc> d_out, d_state, dv, dg, e;
    TokenBuffers<Acc> token;

    void resize(const Dims &d, int64_t segment) {
        seg = segment;
        segments = (d.T + seg - 1) / seg;
        units = d.value_heads_per_key_head() * d.sequences_per_qk_sequence();
        const int64_t area = d.Sk * d.Sv;
        checkpoints.resize(units * segments * area);
        carries.resize(units * area);
        replay.resize((seg + 1) * area);
        dq.resize(seg * d.Sk);
        dk.resize(seg * d.Sk);
        d_out.resize(d.Sv);
        d_state.resize(area);
        dv.resize(d.Sv);
        dg.resize(d.gate_width);
        e.resize(d.Sv);
        token.resize(d);
    }
    uint64_t bytes() const {
        return sizeof(Acc) * (checkpoints.size() + carries.size() + replay.size() + dq.size() + dk.size() + d_state.size());
    }
};

// The backward of every unit that reads key head kh of q/k sequence bq.
template <class Acc>
void backward_group(const BackwardArgs &a, int64_t bq, int64_t kh, BackwardScratch<Acc> &w) {
    const Dims &d = a.dims;
    const Shape<Acc> s = shape_of<Acc>(d);
    const int64_t area = d.Sk * d.Sv;
    const int64_t per_kh = d.value_heads_per_key_head(), per_bq = d.sequences_per_qk_sequence();
    // The scratch may be sized for a longer call (packed sequences share one): this call's segments.
    const int64_t segments = (d.T + w.seg - 1) / w.seg;
    auto unit_rows = [&](int64_t u) {
        const int64_t b = bq * per_bq + u / per_kh;
        return UnitRows(a.q, a.k, a.v, a.g, a.beta, d, b, d.value_head_of(kh, u % per_kh));
    };

    // Forward pass: the state before every segment, per unit.
    for (int64_t u = 0; u < w.units; ++u) {
        const UnitRows r = unit_rows(u);
        Acc *st = w.replay.data();
        if (a.s0) load_state(*a.s0, d, r.h, r.b, st);
        else std::fill(st, st + area, Acc(0));
        for (int64_t t = 0; t < d.T; ++t) {
            if (t % w.seg == 0) std::copy(st, st + area, w.checkpoints.data() + (u * segments + t / w.seg) * area);
            step_forward(s, w.token.load_token(r, d, t), st, static_cast<Acc *>(nullptr));
        }
    }
    std::fill(w.carries.begin(), w.carries.end(), Acc(0));

    // Reverse pass, one segment at a time, every unit of the group inside it.
    for (int64_t segment = segments - 1; segment >= 0; --segment) {
        const int64_t t0 = segment * w.seg, t1 = std::min(d.T, t0 + w.seg);
        std::fill(w.dq.begin(), w.dq.end(), Acc(0));
        std::fill(w.dk.begin(), w.dk.end(), Acc(0));
        for (int64_t u = 0; u < w.units; ++u) {
            const UnitRows r = unit_rows(u);
            Acc *states = w.replay.data();  // states[(t - t0) * area] = S_{t-1}
            std::copy_n(w.checkpoints.data() + (u * segments + segment) * area, area, states);
            for (int64_t t = t0; t < t1; ++t) {
                std::copy_n(states + (t - t0) * area, area, states + (t - t0 + 1) * area);
                step_forward(s, w.token.load_token(r, d, t), states + (t - t0 + 1) * area, static_cast<Acc *>(nullptr));
            }
            Acc *dst = w.carries.data() + u * area;
            for (int64_t t = t1 - 1; t >= t0; --t) {
                const Token<Acc> x = w.token.load_token(r, d, t);
                Acc *dq = a.dq ? w.dq.data() + (t - t0) * d.Sk : nullptr;
                Acc *dk = a.dk ? w.dk.data() + (t - t0) * d.Sk : nullptr;
                const int64_t slot = d.T - 1 - t;
                if (a.d_states && slot < d.K) {
                    load_state(*a.d_states, d, r.h, slot * d.B + r.b, w.d_state.data());
                    for (int64_t n = 0; n < area; ++n) dst[n] += w.d_state[n];
                }
                if (a.d_out) {
                    load_elements(a.d_out->type, element_ptr(*a.d_out, 0, r.h, t, r.b), d.Sv, w.d_out.data());
                    add_output_gradient(s, x.q, w.d_out.data(), states + (t - t0 + 1) * area, dst, dq);
                }
                Acc dbeta = 0;
                step_backward(s, x, states + (t - t0) * area, dst,
                              TokenGrads<Acc>{dq, dk, w.dv.data(), w.dg.data(), &dbeta, w.e.data()});
                if (a.dv) store_elements(a.dv->type, element_ptr(*a.dv, 0, r.h, t, r.b), d.Sv, w.dv.data());
                if (a.dg) store_elements(a.dg->type, element_ptr(*a.dg, 0, r.h, t, r.b), d.gate_width, w.dg.data());
                if (a.dbeta) store_elements(a.dbeta->type, element_ptr(*a.dbeta, 0, r.h, t, r.b), 1, &dbeta);
            }
        }
        for (int64_t t = t0; t < t1; ++t) {
            if (a.dq) store_elements(a.dq->type, element_ptr(*a.dq, 0, kh, t, bq), d.Sk, w.dq.data() + (t - t0) * d.Sk);
            if (a.dk) store_elements(a.dk->type, element_ptr(*a.dk, 0, kh, t, bq), d.Sk, w.dk.data() + (t - t0) * d.Sk);
        }
    }
    if (a.ds0)
        for (int64_t u = 0; u < w.units; ++u) {
            const UnitRows r = unit_rows(u);
            store_state(*a.ds0, d, r.h, r.b, w.carries.data() + u * area);
        }
}

}  // namespace gdn::token
