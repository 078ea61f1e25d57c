// Packed calls (cu_seqlens) next to the per-sequence calls on the same tokens: the test kit's
// reading of docs/VARLEN.md's layout (tools/testkit/sequence_views.h: sequence n = tokens
// [cu[n], cu[n+1]), state index n, snapshot slot s at index s*N + n), independent of the
// library's src/core/sequences.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "case.h"
#include "tensor_set.h"

namespace gdn::varlentest {

// The case's inputs, the packed call's outputs and the per-sequence calls' outputs (in tensors
// of the packed call's shapes, each sequence written through views), for one op.
struct Outcome {
    testkit::TensorSet packed{GDN_TYPE_F32}, per_sequence{GDN_TYPE_F32};
};

// Runs the case packed and sequence by sequence on `backend` (n_threads, chunk_size); throws
// std::runtime_error with gdn_last_error when a call fails.
Outcome run_both(const testkit::Case &c, const char *backend, int n_threads, int chunk_size, gdn_type type = GDN_TYPE_F32);

// The packed call only, with the inputs of seed `seed` (0: the case's own).
testkit::TensorSet run_packed(const testkit::Case &c, const char *backend, int n_threads, int chunk_size,
                              gdn_type type = GDN_TYPE_F32, uint64_t seed = 0);

// Names of the outputs of the case's op: out, states / dq, dk, dv, dg, dbeta, ds0.
std::vector<std::string> output_names(const testkit::Case &c);

// Index of the first element whose bits differ, or -1.
int64_t first_difference(const testkit::TensorSet &a, const testkit::TensorSet &b, const std::string &name);

// A packed case: Sk = Sv = size, Hk, Hv, T tokens in N sequences (lengths from packed_offsets).
testkit::Case packed_case(testkit::Op op, int64_t size, int64_t Hk, int64_t Hv, int64_t T, int64_t N);

}  // namespace gdn::varlentest
