// Run-time choice of the row conversion kernels (typed_rows_x86.cpp on x86-64, the scalar
// definitions of src/math/elements.h elsewhere), and the typed loads and stores built on them.
#include "cpu/typed_rows.h"

#include <cstring>

#include "cpu/cache_control.h"
#include "cpu/typed_rows_kernels.h"

namespace gdn::cpu {

namespace {

namespace generic {
void bf16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}
void f32_to_bf16(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}
void f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(src[i]);
}
void f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_f16(src[i]);
}
}  // namespace generic

bool always() { return true; }

// Best first; the last runs on every host.
const RowKernels kKernels[] = {
#if defined(GDN_TYPED_ROWS_X86)
    x86::avx512bf16_kernels(),
    x86::avx512_kernels(),
    x86::avx2_kernels(),
#endif
    {generic::bf16_to_f32, generic::f32_to_bf16, generic::f16_to_f32, generic::f32_to_f16, always, "generic"},
};

const RowKernels &best() {
    for (const RowKernels &k : kKernels)
        if (k.host_has()) return k;
    return kKernels[sizeof kKernels / sizeof kKernels[0] - 1];
}

const RowKernels *&current() {
    static const RowKernels *k = &best();
    return k;
}

// n floats into BF16 (else F16) elements.
void store_halves(gdn_type type, const float *src, int64_t n, uint16_t *dst) {
    if (type == GDN_TYPE_BF16) current()->f32_to_bf16(src, dst, n);
    else current()->f32_to_f16(src, dst, n);
}

}  // namespace

void load_row(gdn_type type, const void *src, int64_t n, float *dst) {
    switch (type) {
    case GDN_TYPE_BF16: return current()->bf16_to_f32(static_cast<const uint16_t *>(src), dst, n);
    case GDN_TYPE_F16: return current()->f16_to_f32(static_cast<const uint16_t *>(src), dst, n);
    default: std::memcpy(dst, src, sizeof(float) * n); return;
    }
}

void store_row(gdn_type type, const float *src, int64_t n, void *dst) {
    if (type == GDN_TYPE_F32) std::memcpy(dst, src, sizeof(float) * n);
    else store_halves(type, src, n, static_cast<uint16_t *>(dst));
}

void stream_store_row(gdn_type type, const float *src, int64_t n, void *dst) {
    if (type == GDN_TYPE_F32) return stream_row(src, n, static_cast<float *>(dst));
    // Half types: the partial lines at either end stored as usual, each whole line converted into
    // an aligned line here and streamed from it (the conversion kernels store as usual).
    constexpr int64_t line_halves = 32;
    uint16_t *out = static_cast<uint16_t *>(dst);
    int64_t head = 0;
    while (head < n && reinterpret_cast<uintptr_t>(out + head) % (line_halves * 2) != 0) ++head;
    store_halves(type, src, head, out);
    int64_t i = head;
    alignas(64) uint16_t line[line_halves];
    for (; i + line_halves <= n; i += line_halves) {
        store_halves(type, src + i, line_halves, line);
        stream_line(line, out + i);
    }
    store_halves(type, src + i, n - i, out + i);
}

void store_token_rows(const float *src, int64_t L, int64_t n, const gdn_tensor &t, int64_t i1, int64_t t0, int64_t i3) {
    for (int64_t r = 0; r < L; ++r) stream_store_row(t.type, src + r * n, n, element_ptr(t, 0, i1, t0 + r, i3));
    stream_fence();
}

const char *typed_rows_isa() { return current()->name; }

bool typed_rows_force_isa(const char *isa) {
    for (const RowKernels &k : kKernels)
        if (isa != nullptr && std::strcmp(isa, k.name) == 0 && k.host_has()) {
            current() = &k;
            return true;
        }
    return false;
}

}  // namespace gdn::cpu
