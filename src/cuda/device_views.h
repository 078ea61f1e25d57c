// What the kernels receive: strided F32 tensors as element strides, and the resolved sizes.
// Plain structs passed by value to kernels; usable from host code (no device code here).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GDN_HD __host__ __device__ __forceinline__
#else
#define GDN_HD inline
#endif

namespace gdn::cuda {

// A strided F32 tensor on the device: element (i0, i1, i2, i3) is data[i0*s0 + i1*s1 + i2*s2 + i3*s3].
// s0 is 1 (rows contiguous, SPEC section 3) except in a value-major state tensor ([Sk, Sv, Hv, *]
// with s1 = 1, PyTorch's [..., K, V]): kernels that move a whole state pick their loop order by
// it so that neighbouring threads touch neighbouring floats in both layouts. data == nullptr:
// absent (an input read as zero, an output not wanted).
struct View {
    float *data = nullptr;
    int64_t s1 = 0, s2 = 0, s3 = 0;
    int64_t s0 = 1;

    GDN_HD bool present() const { return data != nullptr; }
    GDN_HD bool rows_contiguous() const { return s0 == 1; }
    GDN_HD int64_t offset(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const { return i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3; }
    GDN_HD float *at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const { return data + offset(i0, i1, i2, i3); }
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
