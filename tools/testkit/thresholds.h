// Pass thresholds of gdn-ops test and grad, per case and output tensor, with the reasoning in
// thresholds.cpp.
#pragma once

#include <string>

#include "case.h"

namespace gdn::testkit {

struct Threshold {
    double nmse;     // test: sum((a-b)^2)/sum(b^2) of a backend against the oracle
    double max_rel;  // test: max |a-b| / (|b| + rms(b))
};

// Unit roundoff of rounding to nearest in a type: 2^-24 F32, 2^-8 BF16 (8 significant bits),
// 2^-11 F16 (11); 2^-53 F64.
double unit_roundoff(gdn_type type);

// The element type the case gives output `tensor` (out, states, dq, dk, dv, dg, dbeta, ds0).
gdn_type output_type(const Case &c, const std::string &tensor);

// Test mode, one output tensor: an all-F32 EXACT case against ref on the same F32 inputs (ref
// accumulates in double and rounds once to F32); a narrow case (Case::narrow) against ref in F64
// on the converted inputs: the F32 limit, plus one rounding of the output to its type, plus,
// with precision=bf16, the products' bf16 operands.
Threshold test_threshold(const Case &c, const std::string &tensor);

// Grad mode: worst |analytic - fd| / (|fd| + scale) over the sampled elements of gradient
// `tensor`, for a backend computing in `type` (F64 for ref on an all-F32 case, F32 otherwise),
// the gradient written in output_type(c, tensor).
double grad_threshold(const Case &c, gdn_type type, const std::string &tensor);

// The precision=bf16 allowance alone (the parts of thresholds.cpp's derivation), for the docs
// and the harness tests: relative error per element estimated for a result whose products
// passed through `roundings` bf16 operands, and the forward's and backward's counts.
double bf16_products_rel_estimate(int roundings);
constexpr int kForwardOperandRoundings = 10;
constexpr int kBackwardOperandRoundings = 20;

}  // namespace gdn::testkit
