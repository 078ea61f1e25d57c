// gdn-ops: proves every backend exact and fast at the shapes real models emit (SPEC section 7).
#include <cstdio>
#include <cstring>

#include "gdn/gdn.h"
#include "modes.h"

int main(int argc, char **argv) {
    if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
        std::printf("gdn-ops %s\n", gdn_version());
        return 0;
    }
    return gdn::ops::run_command_line(argc, argv);
}
