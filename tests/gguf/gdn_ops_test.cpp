// gdn-ops --gguf and --preset end to end: a metadata-only GGUF with Qwen3.5-27B's keys and values,
// written here, gives the model's shape, and the modes run their cases at that shape.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "gguf_writer.h"
#include "hf_configs.h"
#include "test_files.h"

namespace gdn::gguf {
namespace {

using testing::TempFile;

struct CommandResult {
    int exit_code = -1;
    std::string output;  // stdout and stderr
};

CommandResult gdn_ops(const std::string &args) {
    CommandResult run;
    const std::string command = std::string("'") + GDN_OPS_PATH + "' " + args + " 2>&1";
    FILE *pipe = popen(command.c_str(), "r");
    if (!pipe) return run;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) run.output.append(buf, n);
    const int status = pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return run;
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

// The case lines of list's output, each without its group column.
std::vector<std::string> case_lines(const std::string &output) {
    std::vector<std::string> out;
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);)
        if (contains(line, "GATED_DELTA_NET")) out.push_back(line.substr(line.find("GATED_DELTA_NET")));
    return out;
}

// Every case line says heads=<map>.
void expect_heads(const std::string &output, const std::string &map) {
    const std::vector<std::string> lines = case_lines(output);
    EXPECT_FALSE(lines.empty()) << output;
    for (const std::string &line : lines) EXPECT_TRUE(contains(line, ",heads=" + map + ",")) << line;
}

constexpr const char *kQwen35Shape = "Sk=128,Sv=128,Hk=16,Hv=48,conv_dim=10240, 48 delta-net layers";

class GdnOpsGguf : public ::testing::Test {
protected:
    void SetUp() override { file_.write(testing::qwen35_27b_metadata().finish()); }
    std::string gguf() const { return "--gguf '" + file_.path() + "'"; }
    TempFile file_;
};

TEST_F(GdnOpsGguf, ListPrintsTheShapeAndItsPackedCases) {
    const CommandResult run = gdn_ops("list " + gguf());
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(contains(run.output, std::string("model: Qwen3.5-27B (qwen35): ") + kQwen35Shape +
                                         "; from GGUF metadata of " + file_.path()))
        << run.output;
    // Forward and backward at a few token counts, q/k/v as views into the packed buffer.
    for (const char *tokens : {"T=1,", "T=64,", "T=130,"}) {
        EXPECT_TRUE(contains(run.output, std::string("GATED_DELTA_NET(Sk=128,Sv=128,Hk=16,Hv=48,") + tokens)) << tokens;
        EXPECT_TRUE(contains(run.output, std::string("GATED_DELTA_NET_BACK(Sk=128,Sv=128,Hk=16,Hv=48,") + tokens)) << tokens;
    }
    EXPECT_TRUE(contains(run.output, "qk=strided")) << run.output;
    EXPECT_TRUE(contains(run.output, "groups: model (6)")) << run.output;
}

TEST_F(GdnOpsGguf, PerfRunsAtTheModelShape) {
    const CommandResult run = gdn_ops("perf " + gguf() + " -b REF -p 'T=1,' --min-time 0.01");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(contains(run.output, kQwen35Shape)) << run.output;
    EXPECT_TRUE(contains(run.output, "GATED_DELTA_NET(Sk=128,Sv=128,Hk=16,Hv=48,T=1,")) << run.output;
    EXPECT_TRUE(contains(run.output, ": timed [REF] ms=")) << run.output;
}

TEST_F(GdnOpsGguf, GradPassesAtTheModelShape) {
    const CommandResult run = gdn_ops("grad " + gguf() + " -b REF -p 'T=1,' -o GATED_DELTA_NET_BACK --samples 2");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(contains(run.output, "GATED_DELTA_NET_BACK(Sk=128,Sv=128,Hk=16,Hv=48,T=1,")) << run.output;
    EXPECT_TRUE(contains(run.output, "1 passed, 0 failed")) << run.output;
}

TEST_F(GdnOpsGguf, TestRunsAtTheModelShape) {
    // Every backend other than REF against REF (none but REF in a CPU-less build: nothing fails).
    const CommandResult run = gdn_ops("test " + gguf() + " -p 'T=1,'");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(contains(run.output, kQwen35Shape)) << run.output;
    EXPECT_TRUE(contains(run.output, " 0 failed")) << run.output;
}

TEST_F(GdnOpsGguf, PresetGivesTheSameCases) {
    const CommandResult from_file = gdn_ops("list " + gguf());
    const CommandResult from_preset = gdn_ops("list --preset qwen3.5-27b");
    EXPECT_EQ(from_preset.exit_code, 0) << from_preset.output;
    EXPECT_TRUE(contains(from_preset.output, kQwen35Shape)) << from_preset.output;
    // Same case lines after the first (model:) line.
    EXPECT_EQ(from_file.output.substr(from_file.output.find('\n')),
              from_preset.output.substr(from_preset.output.find('\n')));
}

TEST(GdnOpsPresets, ListPresetListsThemWithSources) {
    const CommandResult run = gdn_ops("list --preset");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(contains(run.output, "qwen3.5-27b          Sk=128,Sv=128,Hk=16,Hv=48,conv_dim=10240")) << run.output;
    EXPECT_TRUE(contains(run.output, "qwen3-next-80b-a3b   Sk=128,Sv=128,Hk=16,Hv=32,conv_dim=8192")) << run.output;
    EXPECT_TRUE(contains(run.output, "source: Qwen/Qwen3.5-27B config.json")) << run.output;
}

