// Closed forms of the gated delta rule on the ref backend (SPEC section 2), each computed here
// independently of the library: beta = 0 leaves only the decay; g = 0 and beta = 1 with
// orthonormal keys recall the values exactly; a single token, forward and backward, by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "host_problem.h"
#include "random.h"

namespace {

using namespace gdn::reftest;

const char *type_label(gdn_type t) { return t == GDN_TYPE_F64 ? "F64" : "F32"; }

// F64: the ref's double arithmetic against the same closed form in double, reordered (a product
// of exponentials against the exponential of a sum): agreement to a few tens of ulps (measured
// 5e-16 at T = 17).
// F32: inputs held in float, the ref accumulates in double and rounds each result once, so the
// only difference is that rounding: half an ulp, 6e-8 of the value.
double tolerance(gdn_type t) { return t == GDN_TYPE_F64 ? 1e-14 : 1e-7; }

TEST(ClosedForms, BetaZeroLeavesOnlyTheDecay) {
    for (gdn_type type : {GDN_TYPE_F64, GDN_TYPE_F32})
        for (bool kda : {false, true}) {
            SCOPED_TRACE(std::string(type_label(type)) + (kda ? " KDA" : " GDA"));
            Sizes s;
            s.Sk = 5;
            s.Sv = 3;
            s.Hk = 2;
            s.Hv = 4;
            s.T = 17;
            s.B = s.Bq = 2;
            s.kda = kda;
            HostProblem p = random_problem(s, type, 101);
            for (int64_t n = 0; n < p.beta.count(); ++n) p.beta.set(n, 0.0);
            RefContext ctx;
            const ForwardResult f = forward(ctx.get(), p);

            // S_t = diag(exp(G_t)) s0 with G_t the sum of the gates so far; o_t = scale S_t^T q_t.
            const double scale = 1.0 / std::sqrt(static_cast<double>(s.Sk));
            HostTensor out(type, f.out.ne()), state(type, f.states.ne());
            for (int64_t b = 0; b < s.B; ++b)
                for (int64_t h = 0; h < s.Hv; ++h) {
                    const int64_t kh = h % s.Hk;
                    std::vector<double> G(static_cast<size_t>(s.Sk), 0.0);
                    for (int64_t t = 0; t < s.T; ++t) {
                        for (int64_t i = 0; i < s.Sk; ++i) G[i] += p.g.at(kda ? i : 0, h, t, b);
                        for (int64_t j = 0; j < s.Sv; ++j) {
                            double o = 0;
                            for (int64_t i = 0; i < s.Sk; ++i) {
                                const double S = std::exp(G[i]) * p.state.at(i, j, h, b);
                                o += S * p.q.at(i, kh, t, b);
                                if (t == s.T - 1) state.put(i, j, h, b, S);
                            }
                            out.put(j, h, t, b, scale * o);
                        }
                    }
                }
            EXPECT_LE(relative_difference(f.out, out), tolerance(type));
            EXPECT_LE(relative_difference(f.states, state), tolerance(type));

            // Nothing is written, so nothing flows back to the keys or the values: exactly zero.
            const HostTensor d_out = random_tensor(type, f.out.ne(), 5), d_states = random_tensor(type, f.states.ne(), 6);
            const Gradients gr = backward(ctx.get(), p, d_out, d_states);
            for (const HostTensor *t : {&gr.dk, &gr.dv})
                for (int64_t n = 0; n < t->count(); ++n) ASSERT_EQ(t->get(n), 0.0) << "element " << n;
        }
}

// Rows of a random orthonormal basis of R^n (Gram-Schmidt, in double).
std::vector<std::vector<double>> orthonormal_basis(int64_t n, uint64_t seed) {
    gdn::testkit::Random rng(seed);
    std::vector<std::vector<double>> basis;
    while (static_cast<int64_t>(basis.size()) < n) {
        std::vector<double> x(static_cast<size_t>(n));
        for (double &e : x) e = rng.normal();
        for (int pass = 0; pass < 2; ++pass)  // twice: classical Gram-Schmidt loses orthogonality once
            for (const auto &e : basis) {
                double dot = 0;
                for (int64_t i = 0; i < n; ++i) dot += x[i] * e[i];
                for (int64_t i = 0; i < n; ++i) x[i] -= dot * e[i];
            }
        double norm = 0;
        for (double e : x) norm += e * e;
        for (double &e : x) e /= std::sqrt(norm);
        basis.push_back(x);
    }
    return basis;
}

TEST(ClosedForms, OrthonormalKeysWithoutDecayRecallTheValuesExactly) {
    // g = 0 and beta = 1: each write sets S^T k_t = v_t, and later writes along orthogonal keys
    // leave it alone. So a query equal to an earlier key reads that key's value, whatever the
    // initial state; once the keys span R^Sk, the state is exactly sum_t k_t v_t^T.
    for (int64_t T : {3, 8}) {
        SCOPED_TRACE("T = " + std::to_string(T));
        Sizes s;
        s.Sk = 8;
        s.Sv = 5;
        s.Hk = 2;
        s.Hv = 4;
        s.T = T;
        s.B = s.Bq = 2;
        HostProblem p = random_problem(s, GDN_TYPE_F64, 202);
        p.scale = 0.75f;  // exactly representable: the expected outputs are 0.75 v
        for (int64_t bq = 0; bq < s.Bq; ++bq)
            for (int64_t kh = 0; kh < s.Hk; ++kh) {
                const auto basis = orthonormal_basis(s.Sk, 1000 + 10 * bq + kh);
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t i = 0; i < s.Sk; ++i) {
                        p.k.put(i, kh, t, bq, basis[t][i]);
                        p.q.put(i, kh, t, bq, basis[t / 2][i]);  // the key of token t/2 <= t
                    }
            }
        for (int64_t n = 0; n < p.g.count(); ++n) p.g.set(n, 0.0);
        for (int64_t n = 0; n < p.beta.count(); ++n) p.beta.set(n, 1.0);
        RefContext ctx;
        const ForwardResult f = forward(ctx.get(), p);

        HostTensor expected_out(GDN_TYPE_F64, f.out.ne());
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t h = 0; h < s.Hv; ++h)
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t j = 0; j < s.Sv; ++j) expected_out.put(j, h, t, b, 0.75 * p.v.at(j, h, t / 2, b));
        EXPECT_LE(relative_difference(f.out, expected_out), 1e-14);

        // Recall from the final state: S^T k_t = v_t for every token.
        HostTensor recalled(GDN_TYPE_F64, p.v.ne());
        for (int64_t b = 0; b < s.B; ++b)
            for (int64_t h = 0; h < s.Hv; ++h)
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t j = 0; j < s.Sv; ++j) {
                        double r = 0;
                        for (int64_t i = 0; i < s.Sk; ++i) r += f.states.at(i, j, h, b) * p.k.at(i, h % s.Hk, t, b);
                        recalled.put(j, h, t, b, r);
                    }
        EXPECT_LE(relative_difference(recalled, p.v), 1e-14);

        if (T == s.Sk) {  // a full basis: the initial state is forgotten
            HostTensor outer(GDN_TYPE_F64, f.states.ne());
            for (int64_t b = 0; b < s.B; ++b)
                for (int64_t h = 0; h < s.Hv; ++h)
                    for (int64_t j = 0; j < s.Sv; ++j)
                        for (int64_t i = 0; i < s.Sk; ++i) {
                            double x = 0;
                            for (int64_t t = 0; t < T; ++t) x += p.k.at(i, h % s.Hk, t, b) * p.v.at(j, h, t, b);
                            outer.put(i, j, h, b, x);
                        }
            EXPECT_LE(relative_difference(f.states, outer), 1e-14);
        }
    }
}

