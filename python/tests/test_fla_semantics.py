"""gdn.torch.chunk_gated_delta_rule at FLA's edges: its exact signature, the scale as given (a
double, 0.0 included), empty problems and zero-length packed sequences, mixed dtypes, offsets
that are strided views, and the grouped head map through the backward."""

import inspect

import pytest
import torch

import fla_reference
import gdn
import gdn.torch as gt
from reference import recurrent_reference
from torch_inputs import small_inputs


def inputs(B=1, T=9, H=2, HV=6, K=8, V=4, dtype=torch.float64, seed=0):
    """2 key heads read by 6 value heads by default: the grouped map differs from the tiled one."""
    return small_inputs(dtype, B, T, H, HV, K, V, seed, requires_grad=False)


def test_signature_is_flas():
    fla = fla_reference.chunk_parameters()
    if fla is None:
        pytest.skip("FLA is not installed (set GDN_FLA_SITE to an FLA install)")
    ours = []
    parameters = inspect.signature(gt.chunk_gated_delta_rule).parameters.values()
    # gdn's own keyword-only parameters, beside FLA's
    assert {p.name: p.default for p in parameters if p.kind == p.KEYWORD_ONLY} == dict(precision="exact")
    for p in parameters:
        if p.kind == p.KEYWORD_ONLY:
            continue
        if p.kind == p.VAR_KEYWORD:
            ours.append((f"**{p.name}", None))
        else:
            ours.append((p.name, None if p.default is p.empty else repr(p.default)))
    assert [name for name, _ in ours] == [name for name, _ in fla]
    assert ours == fla  # defaults too (None, False), as FLA's source writes them


@pytest.mark.parametrize("backend, tol", [("ref", 1e-13), ("cpu", 2e-6)])
def test_non_default_scale_matches_flas_naive_reference(backend, tol):
    naive = fla_reference.naive()
    q, k, v, g, beta, h0 = inputs(H=3, HV=3)  # FLA's naive functions take as many key heads as value heads
    scale = 0.1  # not a float32 value: it must reach the arithmetic as a double
    dtype = torch.float64 if backend == "ref" else torch.float32
    with gt.backend(backend):
        o, state = gt.chunk_gated_delta_rule(*(t.to(dtype) for t in (q, k, v, g, beta)), scale=scale,
                                             initial_state=h0.to(dtype), output_final_state=True)
    if naive is not None:
        import hf_reference
        fn = hf_reference.in_float64(naive.naive_recurrent_gated_delta_rule)
        o_ref, state_ref = fn(q, k, v, beta, g, scale=scale, initial_state=h0, output_final_state=True)
    else:  # the independent numpy reference
        o_ref, state_ref = (torch.from_numpy(x) for x in recurrent_reference(q.numpy(), k.numpy(), v.numpy(), g.numpy(),
                                                                              beta.numpy(), scale, h0.numpy()))
    assert ((o.double() - o_ref).norm() / o_ref.norm()).item() < tol
    assert ((state.double() - state_ref).norm() / state_ref.norm()).item() < tol


