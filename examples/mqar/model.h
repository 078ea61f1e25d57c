// A small Gated DeltaNet language model for MQAR, in plain C++ around libgdn.
//
//     x = embed[token]
//     per layer:  h = rmsnorm(x)
//                 mix = h W_qkv                       packed [q | k | v] per token (conv_dim wide)
//                 c = silu(causal_conv4(mix))         lets a key see the token before it
//                 q, k = l2norm per key head of c's q and k parts;  v = c's v part
//                 beta = sigmoid(h W_b);  g = -exp(A_log) * softplus(h W_a + dt_bias)
//                 o = gdn_forward(q, k, v, g, beta)   q/k/v are strided views into the packed rows
//                 x = x + o W_out
//     logits = rmsnorm(x) W_head;  loss = cross-entropy on the query positions
//
// This is the Qwen3.5 linear-attention block without its output gate and MLP: L2-normalised q
// and k, sigmoid beta, the A_log/dt_bias decay, a grouped head map with value_heads =
// 2 * key_heads. Everything is templated on the scalar: float for training, double (with the
// op in F64 on the ref backend) for the finite-difference check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data.h"
#include "gdn/gdn.h"
#include "layers.h"
#include "parallel.h"

namespace mqar {

struct ModelConfig {
    int vocab = 64;
    int width = 64;
    int layers = 2;
    int key_heads = 2;
    int value_heads = 4;  // a multiple of key_heads; Qwen3.5 has 2 or 3 value heads per key head
    int head_dim = 16;    // Sk = Sv
    int conv_taps = 4;

    int conv_dim() const { return 2 * key_heads * head_dim + value_heads * head_dim; }
};

// Empty when the configuration is usable, else what is wrong with it.
std::string check_model(const ModelConfig &m);

template <class T>
struct Param {
    std::string name;
    std::vector<T> value, grad;
    bool decay = true;  // AdamW weight decay applies (matrices, not norms, gates or biases)
};

struct StepStats {
    double loss = 0;      // mean cross-entropy over the query positions
    double accuracy = 0;  // fraction of query positions whose argmax is the value
    int64_t scored = 0;
};

template <class T>
class Model {
public:
    Model(const ModelConfig &cfg, uint64_t seed);

    const ModelConfig &config() const { return cfg_; }
    // Threads of the dense layers (0: one per hardware thread). Results do not depend on it.
    void set_threads(int threads) { workers_.set_count(threads); }
    std::vector<Param<T> *> params();

    // Forward over a batch and the loss; when `backward`, also every parameter's gradient
    // (overwritten). `zero_op_grad` replaces the delta-net op's backward by zeros: the ablation
    // in which nothing below the op learns from the recall loss.
    StepStats run(gdn_context *ctx, const Batch &batch, bool backward, bool zero_op_grad = false);

private:
    struct Layer {
        Param<T> norm, qkv, conv, a, b, A_log, dt_bias, out;
    };
    // Activations of one layer, kept for the backward.
    struct LayerCache {
        std::vector<T> x_in, h, inv_rms, mix, conv_z, packed, qk_norms, a, b, g, beta, o;
    };

    void forward_layer(gdn_context *ctx, Layer &L, LayerCache &c, const std::vector<T> &x_in, std::vector<T> &x_out);
    void backward_layer(gdn_context *ctx, Layer &L, LayerCache &c, std::vector<T> &dx, bool zero_op_grad);
    gdn_problem problem(LayerCache &c) const;
    void linear(const T *X, const T *W, T *Y, int64_t in, int64_t out);
    void linear_grads(const T *X, const T *W, const T *dY, T *dW, T *dX, int64_t in, int64_t out);

    ModelConfig cfg_;
    Workers workers_;
    int64_t sequences_ = 0, seq_len_ = 0, rows_ = 0;
    Param<T> embed_, final_norm_, head_;
    std::vector<Layer> layers_;
    std::vector<LayerCache> cache_;
    std::vector<T> x_final_, h_final_, inv_rms_final_, logits_, dlogits_;
    // Backward scratch.
    std::vector<T> dx_, dh_, dmix_, dpacked_, dconv_z_, do_, dg_, dbeta_, da_, db_, wt_;
};

}  // namespace mqar
