#include "cpu/chunk_vector.h"

#include "cpu/chunk_plan.h"
#include "cpu/vectorized.h"

// Vectors are passed only inside always-inlined helpers: the ABI GCC warns about is never used.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace gdn::cpu {

namespace {
constexpr int lanes = kLanes;

// W floats in one vector (8: one AVX register, two SSE or NEON ones; 16: one AVX-512 register),
// loaded and stored by always-inlined helpers.
template <int W>
struct FloatVec {
    typedef float type __attribute__((vector_size(W * sizeof(float))));
};
template <int W>
inline __attribute__((always_inline)) typename FloatVec<W>::type load_vector(const float *p) {
    typename FloatVec<W>::type v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
template <int W>
inline __attribute__((always_inline)) void store_vector(float *p, typename FloatVec<W>::type v) {
    __builtin_memcpy(p, &v, sizeof v);
}
}  // namespace

namespace {

// exp(v) rounded to float (exp_to_float's contract), inlined into each clone that calls it.
constexpr double kFlushBelow = -100 * 0.6931471805599453;  // exp(v) under 2^-100 is 0: chunk_vector.h says why
inline __attribute__((always_inline)) float exp_one(double v) {
    constexpr double log2e = 1.4426950408889634, ln2_hi = 0.6931471805599453, ln2_lo = 2.3190468138462996e-17;
    // NaN is clamped too (to 0), so that the conversion of k below stays defined; the
    // result is replaced by the NaN at the end.
    const double c = v != v ? 0.0 : (v < -110.0 ? -110.0 : (v > 100.0 ? 100.0 : v));
    const double k = __builtin_nearbyint(c * log2e);
    const double r = (c - k * ln2_hi) - k * ln2_lo;  // |r| <= ln2 / 2
    // exp(r) by its Taylor series to r^8 (error < 1e-9 relative on the reduced range).
    double p = 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // 2^k as a double built from its exponent bits (k in [-159, 145]: always a normal double).
    // k + 1.5 * 2^52 is exact and holds k in its low bits: a bit cast and integer adds, which
    // vectorise (converting a double to int64 directly needs AVX-512).
    const double shifted = k + 0x1.8p52;
    int64_t low;
    __builtin_memcpy(&low, &shifted, sizeof low);
    const int64_t bits = (low - 0x4338000000000000 + 1023) << 52;
    double scale;
    __builtin_memcpy(&scale, &bits, sizeof scale);
    const float result = c < kFlushBelow ? 0.0f : static_cast<float>(p * scale);
    return v != v ? static_cast<float>(v) : result;
}

}  // namespace

GDN_VECTORIZED void exp_to_float(const double *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = exp_one(x[i]);
}

namespace {

// One row of kda_gated_rows (restrict parameters, so that the loop vectorises without checks);
// without kExp, e holds the row's factors already.
template <bool kExp>
inline __attribute__((always_inline)) void kda_gated_row(int64_t n, const double *__restrict gam,
                                                         const float *__restrict gl, const float *__restrict k,
                                                         float *__restrict e, float *__restrict einv,
                                                         float *__restrict f, float *__restrict kg,
                                                         float *__restrict kl, float *__restrict kinv) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = kExp ? exp_one(gam[i]) : e[i], inverse = 1.0f / x, tail = gl[i] * inverse;
        if (kExp) e[i] = x;
        einv[i] = inverse;
        f[i] = tail;
        kg[i] = k[i] * x;
        kl[i] = k[i] * tail;
        kinv[i] = k[i] * inverse;
    }
}

}  // namespace

GDN_VECTORIZED void kda_gated_rows(int64_t L, int64_t n, const double *gam, const float *gl, const float *q,
                                   const float *k, const KdaGated &out) {
    for (int64_t i = 0; i < n; ++i) out.e[(L - 1) * n + i] = gl[i];  // exp(gam_L), the same bits by construction
    for (int64_t r = 0; r < L; ++r) {
        const int64_t row = r * n;
        if (gam != nullptr && r + 1 < L)
            kda_gated_row<true>(n, gam + row, gl, k + row, out.e + row, out.einv + row, out.f + row, out.kg + row,
                                out.kl + row, out.kinv + row);
        else
            kda_gated_row<false>(n, nullptr, gl, k + row, out.e + row, out.einv + row, out.f + row, out.kg + row,
                                 out.kl + row, out.kinv + row);
    }
    if (q != nullptr) scale_rows(q, out.e, L, n, n, out.qg);
}

