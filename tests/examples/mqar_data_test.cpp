// The MQAR generator: every sequence is pairs, then each key queried once with its value.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "data.h"

namespace mqar {
namespace {

TEST(MqarData, SequencesHoldPairsThenEveryKeyQueriedOnce) {
    const TaskConfig task{64, 8, 64};
    ASSERT_EQ(check_task(task), "");
    Rng rng(7);
    Batch b;
    generate(task, 50, rng, b);
    ASSERT_EQ(b.tokens.size(), 50u * 64u);
    for (int s = 0; s < b.sequences; ++s) {
        const int32_t *tok = b.tokens.data() + s * 64, *tgt = b.targets.data() + s * 64;
        std::map<int32_t, int32_t> value_of;
        std::set<int32_t> values;
        for (int p = 0; p < 8; ++p) {
            ASSERT_GE(tok[2 * p], 1);
            ASSERT_LT(tok[2 * p], 32);
            ASSERT_GE(tok[2 * p + 1], 32);
            ASSERT_LT(tok[2 * p + 1], 64);
            ASSERT_TRUE(value_of.emplace(tok[2 * p], tok[2 * p + 1]).second) << "keys are distinct";
            ASSERT_TRUE(values.insert(tok[2 * p + 1]).second) << "values are distinct";
            EXPECT_EQ(tgt[2 * p], kNoTarget);
            EXPECT_EQ(tgt[2 * p + 1], kNoTarget);
        }
        std::set<int32_t> queried;
        for (int t = 16; t < 64; ++t) {
            if (tgt[t] == kNoTarget) {
                if (t == 16 || tgt[t - 1] == kNoTarget) EXPECT_EQ(tok[t], 0) << "filler outside queries";
                continue;
            }
            ASSERT_TRUE(value_of.count(tok[t])) << "a query asks for a key of this sequence";
            EXPECT_EQ(tgt[t], value_of[tok[t]]);
            ASSERT_LT(t + 1, 64);
            EXPECT_EQ(tok[t + 1], tgt[t]) << "the answer follows its query";
            EXPECT_TRUE(queried.insert(tok[t]).second) << "each key is queried once";
        }
        EXPECT_EQ(queried.size(), 8u);
    }
}

TEST(MqarData, SameSeedSameData) {
    const TaskConfig task;
    Rng r1(3), r2(3), r3(4);
    Batch a, b, c;
    generate(task, 10, r1, a);
    generate(task, 10, r2, b);
    generate(task, 10, r3, c);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.targets, b.targets);
    EXPECT_NE(a.tokens, c.tokens);
}

TEST(MqarData, RejectsImpossibleConfigurations) {
    EXPECT_NE(check_task({16, 8, 64}), "");  // 8 distinct keys need vocab/2 - 1 >= 8
    EXPECT_NE(check_task({64, 8, 24}), "");  // no room for the queries
    EXPECT_EQ(check_task({18, 8, 32}), "");
}

}  // namespace
}  // namespace mqar
