#include "finite_diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "problem_data.h"
#include "random.h"

namespace gdn::testkit {
namespace {

struct Unit {
    int64_t b, h;
    int64_t seq = -1;  // packed cases: the sequence of the perturbed element; -1 otherwise
};

struct Sizes {
    int64_t Sk, Sv, Hk, Hv, T, B, Bq, K;
    gdn_head_map heads;
    int64_t key_head(int64_t h) const { return heads == GDN_HEAD_MAP_TILED ? h % Hk : h / (Hv / Hk); }
    int64_t qk_sequence(int64_t b) const { return b / (B / Bq); }
};

gdn_tensor sub(const gdn_tensor &t, int64_t i1, int64_t i3, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    gdn_tensor s = t;
    s.data = static_cast<char *>(t.data) + i1 * t.nb[1] + i3 * t.nb[3];
    s.ne[0] = ne0;
    s.ne[1] = ne1;
    s.ne[2] = ne2;
    s.ne[3] = ne3;
    return s;
}

gdn_tensor contiguous(std::vector<double> &storage, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    storage.assign(static_cast<size_t>(n0 * n1 * n2 * n3), 0.0);
    gdn_tensor t{};
    t.data = storage.data();
    t.type = GDN_TYPE_F64;
    const int64_t ne[4] = {n0, n1, n2, n3};
    int64_t stride = 8;
    for (int d = 0; d < 4; ++d) {
        t.ne[d] = ne[d];
        t.nb[d] = stride;
        stride *= ne[d];
    }
    return t;
}

// The loss of one unit: sum(dO * o) + sum over written slots of sum(dS * state).
class UnitLoss {
public:
    UnitLoss(const Case &c, TensorSet &inputs, gdn_context *ref) : c_(c), in_(inputs), ref_(ref) {
        const Shape &s = c.shape;
        sz_ = {s.Sk, s.Sv, s.Hk, s.Hv, s.T, s.B, s.Bq, s.K, c.heads};
    }

    double operator()(const Unit &u) {
        const Sizes &z = sz_;
        const int64_t kh = z.key_head(u.h), bq = z.qk_sequence(u.b);
        // Packed cases: the unit over the perturbed element's sequence and its neighbours, as one
        // packed call, so that the differences run across the sequence boundaries.
        const std::vector<int64_t> &offsets = c_.cu_seqlens;
        const bool packed = u.seq >= 0;
        const int64_t first = packed ? std::max<int64_t>(0, u.seq - 1) : 0;
        const int64_t last = packed ? std::min<int64_t>(c_.sequences(), u.seq + 2) : 1;  // sequences [first, last)
        const int64_t t0 = packed ? offsets[first] : 0, T = packed ? offsets[last] - t0 : z.T;
        const int64_t n_seq = last - first;
        std::vector<int64_t> window;
        for (int64_t n = first; n <= last && packed; ++n) window.push_back(offsets[n] - t0);
        auto tokens = [&](const gdn_tensor &t, int64_t i1, int64_t i3, int64_t ne0) {
            gdn_tensor v = sub(t, i1, i3, ne0, 1, T, 1);
            v.data = static_cast<char *>(v.data) + t0 * t.nb[2];
            return v;
        };
        gdn_problem p{};
        p.q = tokens(in_.host("q"), kh, bq, z.Sk);
        p.k = tokens(in_.host("k"), kh, bq, z.Sk);
        p.v = tokens(in_.host("v"), u.h, u.b, z.Sv);
        const gdn_tensor g = in_.host("g");
        p.g = tokens(g, u.h, u.b, g.ne[0]);
        p.beta = tokens(in_.host("beta"), u.h, u.b, 1);
        const gdn_tensor s0 = in_.host("state");
        if (s0.data && c_.pooled()) {
            p.state = gathered_states(s0, u.h, packed ? first : u.b, n_seq);
        } else if (s0.data) {
            p.state = s0;
            p.state.data = static_cast<char *>(s0.data) + u.h * s0.nb[2] + (packed ? first : u.b) * s0.nb[3];
            p.state.ne[2] = 1;
            p.state.ne[3] = packed ? n_seq : 1;
        }
        if (packed) {
            p.cu_seqlens.data = window.data();
            p.cu_seqlens.type = GDN_TYPE_I64;
            p.cu_seqlens.ne[0] = n_seq + 1;
            p.cu_seqlens.ne[1] = p.cu_seqlens.ne[2] = p.cu_seqlens.ne[3] = 1;
            p.cu_seqlens.nb[0] = 8;
            p.cu_seqlens.nb[1] = p.cu_seqlens.nb[2] = p.cu_seqlens.nb[3] = 8 * (n_seq + 1);
        }
        p.head_map = c_.heads;
        gdn_tensor out_t = contiguous(out_, z.Sv, 1, T, 1), states_t = contiguous(states_, z.Sk, z.Sv, 1, n_seq * z.K);
        if (gdn_forward(ref_, &p, &out_t, &states_t) != GDN_OK)
            throw std::runtime_error(std::string("ref forward of a unit failed: ") + gdn_last_error(ref_));

        const gdn_tensor d_out = in_.host("d_out"), d_states = in_.host("d_states");
        double loss = 0;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < z.Sv; ++j)
                loss += at(d_out, j, u.h, t0 + t, u.b) * out_[static_cast<size_t>(t * z.Sv + j)];
        for (int64_t m = 0; m < n_seq; ++m) {  // sequence m of the call: first + m of the case
            const int64_t length = packed ? window[m + 1] - window[m] : T;
            const int64_t written = std::min(z.K, length);
            const int64_t case_index = packed ? first + m : u.b, case_count = packed ? c_.sequences() : z.B;
            if (c_.slot_of(case_index) < 0) continue;  // a negative pool index: no final state written
            for (int64_t slot = 0; slot < written; ++slot) {
                const int64_t index = c_.pooled() ? c_.slot_of(case_index) : slot * case_count + case_index;
                for (int64_t j = 0; j < z.Sv; ++j)
                    for (int64_t i = 0; i < z.Sk; ++i)
                        loss += at(d_states, i, j, u.h, index) *
                                states_[static_cast<size_t>(((slot * n_seq + m) * z.Sv + j) * z.Sk + i)];
            }
        }
        return loss;
    }

private:
    // The initial states of sequences [first, first + count) at value head h, copied out of their
    // pool slots (zeros for a negative index) as the unit's plain batch, so that the unit's
    // forward does not go through the library's own pool handling.
    gdn_tensor gathered_states(const gdn_tensor &pool, int64_t h, int64_t first, int64_t count) {
        const gdn_tensor t = contiguous(s0_, sz_.Sk, sz_.Sv, 1, count);
        for (int64_t m = 0; m < count; ++m) {
            const int64_t slot = c_.slot_of(first + m);
            if (slot < 0) continue;
            for (int64_t j = 0; j < sz_.Sv; ++j)
                for (int64_t i = 0; i < sz_.Sk; ++i)
                    s0_[static_cast<size_t>((m * sz_.Sv + j) * sz_.Sk + i)] = at(pool, i, j, h, slot);
        }
        return t;
    }

