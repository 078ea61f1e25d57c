#include "model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "rng.h"

namespace mqar {

std::string check_model(const ModelConfig &m) {
    if (m.vocab < 2 || m.width < 1 || m.layers < 1 || m.key_heads < 1 || m.head_dim < 1 || m.conv_taps < 1)
        return "vocab >= 2, width, layers, key_heads, head_dim and conv_taps >= 1 are required";
    if (m.value_heads < m.key_heads || m.value_heads % m.key_heads != 0)
        return "value_heads = " + std::to_string(m.value_heads) + " must be a multiple of key_heads = " +
               std::to_string(m.key_heads);
    return "";
}

namespace {

template <class T>
constexpr gdn_type gdn_type_of() {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "float or double");
    return sizeof(T) == 4 ? GDN_TYPE_F32 : GDN_TYPE_F64;
}

// A gdn_tensor over `data` with element counts ne and element strides st (st[0] is 1).
template <class T>
gdn_tensor view(T *data, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, int64_t st1, int64_t st2, int64_t st3) {
    gdn_tensor t{};
    t.data = data;
    t.type = gdn_type_of<T>();
    const int64_t ne[4] = {ne0, ne1, ne2, ne3}, st[4] = {1, st1, st2, st3};
    for (int i = 0; i < 4; ++i) {
        t.ne[i] = ne[i];
        t.nb[i] = st[i] * static_cast<int64_t>(sizeof(T));
    }
    return t;
}

void check(gdn_context *ctx, gdn_status s, const char *what) {
    if (s != GDN_OK)
        throw std::runtime_error(std::string(what) + ": " + gdn_status_string(s) + ": " + gdn_last_error(ctx));
}

template <class T>
Param<T> make_param(const std::string &name, size_t n, bool decay) {
    Param<T> p;
    p.name = name;
    p.value.assign(n, T(0));
    p.grad.assign(n, T(0));
    p.decay = decay;
    return p;
}

template <class T>
void fill_normal(Param<T> &p, double stddev, Rng &rng) {
    for (T &w : p.value) w = static_cast<T>(stddev * rng.normal());
}

template <class T>
void fill_uniform(Param<T> &p, double lo, double hi, Rng &rng) {
    for (T &w : p.value) w = static_cast<T>(rng.uniform(lo, hi));
}

template <class T>
void fill(Param<T> &p, T value) {
    std::fill(p.value.begin(), p.value.end(), value);
}

constexpr double kNormEps = 1e-6;
// Multiply-adds below which a range is not worth a thread.
constexpr int64_t kGrainFlops = 1 << 16;

}  // namespace

template <class T>
Model<T>::Model(const ModelConfig &cfg, uint64_t seed) : cfg_(cfg) {
    const std::string bad = check_model(cfg);
    if (!bad.empty()) throw std::invalid_argument(bad);
    Rng rng(seed);
    const size_t d = cfg.width, C = cfg.conv_dim(), Hv = cfg.value_heads, V = cfg.vocab;
    const size_t value_width = Hv * cfg.head_dim;

    embed_ = make_param<T>("embed", V * d, true);
    fill_normal(embed_, 1.0, rng);
    for (int l = 0; l < cfg.layers; ++l) {
        const std::string pre = "layer" + std::to_string(l) + ".";
        Layer L;
        L.norm = make_param<T>(pre + "norm", d, false);
        fill(L.norm, T(1));
        L.qkv = make_param<T>(pre + "qkv", d * C, true);
        fill_normal(L.qkv, 1.0 / std::sqrt(double(d)), rng);
        // PyTorch's default for a depthwise Conv1d (fan_in = taps), as Qwen3.5 is initialised.
        L.conv = make_param<T>(pre + "conv", cfg.conv_taps * C, false);
        const double bound = 1.0 / std::sqrt(double(cfg.conv_taps));
        fill_uniform(L.conv, -bound, bound, rng);
        L.a = make_param<T>(pre + "a", d * Hv, true);
        fill_normal(L.a, 1.0 / std::sqrt(double(d)), rng);
        L.b = make_param<T>(pre + "b", d * Hv, true);
        fill_normal(L.b, 1.0 / std::sqrt(double(d)), rng);
        // Qwen3-Next / Mamba2 initialisation: A in [1, 16], dt in [1e-3, 1e-1] (log-uniform),
        // dt_bias = softplus^-1(dt).
        L.A_log = make_param<T>(pre + "A_log", Hv, false);
        for (T &w : L.A_log.value) w = static_cast<T>(std::log(rng.uniform(1.0, 16.0)));
        L.dt_bias = make_param<T>(pre + "dt_bias", Hv, false);
        for (T &w : L.dt_bias.value) {
            const double dt = std::exp(rng.uniform(std::log(1e-3), std::log(1e-1)));
            w = static_cast<T>(dt + std::log(-std::expm1(-dt)));
        }
        L.out = make_param<T>(pre + "out", value_width * d, true);
        fill_normal(L.out, 1.0 / std::sqrt(double(value_width) * cfg.layers), rng);
        layers_.push_back(std::move(L));
    }
    final_norm_ = make_param<T>("final_norm", d, false);
    fill(final_norm_, T(1));
    head_ = make_param<T>("head", d * V, true);
    fill_normal(head_, 1.0 / std::sqrt(double(d)), rng);
    cache_.resize(cfg.layers);
}

