// gdn-ops list and support.
#include <cstdio>
#include <map>

#include "model_source.h"
#include "modes.h"
#include "problem_data.h"
#include "report.h"

namespace gdn::ops {

int run_list(const Options &o) {
    if (o.list_presets) {
        print_presets();
        return 0;
    }
    std::map<std::string, int> per_group;
    std::vector<std::string> order;
    for (const testkit::Case &c : select_cases(o)) {
        if (!per_group.count(c.group)) order.push_back(c.group);
        ++per_group[c.group];
        std::printf("%-6s %s\n", c.group.c_str(), c.label().c_str());
    }
    std::printf("groups:");
    for (const std::string &g : order) std::printf(" %s (%d)", g.c_str(), per_group[g]);
    std::printf("\n");
    return 0;
}

int run_support(const Options &o) {
    Report report(o.output, "support");
    std::vector<testkit::BackendSpec> backends;
    if (!chosen_backends(o, true, backends)) return 2;
    const std::vector<testkit::Case> cases = select_cases(o);
    for (const auto &spec : backends) {
        report.say("Backend " + spec.label + ":");
        testkit::BackendSession session(spec, o.threads, o.chunk_size);
        if (!session.ok()) {
            report.add({spec.label, "backend start", "", Verdict::Skip, "cannot start: " + session.error(), {}});
            continue;
        }
        for (const testkit::Case &c : cases) {
            std::string why;
            testkit::TensorSet inputs = testkit::make_inputs(c, GDN_TYPE_F32, 0);
            const gdn_status s = testkit::check_case(c, inputs, session, why);
            Record rec{spec.label, c.label(), c.group, s == GDN_OK ? Verdict::Info : Verdict::Skip, "", {}};
            rec.note = s == GDN_OK ? "supported" : std::string(gdn_status_string(s)) + ": " + why;
            report.add(rec);
        }
    }
    report.finish();
    return 0;
}

}  // namespace gdn::ops
