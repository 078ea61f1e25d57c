// gdn's ggml custom ops (integrations/ggml) against the pip-installed upstream ggml and against
// gdn's own C API: the drop-in forward agrees with ggml_gated_delta_net on every harness case
// ggml takes; forward and backward give exactly the C API's bits for 1, 2 and 3 ggml threads;
// the packed gradient offsets; clear refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ggml-cpu.h>
#include <ggml.h>

#include "case.h"
#include "gdn/gdn_ggml.h"
#include "metrics.h"
#include "problem_data.h"
#include "runner.h"
#include "thresholds.h"

namespace {

using namespace gdn::testkit;

// ---- the drop-in against upstream, on the harness's cases -------------------------------------

TEST(GgmlDropIn, AgreesWithUpstreamOnEveryHarnessCaseItTakes) {
    BackendSession upstream({"GGML", "ggml", 0}, 2), dropin({"GGML-GDN", "ggml-gdn", 0}, 2);
    ASSERT_TRUE(upstream.ok()) << upstream.error();
    ASSERT_TRUE(dropin.ok()) << dropin.error();
    int compared = 0;
    for (const Case &c : default_cases()) {
        if (c.op != Op::Forward) continue;
        SCOPED_TRACE(c.label());
        TensorSet inputs = make_inputs(c, GDN_TYPE_F32, c.seed(0));
        std::string why;
        if (check_case(c, inputs, upstream, why) != GDN_OK) {
            // What upstream refuses is a real limit of its op, not of the drop-in's dry run.
            EXPECT_TRUE(why.find("Sk == Sv") != std::string::npos || why.find("tiled") != std::string::npos ||
                        why.find("cu_seqlens") != std::string::npos || why.find("value-major") != std::string::npos ||
                        why.find("state_indices") != std::string::npos || why.find("takes F32 tensors") != std::string::npos)
                << why;
            continue;
        }
        RunResult a = run_case(c, inputs, upstream), b = run_case(c, inputs, dropin);
        ASSERT_EQ(a.status, GDN_OK) << a.error;
        ASSERT_EQ(b.status, GDN_OK) << b.error;
        EXPECT_EQ(b.stray_write, "");
        for (const char *name : {"out", "states"}) {
            const Comparison cmp = compare(b.outputs.read(name), a.outputs.read(name));
            const Threshold thr = test_threshold(c, name);
            EXPECT_TRUE(cmp.finite && cmp.nmse <= thr.nmse && cmp.max_rel <= thr.max_rel) << name << ": " << cmp.describe();
        }
        ++compared;
    }
    EXPECT_GE(compared, 40);  // the seed, model and edge groups, not a handful
}

// ---- ggml graphs built by hand ------------------------------------------------------------------

struct Shape {
    int64_t Sk, Sv, Hk, Hv, T, B, Bq, K;
    bool kda;
};

std::string describe(const Shape &s) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "Sk=%lld Sv=%lld Hk=%lld Hv=%lld T=%lld B=%lld Bq=%lld K=%lld kda=%d", (long long)s.Sk,
                  (long long)s.Sv, (long long)s.Hk, (long long)s.Hv, (long long)s.T, (long long)s.B, (long long)s.Bq,
                  (long long)s.K, s.kda);
    return buf;
}

void fill(ggml_tensor *t, std::mt19937 &rng, double lo, double hi) {
    std::uniform_real_distribution<float> u(static_cast<float>(lo), static_cast<float>(hi));
    float *d = static_cast<float *>(t->data);
    for (int64_t i = 0; i < ggml_nelements(t); ++i) d[i] = u(rng);
}

// The inputs of one problem, contiguous, in an allocating ggml context.
struct Inputs {
    Shape s;
    ggml_context *ctx;
    ggml_tensor *q, *k, *v, *g, *beta, *state, *d_result;

