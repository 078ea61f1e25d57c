// Multi-query associative recall (MQAR): key-value pairs, then queries of earlier keys whose
// values must be produced.
//
// A sequence of seq_len tokens over a vocabulary of `vocab` tokens:
//
//     k1 v1 k2 v2 ... kP vP   0 0 kq v? 0 0 0 kq' v?' 0 ...
//
// Token 0 is filler. Keys are drawn without replacement from [1, vocab/2), values without
// replacement from [vocab/2, vocab). After the P pairs, every key is queried once, in random
// order, each query at a random even offset of the remaining positions and followed by its
// value (teacher forcing, as in Zoology's MQAR). The target at a query position is the value;
// every other position has no target. The model must therefore recall, at the query, the token
// that followed the same key earlier in the sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rng.h"

namespace mqar {

struct TaskConfig {
    int vocab = 64;
    int pairs = 8;
    int seq_len = 64;
};

constexpr int32_t kNoTarget = -1;

struct Batch {
    int sequences = 0, seq_len = 0;
    std::vector<int32_t> tokens;   // [sequences][seq_len]
    std::vector<int32_t> targets;  // [sequences][seq_len]; kNoTarget where there is no loss
};

// Empty when the configuration is usable, else what is wrong with it.
std::string check_task(const TaskConfig &task);

// Fills `out` with `sequences` fresh sequences drawn from `rng`.
void generate(const TaskConfig &task, int sequences, Rng &rng, Batch &out);

}  // namespace mqar
