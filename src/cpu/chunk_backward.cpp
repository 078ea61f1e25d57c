// The chunked backward of one group (ALGORITHM.md section 3), chunks in reverse.
//
// Per unit and chunk, with dSL = dL/dS_L carried from the later chunk and dOc = scale * dO:
//   dDm = P^T dOc + Kl dSL,           Y = A^T dDm
//   dS0 = gL o dSL + Qg^T dOc - Kg^T diag(beta) Y          (carried to the earlier chunk)
//   dQg = dOc S0^T,   dKg = -diag(beta) Y S0^T,   dKl = Dm dSL^T
//   dP  = dOc Dm^T (s <= r),   dM = -diag(beta) Y Dm^T (s < r)
//   dV  = diag(beta) Y,   dbeta_r = Y_r . (R - M Dm)_r
// (Dm = A diag(beta) R gives dA = dDm (beta o R)^T, dLmat = -A^T dA A^T = -Y Dm^T, dM = diag(beta) dLmat.)
// The gate gradient is assembled per token without cancelling sums: every exp(gam_r - gam_s)
// factor (pairs s < r inside the chunk, and (L, r) for Kl) contributes to dg_t only for
// s < t <= r, every exp(gam_r) factor (Qg, Kg) to dg_t for t <= r, and gL to every t.
#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "core/tensor.h"
#include "cpu/chunk_drivers.h"
#include "cpu/chunk_vector.h"
#include "cpu/gemm.h"

