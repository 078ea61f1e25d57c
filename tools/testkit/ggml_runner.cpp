// The GGML and GGML-GDN harness backends: the forward as a ggml graph, built the way a ggml user
// builds it (the harness's tensors wrapped as ggml tensors with their strides; ggml_cont where
// upstream's op needs contiguous g, beta or state; a zero state when the case has none).
#include "ggml_runner.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include <ggml-cpu.h>
#include <ggml.h>

#include "cpu_clock.h"
#include "gdn/gdn_ggml.h"

namespace gdn::testkit {
namespace {

bool same_tensor(const gdn_tensor &a, const gdn_tensor &b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Strided copy of a contiguous F32 [ne] block into t.
void copy_out(const float *src, const gdn_tensor &t, int64_t slots3) {
    for (int64_t i3 = 0; i3 < slots3; ++i3)
        for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) {
                char *row = static_cast<char *>(t.data) + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
                std::memcpy(row, src + ((i3 * t.ne[2] + i2) * t.ne[1] + i1) * t.ne[0], sizeof(float) * t.ne[0]);
            }
}

class Runner final : public GgmlRunner {
public:
    Runner(GgmlOp op, int n_threads) : op_(op), threads_(n_threads) {
        ggml_threadpool_params params = ggml_threadpool_params_default(threads_);
        pool_ = ggml_threadpool_new(&params);
        gdn_context_params cp = gdn_context_default_params();
        cp.n_threads = 1;
        gdn_context_create("ref", &cp, &validator_);
    }
    ~Runner() override {
        release();
        ggml_threadpool_free(pool_);
        gdn_context_free(validator_);
    }

    gdn_status check(const gdn_problem &p, const gdn_tensor *out, const gdn_tensor *states, std::string &why) override {
        const gdn_status s = gdn_check_forward(validator_, &p, out, states);
        if (s != GDN_OK) {
            why = gdn_last_error(validator_);
            return s;
        }
        if (p.cu_seqlens.data != nullptr) {
            why = "ggml's gated delta net takes no packed sequences (cu_seqlens)";
            return GDN_ERROR_UNSUPPORTED;
        }
        if (p.state_indices.data != nullptr) {
            why = "ggml's gated delta net takes no state pool (state_indices)";
            return GDN_ERROR_UNSUPPORTED;
        }
        for (const gdn_tensor *t : {&p.state, states})
            if (t && t->data && t->nb[0] != static_cast<int64_t>(sizeof(float)) && t->ne[0] > 1) {
                why = "ggml's gated delta net keeps states key-major (nb[0] = element size); this case's are value-major";
                return GDN_ERROR_UNSUPPORTED;
            }
        for (const gdn_tensor *t : {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.state, out, states})
            if (t && t->data && t->type != GDN_TYPE_F32) {
                why = "ggml's gated delta net takes F32 tensors";
                return GDN_ERROR_TYPE;
            }
        if (p.head_map != GDN_HEAD_MAP_TILED) {
            why = "ggml's gated delta net maps value head h to key head h % Hk (tiled), not grouped";
            return GDN_ERROR_UNSUPPORTED;
        }
        const int64_t Sk = p.q.ne[0], Sv = p.v.ne[0];
        if (op_ == GgmlOp::Upstream && Sk != Sv) {
            why = "ggml_gated_delta_net needs Sk == Sv (Sk = " + std::to_string(Sk) + ", Sv = " + std::to_string(Sv) + ")";
            return GDN_ERROR_UNSUPPORTED;
        }
        const float scale = p.scale != 0 ? p.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(Sk)));
        const float fixed = 1.0f / std::sqrt(static_cast<float>(Sv));
        if (scale != fixed) {
            why = "ggml's scale is fixed at 1/sqrt(Sv) = " + std::to_string(fixed) + "; the case's is " + std::to_string(scale);
            return GDN_ERROR_UNSUPPORTED;
        }
        return GDN_OK;
    }

    gdn_status forward(const gdn_problem &p, const gdn_tensor *out, const gdn_tensor *states, std::string &why) override {
        const gdn_status s = check(p, out, states, why);
        if (s != GDN_OK) return s;
        const gdn_tensor none{};
        const gdn_tensor o = out ? *out : none, st = states ? *states : none;
        if (!graph_ || !same_tensor(p.q, p_.q) || !same_tensor(p.k, p_.k) || !same_tensor(p.v, p_.v) ||
            !same_tensor(p.g, p_.g) || !same_tensor(p.beta, p_.beta) || !same_tensor(p.state, p_.state) ||
            !same_tensor(o, out_) || !same_tensor(st, states_))
            build(p, o, st);
        const UnwrittenSlots unwritten = unwritten_slots(p, st);
        if (unwritten.floats > 0) std::memset(unwritten.first, 0xFF, sizeof(float) * unwritten.floats);  // NaN
        const auto start = std::chrono::steady_clock::now();  // the CPU window nests inside (mode_perf.cpp)
        const double cpu_start = process_cpu_seconds();
        const ggml_status gs = ggml_graph_compute(graph_, &plan_);
        cpu_seconds_ = process_cpu_seconds() - cpu_start;
        seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (gs != GGML_STATUS_SUCCESS) {
            why = "ggml_graph_compute failed with status " + std::to_string(static_cast<int>(gs));
            return GDN_ERROR_BACKEND;
        }
        for (int64_t i = 0; i < unwritten.floats; ++i)
            if (unwritten.first[i] != 0.0f) {
                why = "gdn_ggml_gated_delta_net did not zero the snapshot slots T..K-1 that the call does not write: "
                      "float " + std::to_string(i) + " of them is " + std::to_string(unwritten.first[i]);
                return GDN_ERROR_BACKEND;
            }
        const int64_t Sv = p.v.ne[0], Hv = p.v.ne[1], T = p.v.ne[2], B = p.v.ne[3];
        const float *packed = static_cast<const float *>(result_->data);
        if (o.data) copy_out(packed, o, o.ne[3]);
        if (st.data) copy_out(packed + Sv * Hv * T * B, st, std::min(T, st.ne[3] / B) * B);  // written slots only
        return GDN_OK;
    }

