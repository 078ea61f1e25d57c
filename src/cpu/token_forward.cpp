#include "cpu/token_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/tensor.h"
#include "cpu/chunk_vector.h"

namespace gdn::cpu {

namespace {

const float *row_f32(const gdn_tensor &t, int64_t i1, int64_t i2, int64_t i3) {
    return reinterpret_cast<const float *>(element_ptr(t, 0, i1, i2, i3));
}

}  // namespace

void token_forward_unit(const ForwardArgs &a, int64_t b, int64_t h, TokenForwardScratch &w) {
    const Dims &d = a.dims;
    const int64_t Sk = d.Sk, Sv = d.Sv, kh = d.key_head(h), bq = d.qk_sequence(b);
    const bool per_channel = d.gate_width != 1;
    const float scale = static_cast<float>(d.scale);
    float *st = w.state.data();  // st[j * Sk + i] = S[i][j], as in memory
    for (int64_t j = 0; j < Sv; ++j) {
        if (a.s0) std::memcpy(st + j * Sk, element_ptr(*a.s0, 0, j, h, b), sizeof(float) * Sk);
        else std::fill(st + j * Sk, st + (j + 1) * Sk, 0.0f);
    }
    for (int64_t t = 0; t < d.T; ++t) {
        const float *q = row_f32(*a.q, kh, t, bq), *k = row_f32(*a.k, kh, t, bq), *v = row_f32(*a.v, h, t, b);
        const float *g = row_f32(*a.g, h, t, b);
        const float beta = *row_f32(*a.beta, h, t, b);
        for (int64_t i = 0; i < d.gate_width; ++i) w.decay[i] = std::exp(g[i]);  // as ref: exp of each gate
        for (int64_t j = 0; j < Sv; ++j) {
            float *col = st + j * Sk;
            if (per_channel) {
                scale_rows(col, w.decay.data(), 1, Sk, Sk, col);
            } else {
                cpu::scale(w.decay[0], col, Sk);
            }
            const float delta = beta * (v[j] - dot(col, k, Sk));  // d_j = beta (v_j - (S'^T k)_j)
            axpy(delta, k, col, Sk);                               // S = S' + k d^T
            w.o[j] = scale * dot(col, q, Sk);                      // o = scale S^T q
        }
        if (a.out) std::memcpy(element_ptr(*a.out, 0, h, t, b), w.o.data(), sizeof(float) * Sv);
        const int64_t slot = d.T - 1 - t;
        if (a.states && slot < d.K)
            for (int64_t j = 0; j < Sv; ++j)
                std::memcpy(element_ptr(*a.states, 0, j, h, slot * d.B + b), st + j * Sk, sizeof(float) * Sk);
    }
}

}  // namespace gdn::cpu
