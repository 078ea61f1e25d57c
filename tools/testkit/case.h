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

// How the state-shaped tensors [Sk, Sv, Hv, *] lie in memory (SPEC section 3): keys contiguous
// (nb[0] = element size, ggml's order), values contiguous (nb[1] = element size: PyTorch's
// [..., K, V]), or mixed: the inputs state and d_states value-major, the outputs states and
// grads.state key-major (a call may mix them).
enum class StateLayout { KeyMajor, ValueMajor, Mixed };

// Which pool slot each sequence's state lives in (state_indices), for N sequences and S slots:
// in order (n), with gaps (n*S/N), reversed (S-1 - n*S/N), shuffled (a fixed permutation of the
// slots), or with gaps and every third sequence negative (-1, -2, -3: no state read or written).
enum class SlotPattern { InOrder, Gaps, Reversed, Shuffled, Negative };

// A state pool (SPEC section 2, state_indices): state, states, d_states and grads.state hold
// `slots` states, sequence n's in slot indices[n] (none when negative).
struct StatePool {
    int64_t slots = 0;  // 0: no pool
    SlotPattern pattern = SlotPattern::InOrder;
    gdn_type index_type = GDN_TYPE_I64;
    std::vector<int64_t> indices;      // one per sequence
    std::vector<int32_t> indices_i32;  // the same, passed to the library when index_type is I32
};

// The element types of a case (SPEC 3.1): q, k, v, out, d_out and their gradients in `x`; beta
// and its gradient in `beta`, g and its gradient in `g`; the states always F32 (F64 in the
// oracle's twin, see make_inputs). All F32 by default.
struct ElementTypes {
    gdn_type x = GDN_TYPE_F32;
    gdn_type beta = GDN_TYPE_F32;
    gdn_type g = GDN_TYPE_F32;
    // x, with beta and g in x where SPEC 3.1 allows it (g is F32 or BF16: F32 beside F16).
    static ElementTypes of(gdn_type x);
    bool all_f32() const { return x == GDN_TYPE_F32 && beta == GDN_TYPE_F32 && g == GDN_TYPE_F32; }
};

struct Case {
    std::string group;  // seed, model, edge, fd, varlen, serving, types, perf
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
    StateLayout state_layout = StateLayout::KeyMajor;
    StatePool pool;
    bool in_place = false;  // forward: states is the state tensor itself (needs s0 and K = 1)
    ElementTypes types;     // SPEC 3.1
    gdn_precision precision = GDN_PRECISION_EXACT;

    // Whether some tensor is narrower than F32 or the products may be: the case is held to the
    // F64 oracle on its converted inputs, with limits from the types' unit roundoff (thresholds.h).
    bool narrow() const { return !types.all_f32() || precision != GDN_PRECISION_EXACT; }
    // Sets q/k/v (and out, d_out, their gradients) to x, beta and g to x where SPEC 3.1 allows.
    void use_type(gdn_type x) { types = ElementTypes::of(x); }

    int64_t sequences() const { return cu_seqlens.empty() ? 0 : static_cast<int64_t>(cu_seqlens.size()) - 1; }
    // Sequences that own a state (without a pool, the states tensors' ne[3] is this times K).
    int64_t state_sequences() const { return cu_seqlens.empty() ? shape.B : sequences(); }
    bool pooled() const { return pool.slots > 0; }
    // ne[3] of state and grads.state; of states and d_states.
    int64_t initial_states() const { return pooled() ? pool.slots : state_sequences(); }
    int64_t final_states() const { return pooled() ? pool.slots : state_sequences() * shape.K; }
    // Sequences whose state is read and written: all, but those with a negative pool index.
    int64_t sequences_with_state() const;
    // The pool slot of sequence n (n itself without a pool); negative: none.
    int64_t slot_of(int64_t n) const { return pooled() ? pool.indices[static_cast<size_t>(n)] : n; }

    // Packs the case's T tokens into n sequences (sets B = Bq = 1 and cu_seqlens).
    void pack(int64_t n);
    // Puts the states in a pool of `slots` (after pack: one index per sequence); K must be 1.
    void use_pool(int64_t slots, SlotPattern pattern, gdn_type index_type = GDN_TYPE_I64);

    // GATED_DELTA_NET_BACK(Sk=128,Sv=128,Hk=16,Hv=48,T=130,B=2,Bq=2,gate=scalar,heads=tiled,qk=strided,s0=1,K=1,g=mild,beta=rand)
    // followed, where they apply, by seqs=N (packed), state=vmajor|mixed (not key-major),
    // slots=S,idx=PATTERN[:i32] (a pool) and inplace=1, then type=bf16|f16 (q/k/v's type, when
    // not F32), beta_type=T and g_type=T (where they differ from type's default) and precision=bf16.
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
const char *state_layout_name(StateLayout l);  // kmajor, vmajor, mixed
const char *slot_pattern_name(SlotPattern p);  // order, gaps, reversed, shuffled, negative
const char *type_name(gdn_type t);             // f32, f64, bf16, f16, i32, i64

// The slot of each of n sequences in a pool of `slots` under `pattern` (fixed by the three).
std::vector<int64_t> slot_indices(SlotPattern pattern, int64_t n, int64_t slots);

// Every case of the default list, in groups seed, model, edge, fd, varlen, serving, types; each shape
// for both ops.
std::vector<Case> default_cases();
// The perf cases (group perf): 27B at T = 1, 512, 4096, and at 4096 with bf16 tensors (computed
// exactly, and in bf16 products); 80B at 4096; a KDA case; 27B with
// 4096 tokens packed as 64 sequences (to compare with the one 4096-token sequence), with and
// without s0; serving decode at the 27B shape: 1, 16 and 64 requests of 1 and 4 tokens whose
// value-major states are updated in place in a pool.
std::vector<Case> perf_cases();

// Serving decode at a model's shape (forward): 1, 16 and 64 requests of 1 token (decoding) and 4
// (speculative decoding), whose value-major states are updated in place in a pool of twice as
// many slots at shuffled indices, as a server's cache is: the traffic is the requests' states,
// read and written once.
std::vector<Case> serving_decode_cases(const std::string &model, int64_t Sk, int64_t Sv, int64_t Hk, int64_t Hv,
                                       const std::string &group);

// Model-shape cases (q/k/v as views into the packed conv buffer) for a model with these sizes,
// at a few token counts: what --preset and --gguf run.
std::vector<Case> model_cases(const std::string &model, int64_t Sk, int64_t Sv, int64_t Hk, int64_t Hv,
                              const std::vector<int64_t> &token_counts, const std::string &group);

}  // namespace gdn::testkit
