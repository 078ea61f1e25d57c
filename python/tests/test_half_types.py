"""bfloat16 and float16 through gdn.torch and gdn.forward / gdn.backward (docs/SPEC.md section 3.1).

The identity held exactly: a call with bfloat16 or float16 q, k, v gives the bits of the wide call
on the same values converted (float32 on cpu, float64 on ref, the oracle that accumulates in
double), with each result then rounded once to its tensor's dtype. The tensors reach the library
as the caller gave them: no float32 copy of q, k, v, packed views read in place, saved as they are
for the backward.
"""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import gdn
import gdn.torch as gt
from half_types import HALF_DTYPES, backend_takes, on_backends, round_once

B, T, H, HV, K, V = 2, 37, 2, 4, 16, 8


def wide_dtype(backend):
    return torch.float64 if backend == "ref" else torch.float32


def half_inputs(dtype, beta_dtype, g_dtype, seed=0, gate_per_channel=False):
    """q, k, v in dtype, g, beta, a float32 initial state, and the cotangents of o and the state."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen).to(dtype)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1).to(dtype)
    v = torch.randn(B, T, HV, V, generator=gen).to(dtype)
    g = -0.3 * torch.rand(B, T, HV, *((K,) if gate_per_channel else ()), generator=gen)
    beta = torch.rand(B, T, HV, generator=gen)
    h0 = 0.1 * torch.randn(B, HV, K, V, generator=gen)
    d_out = torch.randn(B, T, HV, V, generator=gen).to(dtype)
    d_state = torch.randn(B, HV, K, V, generator=gen)
    return [q, k, v, g.to(g_dtype), beta.to(beta_dtype), h0], d_out, d_state


def forward_backward(backend, inputs, d_out, d_state, **kwargs):
    """o, the final state and the gradients of every input, through autograd."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    with gt.backend(backend):
        o, state = gt.chunk_gated_delta_rule(*leaves[:5], initial_state=leaves[5], output_final_state=True, **kwargs)
        grads = torch.autograd.grad((o, state), leaves, (d_out, d_state))
    return o, state, grads


def assert_rounded_once(half, wide, dtype, name):
    assert half.dtype == dtype, (name, half.dtype)
    assert torch.equal(half, round_once(wide, dtype)), name


def test_round_once_rounds_once():
    """The helper's premise: just above a bfloat16 tie, float64 -> float32 -> bfloat16 lands on the
    tie and goes to even; rounding once goes up."""
    x = torch.tensor([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-8, 3.0], dtype=torch.float64)
    assert x.to(torch.bfloat16)[0] == 1.0  # torch's conversion rounds twice
    assert round_once(x, torch.bfloat16).tolist() == [1 + 2**-7, -(1 + 2**-7), 1.0, 3.0]
    x16 = torch.tensor([1 + 2**-11 + 2**-40], dtype=torch.float64)
    assert round_once(x16, torch.float16).item() == 1 + 2**-10


@pytest.mark.parametrize("backend", on_backends())
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("beta_like_q", [True, False], ids=["beta-like-q", "beta-f32"])
@pytest.mark.parametrize("g_dtype", [torch.float32, torch.bfloat16], ids=str)
def test_half_call_is_the_wide_call_rounded_once(backend, dtype, beta_like_q, g_dtype):
    inputs, d_out, d_state = half_inputs(dtype, dtype if beta_like_q else torch.float32, g_dtype, seed=1)
    o, state, grads = forward_backward(backend, inputs, d_out, d_state)
    wide = wide_dtype(backend)
    o_w, state_w, grads_w = forward_backward(backend, [x.to(wide) for x in inputs], d_out.to(wide),
                                             d_state.to(wide))
    assert_rounded_once(o, o_w, dtype, "o")
    assert_rounded_once(state, state_w, torch.float32, "final state")
    for name, grad, grad_w, x in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), grads, grads_w, inputs):
        assert_rounded_once(grad, grad_w, x.dtype, name)


