// gdn-ops test: every backend other than REF against REF, per output tensor.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "isolation.h"
#include "metrics.h"
#include "modes.h"
#include "pool_gather.h"
#include "problem_data.h"
#include "report.h"
#include "thresholds.h"
#include "work_items.h"

namespace gdn::ops {

bool chosen_backends(const Options &o, bool with_ref_by_default, std::vector<testkit::BackendSpec> &out) {
    const std::vector<testkit::BackendSpec> available = testkit::available_backends();
    out.clear();
    if (o.backends.empty()) {
        for (const auto &b : available)
            if (with_ref_by_default || b.label != "REF") out.push_back(b);
        return true;
    }
    for (const std::string &name : o.backends) {
        testkit::BackendSpec spec;
        if (!testkit::parse_backend(name, spec)) {
            std::fprintf(stderr, "gdn-ops: unknown backend \"%s\" (REF, CPU, CUDA0, ...)\n", name.c_str());
            return false;
        }
        out.push_back(spec);  // an unavailable one fails visibly when it cannot start
    }
    return true;
}

namespace {

std::vector<std::string> output_names(const testkit::Case &c) {
    if (c.op == testkit::Op::Forward) return {"out", "states"};
    return {"dq", "dk", "dv", "dg", "dbeta", "ds0"};
}

// "dq: nmse=... maxrel=... (limits ...)" when output `name` is outside the case's limits; "" when within.
std::string outside_limits(const std::string &name, const testkit::Comparison &cmp, const testkit::Threshold &thr) {
    if (cmp.finite && cmp.nmse <= thr.nmse && cmp.max_rel <= thr.max_rel) return "";
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s: %s (limits nmse %.0e, maxrel %.0e)", name.c_str(), cmp.describe().c_str(), thr.nmse,
                  thr.max_rel);
    return buf;
}

// What a run's status says about the case: supported and computed, or refused for a reason
// that is the backend's to give (not supported), or a failure.
bool refused_as_unsupported(gdn_status s) { return s == GDN_ERROR_UNSUPPORTED || s == GDN_ERROR_TYPE; }

// Runs in the worker: one case on one backend against REF (REF's outputs kept per case and
// seed, for the next backend).
class TestRunner final : public ItemRunner {
public:
    TestRunner(const Options &o, const std::vector<testkit::BackendSpec> &backends, const std::vector<WorkItem> &items)
        : o_(o), backends_(backends), items_(items), sessions_(o.threads, o.chunk_size) {}

