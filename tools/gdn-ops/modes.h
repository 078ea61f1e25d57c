// The modes of gdn-ops; each returns the process exit code.
#pragma once

#include <vector>

#include "options.h"
#include "runner.h"

namespace gdn::ops {

// gdn-ops as a whole: parses argv and runs the mode (main is this; so is the tests' fault build).
int run_command_line(int argc, char **argv);

int run_test(const Options &o);
int run_grad(const Options &o);
int run_perf(const Options &o);
int run_support(const Options &o);
int run_list(const Options &o);

// The backends a mode runs on: those named with -b, or every available one (without REF
// when `with_ref_by_default` is false). Unknown names are reported and give false.
bool chosen_backends(const Options &o, bool with_ref_by_default, std::vector<testkit::BackendSpec> &out);

}  // namespace gdn::ops
