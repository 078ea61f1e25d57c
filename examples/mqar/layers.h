// The model's own dense layers and their gradients, written plainly on row-major arrays of
// `rows` rows (one row per token). Every backward *adds* into its gradient outputs, so a
// tensor read by several layers collects all of its gradient.
//
// Loop orders keep the innermost loop a contiguous multiply-add over one row (an axpy), which
// the compiler vectorises without reassociating a sum; results are therefore the same on every
// run.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace mqar {

// ---- linear: Y[rows, out] = X[rows, in] W[in, out] (W stored input-major, no bias) ----

template <class T>
void linear_forward(const T *X, const T *W, T *Y, int64_t rows, int64_t in, int64_t out) {
    for (int64_t r = 0; r < rows; ++r) {
        T *y = Y + r * out;
        for (int64_t o = 0; o < out; ++o) y[o] = 0;
        const T *x = X + r * in;
        for (int64_t i = 0; i < in; ++i) {
            const T xi = x[i];
            const T *w = W + i * out;
            for (int64_t o = 0; o < out; ++o) y[o] += xi * w[o];
        }
    }
}

// dW[i0:i1, :] += X[:, i0:i1]^T dY: the weight rows [i0, i1) (all of them: i0 = 0, i1 = in).
template <class T>
void linear_backward_weight(const T *X, const T *dY, T *dW, int64_t rows, int64_t in, int64_t out, int64_t i0,
                            int64_t i1) {
    for (int64_t r = 0; r < rows; ++r) {
        const T *x = X + r * in, *dy = dY + r * out;
        for (int64_t i = i0; i < i1; ++i) {
            const T xi = x[i];
            T *dw = dW + i * out;
            for (int64_t o = 0; o < out; ++o) dw[o] += xi * dy[o];
        }
    }
}

// Wt[out, in] = W[in, out]^T, for linear_backward_input.
template <class T>
void transpose(const T *W, int64_t in, int64_t out, std::vector<T> &Wt) {
    Wt.resize(static_cast<size_t>(in * out));
    for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o) Wt[o * in + i] = W[i * out + o];
}

// dX += dY W^T, given Wt = W^T (so the inner loop runs along a row).
template <class T>
void linear_backward_input(const T *dY, const T *Wt, T *dX, int64_t rows, int64_t in, int64_t out) {
    for (int64_t r = 0; r < rows; ++r) {
        const T *dy = dY + r * out;
        T *dx = dX + r * in;
        for (int64_t o = 0; o < out; ++o) {
            const T d = dy[o];
            const T *w = Wt + o * in;
            for (int64_t i = 0; i < in; ++i) dx[i] += d * w[i];
        }
    }
}

// ---- RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight ----

template <class T>
void rmsnorm_forward(const T *X, const T *weight, T *Y, T *inv_rms, int64_t rows, int64_t width, T eps) {
    for (int64_t r = 0; r < rows; ++r) {
        const T *x = X + r * width;
        T *y = Y + r * width;
        T ss = 0;
        for (int64_t i = 0; i < width; ++i) ss += x[i] * x[i];
        const T inv = T(1) / std::sqrt(ss / T(width) + eps);
        inv_rms[r] = inv;
        for (int64_t i = 0; i < width; ++i) y[i] = x[i] * inv * weight[i];
    }
}

// With u = weight * dy:  dx = inv * u - x * inv^3 * (u . x) / width;  dweight = dy * x * inv.
template <class T>
void rmsnorm_backward(const T *X, const T *weight, const T *inv_rms, const T *dY, T *dX, T *dweight, int64_t rows,
                      int64_t width) {
    for (int64_t r = 0; r < rows; ++r) {
        const T *x = X + r * width, *dy = dY + r * width;
        T *dx = dX + r * width;
        const T inv = inv_rms[r];
        T ux = 0;
        for (int64_t i = 0; i < width; ++i) ux += weight[i] * dy[i] * x[i];
        const T c = inv * inv * inv * ux / T(width);
        for (int64_t i = 0; i < width; ++i) {
            dx[i] += inv * weight[i] * dy[i] - x[i] * c;
            dweight[i] += dy[i] * x[i] * inv;
        }
    }
}

// ---- causal depthwise conv over time, then SiLU (Qwen3.5's conv1d on the packed q/k/v) ----
// X, Z, Y are [sequences][T][channels]; weight is [taps][channels], tap taps-1 reading the
// current token, tap 0 the token taps-1 before it (zero before the sequence starts).

template <class T>
T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }

template <class T>
void conv_silu_forward(const T *X, const T *weight, T *Z, T *Y, int64_t sequences, int64_t T_len, int64_t channels,
                       int64_t taps) {
    for (int64_t s = 0; s < sequences; ++s)
        for (int64_t t = 0; t < T_len; ++t) {
            T *z = Z + (s * T_len + t) * channels;
            for (int64_t c = 0; c < channels; ++c) z[c] = 0;
            for (int64_t j = 0; j < taps; ++j) {
                const int64_t src = t - (taps - 1) + j;
                if (src < 0) continue;
                const T *x = X + (s * T_len + src) * channels, *w = weight + j * channels;
                for (int64_t c = 0; c < channels; ++c) z[c] += w[c] * x[c];
            }
            T *y = Y + (s * T_len + t) * channels;
            for (int64_t c = 0; c < channels; ++c) y[c] = z[c] * sigmoid(z[c]);
        }
}

