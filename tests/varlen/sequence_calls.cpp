#include "sequence_calls.h"

#include <cstring>
#include <stdexcept>

#include "memory.h"
#include "problem_data.h"
#include "sequence_views.h"

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

void call(const testkit::Case &c, testkit::TensorSet &in, testkit::TensorSet &out, gdn_context *ctx, bool per_sequence) {
    testkit::Mirror min(in, testkit::host_memory()), mout(out, testkit::host_memory());
    const testkit::CallTensors packed = testkit::call_tensors(c, min, mout);
    auto run = [&](const testkit::CallTensors &t) {
        if (c.op == testkit::Op::Forward) check(gdn_forward(ctx, &t.problem, &t.out, &t.states), ctx, "gdn_forward");
        else check(gdn_backward(ctx, &t.problem, &t.d_out, &t.d_states, &t.grads), ctx, "gdn_backward");
    };
    if (!per_sequence) return run(packed);
    for (int64_t n = 0; n < c.sequences(); ++n) run(testkit::sequence_views(c, packed, n));
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
