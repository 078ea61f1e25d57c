// Why these numbers.
//
// F32 rounds each operation to u = 2^-24 = 6e-8. A value built from n roundings with random
// signs carries a relative error of about sqrt(n) u. A chunked output is a dot product of
// length Sk over a state that went through a chunk of up to C = 64 rank-C updates per chunk step:
// n ~ Sk * C = 8192 at the 27B shape, sqrt(n) u ~ 5e-6, an NMSE of ~3e-11. The forward limit is
// 3x that estimate; the backward gets 10x more for its longer chains (the dS carry, the
// triangular solve and its adjoint, and the decay gradient dg, a sum whose terms cancel). The
// cpu backend measures at most 9e-14 (forward) and 3e-12 (backward) over every default case,
// so the limits are not tight against it; they are what F32 arithmetic can promise. max_rel,
// measured against |b| + rms(b), gets 1e-4: twenty times the per-element estimate (the cpu
// backend measures at most 4e-6), far below what an indexing or math bug produces (NMSE and
// max_rel ~1).
//
// Mixed-sign per-channel gates make the state grow as exp(sum g) on some channels: the problem
// itself is ill-conditioned there (errors are amplified by the same factor as the values), so
// those cases get 100x more room on the NMSE and 10x on max_rel. Nothing else is loosened.
//
// Narrow cases (BF16 / F16 tensors, or precision=bf16) are held to ref in F64 on the same
// converted inputs (every BF16 and F16 value is exact in F32 and F64), each output against its
// own type's unit roundoff u_T (2^-8 BF16, 2^-11 F16; 0 added for F32 outputs, whose rounding is
// already inside the F32 limits):
//
// - EXACT: the backend computes in F32 from the converted inputs (SPEC 3.1), within the F32
//   limits e (a relative error: e = sqrt(nmse limit) for the NMSE, max_rel for the worst
//   element), and rounds each output once, a relative error of at most u_T of the F32 value.
//   So |a - b| <= u_T |b| (1 + e) + e |b| element by element, and by the triangle inequality in
//   the 2-norm sqrt(nmse) <= u_T (1 + e) + e: the limits are (u_T + (1 + u_T) e)^2 and
//   u_T + (1 + u_T) e. These are worst cases, not estimates: ref itself, whose BF16 result is
//   its F64 result rounded once, can come within a hair of u_T on its largest elements.
// - BF16 products (precision=bf16): the backend may also round the operands of its chunk
//   products to bf16 (u_b = 2^-8 each), accumulating in F32. An output of the chunked forward is
//   the end of a chain of such products; counting the operands rounded on its longest chain,
//   o = q S_c + (q k^T masked) V' with V' = U - W S_c, S_c from the previous chunk's k^T V', and
//   W, U from T (beta k), T from the solve of A = beta k k^T: q, S_c, k^T, V', W, S, T, beta k and
//   A's two k operands, 10 roundings (kForwardOperandRoundings). The backward recomputes that
//   forward and runs the adjoint products of each (20). To first order each rounding perturbs
//   the result by a relative delta in [-u_b, u_b], uniformly and independently: a relative
//   error of variance R u_b^2 / 3 for R roundings, an NMSE estimate of R u_b^2 / 3 (5.1e-5
//   forward, 1.0e-4 backward) and a per-element estimate of sqrt(R / 3) u_b (7.1e-3, 1.0e-2).
//   Their limits take the F32 rules' margins over the same kind of estimate: 3x (forward) and
//   30x (backward) on the NMSE, 20x on the worst element. That part is added to e above.
//   F32 accumulation errors are those of the F32 limits, already in e. A backend that computes
//   such a case as EXACT (no native bf16 products on the host: the same bits as the EXACT call)
//   is held to the EXACT limits instead (runner.h, as_computed), so that a gradient off by a few
//   percent cannot hide in an allowance for roundings that did not happen.
//
// Grad mode compares with 4-point central differences of the ref forward in F64 (truncation
// O(h^4) ~ 1e-12, rounding ~1e-11 relative), so an F64 backward must agree to 1e-7 and an F32
// backward to 1e-4 (u sqrt(n) with room), each relative to |fd| plus the tensor's rms. No case
// is loosened: the score |a - fd| / (|fd| + rms) of an element off by a relative x is below x,
// so a limit of 1e-3 could not see a 1e-3 error at all. A narrow case's finite differences are
// of the F64 forward on its converted inputs; its gradient, rounded once to its type, gets u_T
// more (the score of a relative error x is below x), and with precision=bf16 the backward's
// per-element allowance 20 sqrt(20 / 3) u_b (0.2) more.
#include "thresholds.h"

#include <cmath>

namespace gdn::testkit {
namespace {

// What each tensor carries on top of F32's limits: its own rounding, and the bf16 products'.
struct NarrowParts {
    double rounding = 0;    // u_T of the output's type (0 for F32)
    double nmse_products = 0, rel_products = 0;
};

NarrowParts narrow_parts(const Case &c, const std::string &tensor) {
    NarrowParts parts;
    const gdn_type type = output_type(c, tensor);
    if (type == GDN_TYPE_BF16 || type == GDN_TYPE_F16) parts.rounding = unit_roundoff(type);
    if (c.precision == GDN_PRECISION_BF16) {
        const bool forward = c.op == Op::Forward;
        const int roundings = forward ? kForwardOperandRoundings : kBackwardOperandRoundings;
        const double u = unit_roundoff(GDN_TYPE_BF16);
        parts.nmse_products = (forward ? 3.0 : 30.0) * roundings * u * u / 3.0;
        parts.rel_products = 20.0 * bf16_products_rel_estimate(roundings);
    }
    return parts;
}

}  // namespace

double unit_roundoff(gdn_type type) {
    switch (type) {
        case GDN_TYPE_F64: return std::ldexp(1.0, -53);
        case GDN_TYPE_BF16: return std::ldexp(1.0, -8);
        case GDN_TYPE_F16: return std::ldexp(1.0, -11);
        default: return std::ldexp(1.0, -24);
    }
}

double bf16_products_rel_estimate(int roundings) { return std::sqrt(roundings / 3.0) * unit_roundoff(GDN_TYPE_BF16); }

gdn_type output_type(const Case &c, const std::string &tensor) {
    if (tensor == "out" || tensor == "dq" || tensor == "dk" || tensor == "dv") return c.types.x;
    if (tensor == "dg") return c.types.g;
    if (tensor == "dbeta") return c.types.beta;
    return GDN_TYPE_F32;  // states, ds0
}

Threshold test_threshold(const Case &c, const std::string &tensor) {
    Threshold t = c.op == Op::Forward ? Threshold{1e-10, 1e-4} : Threshold{1e-9, 1e-4};
    if (c.gate == Gate::Mixed) {
        t.nmse *= 100;
        t.max_rel *= 10;
    }
    if (!c.narrow()) return t;
    const NarrowParts parts = narrow_parts(c, tensor);
    const double e_norm = std::sqrt(t.nmse) + std::sqrt(parts.nmse_products);
    const double e_rel = t.max_rel + parts.rel_products;
    const double u = parts.rounding;
    const double norm = u + (1 + u) * e_norm;
    return {norm * norm, u + (1 + u) * e_rel};
}

double grad_threshold(const Case &c, gdn_type type, const std::string &tensor) {
    const double base = type == GDN_TYPE_F64 ? 1e-7 : 1e-4;
    if (!c.narrow()) return base;
    const NarrowParts parts = narrow_parts(c, tensor);
    return base + parts.rounding + (c.precision == GDN_PRECISION_BF16 ? parts.rel_products : 0.0);
}

}  // namespace gdn::testkit