template <class T>
std::vector<Param<T> *> Model<T>::params() {
    std::vector<Param<T> *> ps{&embed_};
    for (Layer &L : layers_)
        for (Param<T> *p : {&L.norm, &L.qkv, &L.conv, &L.a, &L.b, &L.A_log, &L.dt_bias, &L.out}) ps.push_back(p);
    ps.push_back(&final_norm_);
    ps.push_back(&head_);
    return ps;
}

// The op's inputs: q, k and v are strided views into the packed [conv_dim] rows of every token,
// as a real model passes them; g and beta are [1, Hv, T, B].
template <class T>
gdn_problem Model<T>::problem(LayerCache &c) const {
    const int64_t S = cfg_.head_dim, Hk = cfg_.key_heads, Hv = cfg_.value_heads, C = cfg_.conv_dim();
    const int64_t Tn = seq_len_, B = sequences_;
    gdn_problem p{};
    T *packed = c.packed.data();
    p.q = view(packed, S, Hk, Tn, B, S, C, C * Tn);
    p.k = view(packed + Hk * S, S, Hk, Tn, B, S, C, C * Tn);
    p.v = view(packed + 2 * Hk * S, S, Hv, Tn, B, S, C, C * Tn);
    p.g = view(c.g.data(), 1, Hv, Tn, B, 1, Hv, Hv * Tn);
    p.beta = view(c.beta.data(), 1, Hv, Tn, B, 1, Hv, Hv * Tn);
    p.state = view<T>(nullptr, 0, 0, 0, 0, 0, 0, 0);  // zero initial state
    p.scale = 0.0f;                                   // 1/sqrt(Sk)
    p.head_map = GDN_HEAD_MAP_GROUPED;                // Hugging Face's Qwen3.5 convention
    return p;
}

// Y[rows_, out] = X W, the rows split over the workers.
template <class T>
void Model<T>::linear(const T *X, const T *W, T *Y, int64_t in, int64_t out) {
    workers_.ranges(rows_, kGrainFlops / (in * out) + 1,
                    [&](int64_t r0, int64_t r1) { linear_forward(X + r0 * in, W, Y + r0 * out, r1 - r0, in, out); });
}

// dW += X^T dY (the weight's rows split over the workers) and dX += dY W^T (the data rows split).
template <class T>
void Model<T>::linear_grads(const T *X, const T *W, const T *dY, T *dW, T *dX, int64_t in, int64_t out) {
    workers_.ranges(in, kGrainFlops / (rows_ * out) + 1,
                    [&](int64_t i0, int64_t i1) { linear_backward_weight(X, dY, dW, rows_, in, out, i0, i1); });
    transpose(W, in, out, wt_);
    workers_.ranges(rows_, kGrainFlops / (in * out) + 1, [&](int64_t r0, int64_t r1) {
        linear_backward_input(dY + r0 * out, wt_.data(), dX + r0 * in, r1 - r0, in, out);
    });
}

