// Moving states between the caller's tensors and the chunk math's panels (StatePanels in
// cpu/chunk_core.h). A state tensor [Sk, Sv, Hv, *] is key-major (nb[0] = 4: ggml's layout, a
// value channel's Sk floats contiguous) or value-major (nb[1] = 4: PyTorch's [..., K, V], a key
// channel's Sv floats contiguous); the panels are value-contiguous, so a value-major state is
// copied row by row and a key-major one transposed. Both give the same floats.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "core/tensor.h"

namespace gdn::cpu {

// A state tensor whose key index is not the contiguous one: value-major (nb[1] = 4). With Sk =
// 1 or Sv = 1 both strides may be 4, and then either reading is right.
inline bool value_major(const gdn_tensor &t) { return !keys_contiguous(t); }

// Asks the caches for state (h, index) of t (nullptr: nothing), ahead of a load_state.
void prefetch_state(const gdn_tensor *t, const Dims &d, int64_t h, int64_t index);
// State (h, index) of t into s, an Sk x Sv state in panels of `panel` columns (StatePanels; Sv:
// row-major), and back. store_state streams (cpu/cache_control.h): a state is written once and
// not read again by this call, and a batch writes one per sequence and head (200 MB for 64
// sequences at the 27B shape); streaming skips reading each destination line first.
void load_state(const gdn_tensor &t, const Dims &d, int64_t h, int64_t index, float *s, int64_t panel);
void store_state(const gdn_tensor &t, const Dims &d, int64_t h, int64_t index, const float *s, int64_t panel);

}  // namespace gdn::cpu
