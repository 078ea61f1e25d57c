// The element-wise and row-wise loops of the chunk math (everything that is not a GEMM), plain
// loops the compiler vectorises. On x86-64 they are built for AVX-512, AVX2 and baseline x86-64
// and picked at load time (GCC target_clones), so they vectorise on the host's widest ISA; on
// AArch64 they are built once for NEON, which every host has. Reductions keep 16 partial sums in
// a fixed order: the result depends on the host's clone, never on threads or timing.
#pragma once

#include <cstdint>

namespace gdn::cpu {

// sum_i a_i b_i.
float dot(const float *a, const float *b, int64_t n);
// sum_i a_i b_i in double.
double dot_f64(const float *a, const float *b, int64_t n);
// out_r = dot_f64 of row r of a and b (L rows of n floats each).
void row_dots_f64(int64_t L, int64_t n, const float *a, const float *b, double *out);
// The GDA gate gradient's row terms of a chunk (L rows of n floats): single_r = e_r (dqg_r . q_r +
// dkg_r . k_r) and link_r = f_r (dkl_r . k_r), each dot as dot_f64 adds it up.
void gda_gate_terms(int64_t L, int64_t n, const float *dqg, const float *q, const float *dkg, const float *dkl,
                    const float *k, const float *e, const float *f, double *single, double *link);
// gp_rs += dp_rs decay_rs and gm_rs += dm_rs decay_rs below the diagonal of L x L matrices, and
// gp_rr += dp_rr on it (no decay there); nothing above it is read or written.
void add_decayed_pairs(int64_t L, const float *dp, const float *dm, const float *decay, float *gp, float *gm);
// The gate gradient of a chunk, per channel (L rows of gw): dg_t = wsum + sum_{r >= t} single_r
// + sum_{r < t} link_r + pair_t; sums: 2 gw doubles of scratch.
void assemble_gate_gradient(int64_t L, int64_t gw, const double *wsum, const double *single, const double *link,
                            const double *pair, double *sums, double *dg);
// y_i = x_i rounded to float.
void to_floats(const double *x, float *y, int64_t n);
// out_i = a_i b_i + c_i d_i in double (c, d may be nullptr: out_i = a_i b_i).
void products_f64(const float *a, const float *b, const float *c, const float *d, double *out, int64_t n);
// y += alpha x.
void axpy(float alpha, const float *x, float *y, int64_t n);
// y += sum_j (alpha coef[j * coef_stride]) x_j over j = 0 .. count-1 in that order, x_j = x + j * ldx:
// per element the terms of `count` calls of axpy added in the same order, with y held in registers
// across them.
void add_rows(float alpha, const float *coef, int64_t coef_stride, int64_t count, const float *x, int64_t ldx,
              float *y, int64_t n);
// out_rs = gram_rs * decay_rs below the diagonal of an L x L matrix, out_rr = gram_rr when
// with_diagonal (else 0), 0 above.
void decayed_lower(const float *gram, const float *decay, int64_t L, bool with_diagonal, float *out);
// c_rs = 0 above the diagonal of an L x L matrix, and on it when with_diagonal.
void clear_upper(float *c, int64_t L, bool with_diagonal);
// out_i = prev_i + clamp_gate(gate_i) in double (prev nullptr: 0): one row of gate prefix sums.
void add_gates(const double *prev, const float *gate, double *out, int64_t n);
// x *= alpha.
void scale(float alpha, float *x, int64_t n);
// y += x o z (element-wise).
void add_product(const float *x, const float *z, float *y, int64_t n);

// y_i = exp(x_i) rounded to float, for double x (prefix sums of gates): range reduction in
// double, so the result keeps float accuracy (< 1 ulp) whatever the magnitude of x; 0 below
// -100 ln 2 (results under 2^-100), inf above 89, NaN stays NaN.
// Why 0 under 2^-100: these are the decay factors of the chunk products, and a factor near the
// bottom of float's range makes subnormal operands and products (Kg = K o E, the masked grams),
// which x86 cores compute through microcode assists, a hundred times slower: strongly decaying
// heads (gates of -20 per token, as ggml's tests and Qwen3.5's initialisation have) made a
// whole forward 4x slower. A dropped term is the factor (under 2^-100) times a state, key or
// value entry: below the F32 rounding of an output with a term of ordinary size (the current
// token's) unless the state's entries reach about 2^70 (a state of 1e30 would lose terms of
// order 1).
void exp_to_float(const double *x, float *y, int64_t n);

// The row-scaled operands of a KDA chunk (all L x n; the chunk math calls it for L > 1), in one
// pass over the rows with every factor used where it is made: e = exp(gam) as exp_to_float rounds
// it, einv = 1 / e, f = gl o einv, qg = q o e (q nullptr: qg not written), kg = k o e, kl = k o f,
// kinv = k o einv; the same bits as those steps one after another. gl (n floats) is exp(gam_L) as
// the caller made it, and is e's last row (copied there), so the two are one value by
// construction; rows 0 .. L-2 of e come from gam, or, with gam nullptr, are in out.e already (kept
// from an earlier pass over the chunk) and are read, not written.
struct KdaGated {
    float *e, *einv, *f, *qg, *kg, *kl, *kinv;
};
void kda_gated_rows(int64_t L, int64_t n, const double *gam, const float *gl, const float *q, const float *k,
                    const KdaGated &out);

// dst[r] = src[r] * scale[r] for L rows of n floats: one factor per row (gw == 1) or per
// element (gw == n).
void scale_rows(const float *src, const float *scale, int64_t L, int64_t n, int64_t gw, float *dst);

// The per-channel pair terms of the KDA gate gradient over a chunk of L rows (all L x n),
// X_rs[i] = (dP_rs qg_r[i] + dM_rs kg_r[i]) kinv_s[i] for s < r, from their row and column sums:
// dp_kinv = dP Kinv, dm_kinv = dM Kinv and dkinv = dP^T Qg + dM^T Kg over the strict triangles,
// so row r of X sums to qg_r o dp_kinv_r + kg_r o dm_kinv_r and column s to kinv_s o dkinv_s.
// Row t of pair (t = 1 .. L-1) gets the sum over the pairs s < t <= r:
// pair_t = pair_t+1 + (row t's sum) - (column t's sum), added up in double. The sums are as exact
// as the float products they come from, so pair_t's error is relative to the pairs of rows and
// columns t' >= t, not to pair_t: behind a strong gate, where every pair crossing t is tiny,
// pair_t is exact only to its neighbours' rounding.
void kda_pair_sums(int64_t L, int64_t n, const float *qg, const float *kg, const float *kinv, const float *dp_kinv,
                   const float *dm_kinv, const float *dkinv, double *pair);

}  // namespace gdn::cpu
