// gdn-ops grad: each backend's backward against finite differences of the REF forward in F64.
#include <cstdio>

#include "finite_diff.h"
#include "modes.h"
#include "problem_data.h"
#include "report.h"
#include "thresholds.h"

namespace gdn::ops {

int run_grad(const Options &o) {
    Report report(o.output, "grad");
    std::vector<testkit::BackendSpec> backends;
    if (!chosen_backends(o, true, backends)) return 2;
    testkit::BackendSession ref({"REF", "ref", 0}, 1);
    std::vector<testkit::Case> cases;
    for (const testkit::Case &c : select_cases(o))
        if (c.op == testkit::Op::Backward) cases.push_back(c);
    report.say("Checking the backward of " + std::to_string(backends.size()) + " backend(s) on " +
               std::to_string(cases.size()) + " cases x " + std::to_string(o.repeat) + " seed(s) against finite differences");
    for (const auto &spec : backends) {
        report.say("Backend " + spec.label + ":");
        testkit::BackendSession session(spec, o.threads, o.chunk_size);
        if (!session.ok()) {
            report.add({spec.label, "backend start", "", Verdict::Fail, "cannot start: " + session.error(), {}});
            continue;
        }
        // REF is checked in F64 (its own precision); the others in F32, what they compute in.
        const gdn_type type = spec.label == "REF" ? GDN_TYPE_F64 : GDN_TYPE_F32;
        for (const testkit::Case &c : cases)
            for (int rep = 0; rep < o.repeat; ++rep) {
                const uint64_t seed = c.seed(o.seed + static_cast<uint64_t>(rep));
                Record rec{spec.label, c.label(), c.group, Verdict::Pass, "", {}};
                if (o.repeat > 1) rec.label += " seed=" + std::to_string(o.seed + static_cast<uint64_t>(rep));
                testkit::TensorSet inputs = testkit::make_inputs(c, type, seed);
                std::string why;
                const gdn_status support = testkit::check_case(c, inputs, session, why);
                if (support != GDN_OK) {
                    const bool unsupported = support == GDN_ERROR_UNSUPPORTED || support == GDN_ERROR_TYPE;
                    rec.verdict = unsupported ? Verdict::Skip : Verdict::Fail;
                    rec.note = std::string(gdn_status_string(support)) + ": " + why;
                    report.add(rec);
                    continue;
                }
                testkit::RunResult r = testkit::run_case(c, inputs, session);
                if (r.status != GDN_OK || !r.stray_write.empty()) {
                    rec.verdict = Verdict::Fail;
                    rec.note = r.status != GDN_OK ? std::string(gdn_status_string(r.status)) + ": " + r.error : r.stray_write;
                    report.add(rec);
                    continue;
                }
                const double limit = testkit::grad_threshold(c, type);
                double worst = 0;
                try {
                    for (const testkit::GradientCheck &check :
                         testkit::check_gradients(c, seed, r.outputs, ref.context(), o.samples)) {
                        worst = std::max(worst, check.worst);
                        if (!(check.worst <= limit)) {
                            rec.verdict = Verdict::Fail;
                            rec.note += (rec.note.empty() ? "" : "; ") + check.describe();
                        }
                    }
                } catch (const std::exception &e) {
                    rec.verdict = Verdict::Fail;
                    rec.note = e.what();
                }
                if (rec.verdict == Verdict::Fail) {
                    char buf[48];
                    std::snprintf(buf, sizeof buf, " (limit %.0e)", limit);
                    rec.note += buf;
                }
                rec.values = {{"worst", worst}};
                report.add(rec);
            }
        report.backend_summary(spec.label);
    }
    return report.finish();
}

}  // namespace gdn::ops