    double last_compute_seconds() const override { return seconds_; }
    double last_compute_cpu_seconds() const override { return cpu_seconds_; }

private:
    // The drop-in zeroes the packed result's slots T..K-1 (docs/GGML.md; upstream leaves them
    // undefined, and the harness's outputs take only the written slots): where they are, so that
    // forward poisons them before each run and checks them after it. None for upstream or K <= T.
    struct UnwrittenSlots {
        float *first = nullptr;
        int64_t floats = 0;
    };
    UnwrittenSlots unwritten_slots(const gdn_problem &p, const gdn_tensor &st) const {
        const int64_t Sk = p.q.ne[0], Sv = p.v.ne[0], Hv = p.v.ne[1], T = p.v.ne[2], B = p.v.ne[3];
        const int64_t K = st.data ? st.ne[3] / B : 1, slot = Sk * Sv * Hv * B;
        if (op_ != GgmlOp::Gdn || K <= T) return {};
        return {static_cast<float *>(result_->data) + Sv * Hv * T * B + T * slot, (K - T) * slot};
    }

    void release() {
        if (meta_) ggml_free(meta_);
        if (ctx_) ggml_free(ctx_);
        meta_ = ctx_ = nullptr;
        graph_ = nullptr;
    }

    ggml_tensor *wrap(const gdn_tensor &t) {
        ggml_tensor *r = ggml_new_tensor_4d(meta_, GGML_TYPE_F32, t.ne[0], t.ne[1], t.ne[2], t.ne[3]);
        for (int d = 0; d < 4; ++d) r->nb[d] = static_cast<size_t>(t.nb[d]);
        r->data = t.data;
        return r;
    }

    void build(const gdn_problem &p, const gdn_tensor &o, const gdn_tensor &st) {
        release();
        p_ = p;
        out_ = o;
        states_ = st;
        const int64_t Sk = p.q.ne[0], Sv = p.v.ne[0], Hv = p.v.ne[1], T = p.v.ne[2], B = p.v.ne[3];
        const int64_t K = st.data ? st.ne[3] / B : 1;
        const size_t state_bytes = sizeof(float) * Sk * Sv * Hv * B;
        const size_t result_bytes = sizeof(float) * Sv * Hv * (T * B + K * Sk * B);
        const size_t cont_bytes = sizeof(float) * (p.g.ne[0] * Hv * T * B + Hv * T * B) + state_bytes;
        meta_ = ggml_init({16 * ggml_tensor_overhead(), nullptr, true});
        ctx_ = ggml_init({64 * ggml_tensor_overhead() + ggml_graph_overhead() + result_bytes + cont_bytes + state_bytes + (1 << 20),
                          nullptr, false});
        ggml_tensor *q = wrap(p.q), *k = wrap(p.k), *v = wrap(p.v), *g = wrap(p.g), *beta = wrap(p.beta);
        ggml_tensor *state;
        if (p.state.data) state = wrap(p.state);
        else {
            state = ggml_new_tensor_4d(ctx_, GGML_TYPE_F32, Sk, Sv, Hv, B);
            std::memset(state->data, 0, state_bytes);
        }
        if (op_ == GgmlOp::Upstream) {  // its op asserts contiguous g, beta and state
            if (!ggml_is_contiguous(g)) g = ggml_cont(ctx_, g);
            if (!ggml_is_contiguous(beta)) beta = ggml_cont(ctx_, beta);
            if (!ggml_is_contiguous(state)) state = ggml_cont(ctx_, state);
            result_ = ggml_gated_delta_net(ctx_, q, k, v, g, beta, state, K);
        } else {
            result_ = gdn_ggml_gated_delta_net(ctx_, q, k, v, g, beta, state, K);
        }
        graph_ = ggml_new_graph(ctx_);
        ggml_build_forward_expand(graph_, result_);
        plan_ = ggml_graph_plan(graph_, threads_, pool_);
        work_.resize(plan_.work_size);
        plan_.work_data = work_.data();
    }

    GgmlOp op_;
    int threads_;
    ggml_threadpool *pool_ = nullptr;
    gdn_context *validator_ = nullptr;
    ggml_context *meta_ = nullptr, *ctx_ = nullptr;
    ggml_cgraph *graph_ = nullptr;
    ggml_tensor *result_ = nullptr;
    ggml_cplan plan_{};
    std::vector<uint8_t> work_;
    gdn_problem p_{};
    gdn_tensor out_{}, states_{};
    double seconds_ = 0, cpu_seconds_ = 0;
};

}  // namespace

bool ggml_runner_built() { return true; }

std::unique_ptr<GgmlRunner> make_ggml_runner(GgmlOp op, int n_threads, std::string &) {
    const int threads = n_threads > 0 ? n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::make_unique<Runner>(op, threads);
}

}  // namespace gdn::testkit