GDN_VECTORIZED float dot(const float *a, const float *b, int64_t n) {
    float part[lanes] = {};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes)
        for (int l = 0; l < lanes; ++l) part[l] += a[i + l] * b[i + l];
    for (int l = 0; i + l < n; ++l) part[l] += a[i + l] * b[i + l];
    float sum = 0.0f;
    for (int l = 0; l < lanes; ++l) sum += part[l];
    return sum;
}

namespace {
// The sum in double of dot_f64 and its batched forms (inlined into each clone).
inline __attribute__((always_inline)) double row_dot_f64(const float *a, const float *b, int64_t n) {
    double part[lanes] = {};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes)
        for (int l = 0; l < lanes; ++l) part[l] += double(a[i + l]) * double(b[i + l]);
    for (int l = 0; i + l < n; ++l) part[l] += double(a[i + l]) * double(b[i + l]);
    double sum = 0.0;
    for (int l = 0; l < lanes; ++l) sum += part[l];
    return sum;
}
}  // namespace

GDN_VECTORIZED double dot_f64(const float *a, const float *b, int64_t n) { return row_dot_f64(a, b, n); }

GDN_VECTORIZED void row_dots_f64(int64_t L, int64_t n, const float *a, const float *b, double *out) {
    for (int64_t r = 0; r < L; ++r) out[r] = row_dot_f64(a + r * n, b + r * n, n);
}

namespace {
// The three dots of gda_gate_terms for `Rows` rows at once, each added up as row_dot_f64 adds it
// up (the same partial sums, in the same order): a dot of 128 floats ends in 16 dependent adds
// of its partial sums, and rows taken together give the core 3 x Rows such chains to interleave.
template <int Rows>
inline __attribute__((always_inline)) void gate_dots_f64(int64_t n, const float *dqg, const float *q,
                                                         const float *dkg, const float *dkl, const float *k,
                                                         double (*out)[3]) {
    double part[Rows][3][lanes] = {};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes)
        for (int b = 0; b < Rows; ++b) {
            const int64_t at = b * n + i;
            for (int l = 0; l < lanes; ++l) {
                const double kk = k[at + l];
                part[b][0][l] += double(dqg[at + l]) * double(q[at + l]);
                part[b][1][l] += double(dkg[at + l]) * kk;
                part[b][2][l] += double(dkl[at + l]) * kk;
            }
        }
    for (int b = 0; b < Rows; ++b) {
        const int64_t at = b * n + i;
        for (int l = 0; i + l < n; ++l) {
            const double kk = k[at + l];
            part[b][0][l] += double(dqg[at + l]) * double(q[at + l]);
            part[b][1][l] += double(dkg[at + l]) * kk;
            part[b][2][l] += double(dkl[at + l]) * kk;
        }
    }
    for (int b = 0; b < Rows; ++b)
        for (int d = 0; d < 3; ++d) {
            double sum = 0.0;
            for (int l = 0; l < lanes; ++l) sum += part[b][d][l];
            out[b][d] = sum;
        }
}
}  // namespace

GDN_VECTORIZED void gda_gate_terms(int64_t L, int64_t n, const float *dqg, const float *q, const float *dkg,
                                   const float *dkl, const float *k, const float *e, const float *f, double *single,
                                   double *link) {
    constexpr int rows = 4;
    int64_t r = 0;
    for (; r + rows <= L; r += rows) {
        const int64_t at = r * n;
        double dots[rows][3];
        gate_dots_f64<rows>(n, dqg + at, q + at, dkg + at, dkl + at, k + at, dots);
        for (int b = 0; b < rows; ++b) {
            single[r + b] = double(e[r + b]) * (dots[b][0] + dots[b][1]);
            link[r + b] = double(f[r + b]) * dots[b][2];
        }
    }
    for (; r < L; ++r) {
        const int64_t row = r * n;
        single[r] = double(e[r]) * (row_dot_f64(dqg + row, q + row, n) + row_dot_f64(dkg + row, k + row, n));
        link[r] = double(f[r]) * row_dot_f64(dkl + row, k + row, n);
    }
}

