// What the kernels receive: strided tensors (F32, BF16 or F16) as element strides, and the
// resolved sizes. Plain structs passed by value to kernels; usable from host code.
#pragma once

#include <cstdint>

#include "cuda/element_types.h"

namespace gdn::cuda {

// A strided tensor on the device: element (i0, i1, i2, i3) is element i0*s0 + i1*s1 + i2*s2 +
// i3*s3 of `type` from data. s0 is 1 (rows contiguous, SPEC section 3) except in a value-major
// state tensor ([Sk, Sv, Hv, *] with s1 = 1, PyTorch's [..., K, V]): kernels that move a whole
// state pick their loop order by it so that neighbouring threads touch neighbouring floats in
// both layouts. data == nullptr: absent (an input read as zero, an output not wanted).
//
// Token tensors (q, k, v, g, beta, out, d_out and the gradients) may be BF16 or F16 (SPEC 3.1):
// kernels read them by load() (exact) and write them by store() (rounded once), so everything
// between is the F32 computation on the converted values. States and workspace buffers are F32
// and addressed by at().
struct View {
    void *data = nullptr;
    int64_t s1 = 0, s2 = 0, s3 = 0;
    int64_t s0 = 1;
    Element type = Element::F32;

    GDN_HD bool present() const { return data != nullptr; }
    GDN_HD bool rows_contiguous() const { return s0 == 1; }
    GDN_HD bool is_f32() const { return type == Element::F32; }
    GDN_HD int64_t offset(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const { return i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3; }
    // The address of an element of an F32 view.
    GDN_HD float *at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const { return static_cast<float *>(data) + offset(i0, i1, i2, i3); }
    GDN_HD float load(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const { return load_element(type, data, offset(i0, i1, i2, i3)); }
    GDN_HD void store(int64_t i0, int64_t i1, int64_t i2, int64_t i3, float x) const { store_element(type, data, offset(i0, i1, i2, i3), x); }
    // The same tensor from `elements` elements further on.
    GDN_HD View shifted(int64_t elements) const {
        View v = *this;
        if (v.data != nullptr) v.data = static_cast<char *>(v.data) + elements * element_bytes(type);
        return v;
    }
};

// The sizes of one call (Dims of src/core/problem.h, narrowed to what kernels use).
struct Sizes {
    int Sk = 0, Sv = 0;      // key and value head sizes
    int Hk = 0, Hv = 0;      // key heads, value heads
    int B = 0, Bq = 0;       // sequences, q/k sequences
    int K = 1;               // snapshot slots of states / d_states
    int gate_width = 1;      // 1 (GDA) or Sk (KDA)
    int grouped = 0;         // head map: 0 tiled (kh = h % Hk), 1 grouped (kh = h / (Hv/Hk))
    int64_t T = 0;           // tokens
    float scale = 1.0f;
    // gdn_problem.precision = GDN_PRECISION_BF16: the chunked kernels' products take bf16
    // operands with F32 sums (tile_ops.cuh); 0: 3xTF32, about F32 accuracy.
    int bf16_products = 0;

    GDN_HD int key_head(int h) const { return grouped ? h / (Hv / Hk) : h % Hk; }
    GDN_HD int qk_sequence(int b) const { return b / (B / Bq); }
    GDN_HD int value_heads_per_key_head() const { return Hv / Hk; }
    GDN_HD int sequences_per_qk_sequence() const { return B / Bq; }
    // The j-th value head reading key head kh (j < Hv/Hk), ascending.
    GDN_HD int value_head_of(int kh, int j) const { return grouped ? kh * (Hv / Hk) + j : kh + j * Hk; }
};

// The forward's tensors.
struct ForwardViews {
    View q, k, v, g, beta, s0;   // inputs; s0 absent = zero initial state
    View out, states;            // outputs; absent = not wanted
    // The backward's pass over the forward: the state before every `checkpoint_every`-th token,
    // packed as [unit = b*Hv + h][t / checkpoint_every][Sv][Sk]; nullptr = not wanted.
    float *checkpoints = nullptr;
    int64_t checkpoint_every = 1, checkpoint_count = 0;
};

// The backward's tensors.
struct BackwardViews {
    View q, k, v, g, beta, s0;   // inputs
    View d_out, d_states;        // incoming gradients; absent = zero
    View dq, dk, dv, dg, dbeta, ds0;  // outputs; absent = not wanted
};

// The forward pass a backward runs first: the backward's inputs, no outputs, the state before
// every `every`-th token stored in `checkpoints` (count states per unit).
inline ForwardViews checkpoint_pass(const BackwardViews &w, float *checkpoints, int64_t every, int64_t count) {
    ForwardViews f;
    f.q = w.q, f.k = w.k, f.v = w.v, f.g = w.g, f.beta = w.beta, f.s0 = w.s0;
    f.checkpoints = checkpoints;
    f.checkpoint_every = every;
    f.checkpoint_count = count;
    return f;
}

}  // namespace gdn::cuda
