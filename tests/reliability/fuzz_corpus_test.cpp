// Replays every input of the fuzz corpus (fuzz/corpus/api) through the fuzz target's checks,
// in whatever build this is (plain, ASan+UBSan, TSan): the seeds and every past finding stay
// regression tests without libFuzzer. A violated check aborts, which fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "api_target.h"
#include "gguf_target.h"

namespace {

std::vector<std::filesystem::path> corpus_files(const char *target) {
    std::vector<std::filesystem::path> files;
    for (const auto &entry : std::filesystem::directory_iterator(std::filesystem::path(GDN_FUZZ_CORPUS_DIR) / target))
        if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    return files;
}

std::vector<unsigned char> bytes_of(const std::filesystem::path &file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(FuzzCorpus, EveryApiInputPassesTheTargetChecks) {
    const auto files = corpus_files("api");
    ASSERT_GE(files.size(), 50u) << "corpus missing at " << GDN_FUZZ_CORPUS_DIR;
    for (const auto &file : files) {
        SCOPED_TRACE(file.filename().string());
        const auto bytes = bytes_of(file);
        gdn::fuzz::run_api_input(bytes.data(), bytes.size());
    }
    // The seeds cover both outcomes: calls that must be refused and calls checked against ref.
    const gdn::fuzz::ApiTally &t = gdn::fuzz::api_tally();
    EXPECT_EQ(t.inputs, files.size());
    EXPECT_GE(t.refused, 30u);
    EXPECT_GE(t.computed, 25u);
    RecordProperty("refused", static_cast<int>(t.refused));
    RecordProperty("computed", static_cast<int>(t.computed));
}

}  // namespace

namespace {

TEST(FuzzCorpus, EveryGgufInputPassesTheTargetChecks) {
    const auto files = corpus_files("gguf");
    ASSERT_GE(files.size(), 20u) << "corpus missing at " << GDN_FUZZ_CORPUS_DIR;
    for (const auto &file : files) {
        SCOPED_TRACE(file.filename().string());
        const auto bytes = bytes_of(file);
        gdn::fuzz::run_gguf_input(bytes.data(), bytes.size());
    }
    const gdn::fuzz::GgufTally &t = gdn::fuzz::gguf_tally();
    EXPECT_EQ(t.inputs, files.size());
    EXPECT_GE(t.refused, 15u);
    EXPECT_GE(t.shapes, 3u);  // the reference file and the minimal qwen files give a shape
}

}  // namespace
