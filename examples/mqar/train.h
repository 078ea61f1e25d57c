// Training and evaluation of the MQAR model on a libgdn backend.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "adamw.h"
#include "data.h"
#include "model.h"

namespace mqar {

struct TrainConfig {
    TaskConfig task;
    ModelConfig model;
    AdamWConfig adamw;
    int steps = 1500;
    int batch = 32;                // sequences per step, all in one gdn call per layer
    double lr = 6e-3;              // peak; linear warmup, then cosine decay to lr_final_fraction
    int warmup = 100;
    double lr_final_fraction = 0.1;
    uint64_t seed = 1;             // data, initial weights and held-out set all derive from it
    int eval_every = 100;          // steps between held-out evaluations (and at the end)
    int eval_sequences = 1000;     // held-out set size
    int log_every = 25;            // steps between progress lines (0: none)
    double stop_at_accuracy = 0;   // > 0: stop once held-out accuracy reaches it
    std::string backend = "cpu";   // falls back to ref when it cannot start
    int threads = 0;               // cpu backend and dense layers: 0 = all cores
    bool zero_op_grad = false;     // ablation: the delta-net op's backward returns zeros
};

struct CurvePoint {
    int step = 0;
    double elapsed_s = 0;   // training time so far (evaluation excluded)
    double lr = 0;
    double loss = 0, accuracy = 0;  // on the step's training batch
    bool evaluated = false;
    double eval_loss = 0, eval_accuracy = 0;
};

struct TrainResult {
    std::string backend;             // the backend that ran
    std::vector<CurvePoint> curve;   // one point per step
    double train_seconds = 0;        // training only
    double wall_seconds = 0;         // everything, evaluation included
    double tokens_per_second = 0;    // training tokens / train_seconds
    double final_eval_loss = 0, final_eval_accuracy = 0;
    int steps_to_target = -1;        // first evaluated step reaching stop_at_accuracy (or 0.99 if unset); -1: never
    double seconds_to_target = 0;
};

// The --quick run: a smaller task (32 tokens, 4 pairs, vocabulary 32) on a narrower model
// (width 32), 600 steps of 16 sequences with 30 warmup steps. It still learns recall (over 95%
// held-out), in a fraction of the default run's time.
TrainConfig quick_config();

// Opens `name` (falling back from cpu to ref with a note on `log`); throws on failure.
gdn_context *open_backend(const std::string &name, int threads, std::FILE *log);

// Held-out loss and recall accuracy of `model` on `data`, in batches of `batch` sequences.
StepStats evaluate(Model<float> &model, gdn_context *ctx, const Batch &data, int batch);

// Trains from scratch; progress lines go to `log` (may be null).
TrainResult train(const TrainConfig &cfg, std::FILE *log);

// Writes the curve as CSV (step, elapsed_s, lr, loss, accuracy, eval_loss, eval_accuracy).
bool write_csv(const std::string &path, const std::vector<CurvePoint> &curve);

// Draws the curve into a PNG with gnuplot when it is on PATH. Returns false (with a note on
// `log`) when it was skipped or failed.
bool write_plot(const std::string &csv_path, const std::string &png_path, const std::string &title, std::FILE *log);

}  // namespace mqar