    explicit Inputs(const Shape &shape) : s(shape) {
        ctx = ggml_init({size_t(64) << 20, nullptr, false});
        q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.Sk, s.Hk, s.T, s.Bq);
        k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.Sk, s.Hk, s.T, s.Bq);
        v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.Sv, s.Hv, s.T, s.B);
        g = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.kda ? s.Sk : 1, s.Hv, s.T, s.B);
        beta = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, s.Hv, s.T, s.B);
        state = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.Sk, s.Sv, s.Hv, s.B);
        d_result = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, s.Sv * s.Hv, s.T * s.B + s.K * s.Sk * s.B);
        std::mt19937 rng(static_cast<unsigned>(s.Sk * 131 + s.T * 7 + s.K + s.kda));
        const double r = 1.0 / std::sqrt(static_cast<double>(s.Sk));
        fill(q, rng, -r, r);
        fill(k, rng, -r, r);
        fill(v, rng, -1, 1);
        fill(g, rng, -0.3, -0.01);
        fill(beta, rng, 0, 1);
        fill(state, rng, -0.5, 0.5);
        fill(d_result, rng, -1, 1);
    }
    ~Inputs() { ggml_free(ctx); }

    static gdn_tensor view(const ggml_tensor *t) {
        gdn_tensor r{};
        EXPECT_EQ(gdn_ggml_tensor(t, &r, nullptr, 0), GDN_OK);
        return r;
    }
    gdn_problem problem() const {
        gdn_problem p{};
        p.q = view(q), p.k = view(k), p.v = view(v), p.g = view(g), p.beta = view(beta), p.state = view(state);
        p.scale = 1.0f / std::sqrt(static_cast<float>(s.Sv));  // ggml's
        p.head_map = GDN_HEAD_MAP_TILED;
        return p;
    }
};

// Computes `node` in a graph of its own with n ggml threads; its data as floats.
std::vector<float> compute(ggml_context *ctx, ggml_tensor *node, int threads) {
    ggml_cgraph *graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, node);
    EXPECT_EQ(ggml_graph_compute_with_ctx(ctx, graph, threads), GGML_STATUS_SUCCESS);
    const float *d = static_cast<const float *>(node->data);
    return std::vector<float>(d, d + ggml_nelements(node));
}

