// One unit's chunk of the chunked backward (the formulas below), and its share of the group's
// dq, dk (chunk_backward.h).
//
// Per unit and chunk, with dSL = dL/dS_L carried from the later chunk and dOc = scale * dO:
//   dDm = P^T dOc + Kl dSL,           Y = A^T dDm  (A = (I + diag(beta) M)^-1, never formed)
//   dS0 = gL o dSL + Qg^T dOc - Kg^T diag(beta) Y          (carried to the earlier chunk)
//   dQg = dOc S0^T,   dKg = -diag(beta) Y S0^T,   dKl = Dm dSL^T
//   dP  = dOc Dm^T (s <= r),   dM = -diag(beta) Y Dm^T (s < r)
//   dV  = diag(beta) Y,   dbeta_r = Y_r . (R - M Dm)_r
// (Dm = A diag(beta) R gives dA = dDm (beta o R)^T, dLmat = -A^T dA A^T = -Y Dm^T, dM = diag(beta) dLmat.)
// Every line but dQg, dKg, dKl, dP, dM, dbeta and the gL term is column-local (a column of dV or
// dS0 reads the same column of the others); those sum over value columns, and are taken per
// panel of columns (backward_columns_chunk) and added in panel order (ColumnSums).
// The gate gradient is assembled per token: every exp(gam_r - gam_s) factor (pairs s < r inside
// the chunk, and (L, r) for Kl) contributes to dg_t only for s < t <= r, every exp(gam_r) factor
// (Qg, Kg) to dg_t for t <= r, and gL to every t. The pairs crossing t are added up in double, as
// pair_t = pair_t+1 + (row t's pairs) - (column t's pairs): GDA pair by pair, KDA from the row and
// column sums its float products already give (kda_pair_sums: pair_t then carries their
// rounding, which matters only where pair_t is far smaller than its neighbours).
#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "core/tensor.h"
#include "cpu/chunk_backward.h"
#include "cpu/chunk_vector.h"
#include "cpu/gemm.h"
#include "cpu/typed_rows.h"

