// The error bound of GDN_PRECISION_BF16 on the cuda backend's chunked kernels, shared by the
// emulated and the GPU tests.
//
// bf16 keeps 8 significant bits: rounding an operand errs by at most u = 2^-8 of it, a product
// of two rounded operands by 2u + u^2 (the product itself is exact in F32), and the F32 sums
// add only F32 roundoff (in any order: the tensor core's is not documented). Operands that are
// bf16 already (q, k, v as models hand them over) are not changed; the rounded ones are the
// intermediates (the state S, A, D, U, P, M, and the backward's dS, dP, dM). Each output
// element is a sum of products whose operands went through at most R = 3 such roundings in a
// chain (forward: S feeds K S, which feeds D = A (beta R), which feeds the output P D and the
// state update; the backward likewise per chunk). Independent roundings (uniform on [-u, u]
// relative: variance u^2 / 3 each, two operands per product) add in quadrature, so the relative
// mean-square error of an output is about R * 2 u^2 / 3 = 2 u^2 = 3.1e-5; the bound allows 4
// times that for the conditioning of the sums (terms of mixed sign, |sum| below sum |terms|):
// NMSE < 8 u^2 = 1.2e-4. The EXACT path meets 1e-10 (forward) and 1e-9 (backward).
#pragma once

namespace gdn_bf16_bound {

constexpr double kUnitRoundoffBf16 = 1.0 / 256.0;
constexpr double kBf16ProductsNmse = 8 * kUnitRoundoffBf16 * kUnitRoundoffBf16;

}  // namespace gdn_bf16_bound