// silu'(z) = s (1 + z (1 - s)), s = sigmoid(z). dZ is scratch of the size of Z.
template <class T>
void conv_silu_backward(const T *X, const T *weight, const T *Z, const T *dY, T *dZ, T *dX, T *dweight,
                        int64_t sequences, int64_t T_len, int64_t channels, int64_t taps) {
    const int64_t n = sequences * T_len * channels;
    for (int64_t e = 0; e < n; ++e) {
        const T s = sigmoid(Z[e]);
        dZ[e] = dY[e] * s * (T(1) + Z[e] * (T(1) - s));
    }
    for (int64_t s = 0; s < sequences; ++s)
        for (int64_t t = 0; t < T_len; ++t) {
            const T *dz = dZ + (s * T_len + t) * channels;
            for (int64_t j = 0; j < taps; ++j) {
                const int64_t src = t - (taps - 1) + j;
                if (src < 0) continue;
                const T *x = X + (s * T_len + src) * channels, *w = weight + j * channels;
                T *dx = dX + (s * T_len + src) * channels, *dw = dweight + j * channels;
                for (int64_t c = 0; c < channels; ++c) {
                    dx[c] += w[c] * dz[c];
                    dw[c] += x[c] * dz[c];
                }
            }
        }
}

// ---- L2 normalisation of `heads` segments of `size` elements, in place, in rows of `stride` ----
// y = x / n with n = sqrt(x . x + eps) (FLA's l2norm, applied to q and k in Qwen3.5).

template <class T>
void l2norm_forward(T *X, T *norms, int64_t rows, int64_t stride, int64_t heads, int64_t size, T eps) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
            T *x = X + r * stride + h * size;
            T ss = 0;
            for (int64_t i = 0; i < size; ++i) ss += x[i] * x[i];
            const T n = std::sqrt(ss + eps);
            norms[r * heads + h] = n;
            for (int64_t i = 0; i < size; ++i) x[i] /= n;
        }
}

// dx = (dy - y (y . dy)) / n, in place on dY (Y is the normalised output).
template <class T>
void l2norm_backward(const T *Y, const T *norms, T *dY, int64_t rows, int64_t stride, int64_t heads, int64_t size) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
            const T *y = Y + r * stride + h * size;
            T *dy = dY + r * stride + h * size;
            T yd = 0;
            for (int64_t i = 0; i < size; ++i) yd += y[i] * dy[i];
            const T n = norms[r * heads + h];
            for (int64_t i = 0; i < size; ++i) dy[i] = (dy[i] - y[i] * yd) / n;
        }
}

// ---- the gates of Qwen3.5: beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias) ----

template <class T>
T softplus(T x) { return x > T(20) ? x : std::log1p(std::exp(x)); }

// a, b: [rows, heads] raw projections. Writes beta and g, [rows, heads].
template <class T>
void gates_forward(const T *a, const T *b, const T *A_log, const T *dt_bias, T *g, T *beta, int64_t rows,
                   int64_t heads) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
            const int64_t e = r * heads + h;
            beta[e] = sigmoid(b[e]);
            g[e] = -std::exp(A_log[h]) * softplus(a[e] + dt_bias[h]);
        }
}

// Overwrites da, db; adds into dA_log, ddt_bias. dg/dA_log = g, dg/da = -exp(A_log) sigmoid(a + dt_bias).
template <class T>
void gates_backward(const T *a, const T *A_log, const T *dt_bias, const T *g, const T *beta, const T *dg,
                    const T *dbeta, T *da, T *db, T *dA_log, T *ddt_bias, int64_t rows, int64_t heads) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
            const int64_t e = r * heads + h;
            db[e] = dbeta[e] * beta[e] * (T(1) - beta[e]);
            da[e] = dg[e] * -std::exp(A_log[h]) * sigmoid(a[e] + dt_bias[h]);
            dA_log[h] += dg[e] * g[e];
            ddt_bias[h] += da[e];
        }
}

// ---- softmax cross-entropy on the rows that have a target ----

struct LossStats {
    double loss_sum = 0;  // sum of -log p(target) over scored rows
    int64_t scored = 0, correct = 0;
};

// Overwrites dlogits with d(mean loss)/dlogits (zero on rows without a target) when dlogits is
// not null. `normaliser` is the number of scored rows of the whole batch.
template <class T>
LossStats cross_entropy(const T *logits, const int32_t *targets, T *dlogits, int64_t rows, int64_t classes,
                        int64_t normaliser) {
    LossStats st;
    for (int64_t r = 0; r < rows; ++r) {
        const T *z = logits + r * classes;
        T *dz = dlogits ? dlogits + r * classes : nullptr;
        const int32_t target = targets[r];
        if (target < 0) {
            if (dz)
                for (int64_t c = 0; c < classes; ++c) dz[c] = 0;
            continue;
        }
        int64_t best = 0;
        for (int64_t c = 1; c < classes; ++c)
            if (z[c] > z[best]) best = c;
        T sum = 0;
        for (int64_t c = 0; c < classes; ++c) sum += std::exp(z[c] - z[best]);
        const T log_sum = std::log(sum) + z[best];
        st.loss_sum += static_cast<double>(log_sum - z[target]);
        st.scored += 1;
        st.correct += best == target ? 1 : 0;
        if (dz) {
            for (int64_t c = 0; c < classes; ++c) dz[c] = std::exp(z[c] - log_sum) / T(normaliser);
            dz[target] -= T(1) / T(normaliser);
        }
    }
    return st;
}

}  // namespace mqar
