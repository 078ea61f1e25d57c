// Finite differences of the ref forward in F64 against a backward's gradients: the heart of
// gdn-ops grad. Only the units (sequence, value head) that read a perturbed element are
// re-run, each as a one-unit problem of strided views into the full tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "case.h"
#include "tensor_set.h"

namespace gdn::testkit {

struct GradientCheck {
    std::string tensor;       // dq, dk, dv, dg, dbeta, ds0
    int samples = 0;
    double worst = 0;         // max |analytic - fd| / (|fd| + scale)
    double analytic = 0, numeric = 0;  // at the worst element
    std::string describe() const;
};

// Compares `grads` (a backward's outputs for case c, any element type) with 4-point central
// differences of the loss of SPEC section 2, on the inputs make_inputs(c, ..., seed) holds.
// `samples` elements per tensor are drawn at random from `seed`; all of them when the tensor
// has no more than `samples`. ref_ctx must be a ref context.
std::vector<GradientCheck> check_gradients(const Case &c, uint64_t seed, const TensorSet &grads, gdn_context *ref_ctx,
                                           int samples);

}  // namespace gdn::testkit
