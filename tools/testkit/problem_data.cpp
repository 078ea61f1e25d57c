#include "problem_data.h"

#include <cmath>
#include <string>

#include "math/elements.h"

#include "random.h"

namespace gdn::testkit {
namespace {

// q/k/v (or dq/dk/dv) as row views into one packed buffer [conv_dim, T, B], the layout of a
// real model's conv_qkv_mix; or, when the case is not strided or q/k have fewer sequences than
// v, separate tensors (padded when strided).
void add_qkv(TensorSet &set, const Case &c, const char *q, const char *k, const char *v) {
    const Shape &s = c.shape;
    const int64_t qk_ne[4] = {s.Sk, s.Hk, s.T, s.Bq};
    const int64_t v_ne[4] = {s.Sv, s.Hv, s.T, s.B};
    const gdn_type type = set.stored_type(c.types.x);
    if (!c.strided || s.Bq != s.B) {
        set.add_tensor(q, qk_ne, c.strided, false, type);
        set.add_tensor(k, qk_ne, c.strided, false, type);
        set.add_tensor(v, v_ne, c.strided, false, type);
        return;
    }
    const auto es = static_cast<int64_t>(TensorSet::type_size(type));
    const int64_t conv_dim = 2 * s.Hk * s.Sk + s.Hv * s.Sv;
    const int buffer = set.add_buffer(static_cast<size_t>(conv_dim * s.T * s.B * es));
    auto view = [&](const int64_t ne[4], int64_t first_element) {
        View w;
        w.type = type;
        w.buffer = buffer;
        w.offset = static_cast<size_t>(first_element * es);
        for (int d = 0; d < 4; ++d) w.ne[d] = ne[d];
        w.nb[0] = es;
        w.nb[1] = ne[0] * es;
        w.nb[2] = conv_dim * es;
        w.nb[3] = conv_dim * s.T * es;
        return w;
    };
    set.add_view(q, view(qk_ne, 0));
    set.add_view(k, view(qk_ne, s.Hk * s.Sk));
    set.add_view(v, view(v_ne, 2 * s.Hk * s.Sk));
}

// Whether the tensors other than q/k/v are padded. A model's cases take the layout a model has:
// q/k/v rows of the packed projection, and g, beta, the states and the outputs contiguous, as the
// model allocates them (a padded state would put every column across a cache line boundary and
// tax exactly the state traffic that decoding is about). Other strided cases pad everything.
bool padded_others(const Case &c) { return c.strided && c.model.empty(); }

// Whether a state-shaped tensor lies value-major: every one in a value-major case; the inputs
// (state, d_states) only in a mixed one.
bool value_major(const Case &c, bool is_output) {
    return c.state_layout == StateLayout::ValueMajor || (c.state_layout == StateLayout::Mixed && !is_output);
}

void add_state_tensor(TensorSet &set, const Case &c, const char *name, int64_t count, bool is_output) {
    const Shape &s = c.shape;
    const int64_t ne[4] = {s.Sk, s.Sv, s.Hv, count};
    set.add_tensor(name, ne, padded_others(c), value_major(c, is_output));
}

// g and beta (or their gradients), and the initial state (or its gradient) when `state` is named.
void add_others(TensorSet &set, const Case &c, const char *g, const char *beta, const char *state, bool outputs) {
    const Shape &s = c.shape;
    const int64_t g_ne[4] = {c.kda ? s.Sk : 1, s.Hv, s.T, s.B};
    const int64_t beta_ne[4] = {1, s.Hv, s.T, s.B};
    set.add_tensor(g, g_ne, padded_others(c), false, c.types.g);
    set.add_tensor(beta, beta_ne, padded_others(c), false, c.types.beta);
    if (state) add_state_tensor(set, c, state, c.initial_states(), outputs);
}

double round_f32(double x) { return static_cast<double>(static_cast<float>(x)); }

// The type the case gives input `name` (the set may hold it in F64: the oracle's twin).
gdn_type case_type(const Case &c, const std::string &name) {
    if (name == "q" || name == "k" || name == "v" || name == "d_out") return c.types.x;
    if (name == "g") return c.types.g;
    if (name == "beta") return c.types.beta;
    return GDN_TYPE_F32;  // state, d_states
}

// A value drawn in double as the case's tensor holds it: rounded through F32, then to BF16 or
// F16 when the case has that type, so that every set of one case and seed (F32, narrower, or
// the F64 twin) holds exactly the same numbers.
double as_case_value(gdn_type type, double x) {
    double r = round_f32(x);
    if (type == GDN_TYPE_BF16) r = bf16_to_float(float_to_bf16(static_cast<float>(r)));
    if (type == GDN_TYPE_F16) r = f16_to_float(float_to_f16(static_cast<float>(r)));
    return r;
}

void write_case_values(TensorSet &set, const Case &c, const char *name, std::vector<double> &values) {
    const gdn_type type = case_type(c, name);
    for (double &x : values) x = as_case_value(type, x);
    set.write(name, values);
}

void fill_normal(TensorSet &set, const Case &c, const char *name, Random &rng, double sigma) {
    std::vector<double> values = set.read(name);
    for (double &x : values) x = sigma * rng.normal();
    write_case_values(set, c, name, values);
}

// q and k rows L2-normalised, as the models do before the delta rule.
void fill_unit_rows(TensorSet &set, const Case &c, const char *name, int64_t row, Random &rng) {
    std::vector<double> values = set.read(name);
    for (size_t r = 0; r < values.size(); r += static_cast<size_t>(row)) {
        double norm = 0;
        for (int64_t i = 0; i < row; ++i) {
            values[r + i] = rng.normal();
            norm += values[r + i] * values[r + i];
        }
        norm = std::sqrt(norm);
        for (int64_t i = 0; i < row; ++i) values[r + i] = norm > 0 ? values[r + i] / norm : 0.0;
    }
    write_case_values(set, c, name, values);
}

// Gate regimes (log-space gates; g <= 0 decays the state): zero; mild -0.3..-0.02; strong
// -20..-1e-4 (log-uniform magnitude, so both ends occur); spike = mild with -120 on every 7th
// token; mixed -0.5..0.3.
void fill_gate(TensorSet &set, const Case &c, Random &rng) {
    std::vector<double> values = set.read("g");
    const int64_t width = c.kda ? c.shape.Sk : 1, per_token = width * c.shape.Hv;
    for (size_t n = 0; n < values.size(); ++n) {
        const int64_t t = static_cast<int64_t>(n) / per_token % c.shape.T;
        double x = 0;
        switch (c.gate) {
            case Gate::Zero: x = 0; break;
            case Gate::Mild: x = rng.uniform(-0.3, -0.02); break;
            case Gate::Strong: x = -std::exp(rng.uniform(std::log(1e-4), std::log(20.0))); break;
            case Gate::Spike: x = t % 7 == 3 ? -120.0 : rng.uniform(-0.3, -0.02); break;
            case Gate::Mixed: x = rng.uniform(-0.5, 0.3); break;
        }
        values[n] = x;
    }
    write_case_values(set, c, "g", values);
}

void fill_beta(TensorSet &set, const Case &c, Random &rng) {
    std::vector<double> values = set.read("beta");
    for (double &x : values)
        x = c.beta == BetaFill::Zero ? 0.0 : c.beta == BetaFill::One ? 1.0 : rng.uniform();
    write_case_values(set, c, "beta", values);
}

}  // namespace

TensorSet make_inputs(const Case &c, gdn_type type, uint64_t seed) {
    TensorSet set(type);
    const Shape &s = c.shape;
    add_qkv(set, c, "q", "k", "v");
    add_others(set, c, "g", "beta", c.s0 ? "state" : nullptr, false);
    if (c.op == Op::Backward) {
        const int64_t out_ne[4] = {s.Sv, s.Hv, s.T, s.B};
        set.add_tensor("d_out", out_ne, padded_others(c), false, c.types.x);
        add_state_tensor(set, c, "d_states", c.final_states(), false);
    }
    set.poison();  // gaps stay poison: a read of one would show as NaN
    Random rng(seed);
    fill_unit_rows(set, c, "q", s.Sk, rng);
    fill_unit_rows(set, c, "k", s.Sk, rng);
    fill_normal(set, c, "v", rng, 1.0);
    fill_gate(set, c, rng);
    fill_beta(set, c, rng);
    if (c.op == Op::Backward) {
        fill_normal(set, c, "d_out", rng, 1.0);
        fill_normal(set, c, "d_states", rng, 1.0);
    }
    // Last, so that a case with and without s0 shares every other value (finite_diff.cpp).
    if (c.s0) fill_normal(set, c, "state", rng, 0.5);
    return set;
}

TensorSet make_outputs(const Case &c, gdn_type type) {
    TensorSet set(type);
    const Shape &s = c.shape;
    if (c.op == Op::Forward) {
        const int64_t out_ne[4] = {s.Sv, s.Hv, s.T, s.B};
        set.add_tensor("out", out_ne, padded_others(c), false, c.types.x);
        if (!c.in_place) add_state_tensor(set, c, "states", c.final_states(), true);  // else the inputs' state
    } else {
        add_qkv(set, c, "dq", "dk", "dv");
        add_others(set, c, "dg", "dbeta", "ds0", true);
    }
    set.poison();
    return set;
}

void keep_final_states(const Case &c, const TensorSet &inputs_after, TensorSet &outputs) {
    add_state_tensor(outputs, c, "states", c.final_states(), true);
    outputs.write("states", inputs_after.read("state"));
}

gdn_problem problem_of(const Case &c, const Mirror &inputs) {
    gdn_problem p{};
    p.q = inputs.tensor("q");
    p.k = inputs.tensor("k");
    p.v = inputs.tensor("v");
    p.g = inputs.tensor("g");
    p.beta = inputs.tensor("beta");
    p.state = inputs.tensor("state");
    p.scale = 0.0f;
    p.head_map = c.heads;
    p.precision = c.precision;
    if (!c.cu_seqlens.empty()) {  // host memory, which every backend takes (docs/VARLEN.md)
        p.cu_seqlens.data = const_cast<int64_t *>(c.cu_seqlens.data());
        p.cu_seqlens.type = GDN_TYPE_I64;
        p.cu_seqlens.ne[0] = static_cast<int64_t>(c.cu_seqlens.size());
        p.cu_seqlens.ne[1] = p.cu_seqlens.ne[2] = p.cu_seqlens.ne[3] = 1;
        p.cu_seqlens.nb[0] = sizeof(int64_t);
        for (int d = 1; d < 4; ++d) p.cu_seqlens.nb[d] = p.cu_seqlens.ne[0] * static_cast<int64_t>(sizeof(int64_t));
    }
    if (c.pooled()) {  // host memory too
        const bool i32 = c.pool.index_type == GDN_TYPE_I32;
        const auto elem = static_cast<int64_t>(i32 ? sizeof(int32_t) : sizeof(int64_t));
        gdn_tensor &t = p.state_indices;
        t.data = i32 ? static_cast<void *>(const_cast<int32_t *>(c.pool.indices_i32.data()))
                     : static_cast<void *>(const_cast<int64_t *>(c.pool.indices.data()));
        t.type = c.pool.index_type;
        t.ne[0] = static_cast<int64_t>(c.pool.indices.size());
        t.ne[1] = t.ne[2] = t.ne[3] = 1;
        t.nb[0] = elem;
        for (int d = 1; d < 4; ++d) t.nb[d] = t.ne[0] * elem;
    }
    return p;
}

gdn_grads grads_of(const Mirror &outputs) {
    return gdn_grads{outputs.tensor("dq"), outputs.tensor("dk"), outputs.tensor("dv"),
                     outputs.tensor("dg"), outputs.tensor("dbeta"), outputs.tensor("ds0")};
}

}  // namespace gdn::testkit
