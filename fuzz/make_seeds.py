#!/usr/bin/env python3
"""Writes the named seed inputs of fuzz_api into fuzz/corpus/api/ (seed-*).

Each seed is one call in the byte format that fuzz/call.cpp decodes (decode_call): a valid
call of some shape and layout, or one with a chosen defect. libFuzzer starts from these and
mutates them; the corpus test (tests/reliability) replays them in every build.
Run from the repository root: python3 fuzz/make_seeds.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "api")

# Slots, as in fuzz/call.h.
Q, K, V, G, BETA, STATE, OUTP, STATES, D_OUT, D_STATES, DQ, DK, DV, DG, DBETA, DSTATE = range(16)
# Type picks (type_of in call.cpp): 0 F32, 1 F64, 4 F16, 5 BF16, 6 -> 7, 7 -> -1.
F32, F64, F16, BF16, BAD_TYPE, NEG_TYPE = 0, 1, 4, 5, 6, 7
# Bits of the same byte (assign_types in call.cpp): beta F32, g the other of F32/BF16, the states
# in q's type, g in q's type.
BETA_F32, G_FLIP, STATES_X, G_X = 8, 16, 32, 64
# gdn_problem.precision picks (decode_precision in call.cpp): EXACT, BF16, 2, -1, INT_MAX, INT_MIN.
PRECISION = {"exact": 0, "bf16": 1, "2": 3, "-1": 4, "int_max": 5, "int_min": 6}
# Mutation fields (mutate in call.cpp).
(M_NULL, M_BOGUS, M_NE, M_NB, M_TYPE, M_SHIFT, M_ALIAS, M_NO_POINTER, M_NO_PROBLEM, M_NO_GRADS,
 M_HEAD_MAP, M_SCALE, M_SAME_STRIDE, M_GROW) = range(14)
# Context parameters (decode_params in call.cpp) by index: n_threads, chunk_size, device.
THREADS = {"0": 0, "2": 2, "-1": 4, "int_min": 5, "cap+1": 6, "100000": 7, "int_max": 8}
CHUNK = {"0": 0, "1": 1, "3": 3, "100": 6, "2^20": 7, "int_max": 8, "-1": 9, "int_min": 10}
DEVICE = {"0": 0, "1000": 2, "int_max": 3, "-1": 4, "int_min": 5}
# Odd values (kOddValues in call.cpp) by index.
ODD = {"0": 0, "-1": 1, "1": 2, "max": 8, "min": 9, "2^31": 10, "2^32": 12, "2^62": 14, "2^20": 15}
CONTIGUOUS, PADDED, TRANSPOSED = 0, 1, 2


def call(backward=False, check=False, backend=0, type_=F32, Sk=4, Sv=4, Hk=1, hv_mult=2, T=3, Bq=1,
         b_mult=2, K=1, kda=False, grouped=False, s0=True, packed=False, packed_grads=False,
         omit=(), layout=CONTIGUOUS, seed=12345, specials=(), mutations=(),
         drops=None, i32=False, offset_mutations=(), params=None,
         value_major=(), pool=None, in_place=False, index_mutations=(), types=0, precision=None):
    # drops: packed sequences (cu_seqlens): the offsets 0..T with these interior entries
    # removed one after another (index into the remaining interior); None: not packed.
    # value_major: the state slots (STATE, STATES, D_STATES, DSTATE) laid out value-major.
    # pool: a state pool (state_indices), a dict with extra (slots beyond the sequences, 0-3),
    # keep_k (else K = 1), i32, perm (the permutation's swap bytes) and defects (one byte per
    # sequence: < 160 kept, 160-199 negative, 200-229 a repeat, 230-255 out of range).
    # in_place: states is state (forward).
    serving = sum(1 << i for i, slot in enumerate((STATE, STATES, D_STATES, DSTATE)) if slot in value_major)
    serving |= (16 if pool is not None else 0) | (32 if pool and pool.get("i32") else 0) | (64 if in_place else 0)
    op = (1 if backward else 0) | (6 if check else 0)
    # types: bits of the type byte (BETA_F32 ...); precision: a PRECISION pick (None: EXACT).
    b = bytearray([op, backend, type_ | types, Sk - 1, Sv - 1, Hk - 1, hv_mult - 1, T - 1, Bq - 1, b_mult - 1, K - 1])
    b.append((1 if kda else 0) | (2 if grouped else 0) | (0 if s0 else 4) | (8 if packed else 0) |
             (16 if packed_grads else 0) | (32 if drops is not None else 0) | (64 if i32 else 0) |
             (128 if serving else 0))
    if serving:
        b.append(serving)
    if pool is not None:
        b.append(pool.get("extra", 0) | (4 if pool.get("keep_k") else 0))
    optional = [OUTP, STATES, D_OUT, D_STATES, DQ, DK, DV, DG]
    b.append(sum(1 << optional.index(s) for s in omit))
    if drops is not None:
        assert len(drops) < T
        b.append(len(drops))
        b += bytes(drops)
    if pool is not None:
        sequences = T - len(drops) if drops is not None else Bq * b_mult
        slots = sequences + pool.get("extra", 0)
        perm = list(pool.get("perm", ()))
        b += bytes((perm + [0] * slots)[:slots - 1])
        defects = list(pool.get("defects", ()))
        b += bytes((defects + [0] * sequences)[:sequences])
    used = list(range(6)) + (list(range(8, 16)) if backward else [6, 7])
    for s in used:
        if packed and s <= V:
            continue
        if packed_grads and backward and DQ <= s <= DV:
            continue
        b.append(layout)
    b += struct.pack("<Q", seed)
    b.append(len(specials))
    for slot, index, kind in specials:
        b += bytes([slot]) + struct.pack("<H", index) + bytes([kind])
    b.append(len(mutations))
    for m in mutations:
        b += bytes(m)
    if drops is not None:
        b.append(len(offset_mutations))
        for m in offset_mutations:
            b += bytes(m)
    if pool is not None:  # the same mutations as the offsets' (mutate_index_tensor in call.cpp)
        b.append(len(index_mutations))
        for m in index_mutations:
            b += bytes(m)
    if params is not None:
        b += b"P" + bytes(params)
    if precision is not None:
        if params is None:
            b.append(0)  # no parameters: the defaults
        b += b"R" + bytes([precision])
    return bytes(b)


def mut(slot, field, dim=0, *extra):
    return [slot, dim, field, *extra]


SEEDS = {
    # Valid calls: every layout, both ops, both types, both gates and head maps.
    "fwd-f32-contiguous": call(),
    "fwd-f64-padded": call(type_=F64, layout=PADDED),
    "fwd-f32-transposed": call(layout=TRANSPOSED),
    "fwd-packed-qkv": call(packed=True, Hk=2, hv_mult=2, T=4),
    "fwd-kda-grouped": call(kda=True, grouped=True, Hk=2),
    "fwd-no-s0": call(s0=False),
    "fwd-snapshots-K3-T2": call(K=3, T=2),
    "fwd-out-only": call(omit=(STATES,)),
    "fwd-states-only": call(omit=(OUTP,)),
    "fwd-nothing-wanted": call(omit=(OUTP, STATES)),
    "fwd-max-shape": call(Sk=4, Sv=4, Hk=2, hv_mult=2, T=6, Bq=2, b_mult=2, K=3, kda=True, layout=PADDED),
    "bwd-f32-contiguous": call(backward=True),
    "bwd-f64-padded": call(backward=True, type_=F64, layout=PADDED),
    "bwd-packed-grads": call(backward=True, packed=True, packed_grads=True, Hk=2),
    "bwd-kda-grouped-bq": call(backward=True, kda=True, grouped=True, Hk=2, Bq=2, b_mult=2),
    "bwd-no-d-out": call(backward=True, omit=(D_OUT,)),
    "bwd-no-d-states": call(backward=True, omit=(D_STATES,)),
    "bwd-only-dv": call(backward=True, omit=(DQ, DK, DG)),
    "bwd-K2-T1": call(backward=True, K=2, T=1),
    "check-fwd": call(check=True),
    "check-bwd": call(backward=True, check=True),
    # Backends by name: other spellings, unknown names, NULL (fastest available).
    "backend-REF": call(backend=3),
    "backend-cpu": call(backend=4, backward=True),
    "backend-cuda": call(backend=6),
    "backend-empty-name": call(backend=7),
    "backend-unknown": call(backend=8),
    "backend-null": call(backend=9),
    # Types (SPEC 3.1): valid combinations (bf16/f16 q/k/v with beta of their type or F32, g F32 or
    # BF16, F32 states; as packed views of one buffer, with value-major states and pools), then
    # each rule broken once.
    "type-f16": call(type_=F16),
    "type-bf16": call(backward=True, type_=BF16),
    "type-bf16-beta-f32-g-f32": call(backward=True, type_=BF16, types=BETA_F32 | G_FLIP, kda=True),
    "type-f16-g-bf16": call(backward=True, type_=F16, types=G_FLIP, layout=PADDED),
    "type-f32-g-bf16": call(type_=F32, types=G_FLIP),
    "type-bf16-packed-qkv": call(type_=BF16, packed=True, Hk=2, hv_mult=2, T=4),
    "type-bf16-packed-grads": call(backward=True, type_=BF16, packed=True, packed_grads=True, Hk=2),
    "type-bf16-varlen-pool-vmajor": call(type_=BF16, T=6, drops=[1, 0], value_major=(STATE, STATES),
                                         pool={"extra": 2, "defects": [0, 0, 160, 0]}, in_place=True),
    "type-bf16-pool-bwd": call(backward=True, type_=BF16, value_major=(STATE, D_STATES, DSTATE), pool={"extra": 2}, Bq=2, b_mult=1),
    "type-bf16-cpu": call(backend=4, type_=BF16, backward=True),
    "type-bf16-nan-inf": call(type_=BF16, specials=[(Q, 1, 0), (G, 0, 1), (V, 2, 3)]),
    "type-f16-huge": call(type_=F16, backward=True, specials=[(K, 0, 3), (D_OUT, 1, 4)]),
    "type-bf16-states-bf16": call(type_=BF16, types=STATES_X),
    "type-f16-states-f16-bwd": call(backward=True, type_=F16, types=STATES_X),
    "type-f16-g-f16": call(type_=F16, types=G_X),
    "type-f16-g-f16-bwd": call(backward=True, type_=F16, types=G_X),
    "type-bf16-k-f16": call(type_=BF16, mutations=[mut(K, M_TYPE, 0, F16)]),
    # (a type of the same size, so that the strides stay right and the type rule is what refuses)
    "type-bf16-out-f16": call(type_=BF16, mutations=[mut(OUTP, M_TYPE, 0, F16)]),
    "type-bf16-dbeta-f16": call(backward=True, type_=BF16, mutations=[mut(DBETA, M_TYPE, 0, F16)]),
    "type-bf16-dg-f16": call(backward=True, type_=BF16, mutations=[mut(DG, M_TYPE, 0, F16)]),
    "type-f16-dv-bf16": call(backward=True, type_=F16, mutations=[mut(DV, M_TYPE, 0, BF16)]),
    "type-f16-d-out-bf16": call(backward=True, type_=F16, mutations=[mut(D_OUT, M_TYPE, 0, BF16)]),
    "type-bf16-beta-f16": call(type_=BF16, mutations=[mut(BETA, M_TYPE, 0, F16)]),
    "type-bf16-scale-negative": call(type_=BF16, mutations=[mut(Q, M_SCALE, 0, 0, 2)]),
    "type-invalid": call(type_=BAD_TYPE),
    "type-negative": call(type_=NEG_TYPE, backward=True),
    # Precision: EXACT and BF16 on every type, then values outside the enum.
    "precision-bf16-f32": call(precision=PRECISION["bf16"]),
    "precision-bf16-bf16-bwd": call(backward=True, type_=BF16, precision=PRECISION["bf16"], kda=True),
    "precision-bf16-f64": call(type_=F64, precision=PRECISION["bf16"]),
    "precision-bf16-cpu": call(backend=4, backward=True, precision=PRECISION["bf16"], params=[0, CHUNK["3"], 0], T=5),
    "precision-bf16-f16-varlen": call(type_=F16, T=6, drops=[0], precision=PRECISION["bf16"]),
    "precision-2": call(precision=PRECISION["2"]),
    "precision-negative-bwd": call(backward=True, type_=BF16, precision=PRECISION["-1"]),
    "precision-int-max": call(precision=PRECISION["int_max"]),
    "precision-int-min-check": call(check=True, precision=PRECISION["int_min"]),
    # Non-finite values in inputs.
    "nan-in-q": call(specials=[(Q, 1, 0)]),
    "inf-in-g": call(specials=[(G, 0, 1)], backward=True),
    "neg-inf-in-g": call(specials=[(G, 2, 2)]),
    "huge-in-k-beta": call(specials=[(K, 0, 3), (BETA, 1, 4)], backward=True),
    "nan-in-s0-and-d-out": call(backward=True, specials=[(STATE, 3, 0), (D_OUT, 5, 0)]),
    # NULLs.
    "null-q-data": call(mutations=[mut(Q, M_NULL)]),
    "null-beta-data-bwd": call(backward=True, mutations=[mut(BETA, M_NULL)]),
    "null-problem": call(mutations=[mut(Q, M_NO_PROBLEM)]),
    "null-grads": call(backward=True, mutations=[mut(Q, M_NO_GRADS)]),
    # Counts and strides.
    "ne-zero-T": call(mutations=[mut(V, M_NE, 2, ODD["0"])]),
    "ne-negative": call(mutations=[mut(K, M_NE, 1, ODD["-1"])]),
    "ne-int64-max": call(mutations=[mut(OUTP, M_NE, 3, ODD["max"])]),
    "ne-2^62-bwd": call(backward=True, mutations=[mut(DV, M_NE, 0, ODD["2^62"])]),
    "ne-2^31-states": call(mutations=[mut(STATES, M_NE, 3, ODD["2^31"])]),
    "nb-zero": call(mutations=[mut(Q, M_NB, 2, ODD["0"])]),
    "nb-negative": call(mutations=[mut(OUTP, M_NB, 1, ODD["-1"])]),
    "nb-int64-min": call(backward=True, mutations=[mut(DK, M_NB, 3, ODD["min"])]),
    "nb-huge-span-overflow": call(mutations=[mut(G, M_NB, 3, ODD["2^62"])]),
    "nb0-wrong": call(mutations=[mut(BETA, M_NB, 0, ODD["1"])]),
    "nb-overlapping-output": call(mutations=[mut(OUTP, M_SAME_STRIDE, 2, 1)]),
    "nb-overlapping-input": call(mutations=[mut(V, M_SAME_STRIDE, 2, 1)]),
    "bogus-pointer-invalid-ne": call(mutations=[mut(K, M_BOGUS, 0, 3, 0, 2)]),
    "bogus-pointer-bad-type": call(backward=True, mutations=[mut(D_STATES, M_BOGUS, 0, 5, 4, 9)]),
    "misaligned-v": call(mutations=[mut(V, M_SHIFT, 0, 9)]),
    "shape-mismatch-k": call(mutations=[mut(K, M_GROW, 1, 1)]),
    "shape-mismatch-dg": call(backward=True, mutations=[mut(DG, M_GROW, 0, 0)]),
    # Aliasing: outputs on inputs, on each other, the allowed in-place state update.
    "alias-out-on-q": call(mutations=[mut(OUTP, M_ALIAS, 0, Q, 0)]),
    "alias-states-is-state": call(mutations=[mut(STATES, M_ALIAS, 0, STATE, 1)]),
    "alias-states-is-state-K2": call(K=2, mutations=[mut(STATES, M_ALIAS, 0, STATE, 1)]),
    "alias-dq-is-dk": call(backward=True, mutations=[mut(DQ, M_ALIAS, 0, DK, 1)]),
    "alias-dstate-is-state": call(backward=True, mutations=[mut(DSTATE, M_ALIAS, 0, STATE, 1)]),
    "alias-q-is-k-input": call(backward=True, mutations=[mut(K, M_ALIAS, 0, Q, 1)]),
    # Scale and head map.
    "scale-nan": call(mutations=[mut(Q, M_SCALE, 0, 0)]),
    "scale-negative": call(backward=True, mutations=[mut(Q, M_SCALE, 0, 2)]),
    "head-map-invalid": call(mutations=[mut(Q, M_HEAD_MAP, 0, 1, 3)]),
    "head-map-negative": call(backward=True, mutations=[mut(Q, M_HEAD_MAP, 0, 0, 1)]),
    # Packed sequences (cu_seqlens): valid calls, then one bad offsets tensor each (mutate_offsets
    # in call.cpp: 0 swap i j, 1 odd value v at i, 2 repeat entry i, 3 ne[0] +-1, 4 type,
    # 5 nb[0], 6 bogus pointer, 7 absent, 8 on slot s, 9 a second dimension).
    "varlen-fwd-i64": call(T=6, drops=[1, 2]),
    "varlen-bwd-i32-K2": call(backward=True, K=2, T=6, drops=[0, 0, 0], i32=True, kda=True, Hk=2),
    "varlen-one-sequence": call(T=4, drops=[0, 0, 0], layout=PADDED),
    "varlen-every-token-bwd": call(backward=True, T=5, drops=[], packed=True, packed_grads=True, Hk=2),
    "varlen-in-place-state": call(T=5, drops=[1], mutations=[mut(STATES, M_ALIAS, 0, STATE, 1)]),
    "varlen-unsorted": call(T=6, drops=[0], offset_mutations=[[0, 1, 3]]),
    "varlen-empty-sequence": call(backward=True, T=6, drops=[2], offset_mutations=[[2, 2]]),
    "varlen-out-of-range": call(T=6, drops=[0, 0], i32=True, offset_mutations=[[1, 12, 4]]),
    "varlen-negative-first": call(T=5, drops=[1], offset_mutations=[[1, 1, 0]]),
    "varlen-count-short": call(T=6, drops=[0], offset_mutations=[[3, 0]]),
    "varlen-count-long-no-states": call(T=6, drops=[0], s0=False, omit=(STATES,), offset_mutations=[[3, 1]]),
    "varlen-float-type": call(T=6, drops=[0], offset_mutations=[[4, 1, 0]]),
    "varlen-strided-offsets": call(T=6, drops=[0], offset_mutations=[[5, 1]]),
    "varlen-bogus-pointer": call(T=6, drops=[0], offset_mutations=[[6, 3, 0, 2]]),
    "varlen-absent-offsets": call(backward=True, T=6, drops=[0], offset_mutations=[[7]]),
    "varlen-offsets-on-out": call(T=6, drops=[0], offset_mutations=[[8, OUTP]]),
    "varlen-two-dimensional": call(T=6, drops=[0], offset_mutations=[[9, 1]]),
    "varlen-with-two-streams": call(T=6, drops=[0], mutations=[mut(V, M_GROW, 3, 1)]),
    # Context parameters at their limits: refused as invalid (negative, more threads than
    # GDN_MAX_THREADS), a device that does not exist, chunk sizes that do not divide T or pass it.
    "params-threads-100000": call(backend=4, params=[THREADS["100000"], 0, 0]),
    "params-threads-cap-plus-one": call(backend=9, params=[THREADS["cap+1"], 0, 0]),
    "params-threads-int-min": call(backend=0, params=[THREADS["int_min"], 0, 0]),
    "params-chunk-negative": call(backend=4, params=[0, CHUNK["-1"], 0]),
    "params-chunk-3-T5": call(backend=4, backward=True, T=5, params=[THREADS["2"], CHUNK["3"], 0]),
    "params-chunk-int-max": call(backend=4, T=6, params=[0, CHUNK["int_max"], 0]),
    "params-chunk-1-varlen": call(backend=4, T=6, drops=[0], params=[0, CHUNK["1"], 0]),
    "params-device-int-max": call(backend=6, params=[0, 0, DEVICE["int_max"]]),
    "params-device-negative": call(backend=4, params=[0, 0, DEVICE["-1"]]),
    # Serving: value-major states (alone, mixed with key-major ones, in every layout), state
    # pools (in place, into another pool, packed, without s0, with I32 indices), and pools that
    # must be refused: two sequences on one slot, an index past the pool, snapshots, and the bad
    # index tensors of mutate_index_tensor (same numbering as the offsets' above).
    "vmajor-fwd": call(value_major=(STATE, STATES)),
    "vmajor-fwd-transposed-K2": call(value_major=(STATE, STATES), layout=TRANSPOSED, K=2),
    "vmajor-bwd-padded": call(backward=True, value_major=(STATE, D_STATES, DSTATE), layout=PADDED),
    "vmajor-mixed-bwd": call(backward=True, value_major=(STATE, D_STATES), kda=True, Hk=2),
    "vmajor-mixed-fwd-f64": call(type_=F64, value_major=(STATE,), Sk=3, Sv=2),
    "vmajor-in-place": call(value_major=(STATE, STATES), in_place=True),
    "pool-fwd-in-place": call(value_major=(STATE, STATES), pool={"extra": 2, "perm": [1, 3, 0, 2]}, in_place=True, T=1),
    "pool-fwd-other-pool": call(pool={"extra": 3, "perm": [4, 1, 2, 0]}, b_mult=2, Bq=2, T=2),
    "pool-fwd-negative-i32": call(value_major=(STATE, STATES), pool={"extra": 1, "i32": True, "defects": [0, 161]}, in_place=True),
    "pool-fwd-int-min": call(pool={"extra": 1, "defects": [199, 0]}, in_place=True),
    "pool-fwd-no-s0": call(s0=False, value_major=(STATES,), pool={"extra": 2, "perm": [2, 2, 1]}),
    "pool-fwd-packed": call(T=6, drops=[1, 0], value_major=(STATE, STATES), pool={"extra": 2, "defects": [0, 0, 160, 0]},
                            in_place=True, i32=True),
    "pool-bwd": call(backward=True, value_major=(STATE, D_STATES, DSTATE), pool={"extra": 2, "perm": [3, 1, 0]}),
    "pool-bwd-negative-mixed": call(backward=True, value_major=(D_STATES,), pool={"extra": 1, "defects": [162, 0]},
                                    Hk=2, grouped=True),
    "pool-bwd-packed-no-s0": call(backward=True, T=5, drops=[0], s0=False, pool={"extra": 3, "i32": True}, layout=PADDED),
    "pool-fwd-cpu": call(backend=4, pool={"extra": 2, "perm": [1, 2, 0]}, in_place=True, T=4),
    "pool-bwd-cpu-packed": call(backend=4, backward=True, T=6, drops=[2], pool={"extra": 1, "defects": [0, 0, 161, 0]}),
    "pool-duplicate": call(pool={"extra": 2, "defects": [0, 200]}, in_place=True),
    "pool-duplicate-bwd": call(backward=True, pool={"extra": 1, "defects": [0, 200]}),
    "pool-past-the-end": call(pool={"extra": 1, "defects": [230, 0]}),
    "pool-int-max-i32": call(pool={"i32": True, "defects": [0, 255]}, backward=True),
    "pool-snapshots-K3": call(K=3, pool={"extra": 1, "keep_k": True}),
    "pool-indices-float": call(pool={"extra": 1}, index_mutations=[[4, 1, 0]]),
    "pool-indices-count-short": call(pool={"extra": 1}, index_mutations=[[3, 0]]),
    "pool-indices-strided": call(pool={}, index_mutations=[[5, 1]]),
    "pool-indices-bogus-pointer": call(pool={}, index_mutations=[[6, 3, 0, 2]]),
    "pool-indices-absent": call(pool={"extra": 2}, index_mutations=[[7]]),
    "pool-indices-on-out": call(pool={"extra": 1}, index_mutations=[[8, OUTP]]),
    "pool-indices-two-dimensional": call(pool={}, index_mutations=[[9, 1]]),
    "pool-indices-repeated-by-mutation": call(backward=True, pool={"extra": 2}, index_mutations=[[2, 1]]),
    # Optional pointers dropped.
    "no-out-pointer": call(mutations=[mut(OUTP, M_NO_POINTER)]),
    "no-d-states-pointer": call(backward=True, mutations=[mut(D_STATES, M_NO_POINTER)]),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, "seed-" + name), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {OUT}")


if __name__ == "__main__":
    main()
