// A small ggml training loop around gdn's custom forward and backward, wired the way a ggml
// trainer wires an op that ggml's autograd does not know:
//
//   pre:  qkv = W_qkv x (q, k, v row views of it; q, k L2-normalised), g = -softplus(W_g x), beta = sigmoid(W_b x)
//   op:   R = gdn_ggml_gated_delta_net(q, k, v, g, beta, 0, 1)        o = the first T*B rows of R
//   post: loss = mean((W_o o - y)^2)
//
// ggml's autograd runs the post part with R as a leaf (giving dR and dW_o), the custom backward
// turns dR into dq..dbeta, and ggml's autograd runs the pre part on the surrogate
// sum(q*dq) + sum(k*dk) + ... (whose gradient with respect to the weights is the chain rule).
// The gradient of a weight before the op is checked against finite differences of the whole
// model, and a few steps of gradient descent must lower the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <ggml-cpu.h>
#include <ggml.h>

#include "gdn/gdn_ggml.h"

namespace {

constexpr int64_t D = 16, Sk = 16, Sv = 16, Hk = 1, Hv = 2, T = 24, B = 2;
constexpr int64_t conv = 2 * Hk * Sk + Hv * Sv, tokens = T * B;
constexpr int kThreads = 2;

void fill(ggml_tensor *t, std::mt19937 &rng, float sigma) {
    std::normal_distribution<float> n(0.0f, sigma);
    float *d = static_cast<float *>(t->data);
    for (int64_t i = 0; i < ggml_nelements(t); ++i) d[i] = n(rng);
}

ggml_tensor *as_gate(ggml_context *ctx, ggml_tensor *x) { return ggml_reshape_4d(ctx, x, 1, Hv, T, B); }

struct Model {
    ggml_context *ctx = ggml_init({size_t(256) << 20, nullptr, false});
    ggml_tensor *x, *y, *s0, *w_qkv, *w_g, *w_b, *w_o;   // data and weights
    ggml_tensor *q, *k, *v, *g, *beta, *R;               // pre part and the op
    ggml_tensor *r_leaf, *loss_post, *dr_const;           // post part
    ggml_tensor *packed, *packed_const, *surrogate;       // custom backward, pre part's autograd
    ggml_cgraph *forward, *post, *back, *pre;