    static double at(const gdn_tensor &t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
        return *reinterpret_cast<const double *>(static_cast<const char *>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] +
                                                 i2 * t.nb[2] + i3 * t.nb[3]);
    }

    const Case &c_;
    TensorSet &in_;
    gdn_context *ref_;
    Sizes sz_;
    std::vector<double> out_, states_, s0_;
};

struct Target {
    const char *grad;   // name in the backward's outputs
    const char *input;  // name in the inputs
};

constexpr Target kTargets[] = {{"dq", "q"}, {"dk", "k"}, {"dv", "v"}, {"dg", "g"}, {"dbeta", "beta"}, {"ds0", "state"}};

std::vector<Unit> readers_unpacked(const Sizes &z, const std::string &input, const int64_t idx[4]);

// The sequence whose initial state is state index s (its pool slot, with a pool); -1: none.
int64_t sequence_of_state(const Case &c, int64_t s) {
    if (!c.pooled()) return s;
    for (int64_t n = 0; n < c.state_sequences(); ++n)
        if (c.slot_of(n) == s) return n;
    return -1;
}

// The units that read element (i0, i1, i2, i3) of `input`; in a packed case, with the element's sequence.
std::vector<Unit> readers(const Case &c, const Sizes &z, const std::string &input, const int64_t idx[4]) {
    const std::vector<int64_t> &offsets = c.cu_seqlens;
    if (input == "state") {
        const int64_t n = sequence_of_state(c, idx[3]);
        if (n < 0) return {};
        return {offsets.empty() ? Unit{n, idx[2]} : Unit{0, idx[2], n}};
    }
    std::vector<Unit> units = readers_unpacked(z, input, idx);
    if (offsets.empty()) return units;
    for (Unit &u : units) {
        u.b = 0;
        u.seq = static_cast<int64_t>(std::upper_bound(offsets.begin(), offsets.end(), idx[2]) - offsets.begin()) - 1;
    }
    return units;
}

std::vector<Unit> readers_unpacked(const Sizes &z, const std::string &input, const int64_t idx[4]) {
    std::vector<Unit> units;
    if (input == "q" || input == "k") {
        for (int64_t b = 0; b < z.B; ++b)
            for (int64_t h = 0; h < z.Hv; ++h)
                if (z.qk_sequence(b) == idx[3] && z.key_head(h) == idx[1]) units.push_back({b, h});
    } else {
        units.push_back({idx[3], idx[1]});
    }
    return units;
}

}  // namespace

std::string GradientCheck::describe() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: worst %.2e over %d samples (analytic %.6e, fd %.6e)", tensor.c_str(), worst, samples,
                  analytic, numeric);
    return buf;
}

