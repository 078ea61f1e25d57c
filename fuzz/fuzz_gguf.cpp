// libFuzzer entry point of the GGUF reader target (see gguf_target.h).
#include <cstdio>
#include <cstdlib>

#include "gguf_target.h"

namespace {

void print_tally() {
    const gdn::fuzz::GgufTally &t = gdn::fuzz::gguf_tally();
    std::fprintf(stderr, "gdn fuzz_gguf tally: inputs=%llu refused=%llu read=%llu shapes=%llu\n",
                 static_cast<unsigned long long>(t.inputs), static_cast<unsigned long long>(t.refused),
                 static_cast<unsigned long long>(t.read), static_cast<unsigned long long>(t.shapes));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    std::atexit(print_tally);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    gdn::fuzz::run_gguf_input(data, size);
    return 0;
}
