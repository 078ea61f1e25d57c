#include "cpu/token_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/tensor.h"
#include "cpu/state_io.h"
#include "cpu/typed_rows.h"

namespace gdn::cpu {

namespace {

// Tokens per block: the block's q and k rows (2 x 16 x Sk floats) stay in L1/L2 while every
// column of the state passes through them.
constexpr int64_t kTokensPerBlock = 16;

// State (h, index) of a state tensor [Sk, Sv, Hv, *] as the kernel of its layout reads it: a
// key-major state's columns, a value-major state's rows.
StateLines lines_of(const gdn_tensor &t, int64_t h, int64_t index) {
    return {const_cast<char *>(element_ptr(t, 0, 0, h, index)), value_major(t) ? t.nb[0] : t.nb[1]};
}

// State (h, index) of t into `to`, lines of the other layout (rows: value-major), element by
// element: only an initial state whose layout is not the kernel's comes here.
void copy_across_layouts(const gdn_tensor &t, const Dims &d, int64_t h, int64_t index, StateLines to, bool rows) {
    for (int64_t j = 0; j < d.Sv; ++j)
        for (int64_t i = 0; i < d.Sk; ++i) {
            const float x = *reinterpret_cast<const float *>(element_ptr(t, i, j, h, index));
            if (rows) to.line(i)[j] = x;
            else to.line(j)[i] = x;
        }
}

}  // namespace

void TokenForwardScratch::resize(const Dims &d) {
    const int64_t block = std::min(kTokensPerBlock, std::max<int64_t>(d.T, 1)), P = padded_row(d.Sk);
    state.resize(d.Sk * d.Sv);
    columns.resize(std::max(token_block_scratch(P), token_block_rows_scratch(P)));
    k.resize(block * P);
    q.resize(block * P);
    decay.resize(block * P);
    decayed_k.resize(block * P);
    beta.resize(block);
    const bool converted = d.type != GDN_TYPE_F32;  // v and out are read and written through float rows
    v_rows.resize(converted ? block * d.Sv : 0);
    out_rows.resize(converted ? block * d.Sv : 0);
    v.resize(block);
    out.resize(block);
    snapshot.resize(block);
}

uint64_t TokenForwardScratch::bytes() const {
    return sizeof(float) * (state.size() + columns.size() + k.size() + q.size() + decay.size() + decayed_k.size() +
                            beta.size() + v_rows.size() + out_rows.size()) +
           sizeof(void *) * (v.size() + out.size()) + sizeof(StateLines) * snapshot.size();
}

InitialState token_forward_initial(const ForwardArgs &a, int64_t b, int64_t h) {
    if (a.s0 == nullptr) return {};
    return {lines_of(*a.s0, h, b), value_major(*a.s0)};
}

void token_forward_unit(const ForwardArgs &a, int64_t b, int64_t h, TokenForwardScratch &w, InitialState next) {
    const Dims &d = a.dims;
    const int64_t kh = d.key_head(h), bq = d.qk_sequence(b), Sk = d.Sk, P = padded_row(Sk);
    const bool per_channel = d.gate_width != 1;
    const int64_t Sv = d.Sv;
    // A row converted into its padded slot, the pad zeroed (k, q: zeros keep the pad out of every
    // dot product; the state's pad is zero too).
    auto padded_copy = [&](const gdn_tensor &t, int64_t i1, int64_t t_index, int64_t i3, float *slot) {
        load_row(t.type, element_ptr(t, 0, i1, t_index, i3), Sk, slot);
        std::fill(slot + Sk, slot + P, 0.0f);
    };
    // v and out in place when F32; BF16/F16 rows through the scratch rows (out stored after the block).
    const bool converted = d.type != GDN_TYPE_F32;
    // The kernel of the layout the states are written in (else s0's): an s0 in the other layout
    // is copied into the scratch state in the kernel's first.
    const gdn_tensor *layout = a.states ? a.states : a.s0;
    const bool rows = layout && value_major(*layout);
    const auto kernel = rows ? token_block_rows : token_block;
    const StateLines scratch{reinterpret_cast<char *>(w.state.data()), (rows ? d.Sv : Sk) * int64_t(sizeof(float))};
    StateLines initial = a.s0 ? lines_of(*a.s0, h, b) : StateLines{};
    if (a.s0 && value_major(*a.s0) != rows) {
        copy_across_layouts(*a.s0, d, h, b, scratch, rows);
        initial = scratch;
    }
    TokenBlock blk;
    blk.Sk = Sk;
    blk.padded = P;
    blk.Sv = d.Sv;
    blk.scale = static_cast<float>(d.scale);
    blk.k = w.k.data();
    blk.q = w.q.data();
    blk.decay = w.decay.data();
    blk.decayed_k = w.decayed_k.data();
    blk.beta = w.beta.data();
    blk.v = w.v.data();
    blk.out = a.out ? w.out.data() : nullptr;
    blk.snapshot = w.snapshot.data();
    for (int64_t t0 = 0; t0 < d.T; t0 += kTokensPerBlock) {
        const int64_t t1 = std::min(d.T, t0 + kTokensPerBlock);
        blk.tokens = t1 - t0;
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t n = t - t0, slot = d.T - 1 - t;
            padded_copy(*a.k, kh, t, bq, w.k.data() + n * P);
            padded_copy(*a.q, kh, t, bq, w.q.data() + n * P);
            // The decay as a row either way (one gate repeated), the pad zeroed.
            float *decay = w.decay.data() + n * P;
            if (per_channel) {
                load_row(a.g->type, element_ptr(*a.g, 0, h, t, b), Sk, decay);
                for (int64_t i = 0; i < Sk; ++i) decay[i] = std::exp(decay[i]);  // as ref: exp of each gate
            } else {
                std::fill(decay, decay + Sk, std::exp(load_element(*a.g, h, t, b)));
            }
            std::fill(decay + Sk, decay + P, 0.0f);
            const float *k = w.k.data() + n * P;
            float *decayed_k = w.decayed_k.data() + n * P;
            for (int64_t i = 0; i < P; ++i) decayed_k[i] = decay[i] * k[i];
            w.beta[n] = load_element(*a.beta, h, t, b);
            const void *v = element_ptr(*a.v, 0, h, t, b);
            w.v[n] = converted ? w.v_rows.data() + n * Sv : static_cast<const float *>(v);
            if (converted) load_row(a.v->type, v, Sv, w.v_rows.data() + n * Sv);
            if (a.out)
                w.out[n] = converted ? w.out_rows.data() + n * Sv : reinterpret_cast<float *>(element_ptr(*a.out, 0, h, t, b));
            w.snapshot[n] = a.states && slot < d.K ? lines_of(*a.states, h, slot * d.B + b) : StateLines{};
        }
        // The state enters from s0 (or zero) and leaves to the scratch between blocks; the final
        // state is snapshot slot 0, which the last token writes in place of a copy.
        const StateLines from = t0 > 0 ? scratch : initial;
        StateLines to = scratch;
        if (t1 == d.T) {
            to = w.snapshot[blk.tokens - 1];  // base nullptr when no slot is asked for
            w.snapshot[blk.tokens - 1] = {};
            if (next.rows == rows) blk.ahead = next.lines;
        }
        kernel(blk, from, to, w.columns.data());
        if (a.out && converted)
            for (int64_t t = t0; t < t1; ++t) store_row(a.out->type, w.out[t - t0], Sv, element_ptr(*a.out, 0, h, t, b));
    }
}

}  // namespace gdn::cpu
