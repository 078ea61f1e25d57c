// The GEMM profile's table (src/cpu/gemm_profile.h): totals per shape, longest first, with the
// share, call count and rate each line reports.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/gemm_profile.h"

namespace {

using gdn::cpu::GemmProfile;
using gdn::cpu::GemmShape;

std::vector<std::string> lines_of(const std::string &text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

TEST(CpuGemmProfile, EmptyProfileHasNoTable) { EXPECT_EQ(GemmProfile().table(), ""); }

TEST(CpuGemmProfile, SumsCallsPerShapeLongestFirst) {
    GemmProfile p;
    const GemmShape state_update{128, 64, 32, true, false, false, false, true, true};
    const GemmShape gram{64, 32, 128, false, true, false, false, false, false};
    // 2 x 128 x 64 x 32 = 524288 FLOP a call: 3 calls in 6 us are 262.144 GFLOP/s.
    for (int i = 0; i < 3; ++i) p.add(state_update, 2e-6);
    // 2 x 64 x 32 x 128 is the same count: one call in 2 us, the same rate, a quarter of the time.
    p.add(gram, 2e-6);
    const std::vector<std::string> lines = lines_of(p.table());
    ASSERT_EQ(lines.size(), 4u) << p.table();
    EXPECT_EQ(lines[0].rfind(std::string("gdn GEMM profile (") + gdn::cpu::gemm_isa() + " kernel)", 0), 0u) << lines[0];
    EXPECT_EQ(lines[2], "   75.0%    128     64     32  T N  --i     +=          3               262.1");
    EXPECT_EQ(lines[3], "   25.0%     64     32    128  N T  ---     =           1               262.1");
}

TEST(CpuGemmProfile, DistinguishesLayoutsScalesAndAccumulation) {
    GemmProfile p;
    GemmShape s{64, 64, 128, false, false, true, false, false, true};
    p.add(s, 1e-6);
    s.accumulate = false;
    p.add(s, 1e-6);
    s.c_rows = false;
    s.b_rows = true;
    p.add(s, 1e-6);
    s.a_transposed = true;
    p.add(s, 1e-6);
    EXPECT_EQ(lines_of(p.table()).size(), 2u + 4u);
}

}  // namespace
