// Each dense layer of the MQAR model against central finite differences, in double, on the
// loss L = sum(R * Y) with random R (so dY = R): the gradients of every input and weight.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "layers.h"
#include "data.h"
#include "rng.h"

namespace mqar {
namespace {

using Vec = std::vector<double>;

Vec random_vec(size_t n, Rng &rng, double scale = 1.0) {
    Vec v(n);
    for (double &x : v) x = scale * rng.normal();
    return v;
}

double dot(const Vec &a, const Vec &b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// Checks d loss / d x against `analytic`, element by element.
void expect_gradient(const char *what, Vec &x, const Vec &analytic, const std::function<double()> &loss) {
    ASSERT_EQ(x.size(), analytic.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double w = x[i], h = 1e-6 * std::max(1.0, std::fabs(w));
        x[i] = w + h;
        const double up = loss();
        x[i] = w - h;
        const double down = loss();
        x[i] = w;
        const double numeric = (up - down) / (2 * h);
        EXPECT_NEAR(numeric, analytic[i], 1e-7 + 1e-6 * std::fabs(analytic[i])) << what << "[" << i << "]";
    }
}

TEST(MqarLayers, Linear) {
    Rng rng(1);
    const int64_t rows = 5, in = 4, out = 3;
    Vec X = random_vec(rows * in, rng), W = random_vec(in * out, rng), R = random_vec(rows * out, rng);
    auto loss = [&] {
        Vec Y(rows * out);
        linear_forward(X.data(), W.data(), Y.data(), rows, in, out);
        return dot(R, Y);
    };
    Vec dX(rows * in, 0.0), dW(in * out, 0.0), Wt;
    linear_backward_weight(X.data(), R.data(), dW.data(), rows, in, out, 0, in);
    transpose(W.data(), in, out, Wt);
    linear_backward_input(R.data(), Wt.data(), dX.data(), rows, in, out);
    expect_gradient("dX", X, dX, loss);
    expect_gradient("dW", W, dW, loss);
}

TEST(MqarLayers, RmsNorm) {
    Rng rng(2);
    const int64_t rows = 4, width = 6;
    Vec X = random_vec(rows * width, rng), w = random_vec(width, rng), R = random_vec(rows * width, rng);
    Vec inv(rows);
    auto loss = [&] {
        Vec Y(rows * width);
        rmsnorm_forward(X.data(), w.data(), Y.data(), inv.data(), rows, width, 1e-6);
        return dot(R, Y);
    };
    loss();
    Vec dX(rows * width, 0.0), dw(width, 0.0);
    rmsnorm_backward(X.data(), w.data(), inv.data(), R.data(), dX.data(), dw.data(), rows, width);
    expect_gradient("dX", X, dX, loss);
    expect_gradient("dweight", w, dw, loss);
}

TEST(MqarLayers, CausalConvSilu) {
    Rng rng(3);
    const int64_t seqs = 2, T = 5, C = 3, taps = 4;
    Vec X = random_vec(seqs * T * C, rng), w = random_vec(taps * C, rng), R = random_vec(seqs * T * C, rng);
    Vec Z(seqs * T * C);
    auto loss = [&] {
        Vec Y(seqs * T * C);
        conv_silu_forward(X.data(), w.data(), Z.data(), Y.data(), seqs, T, C, taps);
        return dot(R, Y);
    };
    loss();
    Vec dZ(Z.size()), dX(X.size(), 0.0), dw(w.size(), 0.0);
    conv_silu_backward(X.data(), w.data(), Z.data(), R.data(), dZ.data(), dX.data(), dw.data(), seqs, T, C, taps);
    expect_gradient("dX", X, dX, loss);
    expect_gradient("dweight", w, dw, loss);
}

TEST(MqarLayers, L2NormOfHeadsInPackedRows) {
    Rng rng(4);
    const int64_t rows = 3, stride = 11, heads = 2, size = 4;  // heads at the start of longer rows
    Vec X = random_vec(rows * stride, rng), R = random_vec(rows * stride, rng);
    Vec norms(rows * heads), Y;
    auto loss = [&] {
        Y = X;
        l2norm_forward(Y.data(), norms.data(), rows, stride, heads, size, 1e-6);
        double s = 0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < heads * size; ++i) s += R[r * stride + i] * Y[r * stride + i];
        return s;
    };
    loss();
    Vec dX = R;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = heads * size; i < stride; ++i) dX[r * stride + i] = 0;  // not normalised, not scored
    l2norm_backward(Y.data(), norms.data(), dX.data(), rows, stride, heads, size);
    expect_gradient("dX", X, dX, loss);
}

TEST(MqarLayers, Gates) {
    Rng rng(5);
    const int64_t rows = 4, heads = 3;
    Vec a = random_vec(rows * heads, rng, 2), b = random_vec(rows * heads, rng, 2);
    Vec A_log = random_vec(heads, rng, 0.5), dt_bias = random_vec(heads, rng);
    Vec Rg = random_vec(rows * heads, rng), Rb = random_vec(rows * heads, rng);
    Vec g(rows * heads), beta(rows * heads);
    auto loss = [&] {
        gates_forward(a.data(), b.data(), A_log.data(), dt_bias.data(), g.data(), beta.data(), rows, heads);
        return dot(Rg, g) + dot(Rb, beta);
    };
    loss();
    Vec da(a.size()), db(b.size()), dA(heads, 0.0), ddt(heads, 0.0);
    gates_backward(a.data(), A_log.data(), dt_bias.data(), g.data(), beta.data(), Rg.data(), Rb.data(), da.data(),
                   db.data(), dA.data(), ddt.data(), rows, heads);
    expect_gradient("da", a, da, loss);
    expect_gradient("db", b, db, loss);
    expect_gradient("dA_log", A_log, dA, loss);
    expect_gradient("ddt_bias", dt_bias, ddt, loss);
}

TEST(MqarLayers, CrossEntropyOnScoredRowsOnly) {
    Rng rng(6);
    const int64_t rows = 4, classes = 5;
    Vec logits = random_vec(rows * classes, rng, 2);
    const std::vector<int32_t> targets = {2, kNoTarget, 0, 4};
    auto loss = [&] { return cross_entropy(logits.data(), targets.data(), static_cast<double *>(nullptr), rows, classes, 3).loss_sum / 3; };
    Vec dlogits(logits.size());
    const LossStats st = cross_entropy(logits.data(), targets.data(), dlogits.data(), rows, classes, 3);
    EXPECT_EQ(st.scored, 3);
    for (int64_t c = 0; c < classes; ++c) EXPECT_EQ(dlogits[1 * classes + c], 0.0);
    expect_gradient("dlogits", logits, dlogits, loss);
}

}  // namespace
}  // namespace mqar