template <class T>
void Model<T>::forward_layer(gdn_context *ctx, Layer &L, LayerCache &c, const std::vector<T> &x_in,
                             std::vector<T> &x_out) {
    const int64_t R = rows_, d = cfg_.width, C = cfg_.conv_dim(), S = cfg_.head_dim;
    const int64_t Hk = cfg_.key_heads, Hv = cfg_.value_heads, VW = Hv * S;
    c.x_in = x_in;
    c.h.resize(R * d);
    c.inv_rms.resize(R);
    rmsnorm_forward(x_in.data(), L.norm.value.data(), c.h.data(), c.inv_rms.data(), R, d, T(kNormEps));

    c.mix.resize(R * C);
    c.conv_z.resize(R * C);
    c.packed.resize(R * C);
    linear(c.h.data(), L.qkv.value.data(), c.mix.data(), d, C);
    conv_silu_forward(c.mix.data(), L.conv.value.data(), c.conv_z.data(), c.packed.data(), sequences_, seq_len_, C,
                      int64_t(cfg_.conv_taps));
    c.qk_norms.resize(R * 2 * Hk);
    l2norm_forward(c.packed.data(), c.qk_norms.data(), R, C, 2 * Hk, S, T(kNormEps));  // q and k heads

    c.a.resize(R * Hv);
    c.b.resize(R * Hv);
    c.g.resize(R * Hv);
    c.beta.resize(R * Hv);
    linear(c.h.data(), L.a.value.data(), c.a.data(), d, Hv);
    linear(c.h.data(), L.b.value.data(), c.b.data(), d, Hv);
    gates_forward(c.a.data(), c.b.data(), L.A_log.value.data(), L.dt_bias.value.data(), c.g.data(), c.beta.data(), R,
                  Hv);

    c.o.resize(R * VW);
    const gdn_problem p = problem(c);
    const gdn_tensor o = view(c.o.data(), S, Hv, seq_len_, sequences_, S, VW, VW * seq_len_);
    check(ctx, gdn_forward(ctx, &p, &o, nullptr), "gdn_forward");

    x_out.resize(R * d);
    linear(c.o.data(), L.out.value.data(), x_out.data(), VW, d);
    for (int64_t e = 0; e < R * d; ++e) x_out[e] += x_in[e];
}

// dx holds dL/dx_out on entry and dL/dx_in on return (the residual adds the block's part).
template <class T>
void Model<T>::backward_layer(gdn_context *ctx, Layer &L, LayerCache &c, std::vector<T> &dx, bool zero_op_grad) {
    const int64_t R = rows_, d = cfg_.width, C = cfg_.conv_dim(), S = cfg_.head_dim;
    const int64_t Hk = cfg_.key_heads, Hv = cfg_.value_heads, VW = Hv * S;

    do_.assign(R * VW, T(0));
    linear_grads(c.o.data(), L.out.value.data(), dx.data(), L.out.grad.data(), do_.data(), VW, d);

    dpacked_.resize(R * C);
    dg_.resize(R * Hv);
    dbeta_.resize(R * Hv);
    if (zero_op_grad) {
        std::fill(dpacked_.begin(), dpacked_.end(), T(0));
        std::fill(dg_.begin(), dg_.end(), T(0));
        std::fill(dbeta_.begin(), dbeta_.end(), T(0));
    } else {
        const gdn_problem p = problem(c);
        const gdn_tensor d_out = view(do_.data(), S, Hv, seq_len_, sequences_, S, VW, VW * seq_len_);
        gdn_grads gr{};
        T *dp = dpacked_.data();
        gr.q = view(dp, S, Hk, seq_len_, sequences_, S, C, C * seq_len_);
        gr.k = view(dp + Hk * S, S, Hk, seq_len_, sequences_, S, C, C * seq_len_);
        gr.v = view(dp + 2 * Hk * S, S, Hv, seq_len_, sequences_, S, C, C * seq_len_);
        gr.g = view(dg_.data(), 1, Hv, seq_len_, sequences_, 1, Hv, Hv * seq_len_);
        gr.beta = view(dbeta_.data(), 1, Hv, seq_len_, sequences_, 1, Hv, Hv * seq_len_);
        gr.state = view<T>(nullptr, 0, 0, 0, 0, 0, 0, 0);
        check(ctx, gdn_backward(ctx, &p, &d_out, nullptr, &gr), "gdn_backward");
    }

    // Gates.
    da_.resize(R * Hv);
    db_.resize(R * Hv);
    gates_backward(c.a.data(), L.A_log.value.data(), L.dt_bias.value.data(), c.g.data(), c.beta.data(), dg_.data(),
                   dbeta_.data(), da_.data(), db_.data(), L.A_log.grad.data(), L.dt_bias.grad.data(), R, Hv);
    dh_.assign(R * d, T(0));
    linear_grads(c.h.data(), L.a.value.data(), da_.data(), L.a.grad.data(), dh_.data(), d, Hv);
    linear_grads(c.h.data(), L.b.value.data(), db_.data(), L.b.grad.data(), dh_.data(), d, Hv);

    // q/k normalisation, conv + SiLU, the packed projection.
    l2norm_backward(c.packed.data(), c.qk_norms.data(), dpacked_.data(), R, C, 2 * Hk, S);
    dconv_z_.resize(R * C);
    dmix_.assign(R * C, T(0));
    conv_silu_backward(c.mix.data(), L.conv.value.data(), c.conv_z.data(), dpacked_.data(), dconv_z_.data(),
                       dmix_.data(), L.conv.grad.data(), sequences_, seq_len_, C, int64_t(cfg_.conv_taps));
    linear_grads(c.h.data(), L.qkv.value.data(), dmix_.data(), L.qkv.grad.data(), dh_.data(), d, C);

    rmsnorm_backward(c.x_in.data(), L.norm.value.data(), c.inv_rms.data(), dh_.data(), dx.data(), L.norm.grad.data(), R,
                     d);
}

