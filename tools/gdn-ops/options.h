// Command line of gdn-ops (SPEC section 7).
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "case.h"

namespace gdn::ops {

enum class Mode { Test, Grad, Perf, Support, List };
enum class Output { Console, Csv, Json };

// A model's delta-net shape, from --preset, --gguf or --hf-config.
struct ModelShape {
    std::string name;
    int64_t Sk = 0, Sv = 0, Hk = 0, Hv = 0;
    std::string description;  // what was found and where, printed before the cases
    // How the source lays out the value heads (SPEC section 2): GGUF files and the presets, which
    // follow them, tiled; Hugging Face checkpoints grouped. --heads overrides it.
    gdn_head_map heads = GDN_HEAD_MAP_TILED;
};

struct Options {
    Mode mode = Mode::Test;
    bool forward = true, backward = true;     // -o
    std::vector<std::string> backends;        // -b, empty = every available; canonical labels, no repeats
    std::optional<std::regex> pattern;        // -p, matched against the group and the label
    std::string pattern_text;
    std::optional<ModelShape> model;          // --preset / --gguf / --hf-config
    std::string preset, gguf, hf_config;
    std::optional<gdn_head_map> heads;        // --heads: the model cases' head map (default: the model's)
    std::optional<testkit::Gate> gate;         // --gate: every case's gate values (default: the case's)
    std::string list_group;                   // list GROUP: one group only; "perf": the perf cases
    uint64_t seed = 0;
    int repeat = 1;
    int threads = 0;                          // -t, 0 = all cores
    int chunk_size = 0;                       // -c, 0 = backend default
    int samples = 8;                          // grad: elements per tensor
    double min_time = 1.0;                    // perf: seconds of runs per case
    bool list_presets = false;                // list --preset with no name
    bool isolate = true;                      // cases in a worker process (--no-fork: in-process)
    Output output = Output::Console;
};

// Parses argv; on error prints it with the usage and returns false (exit_code set).
bool parse_options(int argc, char **argv, Options &out, int &exit_code);

// The cases a mode runs: the default groups (perf: the perf cases), or the model's shape.
std::vector<testkit::Case> select_cases(const Options &o);

// Why select_cases gave nothing ("no case matches -p 'x'"), for the message that says so.
std::string empty_selection_reason(const Options &o);

// "test", "grad", ...: the mode's name on the command line.
const char *mode_name(Mode m);

}  // namespace gdn::ops
