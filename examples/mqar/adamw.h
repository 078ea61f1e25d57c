// AdamW (decoupled weight decay) with global-norm gradient clipping.
#pragma once

#include <cmath>
#include <vector>

#include "model.h"

namespace mqar {

struct AdamWConfig {
    double beta1 = 0.9, beta2 = 0.99, eps = 1e-8;
    double weight_decay = 0.01;
    double clip_norm = 1.0;  // 0: no clipping
};

template <class T>
class AdamW {
public:
    AdamW(const std::vector<Param<T> *> &params, const AdamWConfig &cfg) : params_(params), cfg_(cfg) {
        for (Param<T> *p : params_) {
            m_.emplace_back(p->value.size(), 0.0);
            v_.emplace_back(p->value.size(), 0.0);
        }
    }

    // Global L2 norm of the gradients before clipping.
    double grad_norm() const {
        double ss = 0;
        for (const Param<T> *p : params_)
            for (T g : p->grad) ss += double(g) * double(g);
        return std::sqrt(ss);
    }

    // One update at learning rate lr; returns the gradient norm before clipping.
    double step(double lr) {
        ++t_;
        const double norm = grad_norm();
        const double clip = (cfg_.clip_norm > 0 && norm > cfg_.clip_norm) ? cfg_.clip_norm / norm : 1.0;
        const double c1 = 1.0 - std::pow(cfg_.beta1, double(t_)), c2 = 1.0 - std::pow(cfg_.beta2, double(t_));
        for (size_t k = 0; k < params_.size(); ++k) {
            Param<T> &p = *params_[k];
            std::vector<double> &m = m_[k], &v = v_[k];
            const double decay = p.decay ? cfg_.weight_decay : 0.0;
            for (size_t i = 0; i < p.value.size(); ++i) {
                const double g = double(p.grad[i]) * clip;
                m[i] = cfg_.beta1 * m[i] + (1 - cfg_.beta1) * g;
                v[i] = cfg_.beta2 * v[i] + (1 - cfg_.beta2) * g * g;
                const double update = (m[i] / c1) / (std::sqrt(v[i] / c2) + cfg_.eps) + decay * double(p.value[i]);
                p.value[i] = static_cast<T>(double(p.value[i]) - lr * update);
            }
        }
        return norm;
    }

private:
    std::vector<Param<T> *> params_;
    AdamWConfig cfg_;
    std::vector<std::vector<double>> m_, v_;
    long t_ = 0;
};

}  // namespace mqar