@pytest.mark.parametrize("backend", on_backends(("bfloat16",)))
def test_bf16_gate_per_key_channel_packed_sequences_value_first_state(backend):
    inputs, d_out, d_state = half_inputs(torch.bfloat16, torch.bfloat16, torch.bfloat16, seed=2,
                                         gate_per_channel=True)
    # B = 1, three sequences packed along T (one of them empty), states [N, HV, V, K].
    inputs = [x.reshape(1, B * T, *x.shape[2:]) for x in inputs[:5]] + [
        torch.cat([inputs[5], inputs[5][:1]]).transpose(-1, -2).contiguous()]
    d_out = d_out.reshape(1, B * T, HV, V)
    d_state = torch.cat([d_state, d_state[:1]]).transpose(-1, -2).contiguous()
    kwargs = dict(cu_seqlens=torch.tensor([0, 30, 30, B * T]), state_v_first=True)
    o, state, grads = forward_backward(backend, inputs, d_out, d_state, **kwargs)
    wide = wide_dtype(backend)
    o_w, state_w, grads_w = forward_backward(backend, [x.to(wide) for x in inputs], d_out.to(wide),
                                             d_state.to(wide), **kwargs)
    assert_rounded_once(o, o_w, torch.bfloat16, "o")
    assert_rounded_once(state, state_w, torch.float32, "final state")
    for name, grad, grad_w, x in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), grads, grads_w, inputs):
        assert_rounded_once(grad, grad_w, x.dtype, name)


@pytest.mark.parametrize("backend", on_backends())
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_decoding_step_updates_a_float32_pool_in_place(backend, dtype):
    """fused_recurrent_gated_delta_rule with half q/k/v: the float32 pool's slots updated in place."""
    inputs, _, _ = half_inputs(dtype, dtype, torch.float32, seed=3)
    q, k, v, g, beta = (x[:, :1] for x in inputs[:5])  # one token per sequence
    pool = torch.zeros(5, HV, K, V)
    slots = torch.tensor([3, 0])
    pool[slots] = inputs[5]
    wide = wide_dtype(backend)
    pool_w = pool.to(wide, copy=True)
    with gt.backend(backend), torch.no_grad():
        o, returned = gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=pool,
                                                         ssm_state_indices=slots)
        o_w, _ = gt.fused_recurrent_gated_delta_rule(*(x.to(wide) for x in (q, k, v, g)), beta=beta.to(wide),
                                                     initial_state=pool_w, ssm_state_indices=slots)
    assert returned is pool
    assert_rounded_once(o, o_w, dtype, "o")
    assert_rounded_once(pool, pool_w, torch.float32, "pool")


def _split(qkv):
    q, k, v = qkv.split([H * K, H * K, HV * V], dim=-1)
    return q.unflatten(-1, (H, K)), k.unflatten(-1, (H, K)), v.unflatten(-1, (HV, V))


class _Spy:
    """Records what gdn.torch hands the extension: each tensor argument's address, dtype and
    strides, and the precision."""

    def __init__(self, monkeypatch):
        self.calls = []
        for name in ("forward", "backward"):
            monkeypatch.setattr(gt._gdn, name, self._wrap(name, getattr(gt._gdn, name)))

    def _wrap(self, name, real):
        def call(ctx, *args):
            tensors = [(a.data_ptr(), a.dtype, a.stride()) if isinstance(a, torch.Tensor) else None for a in args[:5]]
            self.calls.append((name, tensors, args[-1]))
            return real(ctx, *args)
        return call


def _address(t):
    return (t.data_ptr(), t.dtype, t.stride())