// One token, written out element by element (SPEC section 2 for the forward; the derivative of
// L = dO . o + dS . S_1 by the chain rule for the backward).
struct OneToken {
    int64_t Sk, Sv;
    bool kda;
    double scale;
    std::vector<double> q, k, v, g, s0, d_out, d_state;  // s0 and d_state: [i * Sv + j] = S[i][j]
    double beta;

    double a(int64_t i) const { return std::exp(g[kda ? i : 0]); }
};

struct OneTokenResult {
    std::vector<double> o, s1, dq, dk, dv, dg, ds0;
    double dbeta = 0;
};

OneTokenResult by_hand(const OneToken &x) {
    const int64_t Sk = x.Sk, Sv = x.Sv;
    OneTokenResult r;
    std::vector<double> decayed(Sk * Sv), p(Sv, 0.0), d(Sv);
    for (int64_t i = 0; i < Sk; ++i)
        for (int64_t j = 0; j < Sv; ++j) decayed[i * Sv + j] = x.a(i) * x.s0[i * Sv + j];
    for (int64_t j = 0; j < Sv; ++j) {
        for (int64_t i = 0; i < Sk; ++i) p[j] += decayed[i * Sv + j] * x.k[i];
        d[j] = x.beta * (x.v[j] - p[j]);
    }
    r.s1.resize(Sk * Sv);
    for (int64_t i = 0; i < Sk; ++i)
        for (int64_t j = 0; j < Sv; ++j) r.s1[i * Sv + j] = decayed[i * Sv + j] + x.k[i] * d[j];
    r.o.assign(Sv, 0.0);
    for (int64_t j = 0; j < Sv; ++j)
        for (int64_t i = 0; i < Sk; ++i) r.o[j] += x.scale * r.s1[i * Sv + j] * x.q[i];

    // dL/dS_1 = dS + scale q dO^T; dL/dq = scale S_1 dO.
    std::vector<double> D(Sk * Sv);
    r.dq.assign(Sk, 0.0);
    for (int64_t i = 0; i < Sk; ++i)
        for (int64_t j = 0; j < Sv; ++j) {
            D[i * Sv + j] = x.d_state[i * Sv + j] + x.scale * x.q[i] * x.d_out[j];
            r.dq[i] += x.scale * r.s1[i * Sv + j] * x.d_out[j];
        }
    // S_1 = S' + k d^T with d = beta (v - S'^T k): dL/dd = D^T k, and through d to v, beta, k, S'.
    std::vector<double> dd(Sv, 0.0);
    for (int64_t j = 0; j < Sv; ++j)
        for (int64_t i = 0; i < Sk; ++i) dd[j] += D[i * Sv + j] * x.k[i];
    r.dv.resize(Sv);
    for (int64_t j = 0; j < Sv; ++j) {
        r.dv[j] = x.beta * dd[j];
        r.dbeta += dd[j] * (x.v[j] - p[j]);
    }
    r.dk.assign(Sk, 0.0);
    std::vector<double> d_decayed(Sk * Sv);
    for (int64_t i = 0; i < Sk; ++i)
        for (int64_t j = 0; j < Sv; ++j) {
            r.dk[i] += D[i * Sv + j] * d[j] - x.beta * decayed[i * Sv + j] * dd[j];
            d_decayed[i * Sv + j] = D[i * Sv + j] - x.beta * x.k[i] * dd[j];
        }
    // S' = diag(exp(g)) s0: dL/dg_i = sum_j dS'_ij S'_ij (summed over i for a scalar gate).
    r.dg.assign(x.kda ? Sk : 1, 0.0);
    r.ds0.resize(Sk * Sv);
    for (int64_t i = 0; i < Sk; ++i)
        for (int64_t j = 0; j < Sv; ++j) {
            r.dg[x.kda ? i : 0] += d_decayed[i * Sv + j] * decayed[i * Sv + j];
            r.ds0[i * Sv + j] = x.a(i) * d_decayed[i * Sv + j];
        }
    return r;
}

