#include "train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace mqar {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double learning_rate(const TrainConfig &cfg, int step) {
    if (step < cfg.warmup) return cfg.lr * double(step + 1) / double(cfg.warmup);
    const double span = std::max(1, cfg.steps - cfg.warmup);
    const double progress = std::min(1.0, double(step - cfg.warmup) / span);
    const double cosine = 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
    return cfg.lr * (cfg.lr_final_fraction + (1.0 - cfg.lr_final_fraction) * cosine);
}

// Sequences [first, first + count) of `all`.
Batch slice(const Batch &all, int first, int count) {
    Batch b;
    b.sequences = count;
    b.seq_len = all.seq_len;
    const size_t begin = size_t(first) * all.seq_len, end = begin + size_t(count) * all.seq_len;
    b.tokens.assign(all.tokens.begin() + begin, all.tokens.begin() + end);
    b.targets.assign(all.targets.begin() + begin, all.targets.begin() + end);
    return b;
}

// Distinct streams for the weights, the training data and the held-out data.
constexpr uint64_t kWeightsStream = 0x5EED0001, kTrainStream = 0x5EED0002, kHeldOutStream = 0x5EED0003;

}  // namespace

TrainConfig quick_config() {
    TrainConfig cfg;
    cfg.task = {32, 4, 32};
    cfg.model.vocab = 32;
    cfg.model.width = 32;
    cfg.steps = 600;
    cfg.batch = 16;
    cfg.warmup = 30;
    return cfg;
}

gdn_context *open_backend(const std::string &name, int threads, std::FILE *log) {
    gdn_context_params params = gdn_context_default_params();
    params.n_threads = threads;
    gdn_context *ctx = nullptr;
    gdn_status s = gdn_context_create(name.c_str(), &params, &ctx);
    if (s == GDN_OK) return ctx;
    if (name == "cpu") {
        if (log)
            std::fprintf(log, "note: the cpu backend cannot start (%s); using ref (single-threaded, exact, slower)\n",
                         gdn_last_create_error());
        s = gdn_context_create("ref", &params, &ctx);
        if (s == GDN_OK) return ctx;
    }
    throw std::runtime_error("cannot open backend " + name + ": " + gdn_last_create_error());
}

StepStats evaluate(Model<float> &model, gdn_context *ctx, const Batch &data, int batch) {
    double loss_sum = 0, correct = 0;
    int64_t scored = 0;
    for (int first = 0; first < data.sequences; first += batch) {
        const int count = std::min(batch, data.sequences - first);
        const StepStats st = model.run(ctx, slice(data, first, count), false);
        loss_sum += st.loss * double(st.scored);
        correct += st.accuracy * double(st.scored);
        scored += st.scored;
    }
    StepStats total;
    total.scored = scored;
    total.loss = loss_sum / double(scored);
    total.accuracy = correct / double(scored);
    return total;
}

TrainResult train(const TrainConfig &cfg, std::FILE *log) {
    std::string bad = check_task(cfg.task);
    if (bad.empty()) bad = check_model(cfg.model);
    if (bad.empty() && cfg.task.vocab != cfg.model.vocab) bad = "the task's and the model's vocab differ";
    if (bad.empty() && (cfg.steps < 1 || cfg.batch < 1 || cfg.eval_sequences < 1)) bad = "steps, batch and eval_sequences must be positive";
    if (!bad.empty()) throw std::invalid_argument(bad);

    const Clock::time_point wall0 = Clock::now();
    gdn_context *ctx = open_backend(cfg.backend, cfg.threads, log);
    TrainResult res;
    res.backend = gdn_context_backend(ctx);
    try {
        Model<float> model(cfg.model, cfg.seed ^ kWeightsStream);
        model.set_threads(cfg.threads);
        AdamW<float> opt(model.params(), cfg.adamw);
        Rng train_rng(cfg.seed ^ kTrainStream), held_rng(cfg.seed ^ kHeldOutStream);
        Batch held_out, batch;
        generate(cfg.task, cfg.eval_sequences, held_rng, held_out);
        const double target = cfg.stop_at_accuracy > 0 ? cfg.stop_at_accuracy : 0.99;
        const int eval_batch = std::max(cfg.batch, 64);

        double train_s = 0;
        for (int step = 0; step < cfg.steps; ++step) {
            const Clock::time_point t0 = Clock::now();
            generate(cfg.task, cfg.batch, train_rng, batch);
            const StepStats st = model.run(ctx, batch, true, cfg.zero_op_grad);
            const double lr = learning_rate(cfg, step);
            opt.step(lr);
            train_s += seconds_since(t0);

            CurvePoint pt;
            pt.step = step + 1;
            pt.elapsed_s = train_s;
            pt.lr = lr;
            pt.loss = st.loss;
            pt.accuracy = st.accuracy;
            const bool last = step + 1 == cfg.steps;
            if ((cfg.eval_every > 0 && pt.step % cfg.eval_every == 0) || last) {
                const StepStats ev = evaluate(model, ctx, held_out, eval_batch);
                pt.evaluated = true;
                pt.eval_loss = ev.loss;
                pt.eval_accuracy = ev.accuracy;
                res.final_eval_loss = ev.loss;
                res.final_eval_accuracy = ev.accuracy;
                if (log)
                    std::fprintf(log, "eval  step %5d  held-out loss %.4f  recall accuracy %.4f  (%d sequences)\n",
                                 pt.step, ev.loss, ev.accuracy, held_out.sequences);
                if (res.steps_to_target < 0 && ev.accuracy >= target) {
                    res.steps_to_target = pt.step;
                    res.seconds_to_target = train_s;
                }
            }
            res.curve.push_back(pt);
            const double tokens = double(pt.step) * cfg.batch * cfg.task.seq_len;
            if (log && cfg.log_every > 0 && (pt.step % cfg.log_every == 0 || pt.step == 1 || last))
                std::fprintf(log, "step %5d/%d  loss %.4f  acc %.3f  lr %.2e  tok/s %.0f  %.1fs\n", pt.step, cfg.steps,
                             pt.loss, pt.accuracy, lr, tokens / train_s, train_s);
            if (log) std::fflush(log);
            if (cfg.stop_at_accuracy > 0 && res.steps_to_target > 0) break;
        }
        res.train_seconds = train_s;
        res.tokens_per_second = double(res.curve.size()) * cfg.batch * cfg.task.seq_len / train_s;
        if (!res.curve.back().evaluated) {
            const StepStats ev = evaluate(model, ctx, held_out, eval_batch);
            res.curve.back().evaluated = true;
            res.curve.back().eval_loss = res.final_eval_loss = ev.loss;
            res.curve.back().eval_accuracy = res.final_eval_accuracy = ev.accuracy;
        }
    } catch (...) {
        gdn_context_free(ctx);
        throw;
    }
    gdn_context_free(ctx);
    res.wall_seconds = seconds_since(wall0);
    return res;
}

bool write_csv(const std::string &path, const std::vector<CurvePoint> &curve) {
    std::FILE *f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    std::fprintf(f, "step,elapsed_s,lr,loss,accuracy,eval_loss,eval_accuracy\n");
    for (const CurvePoint &p : curve) {
        std::fprintf(f, "%d,%.3f,%.6g,%.6f,%.6f,", p.step, p.elapsed_s, p.lr, p.loss, p.accuracy);
        if (p.evaluated) std::fprintf(f, "%.6f,%.6f\n", p.eval_loss, p.eval_accuracy);
        else std::fprintf(f, ",\n");
    }
    return std::fclose(f) == 0;
}

}  // namespace mqar