GDN_VECTORIZED void add_decayed_pairs(int64_t L, const float *dp, const float *dm, const float *decay, float *gp,
                                      float *gm) {
    for (int64_t r = 0; r < L; ++r) {
        const int64_t row = r * L;
        for (int64_t s = 0; s < r; ++s) {
            gp[row + s] += dp[row + s] * decay[row + s];
            gm[row + s] += dm[row + s] * decay[row + s];
        }
        gp[row + r] += dp[row + r];
    }
}

GDN_VECTORIZED void assemble_gate_gradient(int64_t L, int64_t gw, const double *__restrict wsum,
                                           const double *__restrict single, const double *__restrict link,
                                           const double *__restrict pair, double *__restrict sums,
                                           double *__restrict dg) {
    // Channels innermost, so the running sums of all channels advance together (no add chains).
    double *__restrict suffix = sums, *__restrict prefix = sums + gw;
    for (int64_t c = 0; c < 2 * gw; ++c) sums[c] = 0.0;
    for (int64_t t = L - 1; t >= 0; --t)
        for (int64_t c = 0; c < gw; ++c) {
            suffix[c] += single[t * gw + c];
            dg[t * gw + c] = wsum[c] + suffix[c] + pair[t * gw + c];
        }
    for (int64_t t = 0; t < L; ++t)
        for (int64_t c = 0; c < gw; ++c) {
            dg[t * gw + c] += prefix[c];
            prefix[c] += link[t * gw + c];
        }
}

GDN_VECTORIZED void to_floats(const double *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

GDN_VECTORIZED void products_f64(const float *a, const float *b, const float *c, const float *d, double *out,
                                 int64_t n) {
    if (c == nullptr) {
        for (int64_t i = 0; i < n; ++i) out[i] = double(a[i]) * b[i];
        return;
    }
    for (int64_t i = 0; i < n; ++i) out[i] = double(a[i]) * b[i] + double(c[i]) * d[i];
}

GDN_VECTORIZED void axpy(float alpha, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

namespace {

// add_rows on vectors of W floats: eight of them (W = 8: 64 columns, W = 16: 128) stay in
// registers while every x_j passes. Each element takes the same terms in the same order whatever
// W, so the width changes no bits.
template <int W>
inline __attribute__((always_inline)) void add_rows_in(float alpha, const float *coef, int64_t coef_stride,
                                                       int64_t count, const float *x, int64_t ldx, float *y,
                                                       int64_t n) {
    using Vec = typename FloatVec<W>::type;
    constexpr int block = 8 * W;
    int64_t i = 0;
    for (; i + block <= n; i += block) {
        Vec acc[block / W];
        for (int v = 0; v < block / W; ++v) acc[v] = load_vector<W>(y + i + v * W);
        for (int64_t j = 0; j < count; ++j) {
            const float a = alpha * coef[j * coef_stride];
            const float *xj = x + j * ldx + i;
            for (int v = 0; v < block / W; ++v) acc[v] += a * load_vector<W>(xj + v * W);
        }
        for (int v = 0; v < block / W; ++v) store_vector<W>(y + i + v * W, acc[v]);
    }
    for (; i + W <= n; i += W) {
        Vec acc = load_vector<W>(y + i);
        for (int64_t j = 0; j < count; ++j) acc += (alpha * coef[j * coef_stride]) * load_vector<W>(x + j * ldx + i);
        store_vector<W>(y + i, acc);
    }
    for (; i < n; ++i) {
        float acc = y[i];
        for (int64_t j = 0; j < count; ++j) acc += (alpha * coef[j * coef_stride]) * x[j * ldx + i];
        y[i] = acc;
    }
}

}  // namespace

#if GDN_VECTORIZED_CLONES
// add_rows on x86-64: 16-float vectors on AVX-512 (one register each; the 8-float form left
// half of every register and of every load unused there, in the triangles' diagonal blocks and
// the substitutions), 8-float ones in the AVX2 and baseline builds (their code as it was), chosen
// once from CPUID as GDN_VECTORIZED's clones are.
namespace {
using AddRows = void (*)(float, const float *, int64_t, int64_t, const float *, int64_t, float *, int64_t);
__attribute__((target("arch=x86-64-v4"))) void add_rows_avx512(float alpha, const float *coef, int64_t coef_stride,
                                                               int64_t count, const float *x, int64_t ldx, float *y,
                                                               int64_t n) {
    add_rows_in<16>(alpha, coef, coef_stride, count, x, ldx, y, n);
}
__attribute__((target("arch=x86-64-v3"))) void add_rows_avx2(float alpha, const float *coef, int64_t coef_stride,
                                                             int64_t count, const float *x, int64_t ldx, float *y,
                                                             int64_t n) {
    add_rows_in<8>(alpha, coef, coef_stride, count, x, ldx, y, n);
}
void add_rows_baseline(float alpha, const float *coef, int64_t coef_stride, int64_t count, const float *x,
                       int64_t ldx, float *y, int64_t n) {
    add_rows_in<8>(alpha, coef, coef_stride, count, x, ldx, y, n);
}

// Chosen on the first call, not by an ifunc resolver: a resolver runs while the dynamic loader
// relocates the library, before a sanitizer's runtime is set up, and a sanitized build's
// resolver (instrumented like any function) crashed there.
AddRows pick_add_rows() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) return add_rows_avx512;
    if (__builtin_cpu_supports("x86-64-v3")) return add_rows_avx2;
    return add_rows_baseline;
}
}  // namespace