TEST(GdnOpsPresets, UnknownPresetIsRefused) {
    const CommandResult run = gdn_ops("list --preset qwen9");
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(contains(run.output, "unknown preset \"qwen9\"")) << run.output;
}

TEST(GdnOpsMalformedGguf, RefusedWithTheReason) {
    TempFile file;
    auto bytes = testing::qwen35_27b_metadata().finish();
    bytes.resize(40);
    file.write(bytes);
    CommandResult run = gdn_ops("test --gguf '" + file.path() + "'");
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(contains(run.output, "gdn-ops: --gguf " + file.path() + ": byte 16: key-value count 13 cannot fit"))
        << run.output;

    file.write(testing::GgufWriter().str("general.architecture", "llama").finish());
    run = gdn_ops("perf --gguf '" + file.path() + "'");
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(contains(run.output, "architecture 'llama' is not a gated-delta-net model")) << run.output;

    run = gdn_ops("list --gguf '" + file.path() + ".missing'");
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(contains(run.output, ".missing: no such file")) << run.output;
}

TEST_F(GdnOpsGguf, HeadsOverridesTheHeadMap) {
    const CommandResult tiled = gdn_ops("list " + gguf());
    const CommandResult grouped = gdn_ops("list " + gguf() + " --heads grouped");
    EXPECT_EQ(grouped.exit_code, 0) << grouped.output;
    EXPECT_TRUE(contains(tiled.output, "; head map tiled\n")) << tiled.output;  // llama.cpp's layout, the default
    EXPECT_TRUE(contains(grouped.output, "; head map grouped (--heads)\n")) << grouped.output;
    expect_heads(tiled.output, "tiled");
    expect_heads(grouped.output, "grouped");
    // The same cases otherwise.
    std::vector<std::string> regrouped = case_lines(tiled.output);
    for (std::string &line : regrouped) line.replace(line.find("heads=tiled"), 11, "heads=grouped");
    EXPECT_EQ(regrouped, case_lines(grouped.output));
    expect_heads(gdn_ops("list --preset qwen3.5-27b --heads grouped").output, "grouped");
}

class GdnOpsHfConfig : public ::testing::Test {
protected:
    void write(const std::string &text) { file_.write(std::vector<uint8_t>(text.begin(), text.end())); }
    std::string hf_config() const { return "--hf-config '" + file_.path() + "'"; }
    TempFile file_{".json"};
};

TEST_F(GdnOpsHfConfig, GivesThePresetsShapeWithGroupedHeads) {
    write(testing::qwen35_config());
    const CommandResult run = gdn_ops("list " + hf_config());
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(contains(run.output, std::string("model: qwen3_5 (qwen3_5_text): ") + kQwen35Shape +
                                         "; from Hugging Face config of " + file_.path() + "; head map grouped\n"))
        << run.output;
    expect_heads(run.output, "grouped");
    EXPECT_TRUE(contains(run.output, "groups: model (6)")) << run.output;
    // The preset's cases, heads grouped: transformers' layout.
    std::vector<std::string> preset = case_lines(gdn_ops("list --preset qwen3.5-27b").output);
    for (std::string &line : preset) line.replace(line.find("heads=tiled"), 11, "heads=grouped");
    EXPECT_EQ(case_lines(run.output), preset);
    expect_heads(gdn_ops("list " + hf_config() + " --heads tiled").output, "tiled");
}

TEST_F(GdnOpsHfConfig, TestRunsWithGroupedHeads) {
    write(testing::qwen3_next_config());
    const CommandResult run = gdn_ops("test " + hf_config() + " -b CPU -p 'T=1,' -o GATED_DELTA_NET");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(contains(run.output, "GATED_DELTA_NET(Sk=128,Sv=128,Hk=16,Hv=32,T=1,B=1,Bq=1,gate=scalar,heads=grouped,"))
        << run.output;
    EXPECT_TRUE(contains(run.output, "\n1 passed, 0 failed\n")) << run.output;
}

TEST_F(GdnOpsHfConfig, MalformedOrConflictingRefused) {
    write("{\n  \"linear_num_key_heads\": 16,\n  \"linear_num_value_heads\": 48\n  \"linear_key_head_dim\": 128\n}\n");
    CommandResult run = gdn_ops("list " + hf_config());
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(contains(run.output, "gdn-ops: --hf-config " + file_.path() +
                                         ": line 4, column 3: expected ',' or '}' in the object"))
        << run.output;

    write("{\"model_type\": \"llama\"}");
    run = gdn_ops("test " + hf_config());
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(contains(run.output, "no key linear_num_key_heads: not a gated-delta-net model")) << run.output;

    run = gdn_ops("list --hf-config '" + file_.path() + ".missing'");
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(contains(run.output, ".missing: no such file")) << run.output;

    run = gdn_ops("list --preset qwen3.5-27b " + hf_config());
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(contains(run.output, "--preset, --gguf and --hf-config exclude each other")) << run.output;
}

}  // namespace
}  // namespace gdn::gguf
