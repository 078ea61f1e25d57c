"""gdn.torch for serving: states in FLA's [N, HV, K, V] layout read and written where they are (no
transpose, no copy), and fused_recurrent_gated_delta_rule's state pools (vLLM's
ssm_state_indices, SGLang's initial_state_indices) updated in place."""

import inspect

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import fla_reference
import gdn
import gdn.torch as gt
from reference import recurrent_reference
from torch_inputs import small_inputs


def inputs(B=3, T=4, H=2, HV=4, K=8, V=6, dtype=torch.float64, seed=0):
    q, k, v, g, beta, _ = small_inputs(dtype, B, T, H, HV, K, V, seed, requires_grad=False)
    return q, k, v, g, beta


def pool_of(slots, HV=4, K=8, V=6, dtype=torch.float64, seed=1):
    return torch.randn(slots, HV, K, V, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def reference(q, k, v, g, beta, initial):
    """o and the final states [N, HV, K, V] in float64, from the numpy recurrence."""
    o, final = recurrent_reference(*(t.double().numpy() for t in (q, k, v, g, beta)), q.shape[-1] ** -0.5,
                                   initial.double().numpy())
    return torch.from_numpy(o), torch.from_numpy(final)


def starting_states(pool, slots):
    """What each sequence starts from: its slot of the pool, zeros for a negative index."""
    return torch.stack([pool[s] if s >= 0 else torch.zeros_like(pool[0]) for s in slots])


def close(a, b, dtype):
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    return ((a.double() - b).norm() / b.norm()).item() < tol


def allocations_of_at_least(nbytes, fn):
    """How many tensors of at least ``nbytes`` bytes torch allocates while ``fn`` runs (the
    profiler attributes each host allocation to the op that made it)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return sum(1 for e in prof.events() if e.self_cpu_memory_usage >= nbytes)


BACKENDS = [("ref", torch.float64), ("cpu", torch.float32)]


def test_fused_recurrent_signature_starts_with_flas():
    fla = fla_reference.fused_recurrent_parameters()
    if fla is None:
        pytest.skip("FLA is not installed (set GDN_FLA_SITE to an FLA install)")
    parameters = list(inspect.signature(gt.fused_recurrent_gated_delta_rule).parameters.values())
    positional = [(p.name, None if p.default is p.empty else repr(p.default)) for p in parameters
                  if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == [entry for entry in fla if entry[0] != "**kwargs"]
    keyword_only = {p.name: p.default for p in parameters if p.kind == p.KEYWORD_ONLY}
    assert keyword_only == dict(ssm_state_indices=None, initial_state_indices=None, inplace_final_state=None,
                                precision="exact", out=None)
    assert parameters[-1].kind == parameters[-1].VAR_KEYWORD


@pytest.mark.parametrize("backend, dtype", BACKENDS)
@pytest.mark.parametrize("state_v_first", [False, True])
@pytest.mark.parametrize("op", ["chunk", "fused_recurrent"])
def test_both_state_layouts_match_the_reference(backend, dtype, state_v_first, op):
    q, k, v, g, beta = (t.to(dtype) for t in inputs())
    h0 = pool_of(3, dtype=dtype)
    o_ref, final_ref = reference(q, k, v, g, beta, h0)
    layout = (lambda s: s.transpose(-1, -2).contiguous()) if state_v_first else (lambda s: s)
    fn = gt.chunk_gated_delta_rule if op == "chunk" else gt.fused_recurrent_gated_delta_rule
    with gt.backend(backend):
        o, final = fn(q, k, v, g, beta=beta, initial_state=layout(h0), output_final_state=True,
                      state_v_first=state_v_first)
    assert final.is_contiguous() and final.shape == layout(h0).shape and final.dtype == dtype
    assert close(o, o_ref, dtype) and close(final, layout(final_ref), dtype)


def test_both_layouts_give_the_same_bits_on_cpu():
    q, k, v, g, beta = (t.float() for t in inputs(T=9))
    h0 = pool_of(3, dtype=torch.float32)
    with gt.backend("cpu"):
        o_kv, final_kv = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
        o_vk, final_vk = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0.transpose(-1, -2).contiguous(),
                                                   output_final_state=True, state_v_first=True)
    assert torch.equal(o_kv, o_vk) and torch.equal(final_kv, final_vk.transpose(-1, -2))


def test_chunk_reads_and_writes_fla_states_without_copies():
    """The only state-sized tensor a call with an initial state makes is the final state it returns."""
    q, k, v, g, beta = (t.float() for t in inputs(B=2, T=2, K=32, V=32))
    h0 = pool_of(2, K=32, V=32, dtype=torch.float32)
    nbytes = h0.numel() * h0.element_size()
    calls = lambda: gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)  # noqa
    assert allocations_of_at_least(nbytes, calls) == 1
    # The measure sees a copy: a state in neither layout (strided K and V) is copied once more.
    strided = torch.empty(2, 4, 32, 64)[..., ::2].copy_(h0)
    strided_call = lambda: gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=strided,  # noqa: E731
                                                     output_final_state=True)
    assert allocations_of_at_least(nbytes, strided_call) == 2


@pytest.mark.parametrize("backend, dtype", BACKENDS)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("state_v_first", [False, True])
def test_pool_is_updated_in_place_at_its_slots(backend, dtype, index_dtype, state_v_first):
    """Slots with gaps, out of order and a negative one: each named slot holds its sequence's final
    state, the others keep their bits, and no state-sized tensor is made."""
    q, k, v, g, beta = (t.to(dtype) for t in inputs(B=4, T=1))
    slots = [5, -1, 0, 2]
    indices = torch.tensor(slots, dtype=index_dtype)
    pool = pool_of(7, dtype=dtype)
    o_ref, final_ref = reference(q, k, v, g, beta, starting_states(pool, slots))
    stored = pool.transpose(-1, -2).contiguous() if state_v_first else pool.clone()
    before, address = stored.clone(), stored.data_ptr()
    with gt.backend(backend), torch.no_grad():
        o, final = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=stored,
                                                       ssm_state_indices=indices, state_v_first=state_v_first)
    assert final is stored and stored.data_ptr() == address
    updated = stored.transpose(-1, -2) if state_v_first else stored
    assert close(o, o_ref, dtype)
    for n, s in enumerate(slots):
        if s >= 0:
            assert close(updated[s], final_ref[n], dtype), s
    for s in (1, 3, 4, 6):  # no sequence's: untouched
        assert torch.equal(stored[s], before[s])
    slot_bytes = pool[0].numel() * pool.element_size()
    with gt.backend(backend), torch.no_grad():
        step = lambda: gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=stored,  # noqa: E731
                                                           initial_state_indices=indices, state_v_first=state_v_first)
        assert allocations_of_at_least(slot_bytes, step) == 0


def test_inputs_read_by_copy_give_the_bits_of_inputs_read_in_place():
    """A decoding step the library refuses as given (q and v with strided rows: their copies are
    read) or that Python converts first (beta in another dtype) gives the bits of the same step on
    plain inputs, in the same slots."""
    q, k, v, g, beta = (t.float() for t in inputs(B=4, T=1))
    indices = torch.tensor([5, -1, 0, 2])
    plain, other = pool_of(7, dtype=torch.float32), pool_of(7, dtype=torch.float32)
    with gt.backend("cpu"), torch.no_grad():
        o, _ = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=plain, ssm_state_indices=indices)
        strided_q = torch.stack([q, q], dim=-1)[..., 0]  # the same values, every other float
        strided_v = torch.stack([v, v], dim=-1)[..., 1]
        assert strided_q.stride(-1) == 2 and strided_v.stride(-1) == 2
        o2, _ = gt.fused_recurrent_gated_delta_rule(strided_q, k, strided_v, g, beta=beta.double(), initial_state=other,
                                                    ssm_state_indices=indices)
    assert torch.equal(o, o2) and torch.equal(plain, other)


@pytest.mark.parametrize("general_path", [False, True])
def test_out_receives_o_with_the_bits_of_a_new_o(general_path):
    """out= is written and returned as o, with the bits and the pool update of the same step
    without it; on the one-call path and on the general one (here: g per key channel, gk)."""
    q, k, v, g, beta = (t.float() for t in inputs(B=4, T=1))
    indices = torch.tensor([5, -1, 0, 2])
    gates = dict(gk=g.unsqueeze(-1).expand(*g.shape, q.shape[-1]).contiguous()) if general_path else dict(g=g)
    pools = [pool_of(7, dtype=torch.float32) for _ in range(2)]
    out = torch.full_like(v, float("nan"))
    with gt.backend("cpu"), torch.no_grad():
        o, _ = gt.fused_recurrent_gated_delta_rule(q, k, v, **gates, beta=beta, initial_state=pools[0],
                                                   ssm_state_indices=indices)
        o_out, final = gt.fused_recurrent_gated_delta_rule(q, k, v, **gates, beta=beta, initial_state=pools[1],
                                                           ssm_state_indices=indices, out=out)
    assert o_out is out and final is pools[1]
    assert torch.equal(out, o) and torch.equal(pools[0], pools[1])
    if not general_path:
        with gt.backend("cpu"), torch.no_grad():
            step = lambda: gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=pools[1],  # noqa: E731
                                                               ssm_state_indices=indices, out=out)
            assert allocations_of_at_least(1, step) == 0  # nothing at all: a decoding loop's step


def test_decoding_token_by_token_in_the_pool_equals_one_call():
    q, k, v, g, beta = (t.float() for t in inputs(B=2, T=6))
    pool = pool_of(4, dtype=torch.float32)
    indices = torch.tensor([3, 1])
    _, expected = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool[indices], output_final_state=True)
    with torch.no_grad():
        for t in range(6):
            step = [x[:, t:t + 1] for x in (q, k, v, g, beta)]
            gt.fused_recurrent_gated_delta_rule(*step[:4], beta=step[4], initial_state=pool, ssm_state_indices=indices)
    torch.testing.assert_close(pool[indices], expected, rtol=1e-5, atol=1e-6)


def test_packed_sequences_with_a_pool():
    """cu_seqlens and indices together, an empty sequence among them (its slot keeps its state)."""
    q, k, v, g, beta = inputs(B=1, T=5)
    cu = torch.tensor([0, 2, 2, 5])
    slots = [4, 1, 2]
    pool = pool_of(5)
    expected_pool = pool.clone()
    with gt.backend("ref"), torch.no_grad():
        o, _ = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=pool, cu_seqlens=cu,
                                                   ssm_state_indices=torch.tensor(slots))
    for n, (start, end) in enumerate(((0, 2), (2, 2), (2, 5))):
        part = [x[:, start:end] for x in (q, k, v, g, beta)]
        o_n, final_n = reference(*part, expected_pool[slots[n]:slots[n] + 1])
        expected_pool[slots[n]] = final_n[0]
        if end > start:
            assert close(o[:, start:end], o_n, torch.float64)
    assert close(pool, expected_pool, torch.float64)


def test_without_in_place_the_pool_is_read_and_the_states_returned_with_autograd():
    q, k, v, g, beta = inputs(B=3, T=3)
    pool = pool_of(5).requires_grad_()
    slots = [4, -1, 1]
    o, final = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=pool, output_final_state=True,
                                                   ssm_state_indices=torch.tensor(slots), inplace_final_state=False)
    o_ref, final_ref = reference(q, k, v, g, beta, starting_states(pool.detach(), slots))
    assert close(o, o_ref, torch.float64) and close(final, final_ref, torch.float64)
    (o.sum() + final.square().sum()).backward()
    assert torch.count_nonzero(pool.grad[[0, 2, 3]]) == 0 and torch.count_nonzero(pool.grad[[1, 4]]) > 0
    leaves = [x.clone().requires_grad_() for x in (*inputs(B=2, T=3), pool_of(2))]
    with gt.backend("ref"):
        assert torch.autograd.gradcheck(
            lambda *xs: gt.fused_recurrent_gated_delta_rule(*xs[:4], beta=xs[4], initial_state=xs[5],
                                                            output_final_state=True),
            leaves)


def test_in_place_without_indices_updates_the_given_states():
    q, k, v, g, beta = inputs(B=2, T=2)
    states = pool_of(2)
    o_ref, final_ref = reference(q, k, v, g, beta, states)
    with torch.no_grad():
        o, final = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=states,
                                                       inplace_final_state=True)
    assert final is states and close(states, final_ref, torch.float64) and close(o, o_ref, torch.float64)


def test_fla_gates_of_the_decode_signature():
    """g None is no decay, gk a decay per key channel (with g when both come), beta None is ones."""
    q, k, v, g, beta = inputs(B=1, T=3)
    gk = -torch.rand(1, 3, 4, 8, dtype=torch.float64)
    h0 = pool_of(1)
    cases = [(dict(g=None, beta=beta), torch.zeros_like(g), beta),
             (dict(g=g, gk=gk, beta=None), gk + g.unsqueeze(-1), torch.ones_like(beta)),
             (dict(gk=gk, beta=beta), gk, beta)]
    for given, gate, b in cases:
        o, final = gt.fused_recurrent_gated_delta_rule(q, k, v, initial_state=h0, output_final_state=True, **given)
        o_ref, final_ref = reference(q, k, v, gate, b, h0)
        assert close(o, o_ref, torch.float64) and close(final, final_ref, torch.float64), given


def test_the_update_op_passes_torchs_checks():
    q, k, v, g, beta = (t.float() for t in inputs(B=2, T=1))
    pool = pool_of(3, dtype=torch.float32)
    for indices in (torch.tensor([2, 0]), None):
        state = pool if indices is not None else pool[:2].clone()
        args = (q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), state, indices, None, 0.5, True, False, 0)
        torch.library.opcheck(torch.ops.gdn.gated_delta_rule_update.default, args)


def test_pool_update_under_torch_compile():
    """Traced, the update is the registered op that mutates the pool: the same bits as eagerly."""
    q, k, v, g, beta = (t.float() for t in inputs(B=2, T=1))
    pool = pool_of(3, dtype=torch.float32)
    eager_pool, indices = pool.clone(), torch.tensor([2, 0])

    def step(states):
        return gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=states,
                                                   ssm_state_indices=indices, use_qk_l2norm_in_kernel=True)[0]

    with torch.no_grad():
        expected = step(eager_pool)
        o = torch.compile(step, fullgraph=True, backend="aot_eager")(pool)
    assert torch.equal(o, expected) and torch.equal(pool, eager_pool)


def bad_pool_calls():
    q, k, v, g, beta = (t.float() for t in inputs(B=2, T=1))
    pool = pool_of(4, dtype=torch.float32)
    good = dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=pool, ssm_state_indices=torch.tensor([3, 1]))
    return [
        ("repeated slot", dict(ssm_state_indices=torch.tensor([1, 1])), gdn.AliasError, "share a pool slot"),
        ("slot past the pool", dict(ssm_state_indices=torch.tensor([0, 4])), gdn.ShapeError, "the pool has 4 slots"),
        ("one index short", dict(ssm_state_indices=torch.tensor([0])), gdn.ShapeError, "one slot per sequence"),
        ("float indices", dict(ssm_state_indices=torch.tensor([0.0, 1.0])), gdn.InvalidArgumentError, "int64"),
        ("indices as a list", dict(ssm_state_indices=[0, 1]), gdn.InvalidArgumentError, "torch.Tensor"),
        ("both names", dict(initial_state_indices=torch.tensor([0, 1])), gdn.InvalidArgumentError, "pass one"),
        ("no pool", dict(initial_state=None), gdn.InvalidArgumentError, "initial_state"),
        ("pool shape", dict(initial_state=pool[..., :3]), gdn.ShapeError, "initial_state has shape"),
        ("pool dtype", dict(initial_state=pool.double()), gdn.ElementTypeError, "state dtype"),
        ("pool strides", dict(initial_state=torch.zeros(4, 4, 16, 12)[:, :, ::2, ::2]), gdn.LayoutError, "strides"),
        ("autograd", dict(q=q.clone().requires_grad_()), gdn.UnsupportedError, "no autograd"),
        ("gv", dict(gv=torch.zeros(2, 1, 4, 6)), gdn.UnsupportedError, "gv"),
        ("beta per value channel", dict(beta=torch.rand(2, 1, 4, 6)), gdn.UnsupportedError, "beta"),
        ("speculative decoding", dict(num_accepted_tokens=torch.tensor([1, 1])), gdn.UnsupportedError,
         "num_accepted_tokens"),
        ("out shape", dict(out=torch.zeros(2, 1, 4, 5)), gdn.InvalidArgumentError, "out is"),
        ("out dtype", dict(out=torch.zeros(2, 1, 4, 6, dtype=torch.float64)), gdn.InvalidArgumentError, "out is"),
        ("out not a tensor", dict(out=[0.0]), gdn.InvalidArgumentError, "out is a tensor"),
        ("out with autograd", dict(q=q.clone().requires_grad_(), out=torch.zeros(2, 1, 4, 6)),
         gdn.UnsupportedError, "autograd"),
        ("out requiring grad", dict(out=torch.zeros(2, 1, 4, 6, requires_grad=True)), gdn.UnsupportedError,
         "autograd"),
        ("out overlapping itself", dict(out=torch.zeros(1, 1, 4, 6).expand(2, 1, 4, 6)), gdn.LayoutError, "overlap"),
        ("out of fewer dimensions", dict(out=torch.zeros(2, 4, 6)), gdn.InvalidArgumentError, "out is"),
    ], good


@pytest.mark.parametrize("index", range(len(bad_pool_calls()[0])))
def test_bad_pool_calls_raise_a_gdn_error_and_change_nothing(index):
    cases, good = bad_pool_calls()
    _, change, error, words = cases[index]
    args = {**good, **change}
    before = {name: t.clone() for name, t in args.items() if isinstance(t, torch.Tensor)}
    with pytest.raises(error, match=words):
        gt.fused_recurrent_gated_delta_rule(**args)
    for name, t in before.items():
        assert torch.equal(args[name], t), name


def general_path_gates(g, K):
    """g per key channel (gk): what the one-call path does not take, so the general path runs."""
    return dict(gk=g.unsqueeze(-1).expand(*g.shape, K).contiguous())


@pytest.mark.parametrize("general_path", [False, True])
def test_in_place_writes_count_as_in_place_ops_for_autograd(general_path):
    """The pool and out= are written as torch's in-place ops write: their version counters move,
    so a backward that saved their old values refuses to run instead of using the new ones."""
    q, k, v, g, beta = (t.float() for t in inputs(B=4, T=1))
    gates = general_path_gates(g, q.shape[-1]) if general_path else dict(g=g)
    pool, out = pool_of(7, dtype=torch.float32), torch.zeros_like(v)
    w = torch.ones((), requires_grad=True)
    saved_pool, saved_out = (pool * w).sum(), (out * w).sum()  # mul saves pool and out for its backward
    versions = pool._version, out._version
    with gt.backend("cpu"), torch.no_grad():
        gt.fused_recurrent_gated_delta_rule(q, k, v, **gates, beta=beta, initial_state=pool,
                                            ssm_state_indices=torch.tensor([5, -1, 0, 2]), out=out)
    assert pool._version > versions[0] and out._version > versions[1]
    for saved in (saved_pool, saved_out):
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            saved.backward()


def test_the_lowlevel_layer_counts_its_writes_into_torch_tensors():
    q, k, v, g, beta = (t.float() for t in inputs(B=2, T=3))
    gate, rate = g.unsqueeze(-1), beta.unsqueeze(-1)
    out, states = torch.zeros_like(v), torch.zeros(2, v.shape[2], v.shape[3], q.shape[3])
    before = out._version, states._version
    gdn.forward(q, k, v, gate, rate, out=out, states=states, head_map="grouped", ctx=gdn.Context("cpu", threads=1))
    assert out._version > before[0] and states._version > before[1]
    dq = torch.zeros_like(q)
    gdn.backward(q, k, v, gate, rate, d_out=torch.ones_like(v), dq=dq, head_map="grouped",
                 ctx=gdn.Context("cpu", threads=1))
    assert dq._version > 0


@pytest.mark.parametrize("general_path", [False, True])
def test_a_step_with_no_sequences_leaves_the_pool_as_it_was(general_path):
    """B = 0 (a serving step with no decode requests): an empty index tensor, whose data pointer
    torch leaves NULL, names no slot; it is not read as 'no indices'."""
    K, V, HV = 8, 6, 4
    q, k = torch.zeros(0, 1, 2, K), torch.zeros(0, 1, 2, K)
    v, g, beta = torch.zeros(0, 1, HV, V), torch.zeros(0, 1, HV), torch.zeros(0, 1, HV)
    gates = general_path_gates(g, K) if general_path else dict(g=g)
    pool = pool_of(3, dtype=torch.float32)
    before = pool.clone()
    with gt.backend("cpu"), torch.no_grad():
        o, final = gt.fused_recurrent_gated_delta_rule(q, k, v, **gates, beta=beta, initial_state=pool,
                                                       ssm_state_indices=torch.empty(0, dtype=torch.int64))
    assert o.shape == v.shape and final is pool and torch.equal(pool, before)


def test_strided_indices_name_the_same_slots_as_contiguous_ones():
    """A column of a block table, say: indices every other entry of a tensor."""
    q, k, v, g, beta = (t.float() for t in inputs(B=4, T=1))
    table = torch.tensor([[5, 9], [-1, 9], [0, 9], [2, 9]])
    strided = table[:, 0]
    assert strided.stride(0) == 2
    pools = [pool_of(7, dtype=torch.float32) for _ in range(2)]
    with gt.backend("cpu"), torch.no_grad():
        o, _ = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=pools[0],
                                                   ssm_state_indices=strided.contiguous())
        o2, _ = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=pools[1],
                                                    ssm_state_indices=strided)
    assert torch.equal(o, o2) and torch.equal(pools[0], pools[1])


@pytest.mark.parametrize("general_path", [False, True])
@pytest.mark.parametrize("written", ["pool", "out"])
def test_inference_tensors_are_written_only_in_inference_mode(general_path, written):
    """As torch's in-place ops: an inference tensor (made under torch.inference_mode()) is updated
    inside inference mode, and refused outside it, on either path, with nothing written."""
    q, k, v, g, beta = (t.float() for t in inputs(B=4, T=1))
    gates = general_path_gates(g, q.shape[-1]) if general_path else dict(g=g)
    with torch.inference_mode():
        made_in_inference_mode = pool_of(7, dtype=torch.float32), torch.zeros_like(v)
    pool = made_in_inference_mode[0] if written == "pool" else pool_of(7, dtype=torch.float32)
    out = made_in_inference_mode[1]
    assert pool.is_inference() == (written == "pool")
    call = dict(q=q, k=k, v=v, **gates, beta=beta, initial_state=pool, ssm_state_indices=torch.tensor([5, -1, 0, 2]),
                out=out if written == "out" else None)
    before = pool.clone(), out.clone()
    with gt.backend("cpu"), torch.no_grad():
        with pytest.raises(gdn.InvalidArgumentError, match="inference tensor"):
            gt.fused_recurrent_gated_delta_rule(**call)
    assert torch.equal(pool, before[0]) and torch.equal(out, before[1])
    with gt.backend("cpu"), torch.inference_mode():
        gt.fused_recurrent_gated_delta_rule(**call)
    assert not torch.equal(pool, before[0])


@pytest.mark.parametrize("in_place", [False, True])
def test_mixed_dtypes_return_o_in_vs_dtype_as_flas_decoding_function(in_place):
    """FLA's fused_recurrent makes o like v (its chunked function returns q's dtype): with float32
    q/k and float16 v, o is float16, the float32 result rounded once, and out= is v's dtype."""
    q, k, v, g, beta = (t.float() for t in inputs())
    v16 = v.half()
    pool = pool_of(6, dtype=torch.float32)
    slots = torch.tensor([4, 0, 2])
    kw = dict(initial_state=pool.clone(), ssm_state_indices=slots) if in_place else dict(initial_state=pool[:3])
    with torch.no_grad(), gt.backend("cpu"):
        o, _ = gt.fused_recurrent_gated_delta_rule(q, k, v16, g, beta=beta, **kw)
        assert o.dtype == torch.float16
        kw32 = dict(initial_state=pool.clone(), ssm_state_indices=slots) if in_place else dict(initial_state=pool[:3])
        o32, _ = gt.fused_recurrent_gated_delta_rule(q, k, v16.float(), g, beta=beta, **kw32)
        assert torch.equal(o, o32.half())
        out = torch.empty_like(v16)
        kw = dict(initial_state=pool.clone(), ssm_state_indices=slots) if in_place else dict(initial_state=pool[:3])
        assert gt.fused_recurrent_gated_delta_rule(q, k, v16, g, beta=beta, out=out, **kw)[0] is out
        with pytest.raises(gdn.InvalidArgumentError, match="out is"):
            gt.fused_recurrent_gated_delta_rule(q, k, v16, g, beta=beta, out=torch.empty_like(v), **kw)
        o_chunk, _ = gt.chunk_gated_delta_rule(q, k, v16, g, beta=beta, initial_state=pool[:3])
        assert o_chunk.dtype == torch.float32


