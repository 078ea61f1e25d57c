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
        print_presets(o.output);
        return 0;
    }
    const std::vector<testkit::Case> cases = select_cases(o);
    std::map<std::string, int> per_group;
    std::vector<std::string> order;
    for (const testkit::Case &c : cases)
        if (!per_group[c.group]++) order.push_back(c.group);
    if (o.output == Output::Csv) {
        std::printf("mode,group,case%s\n", o.model ? ",model" : "");
        const std::string model = o.model ? csv_field(o.model->description) : "";
        for (const testkit::Case &c : cases)
            std::printf("list,%s,%s%s%s\n", csv_field(c.group).c_str(), csv_field(c.label()).c_str(), o.model ? "," : "",
                        model.c_str());
    } else if (o.output == Output::Json) {
        std::printf("{\"mode\": \"list\"");
        if (o.model) std::printf(", \"model\": %s", json_string(o.model->description).c_str());
        std::printf(", \"groups\": {");
        for (size_t i = 0; i < order.size(); ++i)
            std::printf("%s%s: %d", i ? ", " : "", json_string(order[i]).c_str(), per_group[order[i]]);
        std::printf("}, \"cases\": [");
        for (size_t i = 0; i < cases.size(); ++i)
            std::printf("%s\n  {\"group\": %s, \"case\": %s}", i ? "," : "", json_string(cases[i].group).c_str(),
                        json_string(cases[i].label()).c_str());
        std::printf("\n]}\n");
    } else {
        for (const testkit::Case &c : cases) std::printf("%-6s %s\n", c.group.c_str(), c.label().c_str());
        std::printf("groups:");
        for (const std::string &g : order) std::printf(" %s (%d)", g.c_str(), per_group[g]);
        std::printf("\n");
    }
    if (cases.empty()) {
        std::fprintf(stderr, "gdn-ops: nothing to list: %s\n", empty_selection_reason(o).c_str());
        return 1;
    }
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
        Record rec{spec.label, c.label(), c.group, s == GDN_OK ? Verdict::Supported : Verdict::Skip, "", {}};
        if (s != GDN_OK) rec.note = std::string(gdn_status_string(s)) + ": " + why;
        return rec;
    }

private:
    const std::vector<testkit::BackendSpec> &backends_;
    const std::vector<WorkItem> &items_;
    SessionCache sessions_;
};

}  // namespace

int run_support(const Options &o) {
    Report report(o, Mode::Support);
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
    return report.finish();
}

}  // namespace gdn::ops
