// The per-chunk math shared by the chunked forward and backward (the recurrence of docs/SPEC.md
// section 2, a chunk of tokens at a time), for one group = (q/k sequence bq, key head kh) and the
// units (sequence, value head) that read it.
//
// Inside a chunk of L tokens starting at t0, with per-unit prefix sums gam_r of the gates
// (restarted at the chunk start; per channel for KDA, scalar for GDA):
//   E = exp(gam), F = exp(gam_L - gam), gL = exp(gam_L)             (every exponent <= 0 for g <= 0)
//   Qg = Q o E, Kg = K o E, Kl = K o F
//   P_rs = sum_i q_ri k_si exp(gam_ri - gam_si), s <= r (0 above)    the decayed Q K^T
//   M_rs = sum_i k_ri k_si exp(gam_ri - gam_si), s <  r (0 on and above)
//   A = (I + diag(beta) M)^-1                                        unit lower triangular
//   R = V - Kg S0,  Dm = A diag(beta) R                              row r is the delta d_r
//   O = c (Qg S0 + P Dm),  S_L = diag(gL) S0 + Kl^T Dm
// GDA: exp(gam_r - gam_s) is one scalar per pair (the matrix `gam_mat`, one exp per pair s < r),
// so Q K^T and K K^T are computed once per chunk for the whole group and only masked and scaled
// per unit.
// KDA: exp(gam_ri - gam_si) = exp(gam_ri) * exp(-gam_si) per channel (Kinv = K o exp(-gam), with
// exp(-gam) taken as 1 / exp(gam)), which chunk_plan keeps finite by bounding the span of gam
// inside a chunk.
//
// States are Sk x Sv here, in column panels (StatePanels below; memory holds the transpose).
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "cpu/aligned_vector.h"
#include "cpu/gemm.h"
#include "cpu/gemm_bf16.h"

namespace gdn::cpu {

// A state S (Sk x Sv) as the chunk math keeps it: in column panels of `panel` columns, each an
// Sk x panel row-major block, the blocks one after another: S[i][j] at
// (j / panel) * Sk * panel + i * panel + j % panel. panel = Sv is plain row-major. The backward
// keeps its states in its panels of value columns (BackwardPanels: 64 columns, or Sv). The
// forward keeps its running states in panels of the GEMM kernel's widest tile
// (gemm_wide_panel_width: 16 columns on AVX2, 64 on AVX-512), the layout a product reads B in
// without packing it, so that S0 is not copied into panels for [Qg; Kg] S0 every chunk, and the
// update writes whole tile rows of a panel.
struct StatePanels {
    int64_t Sk, panel;
    int64_t at(int64_t i, int64_t j) const { return (j / panel) * Sk * panel + i * panel + j % panel; }
    // The panels from column j0 start j0 * Sk floats into the state (j0 a multiple of panel).
    int64_t first_of(int64_t j0) const { return j0 * Sk; }
};
// The forward's panel width for states of Sv columns: the kernel's, where it divides Sv (plain
// row-major, Sv, with bf16 products: gemm_bf16 packs B whatever its layout, and one product over
// all of S0's columns makes fewer, larger AMX calls).
int64_t forward_state_panel(int64_t Sv, bool bf16_products);

// Whether a call of this precision runs its chunk products on gemm_bf16 (bf16 operands, F32
// sums): precision = BF16 on a host whose bf16 kernel is AMX (gemm_bf16_isa() == "amx"), the only
// kernel measured faster than the F32 gemm (docs/PERF.md); any other call, or host, computes as
// EXACT. Asked as each call sizes its scratch (a kernel forced between calls counts). Which
// products: the grams [Q; K] K^T (KDA: [Qg; Kg] Kinv^T), [Qg; Kg] S0, the state update Kl^T Dm,
// and the backward's Kl dSL, [Qg; Kg]^T [dOc; -dV], [dOc; -dV] S0^T, Dm dSL^T, [dOc; -dV] Dm^T
// and the group's dq, dk products (KDA: the [dP; dM] products with Kinv, [Qg; Kg]). The
// triangular solves (solve_deltas, solve_adjoint), the trmm's of P and the gate sums stay F32.
bool bf16_products(gdn_precision precision);

struct GatedOperand;

struct ChunkScratch {
    int64_t Sk = 0, Sv = 0, gw = 1, C = 0;
    bool kda = false;
    // The panels of the states chunk_deltas and advance_state read and write (resize: Sv,
    // row-major; the forward sets forward_state_panel, the backward its BackwardPanels' width).
    int64_t state_panel = 0;