TEST(ClosedForms, SingleTokenByHand) {
    for (bool kda : {false, true})
        for (float scale : {0.0f, 0.625f}) {
            SCOPED_TRACE(std::string(kda ? "KDA" : "GDA") + (scale == 0 ? ", default scale" : ", scale 0.625"));
            OneToken x;
            x.Sk = 3;
            x.Sv = 2;
            x.kda = kda;
            x.scale = scale == 0 ? 1.0 / std::sqrt(3.0) : 0.625;
            x.q = {0.5, -0.25, 0.75};
            x.k = {-0.6, 0.8, 0.0};
            x.v = {1.5, -2.0};
            x.g = kda ? std::vector<double>{-0.1, -0.7, 0.2} : std::vector<double>{-0.3};
            x.beta = 0.4;
            x.s0 = {0.3, -0.2, 0.1, 0.9, -0.5, 0.25};
            x.d_out = {0.7, -1.1};
            x.d_state = {0.2, 0.4, -0.3, 0.6, 1.0, -0.8};
            const OneTokenResult want = by_hand(x);

            Sizes s;
            s.Sk = 3;
            s.Sv = 2;
            s.kda = kda;
            HostProblem p = random_problem(s, GDN_TYPE_F64, 1);
            p.scale = scale;
            for (int64_t i = 0; i < 3; ++i) {
                p.q.set(i, x.q[i]);
                p.k.set(i, x.k[i]);
            }
            for (int64_t w = 0; w < p.g.count(); ++w) p.g.set(w, x.g[w]);
            p.beta.set(0, x.beta);
            HostTensor d_out(GDN_TYPE_F64, {2, 1, 1, 1}), d_state(GDN_TYPE_F64, {3, 2, 1, 1});
            for (int64_t j = 0; j < 2; ++j) {
                p.v.set(j, x.v[j]);
                d_out.set(j, x.d_out[j]);
                for (int64_t i = 0; i < 3; ++i) {
                    p.state.put(i, j, 0, 0, x.s0[i * 2 + j]);  // memory holds S[i][j] at i + Sk * j
                    d_state.put(i, j, 0, 0, x.d_state[i * 2 + j]);
                }
            }
            RefContext ctx;
            const ForwardResult f = forward(ctx.get(), p);
            const Gradients gr = backward(ctx.get(), p, d_out, d_state);
            auto expect_near = [](const char *what, double got, double want) {
                EXPECT_NEAR(got, want, 1e-15 * (1 + std::fabs(want))) << what;
            };
            for (int64_t j = 0; j < 2; ++j) {
                expect_near("o", f.out.get(j), want.o[j]);
                expect_near("dv", gr.dv.get(j), want.dv[j]);
                for (int64_t i = 0; i < 3; ++i) {
                    expect_near("S_1", f.states.at(i, j, 0, 0), want.s1[i * 2 + j]);
                    expect_near("ds0", gr.ds0.at(i, j, 0, 0), want.ds0[i * 2 + j]);
                }
            }
            for (int64_t i = 0; i < 3; ++i) {
                expect_near("dq", gr.dq.get(i), want.dq[i]);
                expect_near("dk", gr.dk.get(i), want.dk[i]);
            }
            for (int64_t w = 0; w < gr.dg.count(); ++w) expect_near("dg", gr.dg.get(w), want.dg[w]);
            expect_near("dbeta", gr.dbeta.get(0), want.dbeta);
        }
}

}  // namespace
