#include "metrics.h"

#include <cmath>
#include <cstdio>

namespace gdn::testkit {

Comparison compare(const std::vector<double> &a, const std::vector<double> &b) {
    Comparison c;
    if (a.size() != b.size()) {
        c.finite = false;
        c.nmse = c.max_rel = INFINITY;
        return c;
    }
    double err2 = 0, ref2 = 0, act2 = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(b[i])) {
            // Non-finite in the oracle: the same non-finite value (NaN, or the same infinity) is
            // all there is to check; anything else is a different result.
            if (!(std::isnan(a[i]) ? std::isnan(b[i]) : a[i] == b[i])) c.finite = false;
            continue;
        }
        if (!std::isfinite(a[i])) c.finite = false;
        const double d = a[i] - b[i];
        err2 += d * d;
        ref2 += b[i] * b[i];
        act2 += a[i] * a[i];
    }
    c.nmse = ref2 > 0 ? err2 / ref2 : (act2 > 0 ? 1.0 : 0.0);
    const double rms = a.empty() ? 0.0 : std::sqrt(ref2 / static_cast<double>(a.size()));
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(b[i])) continue;
        const double denom = std::fabs(b[i]) + rms;
        const double r = denom > 0 ? std::fabs(a[i] - b[i]) / denom : (a[i] == b[i] ? 0.0 : INFINITY);
        if (!(r <= c.max_rel)) c.max_rel = r;  // also catches NaN
    }
    if (!c.finite) c.nmse = c.max_rel = INFINITY;
    return c;
}

std::string Comparison::describe() const {
    char buf[96];
    std::snprintf(buf, sizeof buf, "nmse=%.2e maxrel=%.2e%s", nmse, max_rel, finite ? "" : " (non-finite)");
    return buf;
}

}  // namespace gdn::testkit