    // The group's chunk: Q rows then K rows (2L x Sk); GDA: Q K^T then K K^T (2L x L, read on and
    // below the diagonal only: group_gram), in `gram` or wherever gram_view points (the split
    // backward keeps a segment's grams per group).
    AlignedVector<float> qk_rows, gram;
    const float *gram_view = nullptr;
    // One unit's chunk.
    AlignedVector<float> beta;              // L
    AlignedVector<double> gam;              // L x gw prefix sums
    AlignedVector<double> exp_arg;          // arguments of one batch of exp (GDA: L x L, KDA: gw)
    AlignedVector<float> e, f, einv, gl;    // L x gw: exp(gam), exp(gam_L - gam), KDA (L > 1) 1 / exp(gam); gw: exp(gam_L)
    AlignedVector<float> e_twice;           // GDA: 2L, [e; e] (with Q): the factors of the rows of [Q; K]
    AlignedVector<float> gate_row;          // gw: a gate row of a BF16 g, converted
    AlignedVector<float> gam_mat;           // GDA: L x L, exp(gam_r - gam_s) for s < r (nothing else is set)
    AlignedVector<float> qkg;               // KDA: 2L x Sk, Qg in rows 0..L-1, Kg in rows L..2L-1
    AlignedVector<float> kl, kinv;          // KDA: L x Sk
    AlignedVector<float> pm;                // 2L x L: P (rows 0..L-1), then M (KDA: one product of [Qg; Kg] and Kinv^T)
    // 2C x Sv: R (rows C ..: V, then R = V - Kg S0, then Z = R - M Dm: chunk_deltas) and, in the
    // forward with outputs, the chunk's output rows O in the L rows just above R, so that
    // [O; R] is one matrix and [Qg; Kg] S0 one product (S0's panels read once for both).
    AlignedVector<float> out_r;
    AlignedVector<float> out_r_factors;     // 2C (2L used): the row factors of that product
    AlignedVector<float> dm;                // L x Sv
    AlignedVector<float> pack;              // GEMM packing
    // The bf16 product mode (bf16_products): the products it covers go through product(), on
    // gemm_bf16 with this packing scratch (sized for every one of them: empty when not in it).
    bool bf16 = false;
    AlignedVector<uint8_t> bf16_pack;
    // bf16 mode, GDA: the group's Q and K rows rounded to bf16 once per chunk (laid out as
    // qk_rows), which its products read through MatBf16 views instead of converting them again
    // for every unit and product (load_group_rows).
    AlignedVector<uint16_t> qk_bf16;

    void resize(const Dims &d, int64_t max_chunk);

    // C = alpha A B + c_scale C (gemm's arguments) for a product the bf16 mode covers: gemm_bf16
    // in that mode, else gemm.
    void product(int64_t m, int64_t n, int64_t k, float alpha, Mat a, Mat b, float c_scale, float *c, int64_t ldc,
                 RowScales scales = {}) {
        if (bf16) gemm_bf16(m, n, k, alpha, a, b, c_scale, c, ldc, bf16_pack.data(), scales);
        else gemm(m, n, k, alpha, a, b, c_scale, c, ldc, pack.data(), scales);
    }
    // The same for an A of gated_rows / gated_transposed (its row scales included), read from the
    // bf16 rows where the mode keeps them.
    void product(int64_t m, int64_t n, int64_t k, float alpha, const GatedOperand &a, Mat b, float c_scale,
                 float *c, int64_t ldc);
    // A product whose operands (one or both) are the bf16 rows: bf16 mode only.
    template <class A, class B>
    void product_bf16(int64_t m, int64_t n, int64_t k, float alpha, A a, B b, float c_scale, float *c, int64_t ldc) {
        gemm_bf16(m, n, k, alpha, a, b, c_scale, c, ldc, bf16_pack.data());
    }
    // Whether the group's Q and K rows are kept in bf16 (qk_bf16).
    bool bf16_rows() const { return bf16 && !kda; }
    const uint16_t *q_bf16() const { return qk_bf16.data(); }
    const uint16_t *k_bf16(int64_t L) const { return qk_bf16.data() + L * Sk; }
    uint64_t bytes() const;

