// gdn-ops grad: each backend's backward against finite differences of the REF forward in F64.
#include <algorithm>
#include <cstdio>

#include "finite_diff.h"
#include "isolation.h"
#include "modes.h"
#include "problem_data.h"
#include "report.h"
#include "thresholds.h"
#include "work_items.h"

namespace gdn::ops {
namespace {

// Runs in the worker: one case and seed on one backend.
class GradRunner final : public ItemRunner {
public:
    GradRunner(const Options &o, const std::vector<testkit::BackendSpec> &backends, const std::vector<WorkItem> &items)
        : o_(o), backends_(backends), items_(items), sessions_(o.threads, o.chunk_size) {}

    std::optional<Record> run(size_t i, bool &suspect) override {
        const WorkItem &item = items_[i];
        const testkit::BackendSpec &spec = backends_[item.backend];
        const testkit::Case &c = *item.c;
        std::optional<Record> start_failure;
        testkit::BackendSession *session = sessions_.get(spec, start_failure);
        if (!session) return start_failure;
        // REF computes in F64, the others in F32. An all-F32 case runs REF on F64 tensors (its own
        // precision); a narrow case runs every backend on the case's types, the finite differences
        // being those of the F64 forward on the same converted values.
        const gdn_type type = spec.label == "REF" ? GDN_TYPE_F64 : GDN_TYPE_F32;
        const uint64_t seed = c.seed(o_.seed + static_cast<uint64_t>(item.rep));
        Record rec{spec.label, c.label(), c.group, Verdict::Pass, "", {}};
        if (o_.repeat > 1) rec.label += " seed=" + std::to_string(o_.seed + static_cast<uint64_t>(item.rep));
        testkit::TensorSet inputs = testkit::make_inputs(c, c.narrow() ? GDN_TYPE_F32 : type, seed);
        std::string why;
        const gdn_status support = testkit::check_case(c, inputs, *session, why);
        if (support != GDN_OK) {
            const bool unsupported = support == GDN_ERROR_UNSUPPORTED || support == GDN_ERROR_TYPE;
            rec.verdict = unsupported ? Verdict::Skip : Verdict::Fail;
            rec.note = std::string(gdn_status_string(support)) + ": " + why;
            return rec;
        }
        testkit::RunResult r = testkit::run_case(c, inputs, *session);
        if (r.status != GDN_OK || !r.stray_write.empty()) {
            suspect = !r.stray_write.empty();  // a write past a guard zone may have hit the heap
            rec.verdict = Verdict::Fail;
            rec.note = r.status != GDN_OK ? std::string(gdn_status_string(r.status)) + ": " + r.error : r.stray_write;
            return rec;
        }
        double worst = 0;
        try {
            const testkit::Case computed = testkit::as_computed(c, inputs, *session, r.outputs);
            for (const testkit::GradientCheck &check : testkit::check_gradients(c, seed, r.outputs, ref_.context(), o_.samples)) {
                worst = std::max(worst, check.worst);
                const double limit = testkit::grad_threshold(computed, type, check.tensor);
                if (!(check.worst <= limit)) {
                    char buf[48];
                    std::snprintf(buf, sizeof buf, " (limit %.1e)", limit);
                    rec.verdict = Verdict::Fail;
                    rec.note += (rec.note.empty() ? "" : "; ") + check.describe() + buf;
                }
            }
        } catch (const std::exception &e) {
            rec.verdict = Verdict::Fail;
            rec.note = e.what();
        }
        rec.values = {{"worst", worst}};
        return rec;
    }

private:
    const Options &o_;
    const std::vector<testkit::BackendSpec> &backends_;
    const std::vector<WorkItem> &items_;
    SessionCache sessions_;
    testkit::BackendSession ref_{{"REF", "ref", 0}, 1};
};

}  // namespace

int run_grad(const Options &o) {
    Report report(o, Mode::Grad);
    std::vector<testkit::BackendSpec> backends;
    if (!chosen_backends_isolated(o, true, backends)) return 2;
    std::vector<testkit::Case> cases;
    for (const testkit::Case &c : select_cases(o))
        if (c.op == testkit::Op::Backward) cases.push_back(c);
    report.say("Checking the backward of " + std::to_string(backends.size()) + " backend(s) on " +
               std::to_string(cases.size()) + " cases x " + std::to_string(o.repeat) + " seed(s) against finite differences");
    const std::vector<WorkItem> items = work_items(backends.size(), cases, o.repeat);
    ItemPlan plan;
    plan.count = items.size();
    plan.describe = [&](size_t i) {
        Record r{backends[items[i].backend].label, items[i].c->label(), items[i].c->group, Verdict::Fail, "", {}};
        if (o.repeat > 1) r.label += " seed=" + std::to_string(o.seed + static_cast<uint64_t>(items[i].rep));
        return r;
    };
    plan.make_runner = [&] { return std::make_unique<GradRunner>(o, backends, items); };
    run_items(report, plan, o.isolate);
    return report.finish();
}

}  // namespace gdn::ops
