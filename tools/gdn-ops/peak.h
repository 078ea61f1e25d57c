// This machine's F32 FMA peak, measured, for perf's "% of peak" column.
#pragma once

namespace gdn::ops {

struct Peak {
    double gflops = 0;   // with `threads` threads
    const char *isa = "scalar";
    int threads = 1;
};

// Runs independent FMA chains on `threads` threads (0 = all cores) for about `seconds`.
Peak measure_peak(int threads, double seconds = 0.3);

}  // namespace gdn::ops
