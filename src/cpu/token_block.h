// The per-token recurrence over a block of tokens, a few state columns at a time.
//
// For decoding and short inputs the work is the state: Sk x Sv floats read and written per step,
// against 4 Sk Sv FLOPs. So the loops run over groups of state columns (column j = value channel
// j, contiguous over the key index in a key-major state; token_block_rows below takes the rows of
// a value-major one), and each group goes through every token of the block while it sits in L1:
// the state is read once and written once per block, and each token is two passes over the
// columns (the first only reads them):
//   d_j = beta (v_j - c_j . (a o k));  c_j = a o c_j + d_j k;  o_j = scale c_j . q
// (a = exp(g): one decay, or one per key channel). The same recurrence as src/math/token_step.h.
// A group's columns share each load of k, q and a; the first pass of one group runs inside the
// second pass of another (token_block.cpp says why).
#pragma once

#include <cstdint>

namespace gdn::cpu {

// Floats per vector of the block's arithmetic; rows are padded with zeros to a multiple of it.
constexpr int64_t kTokenLanes = 8;
inline int64_t padded_row(int64_t n) { return (n + kTokenLanes - 1) / kTokenLanes * kTokenLanes; }

// A state in memory as lines `stride` bytes apart: for token_block the columns of a key-major
// state (line j = value channel j, Sk contiguous floats), for token_block_rows the rows of a
// value-major one (line i = key channel i, Sv contiguous floats).
struct StateLines {
    char *base = nullptr;  // nullptr: none (a zero source, or nothing to write)
    int64_t stride = 0;
    float *line(int64_t n) const { return reinterpret_cast<float *>(base + n * stride); }
};

// One block of tokens of one unit. Rows of k, q, the decay a (one gate repeated, or one per key
// channel) and a o k, padded with zeros to `padded` floats; per token t < tokens: rows of v and
// out (Sv floats; out may be nullptr: not written), beta, and snapshot[t]: where the state after
// token t goes (base nullptr: nowhere), in the layout of the kernel that runs the block.
struct TokenBlock {
    int64_t Sk = 0, padded = 0, Sv = 0, tokens = 0;
    float scale = 1.0f;
    const float *k = nullptr, *q = nullptr, *decay = nullptr, *decayed_k = nullptr;  // [tokens][padded]
    const float *beta = nullptr;                                                     // [tokens]
    const float *const *v = nullptr;
    float *const *out = nullptr;
    const StateLines *snapshot = nullptr;
    // The state the worker's next unit starts from, in this kernel's layout (base nullptr: none):
    // a decoding step asks L2 for it while its second passes run (the kernels say how).
    StateLines ahead;
};

// Columns of the state that go through a block together (a group), and how many groups' columns
// the block keeps in its scratch at once.
constexpr int kTokenGroup = 4;
constexpr int64_t kTokenGroupsInFlight = 2;
// Floats of token_block's scratch: the groups' columns between tokens, and a group of zero columns.
inline int64_t token_block_scratch(int64_t padded) { return (kTokenGroupsInFlight + 1) * kTokenGroup * padded; }

// Runs the block on every column of a key-major state: the state enters from `from` (base
// nullptr: zero) and leaves to `to` (base nullptr: not kept). from and to may be the same.
void token_block(const TokenBlock &block, StateLines from, StateLines to, float *scratch);

// The same on a value-major state (from, to and the snapshots are rows), with the same bits
// (token_rows.cpp), in strips of up to kRowStrip value channels.
constexpr int64_t kRowStrip = 32;
// Floats of token_block_rows's scratch: a strip's work rows, a strip of zeros, one of rows
// nobody reads, and a strip-wide row of v.
inline int64_t token_block_rows_scratch(int64_t padded) { return 3 * kRowStrip * padded + kRowStrip; }
void token_block_rows(const TokenBlock &block, StateLines from, StateLines to, float *scratch);

}  // namespace gdn::cpu
