// This machine's F32 FMA peak, its bf16 dot-product peak and its copy bandwidth, measured, for
// perf's "% of peak", "% of bf16 peak" and "%copy" columns.
#pragma once

#include <cstdint>

namespace gdn::ops {

struct Peak {
    double gflops = 0;   // with `threads` threads
    const char *isa = "scalar";
    int threads = 1;
};

// Runs independent FMA chains on `threads` threads (0 = all cores) for about `seconds`, in
// several windows; the best window's rate.
Peak measure_peak(int threads, double seconds = 0.3);

// The same for bf16 products accumulated in F32 (what precision=bf16 may use): chains of
// AVX512_BF16 vdpbf16ps (32 products and 32 additions each) where the host has it; gflops 0 and
// isa "none" where it has no bf16 dot-product instruction.
Peak measure_bf16_peak(int threads, double seconds = 0.3);

// GB/s (bytes read plus bytes written) of memcpy from one buffer of `bytes` to another, the
// threads (0 = all cores) each copying their slice again and again for about `seconds`.
double measure_copy_gbps(int threads, int64_t bytes, double seconds = 0.1);

}  // namespace gdn::ops
