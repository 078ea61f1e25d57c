#include "options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "model_source.h"
#include "runner.h"

namespace gdn::ops {
namespace {

const char kUsage[] =
    "usage: gdn-ops [test|grad|perf|support] [options]\n"
    "       gdn-ops list [GROUP|perf] [options]\n"
    "\n"
    "modes:\n"
    "  test     every backend other than REF against REF, per output tensor (default)\n"
    "  grad     each backend's backward against finite differences of the REF forward in F64\n"
    "  perf     median time, CPU time, tokens/s, canonical GFLOP/s and % of this machine's F32 FMA peak\n"
    "  support  which backend takes which case\n"
    "  list     the cases test, grad and support run, by group (seed, model, edge, fd, varlen, serving, types);\n"
    "           list GROUP: that group only; list perf: the cases perf runs; list --preset: the presets\n"
    "\n"
    "options:\n"
    "  -o OPS           GATED_DELTA_NET, GATED_DELTA_NET_BACK or both, comma-separated (default both)\n"
    "  -b BACKENDS      REF, CPU, CUDA0 (CUDA<n>: device n), GGML (ggml's own forward) or GGML-GDN (gdn's\n"
    "                   forward inside a ggml graph), case-insensitive, comma-separated or repeated\n"
    "                   (default: every available one but GGML-GDN; test and perf leave REF out)\n"
    "  -p REGEX         only the cases whose group or label matches (e.g. -p fd, -p 'Sk=128')\n"
    "  --preset NAME    a model's shape: the cases at its sizes, q/k/v as views into its packed conv buffer\n"
    "  --gguf FILE      the same with the shape read from a GGUF file's metadata\n"
    "  --hf-config FILE the same with the shape read from a Hugging Face config.json\n"
    "  --heads MAP      grouped or tiled: the head map of those model cases (default: tiled for --preset\n"
    "                   and --gguf, as llama.cpp lays out GGUF models; grouped for --hf-config)\n"
    "  --gate KIND      the gates of every case: zero, mild (-0.3..-0.02), strong (-20..-1e-4), spike\n"
    "                   (mild, -120 every 7th token) or mixed (-0.5..0.3) (default: each case's own,\n"
    "                   perf's mild); strong and spike decay products into F32's subnormal range\n"
    "  --seed N         offset of every case's fixed seed (default 0)\n"
    "  --repeat N       test, grad: run each case N times, with N consecutive seeds\n"
    "  -t THREADS       cpu and ggml threads (default: all cores)\n"
    "  -c CHUNK         backend chunk size (default: the backend's)\n"
    "  --samples N      grad: elements checked per gradient tensor (default 8; all when fewer)\n"
    "  --min-time S     perf: seconds of repeated runs per case (default 1)\n"
    "  --no-fork        run the cases in this process (default: in a worker process, so that a case\n"
    "                   that crashes is reported as failed and the run goes on)\n"
    "  --output FORMAT  console (default): a line per case and backend, summaries; json: one document;\n"
    "                   csv: a header, then a row per case and backend, a column per metric\n"
    "  --version        the version of gdn, then exit\n"
    "  -h, --help       this text\n"
    "\n"
    "Case labels name the shape and data of a case; serving cases add state=vmajor (value-major states)\n"
    "or state=mixed (inputs value-major, outputs key-major), slots=S,idx=PATTERN[:i32] (a state pool of S\n"
    "slots, state_indices in order, with gaps, reversed, shuffled or with negative entries) and inplace=1\n"
    "(states is the state tensor itself). Cases in narrower types add type=bf16 or type=f16 (q/k/v, out, d_out\n"
    "and their gradients; beta and g in it where the rule allows, beta_type=/g_type= where not; states F32) and\n"
    "precision=bf16 (bf16 products allowed); test holds them, REF included, to REF in F64 on the same values.\n"
    "\n"
    "Exit status: 0 when everything that ran passed, 1 when a case failed or nothing ran, 2 for a\n"
    "command line or model source that cannot be used.\n";

bool fail_usage(const char *fmt, const char *arg, int &exit_code) {
    std::fprintf(stderr, "gdn-ops: ");
    std::fprintf(stderr, fmt, arg);
    std::fprintf(stderr, "\n\n%s", kUsage);
    exit_code = 2;
    return false;
}

bool parse_int(const char *s, long long lo, long long hi, long long &out) {
    char *end = nullptr;
    errno = 0;
    out = std::strtoll(s, &end, 10);
    return errno == 0 && end != s && *end == '\0' && out >= lo && out <= hi;
}

std::vector<std::string> split(const std::string &s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        const size_t comma = s.find(',', start);
        const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) out.push_back(item);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

// Options that take a value; any other word starting with '-' is unknown.
bool takes_value(const std::string &a) {
    static const char *const names[] = {"-o",     "-b",       "-p", "--preset", "--gguf",    "--hf-config", "--heads",
                                        "--gate",   "--seed", "--repeat", "-t", "-c",       "--samples", "--min-time",  "--output"};
    for (const char *n : names)
        if (a == n) return true;
    return false;
}

bool parse_mode(const std::string &word, Mode &out) {
    for (Mode m : {Mode::Test, Mode::Grad, Mode::Perf, Mode::Support, Mode::List})
        if (word == mode_name(m)) {
            out = m;
            return true;
        }
    return false;
}

// The groups `list GROUP` takes: those of the default cases, and perf.
std::vector<std::string> list_groups() {
    std::vector<std::string> groups;
    for (const testkit::Case &c : testkit::default_cases())
        if (std::find(groups.begin(), groups.end(), c.group) == groups.end()) groups.push_back(c.group);
    groups.push_back("perf");
    return groups;
}

std::string joined(const std::vector<std::string> &items) {
    std::string out;
    for (const std::string &item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
}

// Adds the -b names as canonical labels, each once ("CPU,cpu" is one backend).
bool add_backends(const std::string &value, std::vector<std::string> &backends, int &exit_code) {
    for (const std::string &name : split(value)) {
        testkit::BackendSpec spec;
        if (!testkit::parse_backend(name, spec))
            return fail_usage("unknown backend \"%s\" (REF, CPU, CUDA0, CUDA1, ..., GGML, GGML-GDN)", name.c_str(), exit_code);
        if (std::find(backends.begin(), backends.end(), spec.label) == backends.end()) backends.push_back(spec.label);
    }
    return true;
}

// Reads the model source named on the command line, if any, into o.model.
bool load_model(Options &o, int &exit_code) {
    const int sources = !o.preset.empty() + !o.gguf.empty() + !o.hf_config.empty();
    if (sources == 0) {
        if (o.heads) return fail_usage("%s", "--heads applies to the cases of a model: give --preset, --gguf or --hf-config", exit_code);
        return true;
    }
    if (sources > 1) return fail_usage("%s", "--preset, --gguf and --hf-config exclude each other", exit_code);
    std::string error;
    ModelShape shape;
    const bool ok = !o.preset.empty() ? model_from_preset(o.preset, shape, error)
                    : !o.gguf.empty() ? model_from_gguf(o.gguf, shape, error)
                                      : model_from_hf_config(o.hf_config, shape, error);
    if (!ok) {
        std::fprintf(stderr, "gdn-ops: %s\n", error.c_str());
        exit_code = 2;
        return false;
    }
    if (o.heads) shape.heads = *o.heads;
    shape.description += std::string("; head map ") + (shape.heads == GDN_HEAD_MAP_GROUPED ? "grouped" : "tiled") +
                         (o.heads ? " (--heads)" : "");
    o.model = shape;
    return true;
}

}  // namespace

const char *mode_name(Mode m) {
    switch (m) {
        case Mode::Test: return "test";
        case Mode::Grad: return "grad";
        case Mode::Perf: return "perf";
        case Mode::Support: return "support";
        case Mode::List: return "list";
    }
    return "?";
}

bool parse_options(int argc, char **argv, Options &o, int &exit_code) {
    exit_code = 0;
    int i = 1;
    if (i < argc && argv[i][0] != '-' && !parse_mode(argv[i++], o.mode))
        return fail_usage("unknown mode \"%s\" (test, grad, perf, support, list)", argv[i - 1], exit_code);
    if (o.mode == Mode::List && i < argc && argv[i][0] != '-') {
        o.list_group = argv[i++];
        const std::vector<std::string> groups = list_groups();
        if (std::find(groups.begin(), groups.end(), o.list_group) == groups.end())
            return fail_usage("%s", ("unknown group \"" + o.list_group + "\" (" + joined(groups) + ")").c_str(), exit_code);
    }
    for (; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            std::printf("%s", kUsage);
            exit_code = 0;
            return false;
        }
        if (a == "--preset" && o.mode == Mode::List && (i + 1 >= argc || argv[i + 1][0] == '-')) {
            o.list_presets = true;
            continue;
        }
        if (a == "--no-fork") {
            o.isolate = false;
            continue;
        }
        if (a.empty() || a[0] != '-') return fail_usage("unexpected argument \"%s\" (the mode comes first)", a.c_str(), exit_code);
        if (!takes_value(a)) return fail_usage("unknown option \"%s\"", a.c_str(), exit_code);
        if (i + 1 >= argc) return fail_usage("%s needs a value", a.c_str(), exit_code);
        const char *value = argv[++i];
        long long n = 0;
        if (a == "-o") {
            o.forward = o.backward = false;
            for (const std::string &op : split(value)) {
                if (op == "GATED_DELTA_NET") o.forward = true;
                else if (op == "GATED_DELTA_NET_BACK") o.backward = true;
                else return fail_usage("unknown op \"%s\" (GATED_DELTA_NET, GATED_DELTA_NET_BACK)", op.c_str(), exit_code);
            }
            if (!o.forward && !o.backward) return fail_usage("-o \"%s\" names no op", value, exit_code);
        } else if (a == "-b") {
            if (!add_backends(value, o.backends, exit_code)) return false;
        } else if (a == "-p") {
            try {
                o.pattern = std::regex(value);
                o.pattern_text = value;
            } catch (const std::regex_error &) {
                return fail_usage("-p: \"%s\" is not a regular expression", value, exit_code);
            }
        } else if (a == "--preset") {
            o.preset = value;
        } else if (a == "--gguf") {
            o.gguf = value;
        } else if (a == "--hf-config") {
            o.hf_config = value;
        } else if (a == "--heads") {
            const std::string v = value;
            if (v == "grouped") o.heads = GDN_HEAD_MAP_GROUPED;
            else if (v == "tiled") o.heads = GDN_HEAD_MAP_TILED;
            else return fail_usage("--heads: \"%s\" is not grouped or tiled", value, exit_code);
        } else if (a == "--gate") {
            bool known = false;
            for (testkit::Gate g : {testkit::Gate::Zero, testkit::Gate::Mild, testkit::Gate::Strong, testkit::Gate::Spike, testkit::Gate::Mixed})
                if (value == std::string(testkit::gate_name(g))) o.gate = g, known = true;
            if (!known) return fail_usage("--gate: \"%s\" is not zero, mild, strong, spike or mixed", value, exit_code);
        } else if (a == "--seed") {
            if (!parse_int(value, 0, INT64_MAX, n)) return fail_usage("--seed: \"%s\" is not a non-negative integer", value, exit_code);
            o.seed = static_cast<uint64_t>(n);
        } else if (a == "--repeat") {
            if (!parse_int(value, 1, 1000000, n)) return fail_usage("--repeat: \"%s\" is not an integer in 1..1000000", value, exit_code);
            o.repeat = static_cast<int>(n);
        } else if (a == "-t") {
            if (!parse_int(value, 0, 4096, n)) return fail_usage("-t: \"%s\" is not an integer in 0..4096", value, exit_code);
            o.threads = static_cast<int>(n);
        } else if (a == "-c") {
            if (!parse_int(value, 0, 1 << 20, n)) return fail_usage("-c: \"%s\" is not a chunk size", value, exit_code);
            o.chunk_size = static_cast<int>(n);
        } else if (a == "--samples") {
            if (!parse_int(value, 1, 1 << 20, n)) return fail_usage("--samples: \"%s\" is not a positive integer", value, exit_code);
            o.samples = static_cast<int>(n);
        } else if (a == "--min-time") {
            char *end = nullptr;
            o.min_time = std::strtod(value, &end);
            if (end == value || *end != '\0' || !(o.min_time >= 0.0 && o.min_time <= 3600.0))
                return fail_usage("--min-time: \"%s\" is not a number of seconds", value, exit_code);
        } else if (a == "--output") {
            const std::string v = value;
            if (v == "console") o.output = Output::Console;
            else if (v == "csv") o.output = Output::Csv;
            else if (v == "json") o.output = Output::Json;
            else return fail_usage("--output: \"%s\" is not console, csv or json", value, exit_code);
        }
    }
    return load_model(o, exit_code);
}

std::vector<testkit::Case> select_cases(const Options &o) {
    const bool perf_cases = o.mode == Mode::Perf || o.list_group == "perf";
    std::vector<testkit::Case> all;
    if (o.model) {
        const ModelShape &m = *o.model;
        // perf: decoding, short inputs (speculative decoding, small prefills), and prefill; and
        // serving decode, batches of requests in a state pool.
        const std::vector<int64_t> tokens = perf_cases ? std::vector<int64_t>{1, 4, 16, 64, 512, 4096}
                                                       : std::vector<int64_t>{1, 64, 130};
        all = testkit::model_cases(m.name, m.Sk, m.Sv, m.Hk, m.Hv, tokens, "model");
        if (perf_cases) {
            // The prefill in bf16 tensors, computed exactly and in bf16 products, beside the F32 one.
            for (gdn_precision precision : {GDN_PRECISION_EXACT, GDN_PRECISION_BF16})
                for (testkit::Case c : testkit::model_cases(m.name, m.Sk, m.Sv, m.Hk, m.Hv, {tokens.back()}, "model")) {
                    c.use_type(GDN_TYPE_BF16);
                    c.precision = precision;
                    all.push_back(c);
                }
            for (const testkit::Case &c : testkit::serving_decode_cases(m.name, m.Sk, m.Sv, m.Hk, m.Hv, "model")) all.push_back(c);
        }
        for (testkit::Case &c : all) c.heads = m.heads;
    } else {
        all = perf_cases ? testkit::perf_cases() : testkit::default_cases();
    }
    std::vector<testkit::Case> out;
    for (testkit::Case &c : all) {
        if (o.gate) c.gate = *o.gate;
        if (c.op == testkit::Op::Forward && !o.forward) continue;
        if (c.op == testkit::Op::Backward && !o.backward) continue;
        if (!o.list_group.empty() && !perf_cases && c.group != o.list_group) continue;
        if (o.pattern && !std::regex_search(c.group, *o.pattern) && !std::regex_search(c.label(), *o.pattern)) continue;
        out.push_back(c);
    }
    return out;
}

std::string empty_selection_reason(const Options &o) {
    std::string filters;
    if (!o.list_group.empty()) filters += " in group " + o.list_group;
    if (o.pattern) filters += " matching -p '" + o.pattern_text + "'";
    if (!o.forward || !o.backward) filters += std::string(" of op ") + (o.forward ? "GATED_DELTA_NET" : "GATED_DELTA_NET_BACK");
    if (o.mode == Mode::Grad) filters += " with a backward (grad checks GATED_DELTA_NET_BACK)";
    return "no case" + (filters.empty() ? std::string(" to run") : filters) + " (gdn-ops list" +
           (o.mode == Mode::Perf ? " perf" : "") + " shows the cases)";
}

}  // namespace gdn::ops