gdn_tensor contiguous(float *data, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    gdn_tensor t{};
    t.data = data;
    t.type = GDN_TYPE_F32;
    const int64_t ne[4] = {n0, n1, n2, n3};
    int64_t stride = 4;
    for (int d = 0; d < 4; ++d) t.ne[d] = ne[d], t.nb[d] = stride, stride *= ne[d];
    return t;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const Shape kShapes[] = {
    {32, 32, 2, 6, 150, 2, 2, 1, false},   // chunked, 2 value heads per key head
    {16, 16, 2, 4, 3, 4, 2, 2, false},     // per-token forward, q/k shared by 2 sequences, 2 snapshots
    {16, 16, 1, 3, 2, 1, 1, 4, false},     // T < K: slots 2, 3 unwritten (zeroed by the drop-in)
    {16, 16, 2, 4, 3, 2, 2, 4, false},     // K = T + 1: the one slot 3 unwritten
    {24, 16, 1, 2, 64, 1, 1, 65, true},    // K = T + 1 on the chunked forward (slot 64), KDA
    {32, 16, 2, 4, 70, 2, 1, 1, true},     // Sk != Sv (beyond upstream), KDA
    {16, 16, 1, 2, 65, 3, 3, 3, true},     // KDA with snapshots
};

TEST(GgmlOps, ForwardIsTheCApiForwardForOneTwoAndThreeThreads) {
    gdn_context *cpu = nullptr;
    ASSERT_EQ(gdn_context_create("cpu", nullptr, &cpu), GDN_OK);
    for (const Shape &s : kShapes) {
        SCOPED_TRACE(describe(s));
        Inputs in(s);
        ggml_tensor *r = gdn_ggml_gated_delta_net(in.ctx, in.q, in.k, in.v, in.g, in.beta, in.state, s.K);
        ASSERT_EQ(r->ne[0], s.Sv * s.Hv);
        ASSERT_EQ(r->ne[1], s.T * s.B + s.K * s.Sk * s.B);
        std::vector<float> want(static_cast<size_t>(ggml_nelements(r)), 0.0f);  // unwritten slots: zero
        const gdn_problem p = in.problem();
        const gdn_tensor out = contiguous(want.data(), s.Sv, s.Hv, s.T, s.B);
        const gdn_tensor states = contiguous(want.data() + s.Sv * s.Hv * s.T * s.B, s.Sk, s.Sv, s.Hv, s.B * s.K);
        ASSERT_EQ(gdn_forward(cpu, &p, &out, &states), GDN_OK) << gdn_last_error(cpu);
        for (int threads : {1, 2, 3}) {
            std::memset(r->data, 0xFF, ggml_nbytes(r));  // NaN: every element must be written
            EXPECT_TRUE(same_bits(compute(in.ctx, r, threads), want)) << threads << " threads";
        }
    }
    gdn_context_free(cpu);
}

TEST(GgmlOps, BackwardIsTheCApiBackwardForOneTwoAndThreeThreads) {
    gdn_context *cpu = nullptr;
    ASSERT_EQ(gdn_context_create("cpu", nullptr, &cpu), GDN_OK);
    for (const Shape &s : kShapes) {
        SCOPED_TRACE(describe(s));
        Inputs in(s);
        ggml_tensor *packed = gdn_ggml_gated_delta_net_back(in.ctx, in.q, in.k, in.v, in.g, in.beta, in.state, in.d_result);
        const ggml_tensor *inputs[6] = {in.q, in.k, in.v, in.g, in.beta, in.state};
        int64_t total = 0;
        for (const ggml_tensor *t : inputs) total += ggml_nelements(t);
        ASSERT_EQ(ggml_nelements(packed), total);
        std::vector<float> want(static_cast<size_t>(total));
        gdn_tensor grads[6];
        for (int i = 0, offset = 0; i < 6; offset += static_cast<int>(ggml_nelements(inputs[i])), ++i) {
            EXPECT_EQ(gdn_ggml_grad_offset(packed, static_cast<gdn_ggml_grad>(i)), offset);
            const ggml_tensor *t = inputs[i];
            grads[i] = contiguous(want.data() + offset, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
        }
        const gdn_grads gg = {grads[0], grads[1], grads[2], grads[3], grads[4], grads[5]};
        const gdn_problem p = in.problem();
        float *d = static_cast<float *>(in.d_result->data);
        const gdn_tensor d_out = contiguous(d, s.Sv, s.Hv, s.T, s.B);
        const gdn_tensor d_states = contiguous(d + s.Sv * s.Hv * s.T * s.B, s.Sk, s.Sv, s.Hv, s.B * s.K);
        ASSERT_EQ(gdn_backward(cpu, &p, &d_out, &d_states, &gg), GDN_OK) << gdn_last_error(cpu);
        for (int threads : {1, 2, 3}) {
            std::memset(packed->data, 0xFF, ggml_nbytes(packed));
            EXPECT_TRUE(same_bits(compute(in.ctx, packed, threads), want)) << threads << " threads";
        }
        // The views read the packed tensor at those offsets, in the inputs' shapes.
        ggml_tensor *dv = gdn_ggml_grad_view(in.ctx, packed, GDN_GGML_GRAD_V);
        EXPECT_TRUE(ggml_are_same_shape(dv, in.v));
        EXPECT_EQ(static_cast<const float *>(dv->data), static_cast<const float *>(packed->data) + ggml_nelements(in.q) * 2);
    }
    gdn_context_free(cpu);
}

TEST(GgmlOps, DropInPackingIsUpstreamsIncludingSnapshots) {
    // Upstream and the drop-in side by side in one graph on the same ggml tensors (Sk == Sv,
    // T >= K so that every slot is written by both).
    const Shape s{16, 16, 2, 4, 9, 2, 1, 3, false};
    Inputs in(s);
    ggml_tensor *a = ggml_gated_delta_net(in.ctx, in.q, in.k, in.v, in.g, in.beta, in.state, s.K);
    ggml_tensor *b = gdn_ggml_gated_delta_net(in.ctx, in.q, in.k, in.v, in.g, in.beta, in.state, s.K);
    ASSERT_TRUE(ggml_are_same_shape(a, b));
    const std::vector<float> ra = compute(in.ctx, a, 2), rb = compute(in.ctx, b, 2);
    double err = 0, ref = 0;
    for (size_t i = 0; i < ra.size(); ++i) err += (ra[i] - rb[i]) * double(ra[i] - rb[i]), ref += ra[i] * double(ra[i]);
    EXPECT_LT(err / ref, 1e-12);
    // Each part separately, so that a swapped or shifted block cannot hide in the whole.
    const size_t o = static_cast<size_t>(s.Sv * s.Hv * s.T * s.B), slot = static_cast<size_t>(s.Sk * s.Sv * s.Hv * s.B);
    for (size_t begin : {size_t(0), o, o + slot, o + 2 * slot}) {
        const size_t end = begin == 0 ? o : begin + slot;
        double e = 0, r = 0;
        for (size_t i = begin; i < end; ++i) e += (ra[i] - rb[i]) * double(ra[i] - rb[i]), r += ra[i] * double(ra[i]);
        EXPECT_LT(e / r, 1e-12) << "block at " << begin;
    }
}

TEST(GgmlOps, RefusalsNameWhatIsWrong) {
    const Shape s{16, 16, 2, 4, 5, 2, 2, 1, false};
    Inputs in(s);
    char why[512];
    EXPECT_EQ(gdn_ggml_check_forward(in.q, in.k, in.v, in.g, in.beta, in.state, 1, why, sizeof why), GDN_OK) << why;
    EXPECT_EQ(gdn_ggml_check_forward(in.q, in.k, in.v, in.g, in.beta, in.state, 0, why, sizeof why), GDN_ERROR_SHAPE);
    EXPECT_NE(std::string(why).find("K = 0"), std::string::npos) << why;
    // A key head count that does not divide the value heads.
    ggml_tensor *k3 = ggml_new_tensor_4d(in.ctx, GGML_TYPE_F32, 16, 3, 5, 2);
    EXPECT_EQ(gdn_ggml_check_forward(in.q, k3, in.v, in.g, in.beta, in.state, 1, why, sizeof why), GDN_ERROR_SHAPE);
    EXPECT_NE(std::string(why).find("k.ne[1]"), std::string::npos) << why;
    // A quantized tensor.
    ggml_tensor *q8 = ggml_new_tensor_4d(in.ctx, GGML_TYPE_Q8_0, 32, 2, 5, 2);
    ggml_set_name(q8, "attn_q");
    EXPECT_EQ(gdn_ggml_check_forward(q8, in.k, in.v, in.g, in.beta, in.state, 1, why, sizeof why), GDN_ERROR_TYPE);
    EXPECT_NE(std::string(why).find("q (\"attn_q\") has ggml type q8_0"), std::string::npos) << why;
    gdn_tensor t{};
    EXPECT_EQ(gdn_ggml_tensor(q8, &t, why, sizeof why), GDN_ERROR_TYPE);
    EXPECT_EQ(gdn_ggml_tensor(nullptr, &t, why, sizeof why), GDN_ERROR_INVALID_ARGUMENT);
    // d_result of the wrong shape, or not contiguous.
    ggml_tensor *d_bad = ggml_new_tensor_2d(in.ctx, GGML_TYPE_F32, s.Sv * s.Hv, s.T * s.B + 5);
    EXPECT_EQ(gdn_ggml_check_backward(in.q, in.k, in.v, in.g, in.beta, in.state, d_bad, why, sizeof why), GDN_ERROR_SHAPE);
    EXPECT_NE(std::string(why).find("d_result"), std::string::npos) << why;
    ggml_tensor *d_t = ggml_transpose(in.ctx, in.d_result);
    EXPECT_EQ(gdn_ggml_check_backward(in.q, in.k, in.v, in.g, in.beta, in.state, d_t, why, sizeof why), GDN_ERROR_SHAPE);
    EXPECT_EQ(gdn_ggml_check_backward(in.q, in.k, in.v, in.g, in.beta, in.state, in.d_result, why, sizeof why), GDN_OK) << why;
}

}  // namespace
