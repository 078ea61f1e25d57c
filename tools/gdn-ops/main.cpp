// gdn-ops: proves every backend exact and fast at the shapes real models emit (SPEC section 7).
#include <cstdio>

#include "modes.h"

int main(int argc, char **argv) {
    gdn::ops::Options options;
    int exit_code = 0;
    if (!gdn::ops::parse_options(argc, argv, options, exit_code)) return exit_code;
    if (options.model && options.output == gdn::ops::Output::Console)
        std::printf("model: %s\n", options.model->description.c_str());
    switch (options.mode) {
        case gdn::ops::Mode::Test: return gdn::ops::run_test(options);
        case gdn::ops::Mode::Grad: return gdn::ops::run_grad(options);
        case gdn::ops::Mode::Perf: return gdn::ops::run_perf(options);
        case gdn::ops::Mode::Support: return gdn::ops::run_support(options);
        case gdn::ops::Mode::List: return gdn::ops::run_list(options);
    }
    return 2;
}
