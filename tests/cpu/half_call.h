// Calls built element by element for the half-type tests of the cpu backend: every tensor of a
// call (inputs, outputs, gradients) with the layout features of SPEC 3 (grouped heads, packed
// sequences, state pools updated in place, value-major states, q/k/v as views of one projection
// buffer), filled from a seeded generator whose values are rounded to a chosen type, so that the
// same problem can be built with BF16/F16 tensors and with F32 tensors holding the same values.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "gdn/gdn.h"

namespace gdn::halftest {

using Extents = std::array<int64_t, 4>;

// A tensor over memory it shares (views of one buffer share it); every byte 0xFF (a NaN) until written.
struct Tensor {
    std::shared_ptr<std::vector<uint8_t>> memory;
    gdn_tensor t{};

    bool present() const { return t.data != nullptr; }
    char *at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
        return static_cast<char *>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
    }
    double get(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const;
    void set(int64_t i0, int64_t i1, int64_t i2, int64_t i3, double x) const;  // rounded once to the type
    uint32_t bits(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const;
};

// Contiguous (value_major: a state with nb[1] = element size).
Tensor make_tensor(gdn_type type, Extents ne, bool value_major = false);

struct Types {
    gdn_type x, beta, gate;  // q/k/v/out/d_out and their gradients; beta; g
};

struct Spec {
    int64_t Sk = 32, Sv = 32, Hk = 2, Hv = 4, T = 200, B = 1, Bq = 1, K = 1;
    bool kda = false;
    gdn_head_map heads = GDN_HEAD_MAP_GROUPED;
    std::vector<int64_t> cu_seqlens;     // empty: not packed
    std::vector<int64_t> state_indices;  // empty: no pool; else a pool of `slots`, updated in place
    int64_t slots = 0;
    bool value_major = false;  // every state tensor value-major
    bool projection = false;   // q, k, v views of one [2 Hk Sk + Hv Sv, T, B] buffer
    bool s0 = true;
};

// Every tensor of one forward and one backward call.
struct Call {
    Tensor q, k, v, g, beta, s0, cu, indices;
    Tensor out, states;                       // forward outputs (states is s0 for a pool)
    Tensor d_out, d_states;                   // backward inputs
    Tensor dq, dk, dv, dg, dbeta, ds0;        // backward outputs
    gdn_problem problem() const;
    gdn_grads grads() const;
};

// The call of `spec` with tensors of types `types` holding values rounded to `values` (types =
// values: a half call; F32 types with half values: the F32 call on the converted inputs).
// Fixed by `seed`. States are F32.
Call build(const Spec &spec, Types types, Types values, uint64_t seed);

// Each element of `half` is the element of `f32` rounded once to half's type (the same bits for F32).
// Returns the number of elements that differ (and reports the first few through GoogleTest).
int64_t mismatches_rounded_once(const Tensor &half, const Tensor &f32, const char *what);
// Elements that are NaN (a tensor is poisoned with NaN until written).
int64_t nan_count(const Tensor &t);
// Bit-identical tensors.
bool same_bits(const Tensor &a, const Tensor &b);

}  // namespace gdn::halftest