std::vector<GradientCheck> check_gradients(const Case &c, uint64_t seed, const TensorSet &grads, gdn_context *ref_ctx,
                                           int samples) {
    // The F64 twin of the backend's inputs: same values (make_inputs rounds through F32), plus
    // an explicit zero initial state when the case has none, so that ds0 can be perturbed.
    Case with_state = c;
    with_state.s0 = true;
    TensorSet inputs = make_inputs(with_state, GDN_TYPE_F64, seed);
    if (!c.s0) inputs.write("state", std::vector<double>(inputs.read("state").size(), 0.0));
    UnitLoss loss(c, inputs, ref_ctx);
    const Shape &s = c.shape;
    const Sizes z{s.Sk, s.Sv, s.Hk, s.Hv, s.T, s.B, s.Bq, s.K, c.heads};
    Random rng(seed ^ 0xF1D1FF5ull);

    struct Sample {
        double analytic, numeric;
    };
    std::vector<std::vector<Sample>> per_target;
    for (const Target &target : kTargets) {
        const std::vector<double> analytic = grads.read(target.grad);
        const gdn_tensor in = inputs.host(target.input);
        // The elements the gradient has: a pool's, those of the slots a sequence names (the
        // others are the caller's, untouched: gdn-ops test holds them to REF's).
        std::vector<int64_t> states(1, -1);  // -1: the whole tensor
        const int64_t per_state = in.ne[0] * in.ne[1] * in.ne[2];
        if (c.pooled() && std::string(target.input) == "state") {
            states.clear();
            for (int64_t n = 0; n < c.state_sequences(); ++n)
                if (c.slot_of(n) >= 0) states.push_back(c.slot_of(n));
        }
        const int64_t count = states[0] < 0 ? per_state * in.ne[3] : per_state * static_cast<int64_t>(states.size());
        auto element = [&](int64_t k) { return states[0] < 0 ? k : states[static_cast<size_t>(k / per_state)] * per_state + k % per_state; };
        std::vector<int64_t> chosen;
        if (count <= samples) {
            for (int64_t k = 0; k < count; ++k) chosen.push_back(element(k));
        } else {
            for (int n = 0; n < samples; ++n) chosen.push_back(element(rng.below(count)));
        }
        std::vector<Sample> results;
        for (int64_t flat : chosen) {
            const int64_t idx[4] = {flat % in.ne[0], flat / in.ne[0] % in.ne[1], flat / (in.ne[0] * in.ne[1]) % in.ne[2],
                                    flat / (in.ne[0] * in.ne[1] * in.ne[2])};
            double *x = inputs.element_f64(target.input, idx[0], idx[1], idx[2], idx[3]);
            const std::vector<Unit> units = readers(c, z, target.input, idx);
            const double x0 = *x, h = 1e-3 * std::max(1.0, std::fabs(x0));
            auto loss_at = [&](double value) {
                *x = value;
                double sum = 0;
                for (const Unit &u : units) sum += loss(u);
                return sum;
            };
            const double numeric =
                (-loss_at(x0 + 2 * h) + 8 * loss_at(x0 + h) - 8 * loss_at(x0 - h) + loss_at(x0 - 2 * h)) / (12 * h);
            *x = x0;
            results.push_back({analytic.at(static_cast<size_t>(flat)), numeric});
        }
        per_target.push_back(std::move(results));
    }

    // Scale: each tensor's rms of finite differences, floored at 1e-4 of the rms over all six,
    // so that a gradient that is truly ~0 (beta = 0 zeroes dk and dv) is judged against the
    // loss's overall sensitivity rather than against the differences' rounding noise (~1e-13).
    double all2 = 0;
    size_t all_n = 0;
    for (const auto &results : per_target)
        for (const Sample &x : results) {
            all2 += x.numeric * x.numeric;
            ++all_n;
        }
    const double floor = 1e-4 * std::sqrt(all2 / std::max<size_t>(all_n, 1));
    std::vector<GradientCheck> checks;
    for (size_t n = 0; n < per_target.size(); ++n) {
        const auto &results = per_target[n];
        double sum2 = 0;
        for (const Sample &x : results) sum2 += x.numeric * x.numeric;
        const double scale = std::max(std::sqrt(sum2 / std::max<size_t>(results.size(), 1)), floor);
        GradientCheck check;
        check.tensor = kTargets[n].grad;
        check.samples = static_cast<int>(results.size());
        for (const Sample &x : results) {
            const double denom = std::fabs(x.numeric) + scale;
            double err = denom > 0 ? std::fabs(x.analytic - x.numeric) / denom : (x.analytic == x.numeric ? 0.0 : INFINITY);
            if (std::isnan(err)) err = INFINITY;
            if (err >= check.worst) {
                check.worst = err;
                check.analytic = x.analytic;
                check.numeric = x.numeric;
            }
        }
        checks.push_back(check);
    }
    return checks;
}

}  // namespace gdn::testkit
