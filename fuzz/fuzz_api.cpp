// libFuzzer entry point of the C API target (see api_target.h for what each input checks).
#include <cstdio>
#include <cstdlib>

#include "api_target.h"

namespace {

void print_tally() {
    const gdn::fuzz::ApiTally &t = gdn::fuzz::api_tally();
    std::fprintf(stderr, "gdn fuzz_api tally: inputs=%llu refused=%llu computed=%llu valid_but_not_backed=%llu\n",
                 static_cast<unsigned long long>(t.inputs), static_cast<unsigned long long>(t.refused),
                 static_cast<unsigned long long>(t.computed), static_cast<unsigned long long>(t.not_backed));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    std::atexit(print_tally);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    gdn::fuzz::run_api_input(data, size);
    return 0;
}