def test_packed_bf16_views_reach_the_library_in_place_and_are_saved_as_given(monkeypatch):
    """q, k, v split from one bfloat16 projection: forward and backward get those very views (no
    float32 copy, no contiguous copy), autograd keeps only them for the backward, and the results
    are those of a call on contiguous copies."""
    gen = torch.Generator().manual_seed(4)
    qkv = torch.randn(B, T, 2 * H * K + HV * V, generator=gen).to(torch.bfloat16).requires_grad_()
    g = (-0.3 * torch.rand(B, T, HV, generator=gen)).requires_grad_()
    beta = torch.rand(B, T, HV, generator=gen).to(torch.bfloat16).requires_grad_()
    d_out = torch.randn(B, T, HV, V, generator=gen).to(torch.bfloat16)
    q, k, v = _split(qkv)
    assert not q.is_contiguous()
    saved = []

    def keep(t):
        saved.append(t)
        return t

    spy = _Spy(monkeypatch)
    with gt.backend("ref"):
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            o, _ = gt.chunk_gated_delta_rule(q, k, v, g, beta)
        o.backward(d_out)
    assert [name for name, _, _ in spy.calls] == ["forward", "backward"]
    expected = [_address(t) for t in (q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1))]
    for name, tensors, _ in spy.calls:
        assert tensors == expected, name
    callers = {t.untyped_storage().data_ptr() for t in (qkv, g, beta)}
    assert saved and all(t.untyped_storage().data_ptr() in callers for t in saved), \
        [(t.dtype, tuple(t.shape)) for t in saved]
    assert o.dtype == qkv.grad.dtype == beta.grad.dtype == torch.bfloat16 and g.grad.dtype == torch.float32

    copies = [x.detach().clone().requires_grad_() for x in (qkv, g, beta)]
    with gt.backend("ref"):
        o_c, _ = gt.chunk_gated_delta_rule(*(x.contiguous() for x in _split(copies[0])), copies[1], copies[2])
        o_c.backward(d_out)
    assert torch.equal(o, o_c)
    for x, c in zip((qkv, g, beta), copies):
        assert torch.equal(x.grad, c.grad)


def _allocations_of_at_least(nbytes, fn):
    """How many host allocations of nbytes or more fn makes (the profiler attributes each to the
    op that made it)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return sum(1 for e in prof.events() if e.self_cpu_memory_usage >= nbytes)


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_l2norm_of_half_rows_is_the_float32_result_rounded_once_with_no_float32_copy(dtype):
    """use_qk_l2norm_in_kernel on bfloat16/float16 q or k (a strided view of a packed projection):
    the extension reads the rows in place and computes in float32, so its bits are those of the
    float32 normalisation of the same values rounded once to the dtype, forward and backward; and
    no float32 copy of the rows is made (the output is the one allocation of the rows' size, the
    backward none, overwriting the gradient it is given)."""
    gen = torch.Generator().manual_seed(21)
    packed = torch.randn(2, 37, 3 * 4 * 16, generator=gen).to(dtype)
    x = packed[..., 16:16 + 4 * 16].unflatten(-1, (4, 16))  # [B, T, H, K], rows 192 elements apart
    x[0, 5, 2] = 0.0  # a zero row: eps keeps it finite
    x[1, 3, 1] *= 300.0  # large and tiny rows: the sum of squares is formed in double either way
    x[1, 4, 0] *= 1e-3
    before = x.clone()
    dy = torch.randn(x.shape, generator=gen).to(dtype)
    y = gt._normalized(x)
    assert y.dtype == dtype and torch.equal(y, gt._normalized(x.float()).to(dtype))
    dx = gt._normalized_backward(x, dy.clone())
    assert dx.dtype == dtype and torch.equal(dx, gt._normalized_backward(x.float(), dy.float()).to(dtype))
    assert torch.equal(x, before)

    float32_bytes = x.numel() * 4
    assert _allocations_of_at_least(float32_bytes // 2, lambda: gt._normalized(x)) == 1
    grad = dy.clone()
    assert _allocations_of_at_least(float32_bytes // 2, lambda: gt._normalized_backward(x, grad)) == 0


def test_float16_gate_is_converted_alone(monkeypatch):
    """g in float16 (the library takes float32 or bfloat16 gates): g alone becomes float32, q, k,
    v and beta are passed as they are, and the result is that of the caller's float32 g."""
    inputs, _, _ = half_inputs(torch.float16, torch.float16, torch.float16, seed=5)
    q, k, v, g, beta, _ = inputs
    spy = _Spy(monkeypatch)
    with gt.backend("ref"):
        o, _ = gt.chunk_gated_delta_rule(q, k, v, g, beta)
        o_f32_gate, _ = gt.chunk_gated_delta_rule(q, k, v, g.float(), beta)
    (_, tensors, _), _ = spy.calls
    assert tensors[:3] == [_address(t) for t in (q, k, v)] and tensors[4] == _address(beta.unsqueeze(-1))
    assert tensors[3][1] == torch.float32
    assert torch.equal(o, o_f32_gate)