    Model() {
        std::mt19937 rng(7);
        x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, tokens);
        y = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, tokens);
        s0 = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, Sk, Sv, Hv, B);
        w_qkv = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, conv);
        w_g = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, Hv);
        w_b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, Hv);
        w_o = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, Hv * Sv, D);
        fill(x, rng, 1.0f);
        fill(w_qkv, rng, 0.25f);
        fill(w_g, rng, 0.25f);
        fill(w_b, rng, 0.25f);
        fill(w_o, rng, 0.25f);
        std::memset(s0->data, 0, ggml_nbytes(s0));
        // The target: a fixed random linear read-out of the previous token's input (needs the state).
        std::vector<float> mix(D * D);
        std::normal_distribution<float> n(0.0f, 0.25f);
        for (float &m : mix) m = n(rng);
        const float *xd = static_cast<const float *>(x->data);
        float *yd = static_cast<float *>(y->data);
        for (int64_t t = 0; t < tokens; ++t)
            for (int64_t i = 0; i < D; ++i) {
                float acc = 0;
                if (t % T != 0)
                    for (int64_t j = 0; j < D; ++j) acc += mix[i * D + j] * xd[(t - 1) * D + j];
                yd[t * D + i] = acc;
            }
        for (ggml_tensor *w : {w_qkv, w_g, w_b, w_o}) ggml_set_param(w);

        // pre and the op
        ggml_tensor *qkv = ggml_mul_mat(ctx, w_qkv, x);  // [conv, tokens]
        const size_t f = sizeof(float);
        // q and k L2-normalised per head, as the models do (rms_norm / sqrt(Sk): ops with a backward)
        auto l2 = [&](ggml_tensor *t) { return ggml_scale(ctx, ggml_rms_norm(ctx, ggml_cont(ctx, t), 1e-6f), 1.0f / std::sqrt(float(Sk))); };
        q = l2(ggml_view_4d(ctx, qkv, Sk, Hk, T, B, f * Sk, f * conv, f * conv * T, 0));
        k = l2(ggml_view_4d(ctx, qkv, Sk, Hk, T, B, f * Sk, f * conv, f * conv * T, f * Hk * Sk));
        v = ggml_view_4d(ctx, qkv, Sv, Hv, T, B, f * Sv, f * conv, f * conv * T, f * 2 * Hk * Sk);
        g = as_gate(ctx, ggml_neg(ctx, ggml_softplus(ctx, ggml_mul_mat(ctx, w_g, x))));
        // sigmoid(a) = exp(-softplus(-a)): ops whose backward ggml has
        beta = as_gate(ctx, ggml_exp(ctx, ggml_neg(ctx, ggml_softplus(ctx, ggml_neg(ctx, ggml_mul_mat(ctx, w_b, x))))));
        R = gdn_ggml_gated_delta_net(ctx, q, k, v, g, beta, s0, 1);
        forward = ggml_new_graph(ctx);
        ggml_build_forward_expand(forward, R);

        // post, with R as a leaf
        r_leaf = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, R->ne[0], R->ne[1]);
        ggml_set_param(r_leaf);
        ggml_tensor *o = ggml_view_2d(ctx, r_leaf, Hv * Sv, tokens, r_leaf->nb[1], 0);
        ggml_tensor *err = ggml_sub(ctx, ggml_mul_mat(ctx, w_o, o), y);
        loss_post = ggml_scale(ctx, ggml_sum(ctx, ggml_sqr(ctx, err)), 1.0f / (D * tokens));
        ggml_set_loss(loss_post);
        post = ggml_new_graph_custom(ctx, GGML_DEFAULT_GRAPH_SIZE, true);
        ggml_build_forward_expand(post, loss_post);
        ggml_build_backward_expand(ctx, post, nullptr);

        // the op's backward on a copy of dR
        dr_const = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, R->ne[0], R->ne[1]);
        packed = gdn_ggml_gated_delta_net_back(ctx, q, k, v, g, beta, s0, dr_const);
        back = ggml_new_graph(ctx);
        ggml_build_forward_expand(back, packed);

        // pre's autograd on the surrogate, the gradients as constants (a copy of packed)
        packed_const = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, ggml_nelements(packed));
        auto grad_of = [&](gdn_ggml_grad which, ggml_tensor *like) {
            const int64_t offset = gdn_ggml_grad_offset(packed, which);
            return ggml_view_4d(ctx, packed_const, like->ne[0], like->ne[1], like->ne[2], like->ne[3], f * like->ne[0],
                                f * like->ne[0] * like->ne[1], f * like->ne[0] * like->ne[1] * like->ne[2], f * offset);
        };
        ggml_tensor *terms[5] = {
            ggml_mul(ctx, q, grad_of(GDN_GGML_GRAD_Q, q)),
            ggml_mul(ctx, k, grad_of(GDN_GGML_GRAD_K, k)),
            ggml_mul(ctx, ggml_cont(ctx, v), grad_of(GDN_GGML_GRAD_V, v)),
            ggml_mul(ctx, g, grad_of(GDN_GGML_GRAD_G, g)),
            ggml_mul(ctx, beta, grad_of(GDN_GGML_GRAD_BETA, beta)),
        };
        surrogate = ggml_sum(ctx, terms[0]);
        for (int i = 1; i < 5; ++i) surrogate = ggml_add(ctx, surrogate, ggml_sum(ctx, terms[i]));
        ggml_set_loss(surrogate);
        pre = ggml_new_graph_custom(ctx, GGML_DEFAULT_GRAPH_SIZE, true);
        ggml_build_forward_expand(pre, surrogate);
        ggml_build_backward_expand(ctx, pre, nullptr);
    }
    ~Model() { ggml_free(ctx); }

    void run(ggml_cgraph *graph) { ASSERT_EQ(ggml_graph_compute_with_ctx(ctx, graph, kThreads), GGML_STATUS_SUCCESS); }

    // The model's loss with the current weights (forward, then the post part).
    float loss() {
        run(forward);
        std::memcpy(r_leaf->data, R->data, ggml_nbytes(R));
        ggml_graph_reset(post);
        run(post);
        return *static_cast<float *>(loss_post->data);
    }

    // One step: the loss, and every weight's gradient (in the graphs' grad tensors).
    float step_gradients() {
        const float l = loss();
        std::memcpy(dr_const->data, ggml_graph_get_grad(post, r_leaf)->data, ggml_nbytes(R));
        run(back);
        std::memcpy(packed_const->data, packed->data, ggml_nbytes(packed));
        ggml_graph_reset(pre);
        run(pre);
        return l;
    }

    ggml_tensor *grad(ggml_tensor *w) { return ggml_graph_get_grad(w == w_o ? post : pre, w); }

    // Adam (beta1 0.9, beta2 0.999), by hand on the weights' data.
    std::vector<std::vector<float>> moment1, moment2;
    int steps = 0;
    void adam(float lr, bool only_after_the_op = false) {
        ggml_tensor *ws[4] = {w_qkv, w_g, w_b, w_o};
        moment1.resize(4), moment2.resize(4);
        ++steps;
        const float c1 = 1.0f - std::pow(0.9f, float(steps)), c2 = 1.0f - std::pow(0.999f, float(steps));
        for (int n = only_after_the_op ? 3 : 0; n < 4; ++n) {
            float *d = static_cast<float *>(ws[n]->data);
            const float *gd = static_cast<const float *>(grad(ws[n])->data);
            moment1[n].resize(ggml_nelements(ws[n])), moment2[n].resize(ggml_nelements(ws[n]));
            for (int64_t i = 0; i < ggml_nelements(ws[n]); ++i) {
                moment1[n][i] = 0.9f * moment1[n][i] + 0.1f * gd[i];
                moment2[n][i] = 0.999f * moment2[n][i] + 0.001f * gd[i] * gd[i];
                d[i] -= lr * (moment1[n][i] / c1) / (std::sqrt(moment2[n][i] / c2) + 1e-8f);
            }
        }
    }
};

