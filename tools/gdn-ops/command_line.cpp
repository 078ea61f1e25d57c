#include <cstdio>

#include "modes.h"

namespace gdn::ops {

int run_command_line(int argc, char **argv) {
    Options options;
    int exit_code = 0;
    if (!parse_options(argc, argv, options, exit_code)) return exit_code;
    if (options.model && options.output == Output::Console) std::printf("model: %s\n", options.model->description.c_str());
    switch (options.mode) {
        case Mode::Test: return run_test(options);
        case Mode::Grad: return run_grad(options);
        case Mode::Perf: return run_perf(options);
        case Mode::Support: return run_support(options);
        case Mode::List: return run_list(options);
    }
    return 2;
}

}  // namespace gdn::ops
