#include "sequence_calls.h"

#include <cstring>
#include <stdexcept>

#include "memory.h"
#include "problem_data.h"

namespace gdn::varlentest {
namespace {

class Context {
public:
    Context(const char *backend, int n_threads, int chunk_size) {
        gdn_context_params p = gdn_context_default_params();
        p.n_threads = n_threads;
        p.chunk_size = chunk_size;
        if (gdn_context_create(backend, &p, &ctx_) != GDN_OK)
            throw std::runtime_error(std::string("cannot start ") + backend + ": " + gdn_last_create_error());
    }
    ~Context() { gdn_context_free(ctx_); }
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;
    gdn_context *get() const { return ctx_; }

private:
    gdn_context *ctx_ = nullptr;
};

void check(gdn_status s, gdn_context *ctx, const char *what) {
    if (s != GDN_OK) throw std::runtime_error(std::string(what) + ": " + gdn_status_string(s) + ": " + gdn_last_error(ctx));
}

gdn_tensor tokens(gdn_tensor t, int64_t begin, int64_t length) {
    if (t.data == nullptr) return t;
    t.data = static_cast<char *>(t.data) + begin * t.nb[2];
    t.ne[2] = length;
    return t;
}

gdn_tensor state_of(gdn_tensor t, int64_t n) {
    if (t.data == nullptr) return t;
    t.data = static_cast<char *>(t.data) + n * t.nb[3];
    t.ne[3] = 1;
    return t;
}

gdn_tensor slots_of(gdn_tensor t, int64_t n, int64_t N, int64_t K) {
    if (t.data == nullptr) return t;
    t.data = static_cast<char *>(t.data) + n * t.nb[3];
    t.nb[3] *= N;
    t.ne[3] = K;
    return t;
}

void call(const testkit::Case &c, testkit::TensorSet &in, testkit::TensorSet &out, gdn_context *ctx, bool per_sequence) {
    testkit::Mirror min(in, testkit::host_memory()), mout(out, testkit::host_memory());
    const gdn_problem packed = testkit::problem_of(c, min);
    const gdn_tensor d_out = min.tensor("d_out"), d_states = min.tensor("d_states");
    const gdn_tensor o = mout.tensor("out"), states = mout.tensor("states");
    const gdn_grads grads = testkit::grads_of(mout);
    auto run = [&](const gdn_problem &p, const gdn_tensor &o_, const gdn_tensor &st_, const gdn_tensor &dO, const gdn_tensor &dS,
                   const gdn_grads &g) {
        if (c.op == testkit::Op::Forward) check(gdn_forward(ctx, &p, &o_, &st_), ctx, "gdn_forward");
        else check(gdn_backward(ctx, &p, &dO, &dS, &g), ctx, "gdn_backward");
    };
    if (!per_sequence) return run(packed, o, states, d_out, d_states, grads);
    const int64_t N = c.sequences(), K = c.shape.K;
    for (int64_t n = 0; n < N; ++n) {
        const int64_t begin = c.cu_seqlens[n], length = c.cu_seqlens[n + 1] - begin;
        gdn_problem p = packed;
        p.cu_seqlens = gdn_tensor{};
        for (gdn_tensor *t : {&p.q, &p.k, &p.v, &p.g, &p.beta}) *t = tokens(*t, begin, length);
        p.state = state_of(p.state, n);
        const gdn_grads g{tokens(grads.q, begin, length), tokens(grads.k, begin, length), tokens(grads.v, begin, length),
                          tokens(grads.g, begin, length), tokens(grads.beta, begin, length), state_of(grads.state, n)};
        run(p, tokens(o, begin, length), slots_of(states, n, N, K), tokens(d_out, begin, length), slots_of(d_states, n, N, K), g);
    }
}

}  // namespace

testkit::TensorSet run_packed(const testkit::Case &c, const char *backend, int n_threads, int chunk_size, gdn_type type,
                              uint64_t seed) {
    Context ctx(backend, n_threads, chunk_size);
    testkit::TensorSet in = testkit::make_inputs(c, type, seed != 0 ? seed : c.seed(1));
    testkit::TensorSet out = testkit::make_outputs(c, type);
    call(c, in, out, ctx.get(), false);
    return out;
}

Outcome run_both(const testkit::Case &c, const char *backend, int n_threads, int chunk_size, gdn_type type) {
    Context ctx(backend, n_threads, chunk_size);
    testkit::TensorSet in = testkit::make_inputs(c, type, c.seed(1));
    Outcome r{testkit::make_outputs(c, type), testkit::make_outputs(c, type)};
    call(c, in, r.packed, ctx.get(), false);
    call(c, in, r.per_sequence, ctx.get(), true);
    return r;
}

std::vector<std::string> output_names(const testkit::Case &c) {
    if (c.op == testkit::Op::Forward) return {"out", "states"};
    return {"dq", "dk", "dv", "dg", "dbeta", "ds0"};
}

int64_t first_difference(const testkit::TensorSet &a, const testkit::TensorSet &b, const std::string &name) {
    const std::vector<double> x = a.read(name), y = b.read(name);
    if (x.size() != y.size()) return 0;
    for (size_t i = 0; i < x.size(); ++i)
        if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0) return static_cast<int64_t>(i);
    return -1;
}

testkit::Case packed_case(testkit::Op op, int64_t size, int64_t Hk, int64_t Hv, int64_t T, int64_t N) {
    testkit::Case c;
    c.group = "varlen";
    c.op = op;
    c.shape.Sk = c.shape.Sv = size;
    c.shape.Hk = Hk;
    c.shape.Hv = Hv;
    c.shape.T = T;
    c.pack(N);
    return c;
}

}  // namespace gdn::varlentest
