// The whole model's gradient (its own dense layers, the gates, the conv, the normalisations and
// libgdn's backward through strided q/k/v views) against central finite differences of its loss,
// every parameter element, in double precision with the op in F64 on the ref backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model.h"

namespace mqar {
namespace {

struct Context {
    gdn_context *ctx = nullptr;
    Context() {
        gdn_context_params params = gdn_context_default_params();
        EXPECT_EQ(gdn_context_create("ref", &params, &ctx), GDN_OK);
    }
    ~Context() { gdn_context_free(ctx); }
};

ModelConfig tiny_model() {
    ModelConfig m;
    m.vocab = 10;
    m.width = 6;
    m.layers = 2;
    m.key_heads = 1;
    m.value_heads = 2;
    m.head_dim = 4;
    m.conv_taps = 3;
    return m;
}

Batch tiny_batch(int vocab) {
    const TaskConfig task{vocab, 2, 9};
    EXPECT_EQ(check_task(task), "");
    Rng rng(11);
    Batch b;
    generate(task, 3, rng, b);
    return b;
}

TEST(MqarGradcheck, WholeModelMatchesFiniteDifferences) {
    Context c;
    ASSERT_NE(c.ctx, nullptr);
    const ModelConfig cfg = tiny_model();
    Model<double> model(cfg, 5);
    const Batch batch = tiny_batch(cfg.vocab);
    model.run(c.ctx, batch, true);

    int checked = 0, nonzero = 0;
    for (Param<double> *p : model.params()) {
        const std::vector<double> analytic = p->grad;
        double worst = 0;
        for (size_t i = 0; i < p->value.size(); ++i) {
            const double w = p->value[i], h = 1e-5 * std::max(1.0, std::fabs(w));
            p->value[i] = w + h;
            const double up = model.run(c.ctx, batch, false).loss;
            p->value[i] = w - h;
            const double down = model.run(c.ctx, batch, false).loss;
            p->value[i] = w;
            const double numeric = (up - down) / (2 * h);
            // Central differences in double: truncation ~h^2, rounding ~1e-16/h, both < 1e-9 here.
            const double err = std::fabs(numeric - analytic[i]);
            worst = std::max(worst, err / (1e-7 + std::fabs(analytic[i])));
            EXPECT_LE(err, 1e-8 + 1e-6 * std::fabs(analytic[i]))
                << p->name << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric;
            ++checked;
            nonzero += std::fabs(analytic[i]) > 1e-6 ? 1 : 0;
        }
        RecordProperty(p->name, std::to_string(worst));
    }
    // The check means something only if the gradient is mostly non-zero.
    EXPECT_GT(nonzero, checked / 2) << nonzero << " of " << checked << " gradient elements are non-zero";
}

TEST(MqarGradcheck, ZeroOpGradientStopsEverythingBelowTheOp) {
    Context c;
    ASSERT_NE(c.ctx, nullptr);
    const ModelConfig cfg = tiny_model();
    Model<double> full(cfg, 5), ablated(cfg, 5);
    const Batch batch = tiny_batch(cfg.vocab);
    const double loss_full = full.run(c.ctx, batch, true).loss;
    const double loss_ablated = ablated.run(c.ctx, batch, true, true).loss;
    EXPECT_EQ(loss_full, loss_ablated) << "the ablation changes only the backward";
    const std::vector<Param<double> *> pf = full.params(), pa = ablated.params();
    for (size_t k = 0; k < pf.size(); ++k) {
        const std::string &n = pf[k]->name;
        // Every layer parameter except the output projection sits below the op.
        const size_t dot = n.find('.');
        const std::string part = dot == std::string::npos ? "" : n.substr(dot + 1);
        const bool below_op = !part.empty() && part != "out";
        double full_norm = 0, ablated_norm = 0;
        for (size_t i = 0; i < pf[k]->grad.size(); ++i) {
            full_norm += pf[k]->grad[i] * pf[k]->grad[i];
            ablated_norm += pa[k]->grad[i] * pa[k]->grad[i];
        }
        EXPECT_GT(full_norm, 0) << n;
        if (below_op) EXPECT_EQ(ablated_norm, 0) << n;
        else EXPECT_GT(ablated_norm, 0) << n;
        if (n == "head" || n == "final_norm") EXPECT_EQ(pf[k]->grad, pa[k]->grad) << n;
    }
}

}  // namespace
}  // namespace mqar
