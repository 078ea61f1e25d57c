// A short training run must learn: the loss on the query positions falls well below its start
// and held-out recall is near perfect. The same run with the delta-net op's gradient replaced by
// zero must not learn recall: its loss stays at chance among the values, log(vocab / 2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "train.h"

namespace mqar {
namespace {

// The run of gdn-mqar --quick (a smaller task than the default: 32 tokens, 4 pairs, vocabulary
// 32), so that it learns in a few seconds, and what it promises is what is tested.
TrainConfig short_run() {
    TrainConfig cfg = quick_config();
    cfg.eval_every = 0;  // evaluate once, at the end
    cfg.eval_sequences = 200;
    cfg.log_every = 0;
    return cfg;
}

double mean_loss(const std::vector<CurvePoint> &curve, size_t first, size_t count) {
    double s = 0;
    for (size_t i = first; i < first + count; ++i) s += curve[i].loss;
    return s / double(count);
}

TEST(MqarTraining, ShortRunLearnsRecall) {
    const TrainConfig cfg = short_run();
    const TrainResult r = train(cfg, nullptr);
    ASSERT_EQ(r.curve.size(), size_t(cfg.steps));
    const double start = mean_loss(r.curve, 0, 20), end = mean_loss(r.curve, r.curve.size() - 20, 20);
    std::printf("[%s] loss %.4f -> %.4f, held-out recall %.4f, %.1fs\n", r.backend.c_str(), start, end,
                r.final_eval_accuracy, r.train_seconds);
    EXPECT_LT(end, 0.1 * start);
    EXPECT_GT(r.final_eval_accuracy, 0.95);
}

TEST(MqarTraining, WithoutTheOpGradientRecallIsNotLearned) {
    TrainConfig cfg = short_run();
    cfg.zero_op_grad = true;
    const TrainResult r = train(cfg, nullptr);
    const double chance_loss = std::log(cfg.task.vocab / 2.0);
    const double end = mean_loss(r.curve, r.curve.size() - 20, 20);
    std::printf("[%s] ablated: loss -> %.4f (chance %.4f), held-out recall %.4f\n", r.backend.c_str(), end, chance_loss,
                r.final_eval_accuracy);
    EXPECT_GT(end, 0.9 * chance_loss);
    EXPECT_LT(r.final_eval_accuracy, 0.2);
}

TEST(MqarTraining, SameSeedSameCurveOnAnyThreadCount) {
    TrainConfig cfg = short_run();
    cfg.steps = 40;
    cfg.threads = 1;
    const TrainResult one = train(cfg, nullptr);
    cfg.threads = 2;
    const TrainResult two = train(cfg, nullptr);
    ASSERT_EQ(one.curve.size(), two.curve.size());
    for (size_t i = 0; i < one.curve.size(); ++i) {
        EXPECT_EQ(one.curve[i].loss, two.curve[i].loss) << "step " << one.curve[i].step;
        EXPECT_EQ(one.curve[i].accuracy, two.curve[i].accuracy) << "step " << one.curve[i].step;
    }
    EXPECT_EQ(one.final_eval_loss, two.final_eval_loss);
}

}  // namespace
}  // namespace mqar
