// gdn-ops perf: per case, the median time of repeated runs lasting at least --min-time (wall and
// process CPU time), tokens per second, GFLOP/s on the canonical count (SPEC section 8), % of
// the measured F32 FMA peak, and the workspace. Short forward cases on the host (decoding), whose
// cost is moving the recurrent state, also report that traffic in GB/s and as % of memcpy's
// bandwidth at the same size and thread count, measured in the same worker just before.
// The peak is measured once at the start and again, briefly, before each host case; a case's
// percentage is of the higher of the two (`peak_GFLOP/s`): on a shared or virtual machine a core
// can be taken away for the whole start-up measurement, which would lower the peak and inflate
// every percentage of the run.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cpu_clock.h"
#include "isolation.h"
#include "modes.h"
#include "peak.h"
#include "problem_data.h"
#include "report.h"
#include "sequence_views.h"
#include "work_items.h"

namespace gdn::ops {
namespace {

// Runs in the worker: times one case on one backend.
class PerfRunner final : public ItemRunner {
public:
    PerfRunner(const Options &o, const Peak &peak, const Peak &bf16_peak, const std::vector<testkit::BackendSpec> &backends,
               const std::vector<WorkItem> &items)
        : o_(o), best_peak_(peak.gflops), best_bf16_peak_(bf16_peak.gflops), backends_(backends), items_(items),
          sessions_(o.threads, o.chunk_size) {}

