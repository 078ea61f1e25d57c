#include "options.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "model_source.h"

namespace gdn::ops {
namespace {

const char kUsage[] =
    "usage: gdn-ops [test|grad|perf|support|list] [-o GATED_DELTA_NET,GATED_DELTA_NET_BACK] [-b CPU|REF|CUDA0]\n"
    "               [-p REGEX] [--preset NAME] [--gguf FILE] [--seed N] [--repeat N] [-t THREADS]\n"
    "               [-c CHUNK] [--samples N] [--min-time SECONDS] [--no-fork] [--output console|csv|json]\n"
    "\n"
    "  test     every available backend other than REF against REF, per output tensor (default)\n"
    "  grad     each backend's backward against finite differences of the REF forward in F64\n"
    "  perf     median time, tokens/s, canonical GFLOP/s and % of this machine's F32 FMA peak\n"
    "  support  which backend takes which case\n"
    "  list     the cases, by group (seed, model, edge, fd; perf for perf); list --preset: the presets\n"
    "\n"
    "  -o OPS        comma-separated ops to run (default both)\n"
    "  -b BACKEND    only this backend (repeatable or comma-separated)\n"
    "  -p REGEX      only cases whose group or label matches (e.g. -p fd, -p 'Sk=128')\n"
    "  --preset NAME a model's shape (q/k/v as views into its packed conv buffer); list --preset lists them\n"
    "  --gguf FILE   the shape of the model in a GGUF file (metadata only)\n"
    "  --seed N      offset of every case's fixed seed (default 0)\n"
    "  --repeat N    test/grad: run each case N times, with N consecutive seeds\n"
    "  -t THREADS    cpu threads (default: all cores)\n"
    "  -c CHUNK      backend chunk size (default: the backend's)\n"
    "  --samples N   grad: elements checked per gradient tensor (default 8; all when fewer)\n"
    "  --min-time S  perf: seconds of repeated runs per case (default 1)\n"
    "  --no-fork     run the cases in this process (default: in a worker process, so that a case\n"
    "                that crashes is reported as failed and the run goes on)\n"
    "  --version     print the version of gdn and exit\n";

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

}  // namespace

bool parse_options(int argc, char **argv, Options &o, int &exit_code) {
    exit_code = 0;
    int i = 1;
    if (i < argc && argv[i][0] != '-') {
        const std::string mode = argv[i++];
        if (mode == "test") o.mode = Mode::Test;
        else if (mode == "grad") o.mode = Mode::Grad;
        else if (mode == "perf") o.mode = Mode::Perf;
        else if (mode == "support") o.mode = Mode::Support;
        else if (mode == "list") o.mode = Mode::List;
        else return fail_usage("unknown mode \"%s\"", mode.c_str(), exit_code);
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
        } else if (a == "-b") {
            for (const std::string &b : split(value)) o.backends.push_back(b);
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
        } else {
            --i;
            return fail_usage("unknown option \"%s\"", a.c_str(), exit_code);
        }
    }
    if (!o.preset.empty() || !o.gguf.empty()) {
        std::string error;
        ModelShape shape;
        if (!o.preset.empty() && !o.gguf.empty()) return fail_usage("%s", "--preset and --gguf exclude each other", exit_code);
        if (!(o.preset.empty() ? model_from_gguf(o.gguf, shape, error) : model_from_preset(o.preset, shape, error))) {
            std::fprintf(stderr, "gdn-ops: %s\n", error.c_str());
            exit_code = 2;
            return false;
        }
        o.model = shape;
    }
    return true;
}

std::vector<testkit::Case> select_cases(const Options &o) {
    std::vector<testkit::Case> all;
    if (o.model) {
        const ModelShape &m = *o.model;
        // perf: decoding, short inputs (speculative decoding, small prefills), and prefill.
        const std::vector<int64_t> tokens = o.mode == Mode::Perf ? std::vector<int64_t>{1, 4, 16, 64, 512, 4096}
                                                                 : std::vector<int64_t>{1, 64, 130};
        all = testkit::model_cases(m.name, m.Sk, m.Sv, m.Hk, m.Hv, tokens, "model");
    } else {
        all = o.mode == Mode::Perf ? testkit::perf_cases() : testkit::default_cases();
    }
    std::vector<testkit::Case> out;
    for (const testkit::Case &c : all) {
        if (c.op == testkit::Op::Forward && !o.forward) continue;
        if (c.op == testkit::Op::Backward && !o.backward) continue;
        if (o.pattern && !std::regex_search(c.group, *o.pattern) && !std::regex_search(c.label(), *o.pattern)) continue;
        out.push_back(c);
    }
    return out;
}

}  // namespace gdn::ops
