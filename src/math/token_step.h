// One token of the gated delta rule, forward and backward, for one (value head, sequence) unit.
// Shared by the ref backend (Acc = double) and the cpu backend's per-token path (Acc = float).
//
// States are stored transposed, as in memory (SPEC section 3): st[j * Sk + i] = S[i][j], so a
// value channel j is a contiguous key-indexed column and every inner loop runs over i.
#pragma once

#include <cstdint>

namespace gdn::token {

template <class Acc>
struct Shape {
    int64_t Sk, Sv;
    int64_t gate_width;  // 1 (GDA) or Sk (KDA)
    Acc scale;
};

// Inputs of token t, already loaded in Acc; decay[i] = exp(g_t[i]) for i < gate_width.
template <class Acc>
struct Token {
    const Acc *q, *k, *v, *decay;
    Acc beta;
};

// S <- S' + k d^T with S' = diag(a) S and d = beta (v - S'^T k); o = scale S^T q when o != nullptr.
template <class Acc>
void step_forward(const Shape<Acc> &s, const Token<Acc> &x, Acc *st, Acc *o) {
    const bool per_channel = s.gate_width != 1;
    for (int64_t j = 0; j < s.Sv; ++j) {
        Acc *col = st + j * s.Sk;
        Acc p = 0;
        if (per_channel) {
            for (int64_t i = 0; i < s.Sk; ++i) {
                col[i] *= x.decay[i];
                p += col[i] * x.k[i];
            }
        } else {
            const Acc a = x.decay[0];
            for (int64_t i = 0; i < s.Sk; ++i) {
                col[i] *= a;
                p += col[i] * x.k[i];
            }
        }
        const Acc d = x.beta * (x.v[j] - p);
        Acc out = 0;
        for (int64_t i = 0; i < s.Sk; ++i) {
            col[i] += x.k[i] * d;
            out += col[i] * x.q[i];
        }
        if (o) o[j] = s.scale * out;
    }
}

// Gradients of one token. On entry `dst` holds dL/dS_t (every later contribution, the
// snapshot gradient and the output's already added by add_output_gradient); on exit it holds
// dL/dS_{t-1}. prev = S_{t-1}, cur = S_t. dq and dk are accumulated (+=), the rest written.
template <class Acc>
struct TokenGrads {
    Acc *dq, *dk;     // length Sk, accumulated; may be nullptr
    Acc *dv;          // length Sv, written; may be nullptr
    Acc *dg;          // length gate_width, written
    Acc *dbeta;       // one value, written
    Acc *e;           // scratch, length Sv
};

// dS_t += scale q dO^T and dq += scale S_t dO: the output's contribution.
template <class Acc>
void add_output_gradient(const Shape<Acc> &s, const Acc *q, const Acc *d_out, const Acc *cur, Acc *dst, Acc *dq) {
    for (int64_t j = 0; j < s.Sv; ++j) {
        const Acc w = s.scale * d_out[j];
        Acc *dcol = dst + j * s.Sk;
        const Acc *col = cur + j * s.Sk;
        for (int64_t i = 0; i < s.Sk; ++i) dcol[i] += q[i] * w;
        if (dq)
            for (int64_t i = 0; i < s.Sk; ++i) dq[i] += col[i] * w;
    }
}

template <class Acc>
void step_backward(const Shape<Acc> &s, const Token<Acc> &x, const Acc *prev, Acc *dst, const TokenGrads<Acc> &out) {
    const bool per_channel = s.gate_width != 1;
    // e = dL/dd = dS_t^T k; with p recomputed from S' = diag(a) S_{t-1}: dbeta = e . (v - p).
    Acc dbeta = 0;
    for (int64_t j = 0; j < s.Sv; ++j) {
        const Acc *col = prev + j * s.Sk;
        const Acc *dcol = dst + j * s.Sk;
        Acc e = 0, p = 0;
        for (int64_t i = 0; i < s.Sk; ++i) {
            e += dcol[i] * x.k[i];
            p += x.decay[per_channel ? i : 0] * col[i] * x.k[i];
        }
        out.e[j] = e;
        if (out.dv) out.dv[j] = x.beta * e;
        dbeta += e * (x.v[j] - p);
        // dk += dS_t d_j with d_j = beta (v_j - p_j); the -beta S' e term follows below.
        if (out.dk) {
            const Acc d = x.beta * (x.v[j] - p);
            for (int64_t i = 0; i < s.Sk; ++i) out.dk[i] += dcol[i] * d;
        }
    }
    *out.dbeta = dbeta;
    for (int64_t w = 0; w < s.gate_width; ++w) out.dg[w] = 0;
    Acc dg_scalar = 0;
    for (int64_t j = 0; j < s.Sv; ++j) {
        const Acc *col = prev + j * s.Sk;
        Acc *dcol = dst + j * s.Sk;
        const Acc be = x.beta * out.e[j];
        for (int64_t i = 0; i < s.Sk; ++i) {
            const Acc a = x.decay[per_channel ? i : 0];
            const Acc decayed = a * col[i];                 // S'_ij
            if (out.dk) out.dk[i] -= decayed * be;          // -beta S' e
            const Acc d_decayed = dcol[i] - x.k[i] * be;    // dS'_ij = dS_ij - beta k_i e_j
            if (per_channel) out.dg[i] += d_decayed * decayed;
            else dg_scalar += d_decayed * decayed;
            dcol[i] = a * d_decayed;                        // dS_{t-1} = diag(a) dS'
        }
    }
    if (!per_channel) out.dg[0] = dg_scalar;
}

}  // namespace gdn::token