def test_the_gate_in_kernel_needs_g_as_flas_decoding_function_says():
    q, k, v, g, beta = inputs()
    with pytest.raises(gdn.InvalidArgumentError, match="needs g"):
        gt.fused_recurrent_gated_delta_rule(q, k, v, None, beta=beta, use_gate_in_kernel=True,
                                            A_log=torch.zeros(v.shape[2], dtype=q.dtype))


def test_g_and_gk_are_added_in_float32():
    """g and gk together: their sum in float32 (as FLA's kernel adds them in registers), not in
    their own bfloat16, which would round each decay by up to 0.4%."""
    q, k, v, g, beta = (t.float() for t in inputs())
    gk = -torch.rand(*q.shape[:2], v.shape[2], q.shape[3], generator=torch.Generator().manual_seed(5)) * 0.3
    g16, gk16 = g.bfloat16(), gk.bfloat16()
    with torch.no_grad(), gt.backend("cpu"):
        o, _ = gt.fused_recurrent_gated_delta_rule(q, k, v, g=g16, gk=gk16, beta=beta)
        o_ref, _ = gt.fused_recurrent_gated_delta_rule(q, k, v, gk=gk16.float() + g16.float().unsqueeze(-1), beta=beta)
        assert torch.equal(o, o_ref)
        with pytest.raises(gdn.ShapeError, match="gk"):
            gt.fused_recurrent_gated_delta_rule(q, k, v, gk=g, beta=beta)


