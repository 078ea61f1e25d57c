// An independent reading of SPEC sections 3, 4 and 6: whether a call is valid, written from the
// spec rather than from src/core/validate.cpp, so that the fuzz target can hold the library's
// verdict against it in both directions (accepted something invalid, refused something valid).
#pragma once

#include <string>

#include "call.h"

namespace gdn::fuzz {

enum class Verdict {
    Valid,
    Invalid,   // `reason` says which rule
    Unknown    // overlap of tensors outside the arena: not decided here
};

struct Judgement {
    Verdict verdict = Verdict::Valid;
    std::string reason;
};

Judgement judge(const Call &c);

// Whether cu_seqlens and state_indices are each absent or inside the arena. Even a dry run reads
// the values of index tensors whose layout is valid, so a call with unreadable ones may not be made.
bool index_tensors_in_arena(const Call &c);

// Whether every tensor the library sees lies inside the arena (so the call may be run).
bool all_in_arena(const Call &c, std::string &which);

}  // namespace gdn::fuzz