    float *q() { return qk_rows.data(); }
    float *k(int64_t L) { return qk_rows.data() + L * Sk; }
    const float *qk() const { return gram_view; }
    const float *kk(int64_t L) const { return gram_view + L * L; }
    float *p() { return pm.data(); }
    float *m(int64_t L) { return pm.data() + L * L; }
    float *r() { return out_r.data() + C * Sv; }
    float *o(int64_t L) { return r() - L * Sv; }
    float *qg() { return qkg.data(); }
    float *kg(int64_t L) { return qkg.data() + L * Sk; }
};

struct ChunkUnit {
    int64_t b, h;  // sequence, value head
};

// The chunk's row-scaled operands as a product reads them, A = X or A = X^T for X = Qg, Kg, Kl
// or [Qg; Kg] (2L rows): KDA's stored copies, or GDA's raw Q, K rows with each row's factor
// (e or f) folded into the product, onto C's rows for A = X and onto B's rows for A = X^T
// (RowScales), so that GDA never stores them. Valid after prepare_unit_chunk (with Q for Qg, QKg).
enum class Gated { Qg, Kg, Kl, QKg };
struct GatedOperand {
    Mat a;
    RowScales scales;
    MatBf16 a_bf16{nullptr, 0, 0};  // the same rows in bf16 (ChunkScratch::bf16_rows), else none
};
GatedOperand gated_rows(ChunkScratch &w, Gated x, int64_t L);
GatedOperand gated_transposed(ChunkScratch &w, Gated x, int64_t L);

// How far ahead a walk over token rows asks for the next ones: the rows of the caller's tensors
// are a token stride apart (24-40 KiB at the model shapes), so no hardware prefetcher follows
// them (asking 6 rows ahead gains 2-3% of the chunked forward and backward; 12 the same).
constexpr int64_t rows_ahead = 6;

// dst (L rows of n floats, contiguous) = rows t0 .. t0+L-1 of tensor t at (i1, i3), converted
// from t's element type (cpu/typed_rows.h), asking for the rows rows_ahead further while it copies.
void gather_rows(const gdn_tensor &t, int64_t i1, int64_t t0, int64_t L, int64_t i3, int64_t n, float *dst);

// Loads K rows t0 .. t0+L-1 of the group, and its Q rows when with_q (and their bf16 copies:
// ChunkScratch::bf16_rows).
void load_group_rows(const gdn_tensor &q, const gdn_tensor &k, const Dims &d, int64_t bq, int64_t kh, int64_t t0,
                     int64_t L, bool with_q, ChunkScratch &w);

// c (L x L, leading dimension L) = A B^T for row-major L x n blocks A and B, on and below the
// diagonal (all the chunk math reads of such products): in column blocks, each block's rows from
// its first column down, so above the diagonal only the diagonal blocks are written (callers
// must not read there). With bf16 products, one product (above the diagonal written too: an
// AMX call costs more than the triangle saves).
void lower_product(int64_t L, int64_t n, const float *a, const float *b, float *c, ChunkScratch &w);
// The same for m = L or 2L rows of a: c (m x L) holds m / L stacked L x L blocks, each the lower
// triangle (as lower_product writes it) of its rows of a times b^T, e.g. [P; M] = [Qg; Kg] Kinv^T;
// for L <= 32 one product, so b's panel is packed once.
void lower_product_rows(int64_t L, int64_t m, int64_t n, const float *a, const float *b, float *c, ChunkScratch &w);
// The same for a and b with rows ld floats apart (n of them read), and with accumulate, c += the
// products instead (the upper parts of the diagonal blocks then hold sums of what each call left
// there).
void lower_product_rows(int64_t L, int64_t m, int64_t n, const float *a, const float *b, int64_t ld, float *c,
                        ChunkScratch &w, bool accumulate);

// GDA: the gram of the loaded rows into out (2L x L): Q K^T then K K^T, their lower triangles
// (lower_product); without Q only the K K^T half (rows L .. 2L-1).
void group_gram(int64_t L, bool with_qk, ChunkScratch &w, float *out);

// load_group_rows, then GDA: group_gram into gram (gram_view points there).
void load_group_chunk(const gdn_tensor &q, const gdn_tensor &k, const Dims &d, int64_t bq, int64_t kh, int64_t t0,
                      int64_t L, bool with_qk, ChunkScratch &w);

// What a caller already has of a unit's chunk of KDA gates (nullptr: nothing), so that the gate
// rows are not read again: gam, the prefix sums as ChunkPlanner::next_end kept them (L x gw);
// e, exp(gam) as an earlier pass over the same chunk made it (w.e; used for chunks of L > 1).
struct KnownGates {
    const double *gam = nullptr;
    const float *e = nullptr;
};

// Loads the unit's beta and g rows and computes gates, M and P (when with_q); KDA also Qg (when with_q), Kg, Kl
// and Kinv (chunks of L > 1). GDA stores no row-scaled copies: its products take Q, K and fold
// each token's factor (e_r or f_r) in as they run (RowScales in gemm.h). The g rows are not read
// with known.gam, nor with known.e for a KDA chunk of L > 1.
void prepare_unit_chunk(const gdn_tensor &g, const gdn_tensor &beta, const Dims &d, ChunkUnit u, int64_t t0, int64_t L,
                        bool with_q, KnownGates known, ChunkScratch &w);

// The backward's Y = A^T dDm for A = (I + diag(beta) M)^-1 (M strictly lower, L x L), by back
// substitution rather than forming A (as chunk_deltas solves for Dm): y holds dDm (L rows of n
// floats) on entry and Y on return; w gets diag(beta) Y, which the substitution reads.
void solve_adjoint(int64_t L, int64_t n, const float *beta, const float *M, float *y, float *w, float *pack);

// Dm of the unit's chunk (prepare_unit_chunk done) from its entry state s0, and Z = R - M Dm
// (row r: token r's prediction error v_r - S_{r-1}^T k_r, the state decayed to r; Dm =
// diag(beta) Z). Without z: Dm = A diag(beta) R for R = V - Kg S0 from the unit's V rows, solving
// (I + diag(beta) M) Dm = diag(beta) R by substitution, Z left in r. With z (a
// Z this returned earlier for the same chunk and state, L x Sv): Dm = diag(beta) z, the same bits.
// with_out (no z; prepare_unit_chunk with Q): also scale Qg S0 into w.o(L), the first part of the
// chunk's output, in the same product as Kg S0. Returns Z.
const float *chunk_deltas(const gdn_tensor &v, const Dims &d, ChunkUnit u, int64_t t0, int64_t L, const float *s0,
                          const float *z, ChunkScratch &w, bool with_out = false);

// s_next = diag(gL) s + Kl^T Dm; s_next may be s.
void advance_state(const float *s, float *s_next, int64_t L, ChunkScratch &w);

// Asks for the rows [t_begin, t_end) of tensor t at (i1, i3) to be brought into cache: the next
// chunk's rows of the strided q/k/v views are each a page apart. Pages::Read also reads one float
// of each page a row starts on (once per page) so that its translation is in the TLB when the
// prefetches go out: a prefetch whose page misses the TLB was seen not to bring its line (a
// chunk's v rows took twice as long to gather without the read). The read waits on memory, which
// costs the forward what it saves (neutral) but pays in the backward, whose unit steps are three
// times longer (KDA backward 0.98 of the time).
enum class Pages { Prefetched, Read };
void prefetch_rows(const gdn_tensor *t, int64_t i1, int64_t t_begin, int64_t t_end, int64_t i3, int64_t row_elements,
                   Pages pages = Pages::Prefetched);

// C = alpha T B + c_scale C for an L x L triangle T (read through a Mat view, so T may be the
// transpose of a stored lower triangle) and B (L x n, leading dimension ldb). Only the entries
// (r, s) inside the triangle are read or multiplied: the structural zeros are skipped, not
// multiplied, so a NaN or Inf in row s of B reaches exactly the rows that depend on it (SPEC 6:
// a value planted at token t must not reach earlier tokens through 0 * NaN).
enum class Tri { Lower, Upper };
void trmm(Tri tri, int64_t L, int64_t n, float alpha, Mat t, const float *b, int64_t ldb, float c_scale, float *c,
          int64_t ldc, float *pack);

// dst row r (rows ldd floats apart) = src row r (L rows of n floats, contiguous), written with
// non-temporal stores where the rows are aligned for them: for scratch this call writes once and
// does not read again, so their lines are not read from memory first (nor kept in cache). The
// caller's output rows, in their element types, go through store_token_rows (cpu/typed_rows.h).
void store_rows_streamed(const float *src, int64_t L, int64_t n, float *dst, int64_t ldd);

}  // namespace gdn::cpu
