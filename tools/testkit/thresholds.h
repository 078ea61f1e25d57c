// Pass thresholds of gdn-ops test and grad, per case, with the reasoning in thresholds.cpp.
#pragma once

#include <string>

#include "case.h"

namespace gdn::testkit {

struct Threshold {
    double nmse;     // test: sum((a-b)^2)/sum(b^2) of a backend against ref
    double max_rel;  // test: max |a-b| / (|b| + rms(b))
};

// Test mode: an F32 backend against ref (ref accumulates in double and rounds once to F32).
Threshold test_threshold(const Case &c, const std::string &tensor);

// Grad mode: worst |analytic - fd| / (|fd| + scale) over the sampled elements, for a backend
// computing in `type` (F64 for ref, F32 for the others).
double grad_threshold(const Case &c, gdn_type type);

}  // namespace gdn::testkit
