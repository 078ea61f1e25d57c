// A C++ program built against an installed libgdn (scripts/ci-consumers.sh): prints
// gdn_version() and runs one token from a given state s0 (KDA gate, grouped heads), checked
// against the recurrence computed here in double:
//   S' = diag(exp(g)) s0;  d = beta (v - S'^T k);  S = S' + k d^T;  o = scale S^T q.
#include <gdn/gdn.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

namespace {

constexpr int Sk = 3, Sv = 2;

gdn_tensor tensor(std::vector<float> &data, int64_t e0, int64_t e1 = 1) {
    const int64_t f = sizeof(float);
    return gdn_tensor{data.data(), GDN_TYPE_F32, {e0, e1, 1, 1}, {f, f * e0, f * e0 * e1, f * e0 * e1}};
}

}  // namespace

int main() {
    std::vector<float> q{0.5f, -1.0f, 0.25f}, k{0.75f, 0.5f, -0.5f}, v{2.0f, -1.0f};
    std::vector<float> g{-0.1f, -0.5f, -1.0f}, beta{0.6f};
    std::vector<float> s0{0.3f, -0.2f, 0.1f, 0.4f, 0.0f, -0.6f};  // S[i][j] at i + j*Sk
    std::vector<float> out(Sv), state(Sk * Sv);

    gdn_problem p{};
    p.q = tensor(q, Sk);
    p.k = tensor(k, Sk);
    p.v = tensor(v, Sv);
    p.g = tensor(g, Sk);
    p.beta = tensor(beta, 1);
    p.state = tensor(s0, Sk, Sv);
    p.head_map = GDN_HEAD_MAP_GROUPED;
    const gdn_tensor o = tensor(out, Sv), final_state = tensor(state, Sk, Sv);

    std::printf("gdn %s\n", gdn_version());
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = 2;
    gdn_context *raw = nullptr;
    if (gdn_context_create("cpu", &params, &raw) != GDN_OK) {
        std::fprintf(stderr, "gdn_context_create: %s\n", gdn_last_create_error());
        return 1;
    }
    const std::unique_ptr<gdn_context, void (*)(gdn_context *)> ctx(raw, gdn_context_free);
    if (const gdn_status s = gdn_forward(ctx.get(), &p, &o, &final_state); s != GDN_OK) {
        std::fprintf(stderr, "gdn_forward: %s: %s\n", gdn_status_string(s), gdn_last_error(ctx.get()));
        return 1;
    }

    double S[Sk][Sv];
    for (int i = 0; i < Sk; ++i)
        for (int j = 0; j < Sv; ++j) S[i][j] = std::exp(double(g[i])) * s0[i + j * Sk];
    for (int j = 0; j < Sv; ++j) {
        double read = 0;
        for (int i = 0; i < Sk; ++i) read += S[i][j] * k[i];
        const double d = beta[0] * (v[j] - read);
        for (int i = 0; i < Sk; ++i) S[i][j] += k[i] * d;
    }
    const double scale = 1 / std::sqrt(double(Sk));  // p.scale = 0
    bool ok = true;
    auto check = [&](const char *what, int index, float got, double want) {
        std::printf("%s[%d] = %.7f (recurrence %.7f)\n", what, index, got, want);
        ok = ok && std::fabs(got - want) <= 1e-5 * (1 + std::fabs(want));
    };
    for (int j = 0; j < Sv; ++j) {
        double o_j = 0;
        for (int i = 0; i < Sk; ++i) o_j += S[i][j] * q[i];
        check("o", j, out[j], scale * o_j);
    }
    for (int i = 0; i < Sk; ++i)
        for (int j = 0; j < Sv; ++j) check("state", i + j * Sk, state[i + j * Sk], S[i][j]);
    std::puts(ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