    std::optional<Record> run(size_t i, bool &) override {
        const WorkItem &item = items_[i];
        const testkit::BackendSpec &spec = backends_[item.backend];
        const testkit::Case &c = *item.c;
        std::optional<Record> start_failure;
        testkit::BackendSession *session = sessions_.get(spec, start_failure);
        if (!session) return start_failure;
        Record rec{spec.label, c.label(), c.group, Verdict::Timed, "", {}};
        testkit::TensorSet inputs = testkit::make_inputs(c, GDN_TYPE_F32, c.seed(o_.seed));
        std::string why;
        const gdn_status support = testkit::check_case(c, inputs, *session, why);
        if (support != GDN_OK) {
            rec.verdict = support == GDN_ERROR_UNSUPPORTED || support == GDN_ERROR_TYPE ? Verdict::Skip : Verdict::Fail;
            rec.note = std::string(gdn_status_string(support)) + ": " + why;
            return rec;
        }
        testkit::TensorSet outputs = testkit::make_outputs(c, GDN_TYPE_F32);
        testkit::Mirror in(inputs, session->memory()), out(outputs, session->memory());
        in.upload();
        out.upload();
        // In place, every run updates the pool again: decoding, one token after another.
        const testkit::CallTensors t = testkit::call_tensors(c, in, out);
        auto call = [&] {
            return c.op == testkit::Op::Forward ? session->forward(t.problem, &t.out, &t.states)
                                                : session->backward(t.problem, &t.d_out, &t.d_states, &t.grads);
        };
        // The state's bandwidth ceiling, measured before the case runs (so that its buffers, not
        // the copy's, are the ones in cache when it is timed).
        const double state_bytes = c.forward_state_bytes();
        const bool state_bound = c.state_bound() && session->memory().is_host();
        const double copy_gbps = state_bound ? measure_copy_gbps(o_.threads, static_cast<int64_t>(state_bytes / 2)) : 0;
        // The best reading of the run so far: the peak is the hardware's ceiling, and a reading
        // taken while a core was lent elsewhere must not become a case's denominator (seen on a
        // 2-core VM: 117 against 229 GFLOP/s, which reported 118% of peak).
        if (session->memory().is_host()) best_peak_ = std::max(best_peak_, measure_peak(o_.threads, 0.12).gflops);
        const double peak = session->memory().is_host() ? best_peak_ : 0;
        // precision=bf16 rows are also measured against the bf16 products' ceiling, where the
        // host has bf16 dot products (the backend may use them there, and only there).
        const bool bf16_products = c.precision == GDN_PRECISION_BF16 && session->memory().is_host() && best_bf16_peak_ > 0;
        if (bf16_products) best_bf16_peak_ = std::max(best_bf16_peak_, measure_bf16_peak(o_.threads, 0.12).gflops);
        gdn_status status = call();  // warm-up: workspace, caches, clocks
        session->memory().synchronize();
        std::vector<double> times, cpu_times;
        double total = 0;
        while (status == GDN_OK && (total < o_.min_time || times.size() < 3) && times.size() < 100000) {
            // The CPU window nests inside the wall one: the CPU clock's read is a system call
            // (about a microsecond, more on some hosts), and one thread's CPU time must not
            // count a read that the wall time does not.
            const auto start = std::chrono::steady_clock::now();
            const double cpu_start = testkit::process_cpu_seconds();
            status = call();
            session->memory().synchronize();
            double cpu = testkit::process_cpu_seconds() - cpu_start;
            double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (session->last_op_seconds() > 0) {  // GGML: the graph, not its copy-out, for both clocks
                dt = session->last_op_seconds();
                cpu = session->last_op_cpu_seconds();
            }
            times.push_back(dt);
            cpu_times.push_back(cpu);
            total += dt;
        }
        if (status != GDN_OK) {
            rec.verdict = Verdict::Fail;
            rec.note = std::string(gdn_status_string(status)) + ": " + session->last_error();
            return rec;
        }
        std::sort(times.begin(), times.end());
        std::sort(cpu_times.begin(), cpu_times.end());
        const double median = times[times.size() / 2];
        const double tokens = static_cast<double>(c.shape.T * c.shape.B);
        const double gflops = c.canonical_flops() / median / 1e9;
        // cpu_ms: the process's CPU time per call (all threads, spinning ones included) over the
        // span ms times, steadier than wall time on a shared machine; on the cpu backend, threads x
        // canonical FLOP / CPU time is what the cores give when the program has them to itself
        // (docs/PERF.md). More than ms x threads cannot be; more than ms means threads that wait
        // by spinning.
        rec.values = {{"ms", median * 1e3},
                      {"cpu_ms", cpu_times[cpu_times.size() / 2] * 1e3},
                      {"tok/s", tokens / median},
                      {"GFLOP/s", gflops},
                      {"%peak", peak > 0 ? 100.0 * gflops / peak : 0.0},
                      {"workspace_MiB", static_cast<double>(session->workspace_bytes()) / (1 << 20)},
                      {"runs", static_cast<double>(times.size())}};
        if (peak > 0) rec.values.push_back({"peak_GFLOP/s", peak});
        if (bf16_products) {
            rec.values.push_back({"%bf16peak", 100.0 * gflops / best_bf16_peak_});
            rec.values.push_back({"bf16_peak_GFLOP/s", best_bf16_peak_});
        }
        if (state_bound) {
            const double state_gbps = state_bytes / median / 1e9;
            rec.values.push_back({"state_GB/s", state_gbps});
            rec.values.push_back({"copy_GB/s", copy_gbps});
            rec.values.push_back({"%copy", 100.0 * state_gbps / copy_gbps});
        }
        return rec;
    }

private:
    const Options &o_;
    double best_peak_;       // GFLOP/s
    double best_bf16_peak_;  // GFLOP/s, 0 where the host has no bf16 dot products
    const std::vector<testkit::BackendSpec> &backends_;
    const std::vector<WorkItem> &items_;
    SessionCache sessions_;
};

}  // namespace

int run_perf(const Options &o) {
    Report report(o, Mode::Perf);
    std::vector<testkit::BackendSpec> backends;
    if (!chosen_backends_isolated(o, false, backends)) return 2;
    const std::vector<testkit::Case> cases = select_cases(o);
    if (cases.empty()) return report.finish();  // says why, without a second of peak measurement first
    const Peak peak = measure_peak(o.threads);
    char head[200];
    std::snprintf(head, sizeof head,
                  "Peak F32 FMA on this machine: %.1f GFLOP/s (%s, %d thread%s; measured again before each host "
                  "case: peak_GFLOP/s)",
                  peak.gflops, peak.isa, peak.threads, peak.threads == 1 ? "" : "s");
    report.say(head);
    report.fact("peak_isa", peak.isa);
    report.fact("peak_threads", peak.threads);
    report.fact("startup_peak_GFLOP/s", peak.gflops);
    // The bf16 peak only when a precision=bf16 row is to run (it costs a third of a second).
    const bool bf16_rows = std::any_of(cases.begin(), cases.end(), [](const testkit::Case &c) { return c.precision == GDN_PRECISION_BF16; });
    const Peak bf16_peak = bf16_rows ? measure_bf16_peak(o.threads) : Peak{};
    if (bf16_rows) {
        if (bf16_peak.gflops > 0) {
            std::snprintf(head, sizeof head,
                          "bf16 peak (bf16 products, F32 sums) on this machine: %.1f GFLOP/s (%s, %d thread%s; "
                          "precision=bf16 rows: %%bf16peak)",
                          bf16_peak.gflops, bf16_peak.isa, bf16_peak.threads, bf16_peak.threads == 1 ? "" : "s");
            report.say(head);
        } else {
            report.say("bf16 peak: this machine has no bf16 dot-product instruction (precision=bf16 computes as EXACT here)");
        }
        report.fact("bf16_peak_isa", bf16_peak.isa);
        report.fact("startup_bf16_peak_GFLOP/s", bf16_peak.gflops);
    }
    const std::vector<WorkItem> items = work_items(backends.size(), cases, 1);
    ItemPlan plan;
    plan.count = items.size();
    plan.describe = [&](size_t i) {
        return Record{backends[items[i].backend].label, items[i].c->label(), items[i].c->group, Verdict::Fail, "", {}};
    };
    plan.make_runner = [&] { return std::make_unique<PerfRunner>(o, peak, bf16_peak, backends, items); };
    run_items(report, plan, o.isolate);
    return report.finish();
}

}  // namespace gdn::ops