    std::optional<Record> run(size_t i, bool &suspect) override {
        const WorkItem &item = items_[i];
        const testkit::BackendSpec &spec = backends_[item.backend];
        const testkit::Case &c = *item.c;
        std::optional<Record> start_failure;
        testkit::BackendSession *session = sessions_.get(spec, start_failure);
        if (!session) return start_failure;
        const uint64_t seed = c.seed(o_.seed + static_cast<uint64_t>(item.rep));
        Record rec{spec.label, c.label(), c.group, Verdict::Pass, "", {}};
        testkit::TensorSet inputs = testkit::make_inputs(c, GDN_TYPE_F32, seed);
        std::string why;
        const gdn_status support = testkit::check_case(c, inputs, *session, why);
        if (support != GDN_OK) {
            rec.verdict = refused_as_unsupported(support) ? Verdict::Skip : Verdict::Fail;
            rec.note = std::string(gdn_status_string(support)) + ": " + why;
            return rec;
        }
        const std::string key = rec.label + "#" + std::to_string(seed);
        if (!ref_outputs_.count(key)) {
            // The oracle: ref on the same F32 inputs for an all-F32 case (it rounds each result
            // once to F32); for a narrow one, ref in F64 on the converted inputs (the same values).
            std::optional<testkit::TensorSet> twin;
            if (c.narrow()) twin = testkit::make_inputs(c, GDN_TYPE_F64, seed);
            testkit::RunResult r = testkit::run_case(c, twin ? *twin : inputs, ref_);
            if (r.status != GDN_OK || !r.stray_write.empty()) {
                suspect = !r.stray_write.empty();
                rec.verdict = Verdict::Fail;
                rec.note = "REF failed: " + (r.status != GDN_OK ? r.error : r.stray_write);
                return rec;
            }
            ref_outputs_.emplace(key, std::move(r.outputs));
        }
        const testkit::TensorSet &expected = ref_outputs_.at(key);
        testkit::RunResult r = testkit::run_case(c, inputs, *session);
        if (r.status != GDN_OK) {
            rec.verdict = Verdict::Fail;
            rec.note = std::string(gdn_status_string(r.status)) + ": " + r.error;
        } else if (!r.stray_write.empty()) {
            rec.verdict = Verdict::Fail;
            rec.note = r.stray_write;
            suspect = true;  // a write past a guard zone may have hit the heap
        }
        double worst_nmse = 0, worst_rel = 0;
        const testkit::Case computed = r.status == GDN_OK ? testkit::as_computed(c, inputs, *session, r.outputs) : c;
        for (const std::string &name : output_names(c)) {
            if (r.status != GDN_OK) break;
            const testkit::Comparison cmp = testkit::compare(r.outputs.read(name), expected.read(name));
            const testkit::Threshold thr = testkit::test_threshold(computed, name);
            worst_nmse = std::max(worst_nmse, cmp.nmse);
            worst_rel = std::max(worst_rel, cmp.max_rel);
            if (const std::string outside = outside_limits(name, cmp, thr); !outside.empty()) {
                rec.verdict = Verdict::Fail;
                rec.note += (rec.note.empty() ? "" : "; ") + outside;
            }
        }
        rec.values = {{"nmse", worst_nmse}, {"maxrel", worst_rel}};
        if (!c.cu_seqlens.empty() && r.status == GDN_OK && r.stray_write.empty())
            check_against_sequences_apart(c, inputs, *session, r.outputs, rec, suspect);
        if (c.pooled() && r.status == GDN_OK && r.stray_write.empty())
            check_against_gathered_batch(c, inputs, *session, r.outputs, rec, suspect);
        return rec;
    }

private:
    // A packed case against the same backend's calls on its sequences one by one (cut out by the
    // harness, not by the library): what docs/VARLEN.md promises, checked without REF, whose
    // packed calls go through the same splitting code as the backend's. The worst NMSE over the
    // outputs is the record's metric `seqs` (0: the same values); above the case's limits the
    // case fails with "packed vs sequences apart" in its note.
    static void check_against_sequences_apart(const testkit::Case &c, testkit::TensorSet &inputs,
                                              testkit::BackendSession &session, const testkit::TensorSet &packed,
                                              Record &rec, bool &suspect) {
        const testkit::RunResult apart = testkit::run_case(c, inputs, session, testkit::Calls::SequencesApart);
        std::string failure;
        double worst = 0;
        if (apart.status != GDN_OK) failure = std::string(gdn_status_string(apart.status)) + ": " + apart.error;
        else if (!apart.stray_write.empty()) {
            failure = apart.stray_write;
            suspect = true;
        }
        const bool compared = failure.empty();
        for (const std::string &name : output_names(c)) {
            if (!compared) break;
            const testkit::Comparison cmp = testkit::compare(packed.read(name), apart.outputs.read(name));
            worst = std::max(worst, cmp.nmse);
            if (const std::string outside = outside_limits(name, cmp, testkit::test_threshold(c, name)); !outside.empty())
                failure += (failure.empty() ? "" : ", ") + outside;
        }
        rec.values.emplace_back("seqs", failure.empty() ? worst : INFINITY);
        if (failure.empty()) return;
        rec.verdict = Verdict::Fail;
        rec.note += (rec.note.empty() ? "" : "; ") + std::string("packed vs sequences apart: ") + failure;
    }

    // A pooled case against the same backend's call on a plain batch, its states gathered from
    // the pool's slots by the harness (tools/testkit/pool_gather.h): the metric `pool`, the worst
    // NMSE (0: the same values), and `pool_bits`, 1 when every value is the same bit for bit;
    // above the case's limits the case fails with "pool vs gathered batch" in its note.
    static void check_against_gathered_batch(const testkit::Case &c, const testkit::TensorSet &inputs,
                                             testkit::BackendSession &session, const testkit::TensorSet &pooled,
                                             Record &rec, bool &suspect) {
        const testkit::Case batch = testkit::batch_case(c);
        testkit::TensorSet batch_inputs = testkit::gather_inputs(c, inputs);
        const testkit::RunResult r = testkit::run_case(batch, batch_inputs, session);
        std::string failure;
        if (r.status != GDN_OK) failure = std::string(gdn_status_string(r.status)) + ": " + r.error;
        else if (!r.stray_write.empty()) {
            failure = r.stray_write;
            suspect = true;
        }
        const bool compared = failure.empty();
        double worst = 0;
        bool same_bits = compared;
        for (const std::string &name : output_names(c)) {
            if (!compared) break;
            const testkit::OutputPair pair = testkit::pooled_and_batch(c, name, pooled, r.outputs);
            const testkit::Comparison cmp = testkit::compare(pair.pooled, pair.batch);
            worst = std::max(worst, cmp.nmse);
            same_bits = same_bits && same_values(pair.pooled, pair.batch);
            if (const std::string outside = outside_limits(name, cmp, testkit::test_threshold(c, name)); !outside.empty())
                failure += (failure.empty() ? "" : ", ") + outside;
        }
        rec.values.emplace_back("pool", failure.empty() ? worst : INFINITY);
        rec.values.emplace_back("pool_bits", same_bits ? 1.0 : 0.0);
        if (failure.empty()) return;
        rec.verdict = Verdict::Fail;
        rec.note += (rec.note.empty() ? "" : "; ") + std::string("pool vs gathered batch: ") + failure;
    }