void add_rows(float alpha, const float *coef, int64_t coef_stride, int64_t count, const float *x, int64_t ldx,
              float *y, int64_t n) {
    static const AddRows chosen = pick_add_rows();
    chosen(alpha, coef, coef_stride, count, x, ldx, y, n);
}
#else
GDN_VECTORIZED void add_rows(float alpha, const float *coef, int64_t coef_stride, int64_t count, const float *x,
                             int64_t ldx, float *y, int64_t n) {
    add_rows_in<8>(alpha, coef, coef_stride, count, x, ldx, y, n);
}
#endif

GDN_VECTORIZED void decayed_lower(const float *gram, const float *decay, int64_t L, bool with_diagonal, float *out) {
    for (int64_t r = 0; r < L; ++r) {
        const float *gr = gram + r * L, *dr = decay + r * L;
        float *o = out + r * L;
        for (int64_t s = 0; s < r; ++s) o[s] = gr[s] * dr[s];
        o[r] = with_diagonal ? gr[r] : 0.0f;
        for (int64_t s = r + 1; s < L; ++s) o[s] = 0.0f;
    }
}

GDN_VECTORIZED void clear_upper(float *c, int64_t L, bool with_diagonal) {
    for (int64_t r = 0; r < L; ++r)
        for (int64_t s = with_diagonal ? r : r + 1; s < L; ++s) c[r * L + s] = 0.0f;
}

GDN_VECTORIZED void add_gates(const double *prev, const float *gate, double *out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = (prev ? prev[i] : 0.0) + clamp_gate(gate[i]);
}

GDN_VECTORIZED void scale(float alpha, float *x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

GDN_VECTORIZED void add_product(const float *x, const float *z, float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i] * z[i];
}

GDN_VECTORIZED void scale_rows(const float *src, const float *scale, int64_t L, int64_t n, int64_t gw, float *dst) {
    for (int64_t r = 0; r < L; ++r) {
        const float *sr = src + r * n;
        float *dr = dst + r * n;
        if (gw == 1) {
            const float a = scale[r];
            for (int64_t i = 0; i < n; ++i) dr[i] = sr[i] * a;
        } else {
            const float *ar = scale + r * gw;
            for (int64_t i = 0; i < n; ++i) dr[i] = sr[i] * ar[i];
        }
    }
}

GDN_VECTORIZED void kda_pair_sums(int64_t L, int64_t n, const float *qg, const float *kg, const float *kinv,
                                  const float *dp_kinv, const float *dm_kinv, const float *dkinv, double *pair) {
    for (int64_t t = L - 1; t >= 1; --t) {
        const double *next = t + 1 < L ? pair + (t + 1) * n : nullptr;
        const int64_t row = t * n;
        double *out = pair + row;
        for (int64_t i = 0; i < n; ++i) {
            const double across = double(qg[row + i]) * dp_kinv[row + i] + double(kg[row + i]) * dm_kinv[row + i];
            const double down = double(kinv[row + i]) * dkinv[row + i];
            out[i] = (next ? next[i] : 0.0) + across - down;
        }
    }
}

}  // namespace gdn::cpu
