// The C API fuzz target: decode one input into a call, run it, and hold the outcome to SPEC 6.
//
//   - The library's verdict (gdn_check_* and the call itself) agrees with the spec oracle.
//   - On an error: a non-empty gdn_last_error, and not one byte of the arena changed.
//   - On success: the outputs equal a fresh ref run on contiguous copies of the inputs (bit for
//     bit on ref, to a tolerance elsewhere), and nothing outside the outputs' elements changed.
//
// A violation prints the call and aborts, which libFuzzer (or the corpus test) reports.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gdn::fuzz {

struct ApiTally {
    uint64_t inputs = 0;
    uint64_t refused = 0;     // calls that returned an error status (bad inputs)
    uint64_t computed = 0;    // calls that ran and were compared against ref
    uint64_t not_backed = 0;  // calls not refused with tensors outside the arena: not run (offsets outside: not even checked)
};

void run_api_input(const uint8_t *data, size_t size);
const ApiTally &api_tally();

}  // namespace gdn::fuzz
