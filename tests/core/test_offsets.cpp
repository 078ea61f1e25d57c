// The values of cu_seqlens as the core checks them (validate_offsets, which every backend calls
// once it has read the offsets): each pair of neighbours, the last one included, and both ends.
// Every refusal is GDN_ERROR_SHAPE with a message that names cu_seqlens at the offending index
// and the values that are wrong; offsets that pass are those of N real sequences over T tokens.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/validate.h"

namespace {

constexpr int64_t kT = 10;

gdn::Status check(const std::vector<int64_t> &offsets) {
    gdn::Dims d;
    d.Sk = d.Sv = 4;
    d.Hk = d.Hv = 1;
    d.T = kT;
    d.B = d.Bq = 1;
    d.N = static_cast<int64_t>(offsets.size()) - 1;
    return gdn::validate_offsets(d, offsets);
}

struct BadOffsets {
    const char *name;
    std::vector<int64_t> offsets;
    std::vector<std::string> mentions;  // substrings the message must contain
};

TEST(Offsets, EachBadPairIsRefusedWithItsIndexAndValues) {
    const BadOffsets rows[] = {
        {"last pair decreasing", {0, 3, 10, 9}, {"cu_seqlens[3] = 9", "cu_seqlens[2] = 10"}},
        {"middle pair decreasing", {0, 7, 3, 10}, {"cu_seqlens[2] = 3", "cu_seqlens[1] = 7"}},
        {"last offset short of T", {0, 3, 7, 9}, {"cu_seqlens[3] = 9", "10"}},
        {"last offset past T", {0, 3, 7, 11}, {"cu_seqlens[3] = 11", "10"}},
        {"first offset not 0", {2, 3, 7, 10}, {"cu_seqlens[0] = 2"}},
        {"first offset negative", {-1, 3, 7, 10}, {"cu_seqlens[0] = -1"}},
        {"one sequence, short", {0, 9}, {"cu_seqlens[1] = 9", "10"}},
        {"one sequence, decreasing", {0, -1}, {"cu_seqlens[1] = -1"}},
    };
    for (const BadOffsets &row : rows) {
        SCOPED_TRACE(row.name);
        const gdn::Status s = check(row.offsets);
        EXPECT_EQ(s.code, GDN_ERROR_SHAPE) << s.message;
        for (const std::string &m : row.mentions) EXPECT_NE(s.message.find(m), std::string::npos) << s.message;
    }
}

TEST(Offsets, IncreasingFromZeroToTPass) {
    for (const std::vector<int64_t> &offsets :
         {std::vector<int64_t>{0, 10}, {0, 3, 7, 10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {0, 9, 10}}) {
        const gdn::Status s = check(offsets);
        EXPECT_TRUE(s.ok()) << offsets.size() << " offsets: " << s.message;
    }
}

}  // namespace
