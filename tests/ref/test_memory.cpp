// Memory of the ref backward at the Qwen3.5-27B shape (Sk = Sv = 128, Hk = 16, Hv = 48) over
// T = 4096 tokens, B = 1: the backward recomputes states from checkpoints (docs/DESIGN.md,
// "The ref oracle") instead of storing every state, so its workspace grows with
// sqrt(T), not with T * Sk * Sv (which would be 512 MiB for a single value head, 24 GiB for
// the layer).
//
// Slow (the ref is scalar double arithmetic: ~100 GFLOP): registered with CTest directly,
// labelled `slow`, with its own timeout (tests/ref/CMakeLists.txt).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "case.h"
#include "problem_data.h"
#include "runner.h"

namespace {

// A field of /proc/self/status in KiB (VmRSS, VmHWM), or -1.
int64_t status_kib(const std::string &field) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
    return -1;
}

// Resets VmHWM to the current RSS (Linux: "5" to clear_refs); false where not permitted.
bool reset_peak() {
    std::ofstream out("/proc/self/clear_refs");
    out << "5";
    out.flush();
    return static_cast<bool>(out);
}

TEST(RefMemory, Backward27bAtT4096StaysUnderOneGiB) {
    const std::vector<gdn::testkit::Case> cases = gdn::testkit::model_cases("qwen3.5-27b", 128, 128, 16, 48, {4096}, "memory");
    const gdn::testkit::Case &c = cases.at(1);
    ASSERT_EQ(c.op, gdn::testkit::Op::Backward);
    gdn::testkit::BackendSession ref({"REF", "ref", 0}, 1);
    ASSERT_TRUE(ref.ok()) << ref.error();

    // Inputs and outputs in F32, q/k/v and dq/dk/dv as views into packed [10240, T] buffers,
    // as the model lays them out: about 430 MiB in all, allocated and written before the call.
    gdn::testkit::TensorSet inputs = gdn::testkit::make_inputs(c, GDN_TYPE_F32, c.seed(0));
    size_t input_bytes = 0, output_bytes = 0;
    for (size_t b = 0; b < inputs.buffer_count(); ++b) input_bytes += inputs.storage_bytes(static_cast<int>(b));
    {
        const gdn::testkit::TensorSet outputs = gdn::testkit::make_outputs(c, GDN_TYPE_F32);
        for (size_t b = 0; b < outputs.buffer_count(); ++b) output_bytes += outputs.storage_bytes(static_cast<int>(b));
    }

    const int64_t rss_before = status_kib("VmRSS");
    const bool peak_was_reset = reset_peak();
    struct rusage usage_before {};
    getrusage(RUSAGE_SELF, &usage_before);
    const auto start = std::chrono::steady_clock::now();
    gdn::testkit::RunResult r = gdn::testkit::run_case(c, inputs, ref);  // allocates and poisons the outputs, then runs
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t peak = peak_was_reset ? status_kib("VmHWM") : -1;
    struct rusage usage_after {};
    getrusage(RUSAGE_SELF, &usage_after);

    ASSERT_EQ(r.status, GDN_OK) << r.error;
    EXPECT_EQ(r.stray_write, "");
    for (const char *name : {"dq", "dk", "dv", "dg", "dbeta", "ds0"}) {
        const std::vector<double> values = r.outputs.read(name);
        size_t finite = 0;
        for (double x : values) finite += std::isfinite(x);
        EXPECT_EQ(finite, values.size()) << name;
    }

    const double MiB = 1024.0 * 1024.0;
    const double peak_mib = peak >= 0 ? peak / 1024.0 : usage_after.ru_maxrss / 1024.0;
    const double growth_mib = peak_mib - rss_before / 1024.0;
    const double workspace_mib = gdn_context_workspace_bytes(ref.context()) / MiB;
    std::printf("ref backward, 27B shape, T = 4096, B = 1: %.1f s; inputs %.0f MiB, outputs %.0f MiB; RSS before %.0f MiB; "
                "peak during the call %.0f MiB (%s); growth %.0f MiB; workspace reported %.1f MiB\n",
                seconds, input_bytes / MiB, output_bytes / MiB, rss_before / 1024.0, peak_mib,
                peak >= 0 ? "VmHWM after a reset" : "ru_maxrss", growth_mib, workspace_mib);
    RecordProperty("seconds", std::to_string(seconds));
    RecordProperty("peak_mib", std::to_string(peak_mib));
    // The whole process, inputs and outputs included, under 1 GiB; beyond the outputs the call
    // writes, it adds a workspace far below one state per token of even a single value head
    // (T * Sk * Sv doubles = 512 MiB; the layer's 48 heads would need 24 GiB).
    EXPECT_LT(peak_mib, 1024.0);
    EXPECT_LT(growth_mib - output_bytes / MiB, 128.0);
    EXPECT_LT(workspace_mib, 64.0);
}

}  // namespace
