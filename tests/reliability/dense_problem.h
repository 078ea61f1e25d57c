// A small self-contained problem for the reliability tests: contiguous tensors of one element
// type in std::vectors, random inputs from a seed, and the forward / backward calls on them.
// (The harness's TensorSet does far more; these tests need plain buffers they can poke.)
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gdn/gdn.h"

namespace gdn::reliability {

struct Sizes {
    int64_t Sk = 4, Sv = 4, Hk = 1, Hv = 2, T = 8, B = 1, Bq = 1, K = 1;
    bool kda = false;
};

// One contiguous tensor of F32 or F64 elements.
struct Buffer {
    gdn_type type = GDN_TYPE_F32;
    int64_t ne[4] = {1, 1, 1, 1};
    std::vector<double> storage;  // 8-byte aligned storage for either element size

    Buffer() = default;
    Buffer(gdn_type t, int64_t e0, int64_t e1, int64_t e2, int64_t e3);
    int64_t count() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t index(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
        return i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3));
    }
    double get(int64_t i) const;
    void set(int64_t i, double value);
    gdn_tensor tensor();
    bool same_bits(const Buffer &o) const;
};

struct DenseProblem {
    Sizes s;
    gdn_type type;
    Buffer q, k, v, g, beta, s0;
    Buffer out, states;                   // forward outputs
    Buffer d_out, d_states;               // backward inputs
    Buffer dq, dk, dv, dg, dbeta, ds0;    // backward outputs
    bool with_s0 = true;

    DenseProblem(const Sizes &sizes, gdn_type type, uint64_t seed);
    gdn_problem problem();
    gdn_grads grads();
    gdn_status forward(gdn_context *ctx);
    gdn_status backward(gdn_context *ctx);
};

// A context on `backend`; fails the calling test when it cannot start.
gdn_context *make_context(const char *backend, int n_threads = 0);
// "cpu" when this build has it, else "ref": what the threaded tests exercise.
const char *threaded_backend();

}  // namespace gdn::reliability
