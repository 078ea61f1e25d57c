// The AMX-BF16 kernel of gemm_bf16 (compiled with -mamx-tile -mamx-bf16 -mavx512f; called only
// where the host has AMX-BF16 and the kernel granted this process the tile data state,
// gemm_bf16.cpp). tdpbf16ps multiplies a 16 x 32 bf16 tile of A by a 32 x 16 tile of B (16 rows
// of interleaved pairs, the packed panel's layout) into a 16 x 16 F32 tile. Blocks of 32 x 32 of
// C take the 8 tile registers: 4 C tiles, 2 A tiles, 2 B tiles, so each tile loaded feeds two
// products. A is packed to 16-row multiples and 32-value rows (zero-padded), so every tile is
// full; the C tiles are stored to a buffer and the epilogue writes the rows and columns of C that
// exist. The sums run over k in blocks of 32 in order (the zero padding adds +0 terms).
#include <immintrin.h>

#include "cpu/gemm_bf16_pack_avx512.h"

namespace gdn::cpu::bf16_amx {

using namespace bf16_detail;

namespace {

constexpr int NR = 32;  // columns of a B panel: two B tiles

// The tile configuration (palette 1) every call loads: 8 tiles of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// C tiles 0 .. 3 (rows 0-15 x cols 0-15, 0-15 x 16-31, 16-31 x 0-15, 16-31 x 16-31) of a block
// from A rows a (lda values apart) and the panel; TWO_ROWS false: a block of 16 rows (tiles 0, 1).
template <bool TWO_ROWS>
void block(int64_t k_blocks, const uint16_t *a, int64_t lda, const uint16_t *panel, float *tiles) {
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (TWO_ROWS) {
        _tile_zero(2);
        _tile_zero(3);
    }
    const int64_t a_stride = lda * 2, b_stride = NR * 2 * 2;  // bytes
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
        const uint16_t *b = panel + kb * 16 * NR * 2;  // 16 rows of pairs
        _tile_loadd(4, a + kb * 32, a_stride);
        _tile_loadd(6, b, b_stride);
        _tile_loadd(7, b + 32, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if constexpr (TWO_ROWS) {
            _tile_loadd(5, a + 16 * lda + kb * 32, a_stride);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    constexpr int64_t ts = NR * sizeof(float);  // the buffer: 32 x 32 floats
    _tile_stored(0, tiles, ts);
    _tile_stored(1, tiles + 16, ts);
    if constexpr (TWO_ROWS) {
        _tile_stored(2, tiles + 16 * NR, ts);
        _tile_stored(3, tiles + 16 * NR + 16, ts);
    }
}

}  // namespace

void gemm(const Problem &pr, void *pack) {
    const Scratch s = scratch(pack, pr.m, pr.k);
    const int64_t k_pad = round_up(pr.k, kKPad), rows = round_up(pr.m, kRowPad), k_blocks = k_pad / kKPad;
    // A stored as bf16 rows that fill whole tiles is read in place; else packed.
    const bool a_in_place = pr.a.is_bf16 && pr.a.cs == 1 && pr.k == k_pad && pr.m == rows;
    const int64_t lda = a_in_place ? pr.a.rs : k_pad;
    const uint16_t *a = a_in_place ? static_cast<const uint16_t *>(pr.a.p) : s.a;
    if (!a_in_place) pack_a_fast(pr.m, pr.k, pr.a, rows, lda, s.a);
    static const TileConfig config;
    _tile_loadconfig(&config);
    const RowScales &sc = pr.scales;
    const bool read_c = pr.c_scale != 0.0f;
    for (int64_t j0 = 0; j0 < pr.n; j0 += NR) {
        const int cols = static_cast<int>(pr.n - j0 < NR ? pr.n - j0 : NR);
        pack_b_panel_fast<NR>(pr.k, k_pad, pr.b, j0, cols, sc.b_rows, s.panel);
        for (int64_t i0 = 0; i0 < rows; i0 += 32) {
            if (rows - i0 >= 32) block<true>(k_blocks, a + i0 * lda, lda, s.panel, s.tiles);
            else block<false>(k_blocks, a + i0 * lda, lda, s.panel, s.tiles);
            const int64_t i_end = pr.m < i0 + 32 ? pr.m : i0 + 32;
            for (int64_t i = i0; i < i_end; ++i) {
                const float row_alpha = sc.c_rows ? pr.alpha * sc.c_rows[i] : pr.alpha;
                const float row_c_scale = sc.c_in ? pr.c_scale * sc.c_in[i] : pr.c_scale;
                const float *t = s.tiles + (i - i0) * NR;
                const __m512 sum[2] = {_mm512_loadu_ps(t), _mm512_loadu_ps(t + 16)};
                finish_row<2>(pr.c + i * pr.ldc + j0, sum, cols, row_alpha, row_c_scale, read_c);
            }
        }
    }
    // Give the tile state back, so the kernel need not save it on a switch.
    _tile_release();
}

}  // namespace gdn::cpu::bf16_amx
