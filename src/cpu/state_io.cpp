#include "cpu/state_io.h"

#include <algorithm>
#include <cstring>

#include "core/tensor.h"
#include "cpu/cache_control.h"
#include "cpu/chunk_core.h"
#include "cpu/transpose.h"

namespace gdn::cpu {

namespace {

// Row i of a value-major state (Sv floats: S(i, .)), and the distance to the next one in floats;
// column j of a key-major one (Sk floats: S(., j)) the same way.
float *state_line(const gdn_tensor &t, int64_t line, int64_t h, int64_t index) {
    return value_major(t) ? reinterpret_cast<float *>(element_ptr(t, line, 0, h, index))
                          : reinterpret_cast<float *>(element_ptr(t, 0, line, h, index));
}
int64_t state_line_stride(const gdn_tensor &t) { return (value_major(t) ? t.nb[0] : t.nb[1]) / int64_t(sizeof(float)); }

// A key-major state is kept as S (row i = key channel, Sv contiguous) and stored transposed (the
// key index contiguous): a transpose, done in tiles so that both sides stay in cache lines (a
// packed batch of many short sequences loads and stores a state per sequence and head), and
// inside a tile in 4 x 4 blocks in registers (at T = 512 the element-by-element transposes
// were 4% of the KDA forward).
constexpr int64_t kTransposeTile = 16;

// Tiles a load asks for ahead of the one it transposes: a tile reads one line of each of 16
// stored columns, 16 short streams no hardware prefetcher follows, so a state out of L2 was
// read at the latency of each line.
constexpr int64_t kTilesAhead = 4;

// Visits the Sk x Sv state in tiles of kTransposeTile x kTransposeTile, inside a tile four state
// columns at a time: block(i, j) for the 4 x 4 block at (i, j) where both sides have four left,
// entry(i, j) one by one elsewhere. A tile's four columns are visited down all their rows before
// the next four (each stored column's lines are filled one after another). Before each tile,
// ahead(j0, i0) with the corner of the tile kTilesAhead later in this order (while there is one).
template <class Block, class Entry, class Ahead>
void for_state_blocks(int64_t Sk, int64_t Sv, Block block, Entry entry, Ahead ahead) {
    const int64_t tiles_i = (Sk + kTransposeTile - 1) / kTransposeTile;
    const int64_t tiles = tiles_i * ((Sv + kTransposeTile - 1) / kTransposeTile);
    int64_t tile = 0;
    for (int64_t j0 = 0; j0 < Sv; j0 += kTransposeTile) {
        const int64_t j1 = std::min(Sv, j0 + kTransposeTile);
        for (int64_t i0 = 0; i0 < Sk; i0 += kTransposeTile, ++tile) {
            if (const int64_t later = tile + kTilesAhead; later < tiles)
                ahead(later / tiles_i * kTransposeTile, later % tiles_i * kTransposeTile);
            const int64_t i1 = std::min(Sk, i0 + kTransposeTile);
            int64_t j = j0;
            for (; j + 4 <= j1; j += 4) {
                int64_t i = i0;
                for (; i + 4 <= i1; i += 4) block(i, j);
                for (; i < i1; ++i)
                    for (int64_t c = 0; c < 4; ++c) entry(i, j + c);
            }
            for (; j < j1; ++j)
                for (int64_t i = i0; i < i1; ++i) entry(i, j);
        }
    }
}

// Non-temporal stores where there are any (x86-64), plain ones elsewhere.
void stream_float(float *dst, float x) {
#if defined(__SSE2__)
    int bits;
    std::memcpy(&bits, &x, sizeof bits);
    _mm_stream_si32(reinterpret_cast<int *>(dst), bits);
#else
    *dst = x;
#endif
}
void stream_vec4(float *dst, vec4 x) {
#if defined(__SSE2__)
    if (reinterpret_cast<uintptr_t>(dst) % sizeof(vec4) == 0) {
        _mm_stream_ps(dst, x);
        return;
    }
#endif
    for (int c = 0; c < 4; ++c) stream_float(dst + c, x[c]);
}
// Asks for the lines of the tile at (j0, i0) of stored columns cols (ld floats apart), into L2
// (bursts of prefetches to L1 were found to be lost).
void prefetch_tile(const float *cols, int64_t ld, int64_t Sk, int64_t Sv, int64_t j0, int64_t i0) {
    const int64_t bytes = std::min(kTransposeTile, Sk - i0) * int64_t(sizeof(float));
    for (int64_t j = j0; j < std::min(Sv, j0 + kTransposeTile); ++j) prefetch_lines<2>(cols + j * ld + i0, bytes);
}

// The 4 x 4 blocks below keep four columns j .. j + 3 (j a multiple of 4) of a state row
// contiguous: a panel is the kernel's width (a multiple of 4), or Sv (the whole row).
void load_transposed(const float *cols, int64_t ld, int64_t Sk, int64_t Sv, float *s, int64_t panel) {
    const StatePanels state{Sk, panel};
    for_state_blocks(
        Sk, Sv,
        [&](int64_t i, int64_t j) {
            vec4 y[4];  // y[r] = S(i + r, j .. j + 3)
            load_transposed4(cols + j * ld + i, ld, y);
            for (int r = 0; r < 4; ++r) std::memcpy(s + state.at(i + r, j), &y[r], sizeof(vec4));
        },
        [&](int64_t i, int64_t j) { s[state.at(i, j)] = cols[j * ld + i]; },
        [&](int64_t j0, int64_t i0) { prefetch_tile(cols, ld, Sk, Sv, j0, i0); });
}

void store_transposed(const float *s, int64_t panel, int64_t Sk, int64_t Sv, float *cols, int64_t ld) {
    const StatePanels state{Sk, panel};
    for_state_blocks(
        Sk, Sv,
        [&](int64_t i, int64_t j) {
            vec4 y[4];  // y[c] = S(i .. i + 3, j + c): four floats of stored column j + c
            load_transposed4(s + state.at(i, j), panel, y);
            for (int c = 0; c < 4; ++c) stream_vec4(cols + (j + c) * ld + i, y[c]);
        },
        [&](int64_t i, int64_t j) { stream_float(cols + j * ld + i, s[state.at(i, j)]); }, [](int64_t, int64_t) {});
}

}  // namespace

void prefetch_state(const gdn_tensor *t, const Dims &d, int64_t h, int64_t index) {
    if (t == nullptr) return;
    const int64_t lines = value_major(*t) ? d.Sk : d.Sv, floats = value_major(*t) ? d.Sv : d.Sk;
    const float *first = state_line(*t, 0, h, index);
    const int64_t ld = state_line_stride(*t);
    for (int64_t n = 0; n < lines; ++n) prefetch_lines(first + n * ld, floats * int64_t(sizeof(float)));
}

// A value-major state's rows are the panels' rows: copied in memory order, a row's panels one
// after another.
void load_state(const gdn_tensor &t, const Dims &d, int64_t h, int64_t index, float *s, int64_t panel) {
    const float *first = state_line(t, 0, h, index);
    const int64_t ld = state_line_stride(t);
    if (!value_major(t)) return load_transposed(first, ld, d.Sk, d.Sv, s, panel);
    const StatePanels state{d.Sk, panel};
    for (int64_t i = 0; i < d.Sk; ++i)
        for (int64_t j0 = 0; j0 < d.Sv; j0 += panel)
            std::memcpy(s + state.at(i, j0), first + i * ld + j0, sizeof(float) * panel);
}

void store_state(const gdn_tensor &t, const Dims &d, int64_t h, int64_t index, const float *s, int64_t panel) {
    float *first = state_line(t, 0, h, index);
    const int64_t ld = state_line_stride(t);
    if (!value_major(t)) {
        store_transposed(s, panel, d.Sk, d.Sv, first, ld);
    } else {
        const StatePanels state{d.Sk, panel};
        for (int64_t i = 0; i < d.Sk; ++i)
            for (int64_t j0 = 0; j0 < d.Sv; j0 += panel) stream_row(s + state.at(i, j0), panel, first + i * ld + j0);
    }
    stream_fence();
}

}  // namespace gdn::cpu