@pytest.mark.parametrize("case, tensor, message", [
    ("f16 g", "g", "g.type = F16: g is F32 or BF16"),
    ("bf16 beta with f16 q", "beta", "beta.type = BF16: beta is F32 or the type of q (F16)"),
    ("bf16 state", "state", "state.type = BF16: states are F32 when q is F16"),
    ("f32 out", "out", "out.type = F32 but q.type = F16"),
])
def test_low_level_refuses_other_combinations_with_the_librarys_message(case, tensor, message):
    gen = torch.Generator().manual_seed(6)
    x = {n: torch.randn(*s, generator=gen).half() for n, s in
         (("q", (1, 3, 1, 4)), ("k", (1, 3, 1, 4)), ("v", (1, 3, 2, 4)))}
    x["g"], x["beta"] = -torch.rand(1, 3, 2, 1, generator=gen), torch.rand(1, 3, 2, 1, generator=gen).half()
    x["state"] = torch.zeros(1, 2, 4, 4)
    x["out"] = torch.full((1, 3, 2, 4), 7.0, dtype=torch.float16)
    x[tensor] = {"g": x["g"].half(), "beta": x["beta"].bfloat16(), "state": x["state"].bfloat16(),
                 "out": torch.full((1, 3, 2, 4), 7.0)}[tensor]
    out_before = x["out"].clone()
    ctx = gdn.Context("ref")
    with pytest.raises(gdn.ElementTypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gdn.forward(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"], out=x["out"], ctx=ctx)
    assert torch.equal(x["out"], out_before)  # nothing written


def test_low_level_half_call_allocates_outputs_in_the_right_dtypes():
    inputs, _, _ = half_inputs(torch.bfloat16, torch.float32, torch.bfloat16, seed=7)
    q, k, v, g, beta, _ = inputs
    ctx = gdn.Context("ref")
    out, states = gdn.forward(q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), head_map="grouped", ctx=ctx)
    assert out.dtype == torch.bfloat16 and states.dtype == torch.float32
    grads = gdn.backward(q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), d_out=torch.ones_like(out), head_map="grouped",
                         ctx=ctx)
    assert [t.dtype for t in grads[:5]] == [torch.bfloat16] * 3 + [torch.bfloat16, torch.float32]


def test_cpu_backend_takes_or_refuses_half_types_by_name():
    """While the cpu backend refuses bfloat16, gdn.torch says so with the library's message (no
    silent float32 conversion); once it takes them, the call computes in bfloat16 in and out."""
    inputs, _, _ = half_inputs(torch.bfloat16, torch.bfloat16, torch.float32, seed=8)
    if not gdn.backend_available("cpu"):
        pytest.skip("this build has no cpu backend")
    with gt.backend("cpu"):
        if backend_takes("cpu", torch.bfloat16):
            o, _ = gt.chunk_gated_delta_rule(*inputs[:5])
            assert o.dtype == torch.bfloat16
        else:
            with pytest.raises(gdn.ElementTypeError, match="q/k/v BF16"):
                gt.chunk_gated_delta_rule(*inputs[:5])


def test_unknown_precision_is_a_value_error():
    inputs, _, _ = half_inputs(torch.bfloat16, torch.bfloat16, torch.float32, seed=9)
    q, k, v, g, beta, h0 = inputs
    for bad in ("fp8", "BF16", 1, None):
        with pytest.raises(ValueError, match="precision"):
            gt.chunk_gated_delta_rule(q, k, v, g, beta, precision=bad)
        with pytest.raises(ValueError, match="precision"):
            gt.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, precision=bad)
        with pytest.raises(gdn.InvalidArgumentError, match="precision"):
            gdn.forward(q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), precision=bad, ctx=gdn.Context("ref"))


def test_precision_reaches_the_library(monkeypatch):
    """"bf16" arrives as GDN_PRECISION_BF16 in forward and backward, the default as EXACT; a value
    the library does not know is refused by the library itself (so the field is the problem's)."""
    inputs, d_out, d_state = half_inputs(torch.bfloat16, torch.bfloat16, torch.float32, seed=10)
    spy = _Spy(monkeypatch)
    forward_backward("ref", inputs, d_out, d_state, precision="bf16")
    forward_backward("ref", inputs, d_out, d_state)
    assert [(name, precision) for name, _, precision in spy.calls] == [
        ("forward", 1), ("backward", 1), ("forward", 0), ("backward", 0)]
    q, k, v, g, beta, _ = inputs
    ctx = gdn.Context("ref")
    with pytest.raises(gdn.InvalidArgumentError, match="precision = 7 is not a gdn_precision"):
        gdn._gdn.forward(ctx._native, q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), None, torch.empty_like(v), None,
                         None, 1, False, None, None, 7)


