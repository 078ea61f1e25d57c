// Small contiguous host problems for the ref identity tests: build inputs, cut and permute
// them (token ranges, value-head permutations, repeated sequences), run the forward and the
// backward through the public C API, and compare the results.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "gdn/gdn.h"

namespace gdn::reftest {

using Extents = std::array<int64_t, 4>;

// The type of a call's states for q of type q_type (SPEC 3.1): F64 in an F64 call, else F32.
gdn_type state_type(gdn_type q_type);

// One contiguous F32, F64, BF16 or F16 host tensor, every byte 0xFF (a NaN) until written; set()
// rounds a double once to the element type.
class HostTensor {
public:
    HostTensor() = default;  // absent: view() has data == NULL
    HostTensor(gdn_type type, Extents ne);

    bool absent() const { return bytes_.empty(); }
    gdn_type type() const { return type_; }
    const Extents &ne() const { return ne_; }
    int64_t count() const { return ne_[0] * ne_[1] * ne_[2] * ne_[3]; }
    int64_t flat(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
        return i0 + ne_[0] * (i1 + ne_[1] * (i2 + ne_[2] * i3));
    }

    double get(int64_t flat) const;
    void set(int64_t flat, double x);
    double at(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const { return get(flat(i0, i1, i2, i3)); }
    void put(int64_t i0, int64_t i1, int64_t i2, int64_t i3, double x) { set(flat(i0, i1, i2, i3), x); }

    bool element_is_poison(int64_t flat) const;
    const std::vector<uint8_t> &bytes() const { return bytes_; }
    gdn_tensor view() const;

private:
    gdn_type type_ = GDN_TYPE_F64;
    Extents ne_{0, 0, 0, 0};
    mutable std::vector<uint8_t> bytes_;  // mutable: a gdn_tensor's data pointer is non-const
};

// out[..., i, ...] = in[..., source[i], ...] along dimension `dim`: slices, permutations and
// repetitions of heads, tokens or sequences.
HostTensor gather(const HostTensor &in, int dim, const std::vector<int64_t> &source);
// Indices first, first + 1, ..., last - 1.
std::vector<int64_t> range(int64_t first, int64_t last);
HostTensor sum(const HostTensor &a, const HostTensor &b);
// The same values in another element type, each rounded once (exact when it widens).
HostTensor retyped(const HostTensor &in, gdn_type type);

struct Sizes {
    int64_t Sk = 4, Sv = 4, Hk = 1, Hv = 1, T = 1, B = 1, Bq = 1;
    bool kda = false;  // per-channel gate (width Sk)
    gdn_head_map heads = GDN_HEAD_MAP_TILED;
};

struct HostProblem {
    Sizes sizes;
    HostTensor q, k, v, g, beta;
    HostTensor state;  // absent: zero initial state
    float scale = 0.0f;
    gdn_problem view() const;
};

// Random inputs: q and k rows of unit length, v ~ N(0, 1), g in [-0.3, -0.02] (mild decay),
// beta in [0, 1], s0 ~ N(0, 0.25) when `with_state`.
HostProblem random_problem(const Sizes &sizes, gdn_type type, uint64_t seed, bool with_state = true);
HostTensor random_tensor(gdn_type type, Extents ne, uint64_t seed, double sigma = 1.0);

// The problem over tokens [t0, t1), starting from `s0` (absent: zero).
HostProblem token_range(const HostProblem &p, int64_t t0, int64_t t1, const HostTensor &s0);

struct ForwardResult {
    HostTensor out, states;  // states: [Sk, Sv, Hv, B*K]
};
// Throws std::runtime_error with gdn_last_error when the call fails.
ForwardResult forward(gdn_context *ctx, const HostProblem &p, int64_t K = 1);

struct Gradients {
    HostTensor dq, dk, dv, dg, dbeta, ds0;
};
// d_out / d_states may be absent (zero). Every gradient is requested.
Gradients backward(gdn_context *ctx, const HostProblem &p, const HostTensor &d_out, const HostTensor &d_states);

// max |a - b| / max |b| (0 when both are all zero); infinity when shapes differ or a value is NaN.
double relative_difference(const HostTensor &a, const HostTensor &b);
bool same_bits(const HostTensor &a, const HostTensor &b);

// A context of one backend ("ref", "cpu", ...) for one test; throws std::runtime_error when it
// cannot be created.
class BackendContext {
public:
    explicit BackendContext(const char *backend);
    ~BackendContext();
    BackendContext(const BackendContext &) = delete;
    BackendContext &operator=(const BackendContext &) = delete;
    gdn_context *get() const { return ctx_; }

private:
    gdn_context *ctx_ = nullptr;
};

class RefContext : public BackendContext {
public:
    RefContext() : BackendContext("ref") {}
};

}  // namespace gdn::reftest
