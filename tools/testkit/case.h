// A harness case: one op at one shape with one data regime, as gdn-ops lists and runs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gdn/gdn.h"

namespace gdn::testkit {

enum class Op { Forward, Backward };
enum class Gate { Zero, Mild, Strong, Spike, Mixed };  // see fill_gate in problem_data.cpp
enum class BetaFill { Random, Zero, One };

struct Shape {
    int64_t Sk = 16, Sv = 16, Hk = 1, Hv = 1, T = 1, B = 1, Bq = 1, K = 1;
};

struct Case {
    std::string group;  // seed, model, edge, fd, perf
    Op op = Op::Forward;
    Shape shape;
    bool kda = false;                            // per-channel gate (width Sk)
    gdn_head_map heads = GDN_HEAD_MAP_TILED;
    bool strided = false;                        // q/k/v (and their gradients) as views into a packed buffer
    bool s0 = true;                              // non-zero initial state
    Gate gate = Gate::Mild;
    BetaFill beta = BetaFill::Random;
    std::string model;                           // preset name for the model group, "" otherwise
    // Packed sequences (cu_seqlens, docs/VARLEN.md): N + 1 offsets from 0 to shape.T, whose
    // lengths are drawn by packed_offsets from (T, N); empty = not packed. Packed: B = Bq = 1.
    std::vector<int64_t> cu_seqlens;

    int64_t sequences() const { return cu_seqlens.empty() ? 0 : static_cast<int64_t>(cu_seqlens.size()) - 1; }
    // Sequences that own a state (the states tensors' ne[3] is this times K).
    int64_t state_sequences() const { return cu_seqlens.empty() ? shape.B : sequences(); }

    // Packs the case's T tokens into n sequences (sets B = Bq = 1 and cu_seqlens).
    void pack(int64_t n);

    // GATED_DELTA_NET_BACK(Sk=128,Sv=128,Hk=16,Hv=48,T=130,B=2,Bq=2,gate=scalar,heads=tiled,qk=strided,s0=1,K=1,g=mild,beta=rand)
    std::string label() const;
    const char *op_name() const { return op == Op::Forward ? "GATED_DELTA_NET" : "GATED_DELTA_NET_BACK"; }
    // Seed of the case's data: fixed per case (a hash of the label), offset by the run's seed.
    uint64_t seed(uint64_t run_seed) const;
    // Canonical FLOPs (SPEC section 8): per token and value head 8*Sk*Sv forward, 24*Sk*Sv backward.
    double canonical_flops() const;
    // Bytes of recurrent state a forward call reads (the initial states, when s0) and writes (the
    // snapshot slots among its last K tokens): what bounds decoding, where the arithmetic is small.
    double forward_state_bytes() const;
    // A forward of up to 16 tokens that moves state: timed against the state's bandwidth too.
    bool state_bound() const;
};

// N + 1 offsets from 0 to T (N <= T): a realistic mix of lengths, log-uniform between 1 and T
// (many short sequences, a few long ones), every one at least 1, fixed by (T, N).
std::vector<int64_t> packed_offsets(int64_t T, int64_t N);

const char *gate_name(Gate g);
const char *beta_name(BetaFill b);

// Every case of the default list, in groups seed, model, edge, fd; each shape for both ops.
std::vector<Case> default_cases();
// The perf cases (group perf): 27B at T = 1, 512, 4096; 80B at 4096; a KDA case; 27B with
// 4096 tokens packed as 64 sequences (to compare with the one 4096-token sequence), with and
// without s0.
std::vector<Case> perf_cases();

// Model-shape cases (q/k/v as views into the packed conv buffer) for a model with these sizes,
// at a few token counts: what --preset and --gguf run.
std::vector<Case> model_cases(const std::string &model, int64_t Sk, int64_t Sv, int64_t Hk, int64_t Hv,
                              const std::vector<int64_t> &token_counts, const std::string &group);

}  // namespace gdn::testkit
