#include "cpu/chunk_core.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "core/tensor.h"
#include "cpu/cache_control.h"
#include "cpu/chunk_vector.h"
#include "cpu/gemm.h"
#include "cpu/typed_rows.h"

namespace gdn::cpu {

void ChunkScratch::resize(const Dims &d, int64_t max_chunk) {
    Sk = d.Sk;
    Sv = d.Sv;
    gw = d.gate_width;
    C = max_chunk;
    kda = gw != 1;
    state_panel = Sv;
    qk_rows.resize(2 * C * Sk);
    gram.resize(kda ? 0 : 2 * C * C);
    beta.resize(C);
    gam.resize(C * gw);
    exp_arg.resize(kda ? gw : C * C);
    e.resize(C * gw);
    e_twice.resize(kda ? 0 : 2 * C);
    f.resize(C * gw);
    einv.resize(kda ? C * gw : 0);
    gl.resize(gw);
    gate_row.resize(gw);
    gam_mat.resize(kda ? 0 : C * C);
    qkg.resize(kda ? 2 * C * Sk : 0);
    kl.resize(kda ? C * Sk : 0);
    kinv.resize(kda ? C * Sk : 0);
    pm.resize(2 * C * C);
    out_r.resize(2 * C * Sv);
    out_r_factors.resize(2 * C);
    dm.resize(C * Sv);
    pack.resize(gemm_pack_floats(std::max({Sk, Sv, 2 * C})));
    // Every bf16 product has m <= max(2C, Sk, Sv) rows of A and k <= max(Sk, Sv, 2C).
    bf16 = bf16_products(d.precision);
    const int64_t widest = std::max({Sk, Sv, 2 * C});
    bf16_pack.resize(bf16 ? static_cast<size_t>(gemm_bf16_pack_bytes(widest, widest)) : 0);
    qk_bf16.resize(bf16_rows() ? 2 * C * Sk : 0);
}

bool bf16_products(gdn_precision precision) {
    return precision == GDN_PRECISION_BF16 && std::strcmp(gemm_bf16_isa(), "amx") == 0;
}

uint64_t ChunkScratch::bytes() const {
    uint64_t n = 0;
    for (const auto *vec : {&qk_rows, &gram, &beta, &e, &e_twice, &f, &einv, &gl, &gate_row, &gam_mat, &qkg, &kl, &kinv, &pm,
                            &out_r, &out_r_factors, &dm, &pack})
        n += vec->size() * sizeof(float);
    return n + (gam.size() + exp_arg.size()) * sizeof(double) + bf16_pack.size() + qk_bf16.size() * sizeof(uint16_t);
}

int64_t forward_state_panel(int64_t Sv, bool bf16_products) {
    if (bf16_products) return Sv;
    const int64_t panel = gemm_wide_panel_width();
    return Sv % panel == 0 ? panel : Sv;
}

void gather_rows(const gdn_tensor &t, int64_t i1, int64_t t0, int64_t L, int64_t i3, int64_t n, float *dst) {
    const int64_t bytes = row_bytes(t, n);
    for (int64_t r = 0; r < L; ++r) {
        if (r + rows_ahead < L) prefetch_lines(element_ptr(t, 0, i1, t0 + r + rows_ahead, i3), bytes);
        load_row(t.type, element_ptr(t, 0, i1, t0 + r, i3), n, dst + r * n);
    }
}

void load_group_rows(const gdn_tensor &q, const gdn_tensor &k, const Dims &d, int64_t bq, int64_t kh, int64_t t0,
                     int64_t L, bool with_q, ChunkScratch &w) {
    if (with_q) gather_rows(q, kh, t0, L, bq, d.Sk, w.q());
    gather_rows(k, kh, t0, L, bq, d.Sk, w.k(L));
    if (w.bf16_rows()) {
        const int64_t first = with_q ? 0 : L * d.Sk;  // Q's rows, then K's
        round_to_bf16(w.qk_rows.data() + first, w.qk_bf16.data() + first, 2 * L * d.Sk - first);
    }
}

void ChunkScratch::product(int64_t m, int64_t n, int64_t k, float alpha, const GatedOperand &a, Mat b, float c_scale,
                           float *c, int64_t ldc) {
    if (a.a_bf16.p != nullptr) gemm_bf16(m, n, k, alpha, a.a_bf16, b, c_scale, c, ldc, bf16_pack.data(), a.scales);
    else product(m, n, k, alpha, a.a, b, c_scale, c, ldc, a.scales);
}

void lower_product_rows(int64_t L, int64_t m, int64_t n, const float *a, const float *b, int64_t ld, float *c,
                        ChunkScratch &w, bool accumulate) {
    const float c_scale = accumulate ? 1.0f : 0.0f;
    if (w.bf16) return w.product(m, L, n, 1.0f, rows(a, ld), transposed(b, ld), c_scale, c, L);
    // Blocks of whole kernel panels, at least 32 columns: 3/4 of the full product's work at
    // L = 64, the full product at L = 32 (on AVX2, blocks of one 16-column panel there measured
    // 0.96-1.10 of the time: no gain). The first block is one product over all m rows (its
    // triangles start at row 0: a 32-token chunk is only this); a later block c0 takes rows
    // c0 .. L - 1 of each stacked L x L block.
    const int64_t block = std::max<int64_t>(32, gemm_panel_width());
    for (int64_t c0 = 0; c0 < L; c0 += block) {
        const int64_t cols = std::min(block, L - c0);
        const Mat bt = transposed(b + c0 * ld, ld);
        if (c0 == 0) {
            gemm(m, cols, n, 1.0f, rows(a, ld), bt, c_scale, c, L, w.pack.data());
            continue;
        }
        for (int64_t top = 0; top < m; top += L)
            gemm(L - c0, cols, n, 1.0f, rows(a + (top + c0) * ld, ld), bt, c_scale, c + (top + c0) * L + c0, L,
                 w.pack.data());
    }
}

void lower_product_rows(int64_t L, int64_t m, int64_t n, const float *a, const float *b, float *c, ChunkScratch &w) {
    lower_product_rows(L, m, n, a, b, n, c, w, false);
}

void lower_product(int64_t L, int64_t n, const float *a, const float *b, float *c, ChunkScratch &w) {
    lower_product_rows(L, L, n, a, b, c, w);
}

void group_gram(int64_t L, bool with_qk, ChunkScratch &w, float *out) {
    // With Q, [Q; K] K^T in one product (Q's rows lie just above K's, as do the two triangles):
    // K^T is packed once for both.
    if (w.bf16_rows()) {  // one full product on the bf16 rows (lower_product_rows' bf16 form)
        const int64_t m = with_qk ? 2 * L : L;
        return w.product_bf16(m, L, w.Sk, 1.0f, rows(with_qk ? w.q_bf16() : w.k_bf16(L), w.Sk),
                              transposed(w.k_bf16(L), w.Sk), 0.0f, with_qk ? out : out + L * L, L);
    }
    if (with_qk) lower_product_rows(L, 2 * L, w.Sk, w.q(), w.k(L), out, w);
    else lower_product(L, w.Sk, w.k(L), w.k(L), out + L * L, w);
}

void load_group_chunk(const gdn_tensor &q, const gdn_tensor &k, const Dims &d, int64_t bq, int64_t kh, int64_t t0,
                      int64_t L, bool with_qk, ChunkScratch &w) {
    load_group_rows(q, k, d, bq, kh, t0, L, with_qk, w);
    if (w.kda) return;
    group_gram(L, with_qk, w, w.gram.data());
    w.gram_view = w.gram.data();
}

namespace {

// Prefix sums of the chunk's gates and the exponentials every formula uses, and KDA's row-scaled
// copies of Q and K (with_q: Qg too). Prefix sums are in double, so a difference gam_r - gam_s
// keeps its digits even after a -120 spike.
void compute_gates(const gdn_tensor &g, ChunkUnit u, int64_t t0, int64_t L, bool with_q, KnownGates known,
                   ChunkScratch &w) {
    const int64_t gw = w.gw;
    const bool kept_e = w.kda && L > 1 && known.e != nullptr;
    const double *gam = known.gam;
    if (kept_e) {
        // e as an earlier pass over the chunk made it; exp(gam_L) is its last row.
        std::copy_n(known.e, (L - 1) * gw, w.e.data());
        std::copy_n(known.e + (L - 1) * gw, gw, w.gl.data());
    } else {
        if (gam == nullptr) {
            for (int64_t r = 0; r < L; ++r) {
                if (r + rows_ahead < L) prefetch_rows(&g, u.h, t0 + r + rows_ahead, t0 + r + rows_ahead + 1, u.b, gw);
                const float *gate = row_as_floats(g.type, element_ptr(g, 0, u.h, t0 + r, u.b), gw, w.gate_row.data());
                add_gates(r ? w.gam.data() + (r - 1) * gw : nullptr, gate, w.gam.data() + r * gw, gw);
            }
            gam = w.gam.data();
        }
        exp_to_float(gam + (L - 1) * gw, w.gl.data(), gw);
    }
    // KDA: exp(gam_r - gam_s) = exp(gam_r) * exp(-gam_s) per channel. chunk_plan keeps every
    // channel's prefix sums and the 0 they start from within a span of 60 inside a chunk of more
    // than one token, so |gam| <= 60, exp(gam) is a normal float and exp(-gam) = 1 / exp(gam) is
    // finite: a division (within 1.5 ulp of exp(-gam)) instead of a second exp per element. The
    // factors and the rows they scale are made in one pass (the separate passes were a tenth of
    // the KDA forward's time).
    if (w.kda && L > 1) {
        kda_gated_rows(L, gw, kept_e ? nullptr : gam, w.gl.data(), with_q ? w.q() : nullptr, w.k(L),
                       KdaGated{w.e.data(), w.einv.data(), w.f.data(), w.qg(), w.kg(L), w.kl.data(), w.kinv.data()});
        return;
    }
    const double *gam_last = gam + (L - 1) * gw;
    double *arg = w.exp_arg.data();
    // GDA, and a KDA chunk of one token (f = exp(0) = 1, and no Kinv: M and P have no pairs).
    // GDA: one exp per pair and per row, so that no entry's bits depend on another token's gate
    // (a +Inf gate at token t leaves earlier tokens exact).
    exp_to_float(gam, w.e.data(), L * gw);
    for (int64_t r = 0; r < L; ++r)
        for (int64_t i = 0; i < gw; ++i) arg[r * gw + i] = gam_last[i] - gam[r * gw + i];
    exp_to_float(arg, w.f.data(), L * gw);
    if (w.kda) {
        if (with_q) scale_rows(w.q(), w.e.data(), L, w.Sk, gw, w.qg());
        scale_rows(w.k(L), w.e.data(), L, w.Sk, gw, w.kg(L));
        scale_rows(w.k(L), w.f.data(), L, w.Sk, gw, w.kl.data());
        return;
    }
    // Only s < r is read: the strict lower triangle, its rows one after another in arg
    // (row r starts at r (r - 1) / 2), then each row into place.
    for (int64_t r = 1; r < L; ++r)
        for (int64_t s = 0; s < r; ++s) arg[r * (r - 1) / 2 + s] = gam[r] - gam[s];
    float *packed = w.gam_mat.data() + L * L - L * (L - 1) / 2;  // the tail: rows move forward into place
    exp_to_float(arg, packed, L * (L - 1) / 2);
    for (int64_t r = 1; r < L; ++r)
        std::memmove(w.gam_mat.data() + r * L, packed + r * (r - 1) / 2, sizeof(float) * r);
}

}  // namespace

void prepare_unit_chunk(const gdn_tensor &g, const gdn_tensor &beta, const Dims &d, ChunkUnit u, int64_t t0, int64_t L,
                        bool with_q, KnownGates known, ChunkScratch &w) {
    const int64_t Sk = d.Sk;
    for (int64_t r = 0; r < L; ++r) w.beta[r] = load_element(beta, u.h, t0 + r, u.b);
    compute_gates(g, u, t0, L, with_q, known, w);
    if (!w.kda && with_q) {
        std::copy_n(w.e.data(), L, w.e_twice.data());
        std::copy_n(w.e.data(), L, w.e_twice.data() + L);
    }

    float *P = w.p(), *M = w.m(L);
    if (!w.kda) {
        decayed_lower(w.kk(L), w.gam_mat.data(), L, false, M);
        if (with_q) decayed_lower(w.qk(), w.gam_mat.data(), L, true, P);
    } else {
        // P and M in one product where both are wanted: Kinv^T is packed once.
        if (L > 1) lower_product_rows(L, with_q ? 2 * L : L, Sk, with_q ? w.qg() : w.kg(L), w.kinv.data(),
                                      with_q ? P : M, w);
        // Zeros above the diagonal by assignment (lower_product_rows leaves the diagonal blocks'
        // upper parts there, possibly huge), M's diagonal too; P's diagonal exactly q_r . k_r (no gate).
        clear_upper(M, L, true);
        if (with_q) {
            clear_upper(P, L, false);
            for (int64_t r = 0; r < L; ++r) P[r * L + r] = dot(w.q() + r * Sk, w.k(L) + r * Sk, Sk);
        }
    }
}

namespace {

// c (m rows, Sv floats apart) += alpha A S0 for S0 in the scratch's state panels (A with its row
// scales): a product per panel, each panel read in place.
void add_times_state(int64_t m, float alpha, const GatedOperand &a, const float *s0, float *c, ChunkScratch &w) {
    const StatePanels state{w.Sk, w.state_panel};
    for (int64_t j0 = 0; j0 < w.Sv; j0 += state.panel)
        w.product(m, state.panel, w.Sk, alpha, a, rows(s0 + state.first_of(j0), state.panel), true, c + j0, w.Sv);
}

void solve_deltas(const float *s0, int64_t L, bool with_out, float out_scale, ChunkScratch &w) {
    const int64_t Sv = w.Sv;
    float *R = w.r(), *Dm = w.dm.data();
    const float *M = w.m(L);
    if (with_out) {
        // [O; R] = diag(factors) [Qg; Kg] S0 + [0; V]: O's rows read as zeros, row factors
        // out_scale e_r, then -e_r (KDA: out_scale, -1), the same floats as alpha times the row
        // factor of the two products on their own.
        float *factors = w.out_r_factors.data();
        for (int64_t r = 0; r < L; ++r) {
            const float e = w.kda ? 1.0f : w.e[r];
            factors[r] = out_scale * e;
            factors[L + r] = -e;
        }
        std::fill_n(w.o(L), L * Sv, 0.0f);
        GatedOperand qkg = gated_rows(w, Gated::QKg, L);
        qkg.scales.c_rows = factors;
        add_times_state(2 * L, 1.0f, qkg, s0, w.o(L), w);
    } else {
        add_times_state(L, -1.0f, gated_rows(w, Gated::Kg, L), s0, R, w);
    }
    // (I + diag(beta) M) Dm = diag(beta) R by forward substitution, Dm_r = beta_r (R_r - sum_{s<r}
    // M_rs Dm_s), in row blocks of 16: a block's rows take the earlier blocks' part as one product,
    // then the rows before them inside the block one by one (only M's strict lower triangle is
    // read). What is left in r is R - M Dm.
    constexpr int64_t block = 16;
    for (int64_t r0 = 0; r0 < L; r0 += block) {
        const int64_t r1 = std::min(L, r0 + block);
        if (r0 > 0) gemm(r1 - r0, Sv, r0, -1.0f, rows(M + r0 * L, L), rows(Dm, Sv), 1.0f, R + r0 * Sv, Sv, w.pack.data());
        for (int64_t r = r0; r < r1; ++r) {
            add_rows(-1.0f, M + r * L + r0, 1, r - r0, Dm + r0 * Sv, Sv, R + r * Sv, Sv);
            scale_rows(R + r * Sv, w.beta.data() + r, 1, Sv, 1, Dm + r * Sv);
        }
    }
}

}  // namespace

void solve_adjoint(int64_t L, int64_t n, const float *beta, const float *M, float *y, float *w, float *pack) {
    // (I + diag(beta) M)^T Y = dDm, with W = diag(beta) Y: Y_r = dDm_r - sum_{s>r} M_sr W_s, from the
    // last row up, in row blocks of 16 (as solve_deltas, transposed): a block's rows take the later
    // blocks' part as one product, then the rows after them inside the block one by one (only M's
    // strict lower triangle is read).
    constexpr int64_t block = 16;
    for (int64_t r1 = L; r1 > 0; r1 -= block) {
        const int64_t r0 = std::max<int64_t>(0, r1 - block);
        if (r1 < L) gemm(r1 - r0, n, L - r1, -1.0f, transposed(M + r1 * L + r0, L), rows(w + r1 * n, n), 1.0f, y + r0 * n, n, pack);
        for (int64_t r = r1 - 1; r >= r0; --r) {
            add_rows(-1.0f, M + (r + 1) * L + r, L, r1 - r - 1, w + (r + 1) * n, n, y + r * n, n);
            scale_rows(y + r * n, beta + r, 1, n, 1, w + r * n);
        }
    }
}

const float *chunk_deltas(const gdn_tensor &v, const Dims &d, ChunkUnit u, int64_t t0, int64_t L, const float *s0,
                          const float *z, ChunkScratch &w, bool with_out) {
    if (z) {
        scale_rows(z, w.beta.data(), L, d.Sv, 1, w.dm.data());  // as solve_deltas ends, row by row
        return z;
    }
    gather_rows(v, u.h, t0, L, u.b, d.Sv, w.r());
    solve_deltas(s0, L, with_out, static_cast<float>(d.scale), w);
    return w.r();
}

void advance_state(const float *s, float *s_next, int64_t L, ChunkScratch &w) {
    const int64_t Sk = w.Sk, Sv = w.Sv;
    if (s != s_next) std::copy_n(s, Sk * Sv, s_next);
    // The decay diag(gL) S is applied as the product adds S (GDA: one factor, KDA: one per key
    // channel, a row of S), not in a pass of its own over the state.
    GatedOperand kl_t = gated_transposed(w, Gated::Kl, L);
    float c_scale = w.gl[0];
    if (w.kda) {
        kl_t.scales.c_in = w.gl.data();
        c_scale = 1.0f;
    }
    const int64_t panel = w.state_panel;
    const StatePanels state{Sk, panel};
    for (int64_t j0 = 0; j0 < Sv; j0 += panel)
        w.product(Sk, panel, L, 1.0f, kl_t, rows(w.dm.data() + j0, Sv), c_scale, s_next + state.first_of(j0), panel);
}

namespace {

const float *stored_operand(ChunkScratch &w, Gated x, int64_t L) {
    switch (x) {
    case Gated::Qg: return w.qg();
    case Gated::Kg: return w.kg(L);
    case Gated::Kl: return w.kl.data();
    case Gated::QKg: break;
    }
    return w.qkg.data();
}

const float *raw_operand(ChunkScratch &w, Gated x, int64_t L) {
    return x == Gated::Qg || x == Gated::QKg ? w.q() : w.k(L);  // [Q; K] starts at Q
}

const float *row_factors(const ChunkScratch &w, Gated x) {
    switch (x) {
    case Gated::Qg:
    case Gated::Kg: return w.e.data();
    case Gated::Kl: return w.f.data();
    case Gated::QKg: break;
    }
    return w.e_twice.data();
}

// The bf16 copy of raw_operand's rows.
const uint16_t *raw_operand_bf16(ChunkScratch &w, Gated x, int64_t L) {
    return x == Gated::Qg || x == Gated::QKg ? w.q_bf16() : w.k_bf16(L);
}

}  // namespace

GatedOperand gated_rows(ChunkScratch &w, Gated x, int64_t L) {
    if (w.kda) return {rows(stored_operand(w, x, L), w.Sk), {}};
    GatedOperand a{rows(raw_operand(w, x, L), w.Sk), {row_factors(w, x), nullptr}};
    if (w.bf16_rows()) a.a_bf16 = rows(raw_operand_bf16(w, x, L), w.Sk);
    return a;
}

GatedOperand gated_transposed(ChunkScratch &w, Gated x, int64_t L) {
    if (w.kda) return {transposed(stored_operand(w, x, L), w.Sk), {}};
    GatedOperand a{transposed(raw_operand(w, x, L), w.Sk), {nullptr, row_factors(w, x)}};
    if (w.bf16_rows()) a.a_bf16 = transposed(raw_operand_bf16(w, x, L), w.Sk);
    return a;
}

void prefetch_rows(const gdn_tensor *t, int64_t i1, int64_t t_begin, int64_t t_end, int64_t i3, int64_t row_elements,
                   Pages pages) {
    if (t == nullptr) return;
    constexpr int page_bits = 12;  // 4 KiB pages; rows that share a page (beta, scalar gates) read it once
    uintptr_t last_page = 0;
    for (int64_t r = t_begin; r < t_end; ++r) {
        const void *row = element_ptr(*t, 0, i1, r, i3);
        const uintptr_t page = reinterpret_cast<uintptr_t>(row) >> page_bits;
        if (pages == Pages::Read && page != last_page) (void)*static_cast<const volatile char *>(row);
        last_page = page;
        prefetch_lines(row, row_bytes(*t, row_elements));
    }
}

void trmm(Tri tri, int64_t L, int64_t n, float alpha, Mat t, const float *b, int64_t ldb, float c_scale, float *c,
          int64_t ldc, float *pack) {
    constexpr int64_t block = 16;
    for (int64_t r0 = 0; r0 < L; r0 += block) {
        const int64_t r1 = std::min(L, r0 + block);
        // The rectangle off the diagonal block: columns [0, r0) (lower) or [r1, L) (upper).
        const int64_t k0 = tri == Tri::Upper ? r1 : 0, k1 = tri == Tri::Upper ? L : r0;
        const Mat part{t.p + r0 * t.row_stride + k0 * t.col_stride, t.row_stride, t.col_stride};
        gemm(r1 - r0, n, k1 - k0, alpha, part, rows(b + k0 * ldb, ldb), c_scale, c + r0 * ldc, ldc, pack);
        // The diagonal block, entry by entry inside the triangle.
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t s0 = tri == Tri::Upper ? r : r0;
            const int64_t s1 = tri == Tri::Upper ? r1 : r + 1;
            add_rows(alpha, t.p + r * t.row_stride + s0 * t.col_stride, t.col_stride, s1 - s0, b + s0 * ldb, ldb,
                     c + r * ldc, n);
        }
    }
}

void store_rows_streamed(const float *src, int64_t L, int64_t n, float *dst, int64_t ldd) {
    for (int64_t r = 0; r < L; ++r) stream_row(src + r * n, n, dst + r * ldd);
    stream_fence();
}

}  // namespace gdn::cpu
