// ab_calls: two builds of libgdn compared call by call in one process, on the same inputs.
//
// On a shared host whole runs move by up to 30% and the same case by 2x between runs, so a
// change is judged by loading the library before and after it (each copied to a name of its own,
// so that the loader keeps both) and alternating their calls: A B B A A B ... on the same
// inputs, threads and outputs. Prints the median time of each, the ratio of medians B / A and
// the quartiles of the per-pair ratios, and whether the two gave the same bits. A gain seen here
// is confirmed with bench/perf_in_turn.py (gdn-ops perf, each build in processes of its own)
// before it is kept: the alternation once favoured a change by 3-4% in both orders that took
// the same time there (docs/PERF.md, "What did not pay").
//
//   ab_calls A.so B.so [--op forward|backward] [--threads N] [--calls N] [--tokens T]
//            [--batch B] [--seqs N] [--heads Hk,Hv] [--dims Sk,Sv] [--kda]
//
// Default: the Qwen3.5-27B shape (Hk 16, Hv 48, Sk = Sv = 128), B = 1, T = 4096, backward, 2
// threads, 20 calls each (after one call each to warm up).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include "case.h"
#include "gdn/gdn.h"
#include "memory.h"
#include "problem_data.h"
#include "tensor_set.h"

namespace {

using namespace gdn::testkit;
using Clock = std::chrono::steady_clock;

// The C API of one copy of the library.
struct Library {
    void *handle = nullptr;
    decltype(&gdn_context_default_params) default_params = nullptr;
    decltype(&gdn_context_create) create = nullptr;
    decltype(&gdn_context_free) free = nullptr;
    decltype(&gdn_forward) forward = nullptr;
    decltype(&gdn_backward) backward = nullptr;
    decltype(&gdn_last_error) last_error = nullptr;

    // Loads a copy of `path` under a name of its own (two files of one soname would be one
    // library to the loader).
    bool load(const std::string &path, const std::string &copy) {
        const std::string cmd = "cp '" + path + "' '" + copy + "'";
        if (std::system(cmd.c_str()) != 0) return false;
        handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) {
            std::fprintf(stderr, "%s\n", dlerror());
            return false;
        }
        bool ok = true;
        auto sym = [&](auto &fn, const char *name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
            ok = ok && fn != nullptr;
        };
        sym(default_params, "gdn_context_default_params");
        sym(create, "gdn_context_create");
        sym(free, "gdn_context_free");
        sym(forward, "gdn_forward");
        sym(backward, "gdn_backward");
        sym(last_error, "gdn_last_error");
        return ok;
    }
};

bool parse_pair(const char *s, int64_t &a, int64_t &b) { return std::sscanf(s, "%ld,%ld", &a, &b) == 2; }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: ab_calls A.so B.so [--op forward|backward] [--threads N] [--calls N] "
                             "[--tokens T] [--batch B] [--seqs N] [--heads Hk,Hv] [--dims Sk,Sv] [--kda]\n");
        return 2;
    }
    Case c;
    c.group = "ab";
    c.op = Op::Backward;
    c.shape = {128, 128, 16, 48, 4096, 1, 1, 1};
    c.strided = true;
    c.gate = Gate::Mild;
    int threads = 2, calls = 20;
    int64_t seqs = 0;
    for (int i = 3; i < argc; ++i) {
        const std::string f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        bool used = true;
        if (f == "--op") c.op = std::strcmp(v, "forward") == 0 ? Op::Forward : Op::Backward;
        else if (f == "--threads") threads = std::atoi(v);
        else if (f == "--calls") calls = std::atoi(v);
        else if (f == "--tokens") c.shape.T = std::atoll(v);
        else if (f == "--batch") c.shape.B = c.shape.Bq = std::atoll(v);
        else if (f == "--seqs") used = (seqs = std::atoll(v)) > 0;
        else if (f == "--heads") used = parse_pair(v, c.shape.Hk, c.shape.Hv);
        else if (f == "--dims") used = parse_pair(v, c.shape.Sk, c.shape.Sv);
        else if (f == "--kda") c.kda = true, used = false, --i;
        else {
            std::fprintf(stderr, "unknown option %s\n", f.c_str());
            return 2;
        }
        if (!used && f != "--kda") {
            std::fprintf(stderr, "bad value for %s\n", f.c_str());
            return 2;
        }
        ++i;
    }
    if (seqs > 0) c.pack(seqs);  // the T tokens as seqs packed sequences (cu_seqlens)
    Library lib[2];
    const std::string stem = "/tmp/ab_calls_" + std::to_string(getpid());
    if (!lib[0].load(argv[1], stem + "_a.so") || !lib[1].load(argv[2], stem + "_b.so")) return 1;

    TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
    TensorSet outputs[2] = {make_outputs(c, GDN_TYPE_F32), make_outputs(c, GDN_TYPE_F32)};
    Mirror in(inputs, host_memory()), out0(outputs[0], host_memory()), out1(outputs[1], host_memory());
    const Mirror *out[2] = {&out0, &out1};
    const gdn_problem p = problem_of(c, in);
    const gdn_tensor d_out = in.tensor("d_out"), d_states = in.tensor("d_states");
    gdn_context *ctx[2];
    for (int l = 0; l < 2; ++l) {
        gdn_context_params params = lib[l].default_params();
        params.n_threads = threads;
        if (lib[l].create("cpu", &params, &ctx[l]) != GDN_OK) return 1;
    }
    auto call = [&](int l) {
        const Clock::time_point t = Clock::now();
        gdn_status st;
        if (c.op == Op::Forward) {
            const gdn_tensor o = out[l]->tensor("out"), s = out[l]->tensor("states");
            st = lib[l].forward(ctx[l], &p, &o, &s);
        } else {
            const gdn_grads grads = grads_of(*out[l]);
            st = lib[l].backward(ctx[l], &p, &d_out, &d_states, &grads);
        }
        if (st != GDN_OK) {
            std::fprintf(stderr, "%s: %s\n", l ? "B" : "A", lib[l].last_error(ctx[l]));
            std::exit(1);
        }
        return std::chrono::duration<double>(Clock::now() - t).count() * 1e3;
    };
    call(0);
    call(1);
    std::vector<double> ms[2], ratio;
    for (int i = 0; i < calls; ++i) {
        const int first = i % 2;  // A B, then B A: neither always runs after the other
        double t[2];
        t[first] = call(first);
        t[1 - first] = call(1 - first);
        ms[0].push_back(t[0]);
        ms[1].push_back(t[1]);
        ratio.push_back(t[1] / t[0]);
    }
    std::sort(ratio.begin(), ratio.end());
    bool same = true;
    for (const auto &[name, view] : outputs[0].views()) {
        const std::vector<double> a = outputs[0].read(name), b = outputs[1].read(name);
        same = same && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
    }
    std::printf("%s, %d threads, %d calls each, alternated\n", c.label().c_str(), threads, calls);
    std::printf("A %.2f ms, B %.2f ms (medians); B / A %.3f; per pair %.3f (quartiles %.3f-%.3f); %s bits\n",
                median(ms[0]), median(ms[1]), median(ms[1]) / median(ms[0]), ratio[ratio.size() / 2],
                ratio[ratio.size() / 4], ratio[3 * ratio.size() / 4], same ? "the same" : "different");
    for (int l = 0; l < 2; ++l) lib[l].free(ctx[l]);
    std::remove((stem + "_a.so").c_str());
    std::remove((stem + "_b.so").c_str());
    return 0;
}
