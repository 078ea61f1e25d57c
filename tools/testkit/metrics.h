// How far a backend's tensor is from the reference: the numbers gdn-ops test prints.
#pragma once

#include <string>
#include <vector>

namespace gdn::testkit {

struct Comparison {
    double nmse = 0;        // sum((a-b)^2) / sum(b^2); sum(a^2)-relative when b is all zero
    double max_rel = 0;     // max |a-b| / (|b| + rms(b)): worst element, stable where b is near 0
    bool finite = true;     // no NaN or Inf in a where b is finite
    std::string describe() const;
};

Comparison compare(const std::vector<double> &actual, const std::vector<double> &expected);

}  // namespace gdn::testkit