    static bool same_values(const std::vector<double> &a, const std::vector<double> &b) {
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); ++i)
            if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
        return true;
    }

    const Options &o_;
    const std::vector<testkit::BackendSpec> &backends_;
    const std::vector<WorkItem> &items_;
    SessionCache sessions_;
    testkit::BackendSession ref_{{"REF", "ref", 0}, 1};
    std::map<std::string, testkit::TensorSet> ref_outputs_;  // by label and seed
};

// One line per backend for a check against the same backend's other calls (metric `metric`):
// how many agreed, and the worst NMSE among them; with `bits_metric`, how many bit for bit.
void say_agreement(const Report &report, const std::vector<testkit::BackendSpec> &backends, const char *metric,
                   const char *bits_metric, const char *what) {
    for (const testkit::BackendSpec &b : backends) {
        int checked = 0, agreed = 0, same_bits = 0;
        double worst = 0;
        for (const Record &r : report.records()) {
            if (r.backend != b.label) continue;
            for (const auto &[name, value] : r.values) {
                if (name == metric) {
                    ++checked;
                    if (std::isfinite(value)) ++agreed, worst = std::max(worst, value);
                }
                if (bits_metric && name == bits_metric && value == 1.0) ++same_bits;
            }
        }
        if (checked == 0) continue;
        char buf[256];
        std::snprintf(buf, sizeof buf, "  %s: %s: %d/%d agree (worst nmse %.3g)", b.label.c_str(), what, agreed, checked, worst);
        std::string line = buf;
        if (bits_metric) line += ", " + std::to_string(same_bits) + " bit for bit";
        report.say(line);
    }
}

}  // namespace

int run_test(const Options &o) {
    Report report(o, Mode::Test);
    std::vector<testkit::BackendSpec> compared;
    if (!chosen_backends_isolated(o, true, compared)) return 2;
    const std::vector<testkit::Case> cases = select_cases(o);
    // REF is the oracle of the all-F32 cases; on narrow ones (BF16 / F16 tensors, precision=bf16)
    // it is held, like every backend, to its own F64 computation on the converted inputs.
    std::vector<WorkItem> items;
    for (const WorkItem &item : work_items(compared.size(), cases, o.repeat))
        if (compared[item.backend].label != "REF" || item.c->narrow()) items.push_back(item);
    const bool only_ref = std::all_of(compared.begin(), compared.end(), [](const auto &b) { return b.label == "REF"; });
    if (only_ref && items.empty() && !cases.empty())
        return report.finish("test compares backends with REF, and no other one was chosen or is available here; REF "
                             "itself is tested on the narrow cases only (type=, precision=; gdn-ops grad checks REF "
                             "against finite differences)");
    report.say("Testing " + std::to_string(compared.size()) + " backend(s) against REF on " + std::to_string(cases.size()) +
               " cases (REF: on its F64 self, on the narrow ones)");
    ItemPlan plan;
    plan.count = items.size();
    plan.describe = [&](size_t i) {
        return Record{compared[items[i].backend].label, items[i].c->label(), items[i].c->group, Verdict::Fail, "", {}};
    };
    plan.make_runner = [&] { return std::make_unique<TestRunner>(o, compared, items); };
    run_items(report, plan, o.isolate);
    say_agreement(report, compared, "seqs", nullptr, "packed calls against their sequences called apart");
    say_agreement(report, compared, "pool", "pool_bits", "pooled calls against their states gathered into a batch");
    return report.finish();
}

}  // namespace gdn::ops
