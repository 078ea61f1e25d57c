// The GGUF reader fuzz target: any byte string is read as a GGUF file's metadata; the reader
// must either succeed with metadata inside its documented limits, from which a model shape is
// derived or refused with a message, or fail with a message and empty metadata. Memory-safety
// problems are the sanitizers' to report; a broken contract prints and aborts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gdn::fuzz {

struct GgufTally {
    uint64_t inputs = 0;
    uint64_t refused = 0;       // read_metadata failed with a message
    uint64_t read = 0;          // metadata read
    uint64_t shapes = 0;        // ... and a gated-delta-net shape derived from it
};

void run_gguf_input(const uint8_t *data, size_t size);
const GgufTally &gguf_tally();

}  // namespace gdn::fuzz
