// gdn-ops list and support.
#include <cstdio>
#include <map>

#include "isolation.h"
#include "model_source.h"
#include "modes.h"
#include "problem_data.h"
#include "report.h"
#include "work_items.h"

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

namespace {

// Runs in the worker: asks one backend whether it takes one case (a dry run).
class SupportRunner final : public ItemRunner {
public:
    SupportRunner(const Options &o, const std::vector<testkit::BackendSpec> &backends, const std::vector<WorkItem> &items)
        : backends_(backends), items_(items), sessions_(o.threads, o.chunk_size) {}

    std::optional<Record> run(size_t i, bool &) override {
        const WorkItem &item = items_[i];
        const testkit::BackendSpec &spec = backends_[item.backend];
        const testkit::Case &c = *item.c;
        std::optional<Record> start_failure;
        testkit::BackendSession *session = sessions_.get(spec, start_failure, Verdict::Skip);
        if (!session) return start_failure;
        std::string why;
        testkit::TensorSet inputs = testkit::make_inputs(c, GDN_TYPE_F32, 0);
        const gdn_status s = testkit::check_case(c, inputs, *session, why);
        Record rec{spec.label, c.label(), c.group, s == GDN_OK ? Verdict::Info : Verdict::Skip, "", {}};
        rec.note = s == GDN_OK ? "supported" : std::string(gdn_status_string(s)) + ": " + why;
        return rec;
    }

private:
    const std::vector<testkit::BackendSpec> &backends_;
    const std::vector<WorkItem> &items_;
    SessionCache sessions_;
};

}  // namespace

int run_support(const Options &o) {
    Report report(o.output, "support");
    std::vector<testkit::BackendSpec> backends;
    if (!chosen_backends_isolated(o, true, backends)) return 2;
    const std::vector<testkit::Case> cases = select_cases(o);
    const std::vector<WorkItem> items = work_items(backends.size(), cases, 1);
    ItemPlan plan;
    plan.count = items.size();
    plan.describe = [&](size_t i) {
        return Record{backends[items[i].backend].label, items[i].c->label(), items[i].c->group, Verdict::Fail, "", {}};
    };
    plan.make_runner = [&] { return std::make_unique<SupportRunner>(o, backends, items); };
    run_items(report, plan, o.isolate);
    report.finish();
    return 0;
}

}  // namespace gdn::ops