namespace gdn::cpu {

BackwardLayout BackwardLayout::of(int64_t chunks, int64_t T, int64_t max_chunk) {
    const int64_t max_checkpoints = (T + max_chunk - 1) / max_chunk + 1;
    BackwardLayout l;
    l.chunks_per_segment = std::max<int64_t>(1, (chunks + max_checkpoints - 1) / max_checkpoints);
    l.segments = (chunks + l.chunks_per_segment - 1) / l.chunks_per_segment;
    return l;
}

BackwardLayout BackwardLayout::widest(const BackwardLayout &a, const BackwardLayout &b) {
    return {std::max(a.chunks_per_segment, b.chunks_per_segment), std::max(a.segments, b.segments)};
}

BackwardLayout backward_layout(const Dims &d, const std::vector<int64_t> &ends, int64_t max_chunk) {
    return BackwardLayout::of(static_cast<int64_t>(ends.size()), d.T, max_chunk);
}

void BackwardWork::resize(const Dims &d, int64_t max_chunk) {
    const int64_t C = max_chunk, Sk = d.Sk, Sv = d.Sv, gw = d.gate_width;
    chunk.resize(d, max_chunk);
    d_state.resize(Sk * Sv);
    doy.resize(2 * C * Sv);
    y.resize(C * Sv);
    ddm.resize(C * Sv);
    dqkg.resize(2 * C * Sk);
    dkl.resize(C * Sk);
    dkinv.resize(gw != 1 ? C * Sk : 0);
    dpm.resize(2 * C * C);
    gm_pair.resize(gw == 1 ? 2 * C * C : 0);
    for (auto *v : {&single, &link, &pair, &dgam}) v->resize(C * gw);
    acc.resize(std::max<int64_t>(C, 2) * gw);
    wterm.resize(gw);
}

uint64_t BackwardWork::bytes() const {
    uint64_t n = chunk.bytes();
    for (const auto *v : {&d_state, &doy, &y, &ddm, &dqkg, &dkl, &dkinv, &dpm, &gm_pair}) n += v->size() * sizeof(float);
    for (const auto *v : {&single, &link, &pair, &acc, &dgam, &wterm}) n += v->size() * sizeof(double);
    return n;
}

void GroupBackward::resize(const Dims &d, int64_t max_chunk, const BackwardLayout &layout) {
    const bool gda = d.gate_width == 1;
    units = units_of(d);
    area = d.Sk * d.Sv;
    C = max_chunk;
    segments = layout.segments;
    chunks_per_segment = layout.chunks_per_segment;
    replay_slots = chunks_per_segment > 1 ? std::max<int64_t>(3, chunks_per_segment) : 0;
    share_floats = 2 * C * d.Sk + (gda ? 2 * C * C : 0);
    gram.resize(gda ? chunks_per_segment * C * C : 0);
    checkpoints.resize(units * segments * area);
    replay.resize(units * replay_slots * area);
    carries.resize(units * 2 * area);
    carry_side.resize(units);
    shares.resize(units * chunks_per_segment * share_floats);
}

uint64_t GroupBackward::bytes() const {
    uint64_t n = carry_side.size();
    for (const auto *v : {&gram, &checkpoints, &replay, &carries, &shares}) n += v->size() * sizeof(float);
    return n;
}

namespace {

float *row_ptr(const gdn_tensor &t, int64_t i1, int64_t i2, int64_t i3) {
    return reinterpret_cast<float *>(element_ptr(t, 0, i1, i2, i3));
}

// A unit's share of its group's chunk: dq, dk rows (L x Sk); GDA: dP o Gam, dM o Gam (L x L),
// which the group multiplies by Q and K once for all its units.
struct UnitShare {
    float *dq, *dk, *gp, *gm;
};

UnitShare share_of(GroupBackward &g, int64_t u, int64_t j, int64_t Sk) {
    float *base = g.shares.data() + (u * g.chunks_per_segment + j) * g.share_floats;
    const int64_t rows = g.C * Sk;
    return {base, base + rows, base + 2 * rows, base + 2 * rows + g.C * g.C};
}

// dg_t = w + sum_{r >= t} single_r + sum_{r < t} link_r + pair_t, per channel; written to w.dgam.
// Channels innermost, so the running sums of all channels advance together (no add chains).
void assemble_gate_gradient(int64_t L, int64_t gw, const double *wsum, BackwardWork &w) {
    double *suffix = w.acc.data(), *prefix = w.acc.data() + gw;  // acc is free once the pairs are summed
    std::fill_n(suffix, 2 * gw, 0.0);
    for (int64_t t = L - 1; t >= 0; --t)
        for (int64_t c = 0; c < gw; ++c) {
            suffix[c] += w.single[t * gw + c];
            w.dgam[t * gw + c] = wsum[c] + suffix[c] + w.pair[t * gw + c];
        }
    for (int64_t t = 0; t < L; ++t)
        for (int64_t c = 0; c < gw; ++c) {
            w.dgam[t * gw + c] += prefix[c];
            prefix[c] += w.link[t * gw + c];
        }
}

// GDA: the pair terms of the gate gradient (X_rs = dP_rs P_rs + dM_rs M_rs, s < r: dg_t gets
// the sum over s < t <= r), and this unit's share of the group's dq, dk: the row-scaled single
// terms here, the P and M terms summed into gp, gm for one product per chunk.
void gda_pairs_and_dqk(int64_t L, int64_t Sk, const float *dP, const float *dM, const float *dQg, const float *dKg,
                       const UnitShare &out, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const float *P = c.p.data(), *M = c.m.data();
    std::vector<double> &acc = w.acc, &pair = w.pair;
    // Pairs X_rs = dP_rs P_rs + dM_rs M_rs (s < r); dg_t gets sum over s < t <= r.
    for (int64_t t = L - 1; t >= 1; --t) {
        double total = 0.0;
        for (int64_t s = 0; s < t; ++s) {
            acc[s] += double(dP[t * L + s]) * P[t * L + s] + double(dM[t * L + s]) * M[t * L + s];
            total += acc[s];
        }
        pair[t] = total;
    }
    // The group's dq, dk: row-scaled single terms here; P and M terms through gp, gm.
    for (int64_t r = 0; r < L; ++r) {
        axpy(c.e[r], dQg + r * Sk, out.dq + r * Sk, Sk);
        axpy(c.e[r], dKg + r * Sk, out.dk + r * Sk, Sk);
        axpy(c.f[r], w.dkl.data() + r * Sk, out.dk + r * Sk, Sk);
        for (int64_t s = 0; s <= r; ++s) {
            const float gam = s == r ? 1.0f : c.gam_mat[r * L + s];
            out.gp[r * L + s] += dP[r * L + s] * gam;
            if (s < r) out.gm[r * L + s] += dM[r * L + s] * gam;
        }
    }
}

// KDA: the per-channel pair terms of the gate gradient (X^i_rs = (dP_rs Qg_ri + dM_rs Kg_ri)
// Kinv_si, s < r), and this unit's dq, dk through the factored exp(gam_r - gam_s).
void kda_pairs_and_dqk(int64_t L, int64_t Sk, float *dP, const float *dM, const float *dQg, const float *dKg,
                       const UnitShare &out, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    const float *Qg = c.qg(), *Kg = c.kg(L);
    float *pack = c.pack.data();
    const int64_t gw = Sk;
    std::vector<double> &acc = w.acc, &pair = w.pair;
    // Pairs per channel: X^i_rs = (dP_rs Qg_ri + dM_rs Kg_ri) Kinv_si for s < r.
    const float *Kinv = c.kinv.data();
    if (L > 1) {
        for (int64_t t = L - 1; t >= 1; --t)
            kda_pair_row(t, Sk, dP + t * L, dM + t * L, Qg + t * Sk, Kg + t * Sk, Kinv, acc.data(),
                         pair.data() + t * gw);
    }
    // Diagonal of P (no gate): dq_r += dP_rr k_r, dk_r += dP_rr q_r; then strict parts.
    for (int64_t r = 0; r < L; ++r) {
        const float dpr = dP[r * L + r];
        axpy(dpr, c.k(L) + r * Sk, out.dq + r * Sk, Sk);
        axpy(dpr, c.q() + r * Sk, out.dk + r * Sk, Sk);
        dP[r * L + r] = 0.0f;
    }
    if (L > 1) {
        // dKinv = [dP; dM]^T [Qg; Kg];  [dQg; dKg] += [dP; dM] Kinv.
        gemm(L, Sk, 2 * L, 1.0f, transposed(w.dpm.data(), L), rows(c.qkg.data(), Sk), false, w.dkinv.data(), Sk, pack);
        gemm(2 * L, Sk, L, 1.0f, rows(w.dpm.data(), L), rows(Kinv, Sk), true, w.dqkg.data(), Sk, pack);
    }
    add_product(c.e.data(), dQg, out.dq, L * Sk);
    add_product(c.e.data(), dKg, out.dk, L * Sk);
    add_product(c.f.data(), w.dkl.data(), out.dk, L * Sk);
    if (L > 1) add_product(c.einv.data(), w.dkinv.data(), out.dk, L * Sk);
}

// The backward of one unit over one chunk: dsl = dL/dS_L in, ds0 = dL/dS0 out; the unit's dq,
// dk (and GP, GM) added to `out`. The group's Q, K rows (and gram) are loaded.
void backward_unit_chunk(const BackwardArgs &a, ChunkUnit unit, int64_t t0, int64_t L, const float *s0,
                         const float *dsl, float *ds0, const UnitShare &out, BackwardWork &w) {
    const Dims &d = a.dims;
    ChunkScratch &c = w.chunk;
    const int64_t Sk = d.Sk, Sv = d.Sv, gw = d.gate_width, area = Sk * Sv;
    const bool kda = gw != 1;
    float *pack = c.pack.data();
    prepare_unit_chunk(*a.v, *a.g, *a.beta, d, unit, t0, L, true, c);
    solve_deltas(s0, L, c);
    const float *P = c.p.data(), *M = c.m.data(), *A = c.a.data(), *Dm = c.dm.data();
    const float *Qg = c.qg(), *Kg = c.kg(L);

    float *doc = w.doy.data(), *nby = w.doy.data() + L * Sv;
    const float scale = static_cast<float>(d.scale);
    for (int64_t r = 0; r < L; ++r) {
        float *dst = doc + r * Sv;
        if (a.d_out) {
            std::memcpy(dst, row_ptr(*a.d_out, unit.h, t0 + r, unit.b), sizeof(float) * Sv);
            cpu::scale(scale, dst, Sv);
        } else {
            std::fill(dst, dst + Sv, 0.0f);
        }
    }
    // dDm = P^T dOc + Kl dSL;  Y = A^T dDm;  nby = -beta o Y (triangles read as triangles: trmm).
    trmm(Tri::Upper, L, Sv, 1.0f, transposed(P, L), doc, Sv, 0.0f, w.ddm.data(), Sv, pack);
    gemm(L, Sv, Sk, 1.0f, rows(c.kl.data(), Sk), rows(dsl, Sv), true, w.ddm.data(), Sv, pack);
    trmm(Tri::Upper, L, Sv, 1.0f, transposed(A, L), w.ddm.data(), Sv, 0.0f, w.y.data(), Sv, pack);
    scale_rows(w.y.data(), c.beta.data(), L, Sv, 1, nby);
    cpu::scale(-1.0f, nby, L * Sv);
    // dS0 = gL o dSL + [Qg; Kg]^T [dOc; nby].
    if (kda) scale_rows(dsl, c.gl.data(), Sk, Sv, 1, ds0);
    else scale_rows(dsl, c.gl.data(), 1, area, 1, ds0);
    gemm(Sk, Sv, 2 * L, 1.0f, transposed(c.qkg.data(), Sk), rows(w.doy.data(), Sv), true, ds0, Sv, pack);
    // [dQg; dKg] = [dOc; nby] S0^T;  dKl = Dm dSL^T;  [dP; dM] = [dOc; nby] Dm^T.
    gemm(2 * L, Sk, Sv, 1.0f, rows(w.doy.data(), Sv), transposed(s0, Sv), false, w.dqkg.data(), Sk, pack);
    gemm(L, Sk, Sv, 1.0f, rows(Dm, Sv), transposed(dsl, Sv), false, w.dkl.data(), Sk, pack);
    gemm(2 * L, L, Sv, 1.0f, rows(w.doy.data(), Sv), transposed(Dm, Sv), false, w.dpm.data(), L, pack);
    float *dP = w.dpm.data(), *dM = w.dpm.data() + L * L;
    for (int64_t r = 0; r < L; ++r)
        for (int64_t s = r; s < L; ++s) {
            if (s > r) dP[r * L + s] = 0.0f;
            dM[r * L + s] = 0.0f;
        }
    // dV = beta o Y;  dbeta_r = Y_r . (R - M Dm)_r (R is not needed after this: Z overwrites it).
    float *Z = c.r.data();
    trmm(Tri::StrictlyLower, L, Sv, -1.0f, rows(M, L), Dm, Sv, 1.0f, Z, Sv, pack);
    for (int64_t r = 0; r < L; ++r) {
        if (a.dbeta) *row_ptr(*a.dbeta, unit.h, t0 + r, unit.b) = dot(w.y.data() + r * Sv, Z + r * Sv, Sv);
        if (a.dv) scale_rows(w.y.data() + r * Sv, c.beta.data() + r, 1, Sv, 1, row_ptr(*a.dv, unit.h, t0 + r, unit.b));
    }

    // Gate-gradient pieces: single (Qg, Kg), link (Kl with gam_L), the gL term, pairs (P, M).
    const float *dQg = w.dqkg.data(), *dKg = w.dqkg.data() + L * Sk;
    std::vector<double> &single = w.single, &link = w.link, &pair = w.pair, &acc = w.acc;
    std::fill_n(pair.begin(), L * gw, 0.0);
    std::fill_n(acc.begin(), L * gw, 0.0);
    if (kda) {
        products_f64(dQg, Qg, dKg, Kg, single.data(), L * Sk);
        products_f64(w.dkl.data(), c.kl.data(), nullptr, nullptr, link.data(), L * Sk);
    } else {
        for (int64_t r = 0; r < L; ++r) {
            const int64_t n = r * Sk;
            single[r] = dot_f64(dQg + n, Qg + n, Sk) + dot_f64(dKg + n, Kg + n, Sk);
            link[r] = dot_f64(w.dkl.data() + n, c.kl.data() + n, Sk);
        }
    }
    // The gL term: w_c = gL_c sum_j dSL_cj S0_cj (KDA per channel; GDA one sum).
    double *wterm = w.wterm.data();
    std::fill_n(wterm, gw, 0.0);
    if (kda)
        for (int64_t i = 0; i < Sk; ++i) wterm[i] = dot_f64(dsl + i * Sv, s0 + i * Sv, Sv);
    else
        wterm[0] = dot_f64(dsl, s0, area);
    for (int64_t ch = 0; ch < gw; ++ch) wterm[ch] *= c.gl[ch];

    if (kda) kda_pairs_and_dqk(L, Sk, dP, dM, dQg, dKg, out, w);
    else gda_pairs_and_dqk(L, Sk, dP, dM, dQg, dKg, out, w);
    assemble_gate_gradient(L, gw, wterm, w);
    if (a.dg)
        for (int64_t r = 0; r < L; ++r) {
            float *dg = row_ptr(*a.dg, unit.h, t0 + r, unit.b);
            for (int64_t ch = 0; ch < gw; ++ch) dg[ch] = static_cast<float>(w.dgam[r * gw + ch]);
        }
}


int64_t start_of(const std::vector<int64_t> &ends, int64_t ci) { return ci ? ends[ci - 1] : int64_t(0); }

float *checkpoint(GroupBackward &g, int64_t u, int64_t seg) { return g.checkpoints.data() + (u * g.segments + seg) * g.area; }

// Entry state of chunk c0 + j of segment seg: the checkpoint, then replayed states.
float *entry(GroupBackward &g, int64_t u, int64_t seg, int64_t j) {
    return j == 0 ? checkpoint(g, u, seg) : g.replay.data() + (u * g.replay_slots + j) * g.area;
}

float *carry(GroupBackward &g, int64_t u, int side) { return g.carries.data() + (2 * u + side) * g.area; }

// Loads the group's rows of chunk ci. Forward (!with_q): K only, and K K^T into the scratch's own
// gram; backward: Q and K, and the gram stored for the segment's chunk j by backward_gram.
void use_group_chunk(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t ci,
                     bool with_q, int64_t j, GroupBackward &g, ChunkScratch &c) {
    const int64_t t0 = start_of(ends, ci), L = ends[ci] - t0;
    load_group_rows(*a.q, *a.k, a.dims, bq, kh, t0, L, with_q, c);
    if (c.kda) return;
    if (with_q) {
        c.gram_view = g.gram.data() + j * g.C * g.C;
    } else {
        group_gram(L, false, c, c.gram.data());
        c.gram_view = c.gram.data();
    }
}

// One chunk forward of one unit (the group's chunk loaded): s_next = the state after chunk ci from s.
void forward_chunk(const BackwardArgs &a, const std::vector<int64_t> &ends, int64_t ci, ChunkUnit unit, const float *s,
                   float *s_next, ChunkScratch &c) {
    const int64_t t0 = start_of(ends, ci), L = ends[ci] - t0;
    prepare_unit_chunk(*a.v, *a.g, *a.beta, a.dims, unit, t0, L, false, c);
    solve_deltas(s, L, c);
    advance_state(s, s_next, L, c);
}

}  // namespace

void backward_gram(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, int64_t seg,
                   GroupBackward &g, BackwardWork &w) {
    ChunkScratch &c = w.chunk;
    if (c.kda || seg < 0) return;
    const int64_t per_seg = backward_layout(a.dims, ends, g.C).chunks_per_segment;
    const int64_t c0 = seg * per_seg, c1 = std::min<int64_t>(static_cast<int64_t>(ends.size()), c0 + per_seg);
    for (int64_t ci = c0; ci < c1; ++ci) {
        const int64_t t0 = start_of(ends, ci), L = ends[ci] - t0;
        load_group_rows(*a.q, *a.k, a.dims, bq, kh, t0, L, true, c);
        group_gram(L, true, c, g.gram.data() + (ci - c0) * g.C * g.C);
    }
}

void backward_checkpoints(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                          UnitRange units, GroupBackward &g, BackwardWork &w) {
    const Dims &d = a.dims;
    const int64_t chunks = static_cast<int64_t>(ends.size());
    const int64_t per_seg = backward_layout(d, ends, g.C).chunks_per_segment;
    for (int64_t u = units.begin; u < units.end; ++u) {
        const ChunkUnit unit = group_unit(d, bq, kh, u);
        float *first = checkpoint(g, u, 0);
        if (a.s0) load_state(*a.s0, d, unit.h, unit.b, first);
        else std::fill(first, first + g.area, 0.0f);
        std::fill(carry(g, u, 0), carry(g, u, 0) + g.area, 0.0f);
        g.carry_side[u] = 0;
    }
    // Within a segment the state runs through replay slots 1 and 2 alternately (per_seg >= 2 there).
    auto running = [&](int64_t ci, int64_t u) {
        const int64_t j = ci % per_seg;
        return j == 0 ? checkpoint(g, u, ci / per_seg) : g.replay.data() + (u * g.replay_slots + 1 + (j + 1) % 2) * g.area;
    };
    for (int64_t ci = 0; ci + 1 < chunks; ++ci) {
        use_group_chunk(a, bq, kh, ends, ci, false, 0, g, w.chunk);
        for (int64_t u = units.begin; u < units.end; ++u)
            forward_chunk(a, ends, ci, group_unit(d, bq, kh, u), running(ci, u), running(ci + 1, u), w.chunk);
    }
}

void backward_unit_segment(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                           UnitRange units, int64_t seg, GroupBackward &g, BackwardWork &w) {
    const Dims &d = a.dims;
    const int64_t Sk = d.Sk, Sv = d.Sv, area = g.area;
    const int64_t chunks = static_cast<int64_t>(ends.size());
    const int64_t per_seg = backward_layout(d, ends, g.C).chunks_per_segment;
    const int64_t c0 = seg * per_seg, c1 = std::min(chunks, c0 + per_seg);
    ChunkScratch &c = w.chunk;
    for (int64_t ci = c0; ci + 1 < c1; ++ci) {
        use_group_chunk(a, bq, kh, ends, ci, false, 0, g, c);
        for (int64_t u = units.begin; u < units.end; ++u)
            forward_chunk(a, ends, ci, group_unit(d, bq, kh, u), entry(g, u, seg, ci - c0), entry(g, u, seg, ci - c0 + 1), c);
    }
    for (int64_t ci = c1 - 1; ci >= c0; --ci) {
        const int64_t t0 = start_of(ends, ci), t1 = ends[ci], L = t1 - t0;
        const int64_t prev_start = ci > 0 ? start_of(ends, ci - 1) : t0;
        use_group_chunk(a, bq, kh, ends, ci, true, ci - c0, g, c);
        prefetch_rows(a.q, kh, prev_start, t0, bq, Sk);
        prefetch_rows(a.k, kh, prev_start, t0, bq, Sk);
        for (int64_t u = units.begin; u < units.end; ++u) {
            const ChunkUnit unit = group_unit(d, bq, kh, u);
            prefetch_rows(a.v, unit.h, prev_start, t0, unit.b, Sv);
            prefetch_rows(a.d_out, unit.h, prev_start, t0, unit.b, Sv);
            const UnitShare share = share_of(g, u, ci - c0, Sk);
            std::fill_n(share.dq, L * Sk, 0.0f);
            std::fill_n(share.dk, L * Sk, 0.0f);
            if (!c.kda) {
                std::fill_n(share.gp, L * L, 0.0f);
                std::fill_n(share.gm, L * L, 0.0f);
            }
            float *dsl = carry(g, u, g.carry_side[u]), *ds0 = carry(g, u, 1 - g.carry_side[u]);
            const int64_t slot = d.T - t1;
            if (a.d_states && slot < d.written_slots()) {
                load_state(*a.d_states, d, unit.h, slot * d.B + unit.b, w.d_state.data());
                axpy(1.0f, w.d_state.data(), dsl, area);
            }
            backward_unit_chunk(a, unit, t0, L, entry(g, u, seg, ci - c0), dsl, ds0, share, w);
            g.carry_side[u] = static_cast<uint8_t>(1 - g.carry_side[u]);
        }
    }
    if (seg == 0 && a.ds0)
        for (int64_t u = units.begin; u < units.end; ++u) {
            const ChunkUnit unit = group_unit(d, bq, kh, u);
            store_state(*a.ds0, d, unit.h, unit.b, carry(g, u, g.carry_side[u]));
        }
}

void backward_reduce_segment(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends,
                             int64_t seg, GroupBackward &g, BackwardWork &w) {
    const Dims &d = a.dims;
    const int64_t Sk = d.Sk;
    const int64_t chunks = static_cast<int64_t>(ends.size());
    const int64_t per_seg = backward_layout(d, ends, g.C).chunks_per_segment;
    const int64_t c0 = seg * per_seg, c1 = std::min(chunks, c0 + per_seg);
    ChunkScratch &c = w.chunk;
    for (int64_t ci = c0; ci < c1; ++ci) {
        const int64_t t0 = start_of(ends, ci), L = ends[ci] - t0;
        // The units' shares in unit order, into unit 0's.
        const UnitShare sum = share_of(g, 0, ci - c0, Sk);
        for (int64_t u = 1; u < units_of(d); ++u) {
            const UnitShare part = share_of(g, u, ci - c0, Sk);
            axpy(1.0f, part.dq, sum.dq, L * Sk);
            axpy(1.0f, part.dk, sum.dk, L * Sk);
            if (!c.kda) {
                axpy(1.0f, part.gp, sum.gp, L * L);
                axpy(1.0f, part.gm, sum.gm, L * L);
            }
        }
        if (!c.kda) {
            // dQ += GP K;  dK += [GP^T, GM + GM^T] [Q; K] (one product over 2L).
            load_group_rows(*a.q, *a.k, d, bq, kh, t0, L, true, c);
            float *pack = c.pack.data(), *lhs = w.gm_pair.data();
            for (int64_t r = 0; r < L; ++r)
                for (int64_t s = 0; s < L; ++s) {
                    lhs[r * 2 * L + s] = sum.gp[s * L + r];
                    lhs[r * 2 * L + L + s] = sum.gm[r * L + s] + sum.gm[s * L + r];
                }
            gemm(L, Sk, L, 1.0f, rows(sum.gp, L), rows(c.k(L), Sk), true, sum.dq, Sk, pack);
            gemm(L, Sk, 2 * L, 1.0f, rows(lhs, 2 * L), rows(c.q(), Sk), true, sum.dk, Sk, pack);
        }
        for (int64_t r = 0; r < L; ++r) {
            if (a.dq) std::memcpy(row_ptr(*a.dq, kh, t0 + r, bq), sum.dq + r * Sk, sizeof(float) * Sk);
            if (a.dk) std::memcpy(row_ptr(*a.dk, kh, t0 + r, bq), sum.dk + r * Sk, sizeof(float) * Sk);
        }
    }
}

void backward_group(const BackwardArgs &a, int64_t bq, int64_t kh, const std::vector<int64_t> &ends, GroupBackward &g,
                    BackwardWork &w) {
    const UnitRange units{0, units_of(a.dims)};
    const int64_t segments = backward_layout(a.dims, ends, g.C).segments;
    backward_checkpoints(a, bq, kh, ends, units, g, w);
    backward_gram(a, bq, kh, ends, segments - 1, g, w);
    for (int64_t seg = segments - 1; seg >= 0; --seg) {
        backward_unit_segment(a, bq, kh, ends, units, seg, g, w);
        backward_reduce_segment(a, bq, kh, ends, seg, g, w);
        backward_gram(a, bq, kh, ends, seg - 1, g, w);
    }
}

}  // namespace gdn::cpu