template <class T>
StepStats Model<T>::run(gdn_context *ctx, const Batch &batch, bool backward, bool zero_op_grad) {
    sequences_ = batch.sequences;
    seq_len_ = batch.seq_len;
    rows_ = sequences_ * seq_len_;
    const int64_t R = rows_, d = cfg_.width, V = cfg_.vocab;

    std::vector<T> x(R * d), x_next;
    for (int64_t r = 0; r < R; ++r) {
        const int32_t tok = batch.tokens[r];
        if (tok < 0 || tok >= V) throw std::invalid_argument("token " + std::to_string(tok) + " is outside the vocabulary");
        std::copy_n(embed_.value.data() + tok * d, d, x.data() + r * d);
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
        forward_layer(ctx, layers_[l], cache_[l], x, x_next);
        x.swap(x_next);
    }
    x_final_ = x;
    h_final_.resize(R * d);
    inv_rms_final_.resize(R);
    rmsnorm_forward(x_final_.data(), final_norm_.value.data(), h_final_.data(), inv_rms_final_.data(), R, d,
                    T(kNormEps));
    logits_.resize(R * V);
    linear(h_final_.data(), head_.value.data(), logits_.data(), d, V);

    int64_t scored = 0;
    for (int32_t t : batch.targets) scored += t >= 0 ? 1 : 0;
    if (scored == 0) throw std::invalid_argument("the batch has no query positions");
    if (backward) dlogits_.resize(R * V);
    const LossStats ls = cross_entropy(logits_.data(), batch.targets.data(), backward ? dlogits_.data() : nullptr, R, V,
                                       scored);
    StepStats st;
    st.loss = ls.loss_sum / double(scored);
    st.accuracy = double(ls.correct) / double(scored);
    st.scored = scored;
    if (!backward) return st;

    for (Param<T> *p : params()) std::fill(p->grad.begin(), p->grad.end(), T(0));
    dh_.assign(R * d, T(0));
    linear_grads(h_final_.data(), head_.value.data(), dlogits_.data(), head_.grad.data(), dh_.data(), d, V);
    dx_.assign(R * d, T(0));
    rmsnorm_backward(x_final_.data(), final_norm_.value.data(), inv_rms_final_.data(), dh_.data(), dx_.data(),
                     final_norm_.grad.data(), R, d);
    for (size_t l = layers_.size(); l-- > 0;) backward_layer(ctx, layers_[l], cache_[l], dx_, zero_op_grad);
    for (int64_t r = 0; r < R; ++r) {
        T *de = embed_.grad.data() + batch.tokens[r] * d;
        const T *g = dx_.data() + r * d;
        for (int64_t i = 0; i < d; ++i) de[i] += g[i];
    }
    return st;
}

template class Model<float>;
template class Model<double>;

}  // namespace mqar