def test_bf16_precision_on_ref_is_exact():
    """The ref backend ignores precision: precision="bf16" gives the exact call's bits."""
    inputs, d_out, d_state = half_inputs(torch.bfloat16, torch.bfloat16, torch.bfloat16, seed=11)
    exact = forward_backward("ref", inputs, d_out, d_state)
    bf16 = forward_backward("ref", inputs, d_out, d_state, precision="bf16")
    assert torch.equal(exact[0], bf16[0]) and torch.equal(exact[1], bf16[1])
    assert all(torch.equal(a, b) for a, b in zip(exact[2], bf16[2]))


@pytest.mark.skipif(not gdn.backend_available("cpu"), reason="this build has no cpu backend")
def test_bf16_precision_on_cpu_goes_through_and_repeats_its_bits():
    """float32 inputs with precision="bf16" on the cpu backend: computed, the same bits every call
    (the exact call's bits only where the host has no native bfloat16 products: not asserted)."""
    inputs, d_out, d_state = half_inputs(torch.float32, torch.float32, torch.float32, seed=12)
    first = forward_backward("cpu", inputs, d_out.float(), d_state, precision="bf16")
    second = forward_backward("cpu", inputs, d_out.float(), d_state, precision="bf16")
    assert torch.equal(first[0], second[0]) and all(torch.equal(a, b) for a, b in zip(first[2], second[2]))


def test_bf16_under_torch_compile_is_the_eager_call():
    inputs, d_out, d_state = half_inputs(torch.bfloat16, torch.bfloat16, torch.float32, seed=13)

    def fn(q, k, v, g, beta, h0):
        return gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                         use_qk_l2norm_in_kernel=True)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    results = []
    for f in (fn, compiled):
        leaves = [x.detach().clone().requires_grad_() for x in inputs]
        with gt.backend("ref"):
            o, state = f(*leaves)
            grads = torch.autograd.grad((o, state), leaves, (d_out, d_state))
        results.append((o, state, grads))
    (o, state, grads), (o_c, state_c, grads_c) = results
    assert o_c.dtype == torch.bfloat16 and state_c.dtype == torch.float32
    assert torch.equal(o, o_c) and torch.equal(state, state_c)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_c))


def test_opcheck_with_bf16_inputs():
    """PyTorch's checks of the registered op (schema, fake tensors' dtypes, autograd) on bfloat16."""
    inputs, _, _ = half_inputs(torch.bfloat16, torch.bfloat16, torch.float32, seed=14)
    q, k, v, g, beta, h0 = inputs
    with gt.backend("ref"):
        for precision in (0, 1):
            args = (q[:1, :5], k[:1, :5], v[:1, :5], g[:1, :5].unsqueeze(-1), beta[:1, :5].unsqueeze(-1), h0[:1],
                    None, None, True, True, False, precision)
            torch.library.opcheck(torch.ops.gdn.gated_delta_rule_fwd.default, args)


def test_numpy_float16_arrays_through_the_low_level_layer():
    """numpy float16 arrays (numpy has no bfloat16): out float16, states float32, the bits of the
    same call on torch tensors."""
    inputs, _, _ = half_inputs(torch.float16, torch.float16, torch.float32, seed=15)
    q, k, v, g, beta, h0 = inputs
    args = (q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), h0.transpose(-1, -2).contiguous())
    ctx = gdn.Context("ref")
    out, states = gdn.forward(*(t.numpy() for t in args), head_map="grouped", ctx=ctx)
    out_t, states_t = gdn.forward(*args, head_map="grouped", ctx=ctx)
    assert out.dtype.name == "float16" and states.dtype.name == "float32"
    assert torch.equal(torch.from_numpy(out), out_t) and torch.equal(torch.from_numpy(states), states_t)
