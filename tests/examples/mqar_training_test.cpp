// A short training run must learn: the loss on the query positions falls well below its start
// (chance is log(vocab/2) once the model knows answers are values), and held-out recall beats
// chance by far. The same run with the op's gradient replaced by zero must not.
#include <gtest/gtest.h>

#include <cmath>

#include "train.h"

namespace mqar {
namespace {

TrainConfig short_run() {
    TrainConfig cfg;
    cfg.task = {32, 4, 32};
    cfg.model.vocab = 32;
    cfg.model.width = 32;
    cfg.model.layers = 2;
    cfg.steps = 300;
    cfg.batch = 16;
    cfg.warmup = 30;
    cfg.eval_every = 0;
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
    const double start = mean_loss(r.curve, 0, 10), end = mean_loss(r.curve, r.curve.size() - 10, 10);
    std::printf("[%s] loss %.3f -> %.3f, held-out recall %.3f, %.1fs\n", r.backend.c_str(), start, end,
                r.final_eval_accuracy, r.train_seconds);
    EXPECT_LT(end, 0.25 * start);
    EXPECT_GT(r.final_eval_accuracy, 0.9);
}

}  // namespace
}  // namespace mqar