TEST(GgmlTraining, GradientsThroughTheCustomOpMatchFiniteDifferences) {
    Model m;
    m.step_gradients();
    // Weights before the op: their gradient flows through gdn_ggml_gated_delta_net_back.
    for (ggml_tensor *w : {m.w_qkv, m.w_g, m.w_b}) {
        float *d = static_cast<float *>(w->data);
        const float *gd = static_cast<const float *>(m.grad(w)->data);
        // the element with the largest gradient, and one in the middle
        int64_t big = 0;
        for (int64_t i = 0; i < ggml_nelements(w); ++i)
            if (std::fabs(gd[i]) > std::fabs(gd[big])) big = i;
        for (int64_t i : {big, ggml_nelements(w) / 2}) {
            const float saved = d[i], h = 1e-2f;
            d[i] = saved + h;
            const double up = m.loss();
            d[i] = saved - h;
            const double down = m.loss();
            d[i] = saved;
            const double fd = (up - down) / (2.0 * h);
            EXPECT_NEAR(gd[i], fd, 0.02 * std::fabs(gd[big]) + 1e-5) << w->name << "[" << i << "]";
        }
    }
}

// 30 Adam steps, every weight or only W_o (what training learns without the op's backward).
std::pair<float, float> train(bool only_after_the_op) {
    Model m;
    const float first = m.step_gradients();
    float last = first;
    for (int step = 0; step < 30; ++step) {
        m.adam(0.03f, only_after_the_op);
        last = m.step_gradients();
        if (!std::isfinite(last)) break;
    }
    return {first, last};
}

TEST(GgmlTraining, AFewStepsLowerTheLoss) {
    const auto [first, last] = train(false);
    EXPECT_LT(last, 0.5f * first) << "first " << first << ", after 30 steps " << last;
    // The target needs the previous token, which only the recurrence carries: the weights before
    // the op, trained through gdn_ggml_gated_delta_net_back, must matter.
    const auto [first_post, last_post] = train(true);
    EXPECT_EQ(first, first_post);
    std::printf("all weights %g, W_o only %g (from %g)\n", last, last_post, first);
    EXPECT_LT(last, 0.7f * last_post) << "all weights " << last << ", W_o only " << last_post;
}
}  // namespace