namespace gdn::cpu {

void BackwardWork::resize(const Dims &d, int64_t max_chunk) {
    const int64_t C = max_chunk, Sk = d.Sk, Sv = d.Sv, gw = d.gate_width;
    const bool kda = gw != 1;
    chunk.resize(d, max_chunk);
    d_state.resize(Sk * Sv);
    doy.resize(2 * C * Sv);
    y.resize(C * Sv);
    dqkg.resize(2 * C * Sk);
    dkl.resize(C * Sk);
    dkinv.resize(kda ? C * Sk : 0);
    dbeta_dots.resize(C);
    panel_wterm.resize(gw);
    dpm_kinv.resize(kda ? 2 * C * Sk : 0);
    dpm.resize(2 * C * C);
    dp_diag.resize(kda ? C : 0);
    dg_rows.resize(kda ? C * gw : 0);
    dq.resize(C * Sk);
    dk.resize(C * Sk);
    gp.resize(kda ? 0 : C * C);
    gm.resize(kda ? 0 : C * C);
    gm_pair.resize(kda ? 0 : 2 * C * C);
    for (auto *v : {&single, &link, &pair, &dgam}) v->resize(C * gw);
    acc.resize(kda ? 2 * gw : std::max<int64_t>(C, 2));
    wterm.resize(gw);
    // The most rows a chunk's steps queue per token: the forward pass's K row and every unit's v,
    // g and beta rows, or the reverse walk's Q and K rows and one unit's v, g, beta and d_out rows.
    coming_rows.reserve(C * std::max<int64_t>(1 + 3 * units_of(d), 6));
}

uint64_t BackwardWork::bytes() const {
    uint64_t n = chunk.bytes();
    for (const auto *v : {&d_state, &doy, &y, &dqkg, &dkl, &dkinv, &dbeta_dots, &dpm_kinv, &dpm, &dp_diag, &dg_rows, &dq, &dk, &gp, &gm, &gm_pair})
        n += v->size() * sizeof(float);
    for (const auto *v : {&single, &link, &pair, &acc, &dgam, &wterm, &panel_wterm}) n += v->size() * sizeof(double);
    return n + coming_rows.bytes();
}

namespace {

// GDA: the pair terms of the gate gradient (X_rs = dP_rs P_rs + dM_rs M_rs, s < r: dg_t gets
// the sum over s < t <= r).
void gda_pairs(int64_t L, const float *dP, const float *dM, BackwardWork &w) {
    const float *P = w.chunk.p(), *M = w.chunk.m(L);
    AlignedVector<double> &acc = w.acc, &pair = w.pair;
    for (int64_t t = L - 1; t >= 1; --t) {
        double total = 0.0;
        for (int64_t s = 0; s < t; ++s) {
            acc[s] += double(dP[t * L + s]) * P[t * L + s] + double(dM[t * L + s]) * M[t * L + s];
            total += acc[s];
        }
        pair[t] = total;
    }
}

// KDA: dP's diagonal (no gate) set aside, then the factored exp(gam_r - gam_s) products of the
// strict parts: dKinv = [dP; dM]^T [Qg; Kg], [dQg; dKg] += [dP; dM] Kinv; and from the same
// products the per-channel pair terms of the gate gradient (kda_pair_sums: the pairs
// X^i_rs = (dP_rs Qg_ri + dM_rs Kg_ri) Kinv_si by row and by column, instead of one by one).
void kda_pairs_and_products(int64_t L, int64_t Sk, float *dP, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const float *Qg = c.qg(), *Kg = c.kg(L), *Kinv = c.kinv.data();
    for (int64_t r = 0; r < L; ++r) {
        w.dp_diag[r] = dP[r * L + r];
        dP[r * L + r] = 0.0f;
    }
    if (L > 1) {
        float *dpm_kinv = w.dpm_kinv.data();
        c.product(L, Sk, 2 * L, 1.0f, transposed(w.dpm.data(), L), rows(c.qkg.data(), Sk), false, w.dkinv.data(), Sk);
        c.product(2 * L, Sk, L, 1.0f, rows(w.dpm.data(), L), rows(Kinv, Sk), false, dpm_kinv, Sk);
        axpy(1.0f, dpm_kinv, w.dqkg.data(), 2 * L * Sk);  // the bits of the product added in place
        kda_pair_sums(L, Sk, Qg, Kg, Kinv, dpm_kinv, dpm_kinv + L * Sk, w.dkinv.data(), w.pair.data());
    }
}

}  // namespace

int64_t column_sums_floats(int64_t C, int64_t Sk, int64_t gw) {
    const int64_t floats = 3 * C * Sk + 2 * C * C + C;
    return (floats + 1) / 2 * 2 + 2 * gw;  // the doubles 8-byte aligned
}

ColumnSums column_sums_at(float *floats, int64_t C, int64_t Sk) {
    ColumnSums s;
    s.dqkg = floats;
    s.dkl = s.dqkg + 2 * C * Sk;
    s.dpm = s.dkl + C * Sk;
    s.dbeta = s.dpm + 2 * C * C;
    s.wterm = reinterpret_cast<double *>(floats + (3 * C * Sk + 2 * C * C + C + 1) / 2 * 2);
    return s;
}

ColumnSums unit_totals(BackwardWork &w) {
    return {w.dqkg.data(), w.dkl.data(), w.dpm.data(), w.dbeta_dots.data(), w.wterm.data()};
}

void add_column_sums(int64_t L, int64_t Sk, int64_t gw, const ColumnSums &from,
                                       const ColumnSums &into) {
    axpy(1.0f, from.dqkg, into.dqkg, 2 * L * Sk);
    axpy(1.0f, from.dkl, into.dkl, L * Sk);
    axpy(1.0f, from.dpm, into.dpm, 2 * L * L);
    axpy(1.0f, from.dbeta, into.dbeta, L);
    for (int64_t ch = 0; ch < gw; ++ch) into.wterm[ch] += from.wterm[ch];
}

void copy_column_sums(int64_t L, int64_t Sk, int64_t gw, const ColumnSums &from, const ColumnSums &into) {
    std::copy_n(from.dqkg, 2 * L * Sk, into.dqkg);
    std::copy_n(from.dkl, L * Sk, into.dkl);
    std::copy_n(from.dpm, 2 * L * L, into.dpm);
    std::copy_n(from.dbeta, L, into.dbeta);
    std::copy_n(from.wterm, gw, into.wterm);
}

void prepare_backward_unit(const BackwardArgs &a, ChunkUnit unit, int64_t t0, int64_t L, const float *e,
                           BackwardWork &w) {
    prepare_unit_chunk(*a.g, *a.beta, a.dims, unit, t0, L, true, KnownGates{nullptr, e}, w.chunk);
    w.coming_rows.step();
}

void backward_columns_chunk(const BackwardWindow &p, int64_t panel, ChunkUnit unit, int64_t t0, int64_t L,
                            const float *s0, const float *z, const float *dsl, float *ds0, const ColumnSums &sums,
                            BackwardWork &w) {
    const Dims &d = p.dims;
    ChunkScratch &c = w.chunk;
    const int64_t Sk = d.Sk, Sv = d.Sv, gw = d.gate_width;
    const bool kda = gw != 1;
    const StatePanels state{Sk, panel};
    float *pack = c.pack.data();
    c.Sv = Sv;  // the scratch is sized for every column of the call
    c.state_panel = panel;
    // The gL term's sums dSL . S0 (KDA per channel; GDA one sum), panel by panel. First, because
    // it reads S0 front to back: a checkpoint streamed out long ago, so the hardware prefetchers
    // bring it in here, not the transposing pack of S0^T below, line by line.
    double *part = w.panel_wterm.data();
    for (int64_t j0 = 0; j0 < Sv; j0 += panel) {
        const int64_t at = state.first_of(j0);
        if (kda) row_dots_f64(Sk, panel, dsl + at, s0 + at, part);
        else part[0] = dot_f64(dsl + at, s0 + at, Sk * panel);
        const bool add = j0 > 0;
        for (int64_t ch = 0; ch < gw; ++ch) sums.wterm[ch] = add ? sums.wterm[ch] + part[ch] : part[ch];
    }
    const float *Z = chunk_deltas(*p.v_ptr, d, unit, t0, L, s0, z, c);
    w.coming_rows.step();
    const float *P = c.p(), *Dm = c.dm.data();

    float *doc = w.doy.data(), *nby = w.doy.data() + L * Sv;
    const float scale = static_cast<float>(d.scale);
    if (p.d_out_ptr) {
        gather_rows(*p.d_out_ptr, unit.h, t0, L, unit.b, Sv, doc);
        cpu::scale(scale, doc, L * Sv);
    } else {
        std::fill(doc, doc + L * Sv, 0.0f);
    }
    // dDm = P^T dOc + Kl dSL (P^T read as a triangle: trmm);  Y = A^T dDm by back substitution,
    // which leaves dV = beta o Y in nby; then nby = -dV.
    trmm(Tri::Upper, L, Sv, 1.0f, transposed(P, L), doc, Sv, 0.0f, w.y.data(), Sv, pack);
    const GatedOperand kl = gated_rows(c, Gated::Kl, L);
    for (int64_t j0 = 0; j0 < Sv; j0 += panel)
        c.product(L, panel, Sk, 1.0f, kl, rows(dsl + state.first_of(j0), panel), true, w.y.data() + j0, Sv);
    w.coming_rows.step();
    solve_adjoint(L, Sv, c.beta.data(), c.m(L), w.y.data(), nby, pack);
    w.coming_rows.step();
    if (p.dv_ptr) store_token_rows(nby, L, Sv, *p.dv_ptr, unit.h, t0, unit.b);
    cpu::scale(-1.0f, nby, L * Sv);
    // dS0 = gL o dSL + [Qg; Kg]^T [dOc; nby].
    const GatedOperand qkg_t = gated_transposed(c, Gated::QKg, L);
    for (int64_t j0 = 0; j0 < Sv; j0 += panel) {
        const int64_t at = state.first_of(j0);
        if (kda) scale_rows(dsl + at, c.gl.data(), Sk, panel, 1, ds0 + at);
        else scale_rows(dsl + at, c.gl.data(), 1, Sk * panel, 1, ds0 + at);
        c.product(Sk, panel, 2 * L, 1.0f, qkg_t, rows(w.doy.data() + j0, Sv), true, ds0 + at, panel);
    }
    w.coming_rows.step();
    // The sums over value columns, panel by panel, each panel's products adding to the panels'
    // before it as the kernels end every product (C + the product's sums: the bits of
    // add_column_sums, as long as these products take alpha = 1 and no row factors, which would
    // scale the sums before they are added): [dQg; dKg] = [dOc; nby] S0^T;  dKl = Dm dSL^T;  [dP; dM] = [dOc; nby] Dm^T
    // (lower triangles; zeros above them: lower_product_rows leaves the diagonal blocks' upper
    // parts, and writes nothing above them; dP keeps its diagonal, dM's is zero too);
    // dbeta_r = Y_r . Z_r (Z = R - M Dm).
    for (int64_t j0 = 0; j0 < Sv; j0 += panel) {
        const int64_t at = state.first_of(j0);
        const bool add = j0 > 0;
        c.product(2 * L, Sk, panel, 1.0f, rows(w.doy.data() + j0, Sv), transposed(s0 + at, panel), add, sums.dqkg, Sk);
        c.product(L, Sk, panel, 1.0f, rows(Dm + j0, Sv), transposed(dsl + at, panel), add, sums.dkl, Sk);
        lower_product_rows(L, 2 * L, panel, w.doy.data() + j0, Dm + j0, Sv, sums.dpm, c, add);
        clear_upper(sums.dpm, L, false);
        clear_upper(sums.dpm + L * L, L, true);
        w.coming_rows.step();
        for (int64_t r = 0; r < L; ++r) {
            const float dots = dot(w.y.data() + r * Sv + j0, Z + r * Sv + j0, panel);
            sums.dbeta[r] = add ? sums.dbeta[r] + dots : dots;
        }
        w.coming_rows.step();
        w.coming_rows.step();
    }
}

UnitPieces finish_backward_unit(const BackwardArgs &a, ChunkUnit unit, int64_t t0, int64_t L, BackwardWork &w) {
    const Dims &d = a.dims;
    ChunkScratch &c = w.chunk;
    const int64_t Sk = d.Sk, gw = d.gate_width;
    const bool kda = gw != 1;
    double *wterm = w.wterm.data();
    for (int64_t ch = 0; ch < gw; ++ch) wterm[ch] *= c.gl[ch];
    if (a.dbeta)
        for (int64_t r = 0; r < L; ++r) store_element(*a.dbeta, unit.h, t0 + r, unit.b, w.dbeta_dots[r]);

    // Gate-gradient pieces: single (Qg, Kg), link (Kl with gam_L), the gL term, pairs (P, M).
    float *dP = w.dpm.data(), *dM = w.dpm.data() + L * L;
    const float *dQg = w.dqkg.data(), *dKg = w.dqkg.data() + L * Sk;
    AlignedVector<double> &single = w.single, &link = w.link, &pair = w.pair, &acc = w.acc;
    std::fill_n(pair.begin(), L * gw, 0.0);  // row 0 has no pairs (s < 0); the pair terms below write rows >= 1
    if (!kda) std::fill_n(acc.begin(), L, 0.0);  // gda_pairs' column sums
    if (kda) {
        products_f64(dQg, c.qg(), dKg, c.kg(L), single.data(), L * Sk);
        products_f64(w.dkl.data(), c.kl.data(), nullptr, nullptr, link.data(), L * Sk);
    } else {  // Qg = e o Q, Kg = e o K, Kl = f o K: each row's factor taken out of its sums
        gda_gate_terms(L, Sk, dQg, c.q(), dKg, w.dkl.data(), c.k(L), c.e.data(), c.f.data(), single.data(), link.data());
    }
    w.coming_rows.step();

    if (kda) kda_pairs_and_products(L, Sk, dP, w);
    else gda_pairs(L, dP, dM, w);
    w.coming_rows.step();
    assemble_gate_gradient(L, gw, wterm, w.single.data(), w.link.data(), w.pair.data(), w.acc.data(), w.dgam.data());
    if (a.dg && kda) {
        // KDA dg rows are Sk floats, a token stride apart: converted here, then streamed out as dv
        // is (written one float at a time into the caller's rows, their lines were read from
        // memory first).
        to_floats(w.dgam.data(), w.dg_rows.data(), L * gw);
        store_token_rows(w.dg_rows.data(), L, gw, *a.dg, unit.h, t0, unit.b);
    } else if (a.dg) {
        for (int64_t r = 0; r < L; ++r) store_element(*a.dg, unit.h, t0 + r, unit.b, static_cast<float>(w.dgam[r]));
    }

    UnitPieces p;
    p.e = c.e.data();
    p.f = c.f.data();
    p.dqg = dQg;
    p.dkg = dKg;
    p.dkl = w.dkl.data();
    if (kda) {
        p.dp_diag = w.dp_diag.data();
        p.einv = c.einv.data();
        p.dkinv = w.dkinv.data();
    } else {
        p.dp = dP;
        p.dm = dM;
        p.gam_mat = c.gam_mat.data();
    }
    return p;
}

void start_group_chunk(int64_t L, BackwardWork &w) {
    const int64_t Sk = w.chunk.Sk;
    std::fill_n(w.dq.begin(), L * Sk, 0.0f);
    std::fill_n(w.dk.begin(), L * Sk, 0.0f);
    if (!w.chunk.kda) {
        std::fill_n(w.gp.begin(), L * L, 0.0f);
        std::fill_n(w.gm.begin(), L * L, 0.0f);
    }
}

// Not inlined: every schedule runs this one body, so no call site can compile the sums
// differently (contracting a product and a sum into an FMA at one site but not the other).
[[gnu::noinline]] void add_unit_share(int64_t L, const UnitPieces &p, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const int64_t Sk = c.Sk;
    float *dq = w.dq.data(), *dk = w.dk.data();
    if (c.kda) {
        // The diagonal of P (no gate): dq_r += dP_rr k_r, dk_r += dP_rr q_r; then the gated parts.
        for (int64_t r = 0; r < L; ++r) {
            axpy(p.dp_diag[r], c.k(L) + r * Sk, dq + r * Sk, Sk);
            axpy(p.dp_diag[r], c.q() + r * Sk, dk + r * Sk, Sk);
        }
        add_product(p.e, p.dqg, dq, L * Sk);
        add_product(p.e, p.dkg, dk, L * Sk);
        add_product(p.f, p.dkl, dk, L * Sk);
        if (L > 1) add_product(p.einv, p.dkinv, dk, L * Sk);
        return;
    }
    // GDA: the row-scaled single terms here; the P and M terms summed into gp, gm for one product
    // per chunk (finish_group_chunk).
    for (int64_t r = 0; r < L; ++r) {
        axpy(p.e[r], p.dqg + r * Sk, dq + r * Sk, Sk);
        axpy(p.e[r], p.dkg + r * Sk, dk + r * Sk, Sk);
        axpy(p.f[r], p.dkl + r * Sk, dk + r * Sk, Sk);
    }
    add_decayed_pairs(L, p.dp, p.dm, p.gam_mat, w.gp.data(), w.gm.data());
}

void finish_group_chunk(const BackwardArgs &a, int64_t bq, int64_t kh, int64_t t0, int64_t L, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const int64_t Sk = c.Sk;
    if (!c.kda) {
        // dQ += GP K;  dK += [GP^T, GM + GM^T] [Q; K] (one product over 2L).
        float *lhs = w.gm_pair.data();
        for (int64_t r = 0; r < L; ++r)
            for (int64_t s = 0; s < L; ++s) {
                lhs[r * 2 * L + s] = w.gp[s * L + r];
                lhs[r * 2 * L + L + s] = w.gm[r * L + s] + w.gm[s * L + r];
            }
        if (c.bf16_rows()) {  // K and [Q; K] from their bf16 rows
            c.product_bf16(L, Sk, L, 1.0f, rows(w.gp.data(), L), rows(c.k_bf16(L), Sk), 1.0f, w.dq.data(), Sk);
            c.product_bf16(L, Sk, 2 * L, 1.0f, rows(lhs, 2 * L), rows(c.q_bf16(), Sk), 1.0f, w.dk.data(), Sk);
        } else {
            c.product(L, Sk, L, 1.0f, rows(w.gp.data(), L), rows(c.k(L), Sk), true, w.dq.data(), Sk);
            c.product(L, Sk, 2 * L, 1.0f, rows(lhs, 2 * L), rows(c.q(), Sk), true, w.dk.data(), Sk);
        }
    }
    if (a.dq) store_token_rows(w.dq.data(), L, Sk, *a.dq, kh, t0, bq);
    if (a.dk) store_token_rows(w.dk.data(), L, Sk, *a.dk, kh, t0, bq);
}

namespace {

// A slot's regions, in order: the member, its floats for C tokens and for L.
struct PieceRegion {
    const float *UnitPieces::*member;
    int64_t capacity, length;
};

template <class F>
void for_each_region(int64_t L, bool kda, int64_t Sk, int64_t C, F &&f) {
    using P = UnitPieces;
    const int64_t rows = L * Sk, rows_cap = C * Sk;
    if (kda) {
        for (const PieceRegion &r : {PieceRegion{&P::dp_diag, C, L}, {&P::e, rows_cap, rows}, {&P::f, rows_cap, rows},
                                     {&P::einv, rows_cap, rows}, {&P::dqg, rows_cap, rows}, {&P::dkg, rows_cap, rows},
                                     {&P::dkl, rows_cap, rows}, {&P::dkinv, rows_cap, rows}})
            f(r);
    } else {
        for (const PieceRegion &r : {PieceRegion{&P::e, C, L}, {&P::f, C, L}, {&P::dqg, rows_cap, rows},
                                     {&P::dkg, rows_cap, rows}, {&P::dkl, rows_cap, rows}, {&P::dp, C * C, L * L},
                                     {&P::dm, C * C, L * L}, {&P::gam_mat, C * C, L * L}})
            f(r);
    }
}

}  // namespace

int64_t pieces_slot_floats(const Dims &d, int64_t max_chunk) {
    int64_t n = 0;
    for_each_region(max_chunk, d.gate_width != 1, d.Sk, max_chunk, [&](const PieceRegion &r) { n += r.capacity; });
    return n;
}

void store_pieces(int64_t L, const UnitPieces &p, bool kda, int64_t Sk, int64_t C, float *slot) {
    for_each_region(L, kda, Sk, C, [&](const PieceRegion &r) {
        std::memcpy(slot, p.*r.member, sizeof(float) * r.length);
        slot += r.capacity;
    });
}

UnitPieces stored_pieces(int64_t L, bool kda, int64_t Sk, int64_t C, const float *slot) {
    UnitPieces p;
    for_each_region(L, kda, Sk, C, [&](const PieceRegion &r) {
        p.*r.member = slot;
        slot += r.capacity;
    });
    return p;
}

}  // namespace gdn::cpu
