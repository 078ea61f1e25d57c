// gdn-ops: proves every backend exact and fast at the shapes real models emit (SPEC section 7).
#include "modes.h"

int main(int argc, char **argv) { return gdn::ops::run_command_line(argc, argv); }