def test_scale_zero_is_zero_and_none_is_the_default():
    q, k, v, g, beta, h0 = inputs()
    with gt.backend("ref"):
        o0, s0 = gt.chunk_gated_delta_rule(q, k, v, g, beta, scale=0.0, initial_state=h0, output_final_state=True)
        o1, s1 = gt.chunk_gated_delta_rule(q, k, v, g, beta, scale=1.0, initial_state=h0, output_final_state=True)
        o_none, _ = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0)
        o_given, _ = gt.chunk_gated_delta_rule(q, k, v, g, beta, scale=q.shape[-1] ** -0.5, initial_state=h0)
    assert torch.count_nonzero(o0) == 0 and torch.equal(s0, s1)  # FLA: the read-out is scaled, the state is not
    torch.testing.assert_close(o_none, o_given, rtol=1e-15, atol=0)
    assert not torch.equal(o1, o_none)


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("B", [0, 2])
def test_no_tokens_returns_the_initial_state_forward_and_backward(backend, B):
    dtype = torch.float64 if backend == "ref" else torch.float32
    q, k, v, g, beta, h0 = (t.to(dtype) for t in inputs(B=B, T=0))
    leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta, h0)]
    with gt.backend(backend):
        o, state = gt.chunk_gated_delta_rule(*leaves[:5], initial_state=leaves[5], output_final_state=True)
        assert o.shape == v.shape and state.shape == h0.shape and torch.equal(state, h0)
        d_state = torch.randn_like(state)
        (state * d_state).sum().backward()
    assert torch.equal(leaves[5].grad, d_state)  # the final state is the initial state
    for leaf in leaves[:5]:
        assert leaf.grad.shape == leaf.shape
    with gt.backend(backend):
        _, zero = gt.chunk_gated_delta_rule(*leaves[:5], output_final_state=True)
    assert zero.shape == h0.shape and torch.count_nonzero(zero) == 0


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_zero_length_packed_sequences_pass_their_state_through(backend):
    dtype = torch.float64 if backend == "ref" else torch.float32
    q, k, v, g, beta, _ = (t.to(dtype) for t in inputs(T=12))
    lengths = [0, 5, 0, 7, 0]
    cu = torch.tensor([0, 0, 5, 5, 12, 12])
    h0 = torch.randn(len(lengths), v.shape[2], q.shape[3], v.shape[3], dtype=dtype)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta, h0)]
    with gt.backend(backend):
        o, state = gt.chunk_gated_delta_rule(*leaves[:5], initial_state=leaves[5], output_final_state=True,
                                             cu_seqlens=cu)
        d_o, d_state = torch.randn_like(o), torch.randn_like(state)
        ((o * d_o).sum() + (state * d_state).sum()).backward()
        for n, start in ((1, 0), (3, 5)):
            part = [t[:, start:start + lengths[n]] for t in (q, k, v, g, beta)]
            o_n, state_n = gt.chunk_gated_delta_rule(*part, initial_state=h0[n:n + 1], output_final_state=True)
            assert torch.equal(o[:, start:start + lengths[n]], o_n) and torch.equal(state[n], state_n[0])
    for n in (0, 2, 4):
        assert torch.equal(state[n], h0[n]) and torch.equal(leaves[5].grad[n], d_state[n])


def test_mixed_dtypes_are_computed_as_fla_computes_them():
    """FLA's own tests call the op with float32 q/k and float16 v/beta: o comes back in q's dtype,
    the final state in float32, and the numbers are those of the float32 inputs."""
    q, k, v, g, beta, h0 = (t.float() for t in inputs())
    v16, beta16 = v.half(), beta.half()
    o, state = gt.chunk_gated_delta_rule(q, k, v16, g, beta16, initial_state=h0, output_final_state=True)
    o_ref, state_ref = gt.chunk_gated_delta_rule(q, k, v16.float(), g, beta16.float(), initial_state=h0,
                                                 output_final_state=True)
    assert o.dtype == torch.float32 and state.dtype == torch.float32
    assert torch.equal(o, o_ref) and torch.equal(state, state_ref)
    o_half, _ = gt.chunk_gated_delta_rule(q.half(), k.half(), v, g, beta)
    assert o_half.dtype == torch.float16


def test_strided_offsets_are_read_with_their_stride():
    q, k, v, g, beta, _ = inputs(T=12)
    buffer = torch.tensor([0, -1, 4, -1, 12, -1])
    strided = buffer[::2]
    assert not strided.is_contiguous()
    with gt.backend("ref"):
        o, state = gt.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, cu_seqlens=strided)
        o_ref, state_ref = gt.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True,
                                                     cu_seqlens=strided.contiguous())
    assert torch.equal(o, o_ref) and torch.equal(state, state_ref)
    # The low-level layer hands the view to the library as it is: the stride is read, and refused.
    with pytest.raises(gdn.LayoutError, match="cu_seqlens"):
        gdn.forward(q, k, v, g[..., None], beta[..., None], cu_seqlens=strided, head_map="grouped",
                    ctx=gdn.Context("ref"))