def test_out_over_the_pool_is_refused_and_the_pool_kept():
    q, k, v, g, beta = (t.float() for t in inputs(B=2, T=1))
    pool = pool_of(4, dtype=torch.float32)
    before = pool.clone()
    out = pool.view(-1)[:v.numel()].view(v.shape)  # o's buffer laid over slot 0
    for fast in (True, False):
        kw = {} if fast else dict(use_beta_sigmoid_in_kernel=True)  # the general path
        with torch.no_grad(), pytest.raises(gdn.AliasError):
            gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=pool,
                                                ssm_state_indices=torch.tensor([2, 0]), out=out, **kw)
        assert torch.equal(pool, before)


def test_a_pool_of_no_slots_with_negative_indices_starts_from_zeros():
    q, k, v, g, beta = inputs(B=2)
    empty = pool_of(0)
    with torch.no_grad():
        o, final = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=empty,
                                                       ssm_state_indices=torch.tensor([-1, -1]),
                                                       inplace_final_state=False, output_final_state=True)
        o_ref, final_ref = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta,
                                                               initial_state=torch.zeros(2, *empty.shape[1:],
                                                                                         dtype=empty.dtype),
                                                               output_final_state=True)
    assert torch.equal(o, o_ref) and torch.equal(final, final_ref)


@pytest.mark.parametrize("state_v_first", [False, True])
def test_a_state_with_one_value_channel_and_strided_keys_is_read_in_place(state_v_first):
    """V = 1 (or K = 1 V-first): the size-1 dimension is the contiguous one, so a slice of a wider
    state (its other dimension a stride apart) is read and updated where it is."""
    q, k, v, g, beta = (t.float() for t in inputs(K=4, V=1))
    wide = torch.randn(3, 4, 1, 4, 3) if state_v_first else torch.randn(3, 4, 4, 3)
    with torch.no_grad():
        state = wide[..., 1] if state_v_first else wide[..., 1:2]
        assert not state.is_contiguous()
        o_ref, final_ref = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state.contiguous(),
                                                     output_final_state=True, state_v_first=state_v_first)
        o, final = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=state, output_final_state=True,
                                             state_v_first=state_v_first)
        assert torch.equal(o, o_ref) and torch.equal(final, final_ref)
        o2, same = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=state,
                                                       inplace_final_state=True, state_v_first=state_v_first)
        assert same is state and torch.equal(o2, o_ref) and torch.equal(state, final_ref)
