// A harness must survive the code it tests. The cases of a mode run in a worker process forked
// from gdn-ops; the parent only prints. When the worker dies (a signal, an abort, an exit) the
// case it was running is reported as failed with the cause and a fresh worker goes on with the
// next case. A worker whose case wrote outside its outputs (its heap may be damaged) is replaced
// too. The parent never starts a backend, so a CUDA context is only ever created after the fork.
//
// Cost: one fork per worker, not per case (a new worker only after a crash or a stray write),
// and a few hundred bytes through a pipe per case. --no-fork runs the items in-process.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "report.h"
#include "runner.h"

namespace gdn::ops {

// The code of a mode that runs inside the worker, item by item, in order. Created in the
// worker (it starts the backends there).
class ItemRunner {
public:
    virtual ~ItemRunner() = default;
    // Runs item i. No record: nothing to report (the items of a backend that could not start).
    // `suspect`: the process's memory may be damaged (a write outside an output): the worker
    // stops after reporting this item and a fresh one continues.
    virtual std::optional<Record> run(size_t i, bool &suspect) = 0;
};

struct ItemPlan {
    size_t count = 0;
    // The record a failed item gets when its process dies (backend, label, group filled in).
    std::function<Record(size_t)> describe;
    std::function<std::unique_ptr<ItemRunner>()> make_runner;
};

// Runs every item and adds the records to the report in item order, with a "Backend X:"
// heading and a per-backend summary around each backend's records. isolate = false: in-process.
void run_items(Report &report, const ItemPlan &plan, bool isolate);

// The backends a mode runs on (as chosen_backends), probed in a child process when isolating,
// so that the parent never initialises a device. False: an unknown name (reported).
bool chosen_backends_isolated(const Options &o, bool with_ref_by_default, std::vector<testkit::BackendSpec> &out);

// "signal 11 (Segmentation fault)", "exit status 3": how a waited-for child ended.
std::string describe_wait_status(int status);

}  // namespace gdn::ops