def test_gradcheck_with_grouped_key_heads():
    """H = 2 key heads read by HV = 6 value heads: the grouped map differs from the tiled one, in
    the forward and in the backward's sums over the value heads that read a key head."""
    q, k, v, g, beta, h0 = (t.requires_grad_() for t in inputs(T=5, K=4, V=3))

    def op(q, k, v, g, beta, h0):
        return gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)

    with gt.backend("ref"):
        assert torch.autograd.gradcheck(op, (q, k, v, g, beta, h0), eps=1e-6, atol=1e-8, rtol=1e-6)
        o, _ = op(*(t.detach() for t in (q, k, v, g, beta, h0)))
    o_ref, _ = recurrent_reference(*(t.detach().numpy() for t in (q, k, v, g, beta)), q.shape[-1] ** -0.5,
                                   h0.detach().numpy())
    torch.testing.assert_close(o, torch.from_numpy(o_ref), rtol=1e-12, atol=1e-12)


def test_state_v_first_keeps_gdns_own_layout():
    q, k, v, g, beta, h0 = inputs()
    with gt.backend("ref"):
        o, state = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
        o_t, state_t = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0.transpose(-1, -2).contiguous(),
                                                 output_final_state=True, state_v_first=True)
    assert torch.equal(o, o_t) and torch.equal(state.transpose(-1, -2), state_t) and state_t.is_contiguous()


def test_fla_gate_and_beta_options():
    q, k, v, a, b, h0 = inputs()
    A_log, dt_bias = torch.randn(v.shape[2], dtype=torch.float64), torch.randn(v.shape[2], dtype=torch.float64)
    with gt.backend("ref"):
        o, _ = gt.chunk_gated_delta_rule(q, k, v, a, b, initial_state=h0, use_gate_in_kernel=True, A_log=A_log,
                                         dt_bias=dt_bias, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)
        g = -A_log.exp() * torch.nn.functional.softplus(a + dt_bias)
        o_ref, _ = gt.chunk_gated_delta_rule(q, k, v, g, 2 * b.sigmoid(), initial_state=h0)
    torch.testing.assert_close(o, o_ref, rtol=1e-14, atol=1e-14)
    with pytest.raises(gdn.InvalidArgumentError, match="allow_neg_eigval"):
        gt.chunk_gated_delta_rule(q, k, v, a, b, allow_neg_eigval=True)


def test_the_gate_in_kernel_is_computed_in_float32_from_half_inputs():
    """use_gate_in_kernel with bfloat16 g, A_log and dt_bias: -exp(A_log) softplus(g + dt_bias) in
    float32, as FLA computes it (in bfloat16 each gate would be rounded by up to 0.4%)."""
    q, k, v, a, b, h0 = (t.float() for t in inputs())
    A_log, dt_bias = torch.randn(v.shape[2]), torch.randn(v.shape[2])
    half = [t.bfloat16() for t in (a, A_log, dt_bias)]
    with gt.backend("cpu"):
        o, _ = gt.chunk_gated_delta_rule(q, k, v, half[0], b, initial_state=h0, use_gate_in_kernel=True,
                                         A_log=half[1], dt_bias=half[2])
        g = -half[1].float().exp() * torch.nn.functional.softplus(half[0].float() + half[2].float())
        o_ref, _ = gt.chunk_gated_delta_rule(q, k, v, g, b, initial_state=h0)
    assert torch.equal(o, o_ref)


def test_beta_from_half_logits_is_a_float32_sigmoid():
    """use_beta_sigmoid_in_kernel with bfloat16 logits: sigmoid (and allow_neg_eigval's 2x) in
    float32, kept so, as FLA's kernels compute it (rounded to bfloat16 each beta would move by up
    to 0.4%)."""
    q, k, v, g, b, h0 = (t.float() for t in inputs())
    q, k, v = (t.bfloat16() for t in (q, k, v))
    logits = (4 * b - 2).bfloat16()
    with gt.backend("cpu"):
        for neg in (False, True):
            o, _ = gt.chunk_gated_delta_rule(q, k, v, g, logits, initial_state=h0, use_beta_sigmoid_in_kernel=True,
                                             allow_neg_eigval=neg)
            beta = logits.float().sigmoid() * (2 if neg else 1)
            o_ref, _ = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0)
            assert torch.equal(o, o_ref)
            o_rounded, _ = gt.chunk_gated_delta_rule(q, k, v, g, beta.bfloat16(), initial_state=h0)
            assert not torch.equal(o, o_rounded)  # the inputs are such that rounding beta shows


def test_transpose_state_layout_is_flas_old_name_of_state_v_first():
    q, k, v, g, beta, h0 = inputs()
    h0_vk = h0.transpose(-1, -2).contiguous()
    with gt.backend("ref"):
        o, state = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0_vk, output_final_state=True,
                                             state_v_first=True)
        with pytest.warns(DeprecationWarning, match="transpose_state_layout"):
            o_old, state_old = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0_vk,
                                                         output_final_state=True, transpose_state_layout=True)
        assert torch.equal(o, o_old) and torch.equal(state, state_old)
        with pytest.raises(gdn.InvalidArgumentError, match="Cannot pass both"):
            gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0_vk, state_v_first=True,
                                      transpose_state_layout=True)


def test_chunk_size_is_checked_as_fla_checks_it():
    q, k, v, g, beta, h0 = inputs()
    with gt.backend("ref"):
        o, _ = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0)
        for size in (16, 32, 64):
            assert torch.equal(gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, chunk_size=size)[0], o)
        for size in (8, 128):
            with pytest.raises(ValueError, match="chunk_size"):
                gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, chunk_size=size)


def test_a_gate_per_key_channel_from_raw_takes_a_log_per_head():
    """use_gate_in_kernel with g [B, T, HV, K]: A_log one per value head (broadcast over the key
    channels), dt_bias per head and channel, as FLA's KDA gate takes them; wrong sizes refused."""
    q, k, v, _, beta, h0 = inputs(H=2, HV=2, K=2)  # K == HV: a broadcast over the wrong dimension would run
    B, T, HV, K = q.shape[0], q.shape[1], v.shape[2], q.shape[3]
    raw = torch.randn(B, T, HV, K, dtype=torch.float64)
    A_log, dt_bias = torch.tensor([0.0, 2.0], dtype=torch.float64), torch.randn(HV * K, dtype=torch.float64)
    with gt.backend("ref"):
        o, _ = gt.chunk_gated_delta_rule(q, k, v, raw, beta, initial_state=h0, use_gate_in_kernel=True, A_log=A_log,
                                         dt_bias=dt_bias)
        g = -A_log.exp()[:, None] * torch.nn.functional.softplus(raw + dt_bias.view(HV, K))
        o_ref, _ = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0)
        assert torch.equal(o, o_ref)
        with pytest.raises(gdn.ShapeError, match="A_log"):
            gt.chunk_gated_delta_rule(q, k, v, raw, beta, use_gate_in_kernel=True, A_log=torch.zeros(3))
        with pytest.raises(gdn.ShapeError, match="dt_bias"):
            gt.chunk_gated_delta_rule(q, k, v, raw, beta, use_gate_in_kernel=True, A_log=A_log, dt_bias=torch.zeros(3))


def test_activations_of_a_float64_call_are_in_float64():
    """q, k, v in float64 make the whole call float64: beta's sigmoid and the gate from raw g too,
    whatever dtype the logits and A_log come in."""
    q, k, v, g, b, h0 = inputs()
    logits, raw, A_log = (2 * b - 1).float(), g.float(), torch.randn(v.shape[2])
    with gt.backend("ref"):
        o, _ = gt.chunk_gated_delta_rule(q, k, v, raw, logits, initial_state=h0, use_beta_sigmoid_in_kernel=True,
                                         use_gate_in_kernel=True, A_log=A_log)
        o_ref, _ = gt.chunk_gated_delta_rule(q, k, v, raw.double(), logits.double(), initial_state=h0,
                                             use_beta_sigmoid_in_kernel=True, use_gate_in_kernel=True,
                                             A_log=A_log.double())
    assert torch.equal(o, o_ref)
