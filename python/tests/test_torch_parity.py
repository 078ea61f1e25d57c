"""gdn.torch.chunk_gated_delta_rule against transformers' own pure-PyTorch functions (and FLA's
naive references when FLA is installed): outputs and all six gradients.

float64: gdn's ref backend against the references' code run in float64, to ~1e-10.
float32: gdn's cpu backend against that float64 truth, to the library's thresholds (NMSE 1e-10
forward, 1e-9 backward)."""

import pytest
import torch

import fla_reference
import gdn.torch as gt
import hf_reference as hf
from half_types import on_backends

FORWARD_NMSE_F32, BACKWARD_NMSE_F32 = 1e-10, 1e-9


def nmse(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float(((a - b) ** 2).sum() / (b * b).sum().clamp_min(1e-300))


def make_inputs(B, T, H, HV, K, V, decay, with_state, seed, dtype=torch.float64, packed=False):
    """Inputs as a model makes them: q and k raw (the op normalises them), g = -exp(A) softplus(.),
    beta = sigmoid(.). packed: q, k, v as views into one [B, T, conv_dim] projection buffer."""
    gen = torch.Generator().manual_seed(seed)
    if packed:
        qkv = torch.randn(B, T, 2 * H * K + HV * V, generator=gen, dtype=dtype)
        leaves = [qkv]
    else:
        qkv = None
        leaves = [torch.randn(B, T, H, K, generator=gen, dtype=dtype), torch.randn(B, T, H, K, generator=gen, dtype=dtype),
                  torch.randn(B, T, HV, V, generator=gen, dtype=dtype)]
    a_log = {"strong": 1.0, "weak": -4.0}[decay]
    g = -torch.exp(torch.tensor(a_log, dtype=dtype)) * torch.nn.functional.softplus(
        torch.randn(B, T, HV, generator=gen, dtype=dtype))
    beta = torch.sigmoid(torch.randn(B, T, HV, generator=gen, dtype=dtype))
    h0 = torch.randn(B, HV, K, V, generator=gen, dtype=dtype) * 0.5 if with_state else None
    leaves += [g, beta] + ([h0] if with_state else [])
    leaves = [x.requires_grad_() for x in leaves]

    def views(leaves):
        """(q, k, v, g, beta, h0) over the leaf tensors given (the same structure for any dtype)."""
        if packed:
            q, k, v = torch.split(leaves[0], [H * K, H * K, HV * V], dim=-1)
            q, k, v = q.reshape(B, T, H, K), k.reshape(B, T, H, K), v.reshape(B, T, HV, V)
            rest = leaves[1:]
        else:
            (q, k, v), rest = leaves[:3], leaves[3:]
        return (q, k, v, rest[0], rest[1], rest[2] if with_state else None)
    return leaves, views


def run(fn, inputs, d_out, d_state, **kw):
    q, k, v, g, beta, h0 = inputs
    o, final = fn(q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True, **kw)
    return o, final, (o * d_out).sum() + (final * d_state).sum()


def compare(leaves, views, reference, dtype):
    """NMSE of gdn.torch in dtype against reference in float64: ((out, state), [six gradients])."""
    q, _, v, _, _, _ = views(leaves)
    (B, T, HV, V), K = v.shape, q.shape[-1]
    gen = torch.Generator().manual_seed(99)
    d_out = torch.randn(B, T, HV, V, generator=gen, dtype=torch.float64)
    d_state = torch.randn(B, HV, K, V, generator=gen, dtype=torch.float64)
    o_ref, s_ref, loss_ref = run(reference, views(leaves), d_out, d_state)
    grads_ref = torch.autograd.grad(loss_ref, leaves)
    cast = [x.detach().to(dtype).requires_grad_() for x in leaves]
    o, s, loss = run(gt.chunk_gated_delta_rule, views(cast), d_out.to(dtype), d_state.to(dtype))
    grads = torch.autograd.grad(loss, cast)
    assert o.dtype == dtype
    return (nmse(o, o_ref), nmse(s, s_ref)), [nmse(a, b) for a, b in zip(grads, grads_ref)]


CASES = [  # K, V, H, HV, B, T, decay, initial state
    (16, 16, 1, 1, 1, 1, "strong", False),
    (32, 64, 2, 6, 2, 37, "weak", True),
    (64, 32, 4, 8, 3, 130, "strong", True),
    (128, 128, 1, 3, 1, 300, "weak", False),
    (256, 64, 2, 2, 1, 65, "weak", True),
    (48, 80, 3, 9, 2, 64, "strong", True),
    (16, 256, 4, 4, 1, 200, "strong", False),
]


@pytest.mark.parametrize("K, V, H, HV, B, T, decay, with_state", CASES)
def test_odd_shapes_match_transformers(K, V, H, HV, B, T, decay, with_state):
    leaves, views = make_inputs(B, T, H, HV, K, V, decay, with_state, seed=K + V + T)
    fwd64, bwd64 = compare(leaves, views, hf.chunk64, torch.float64)
    assert max(fwd64) < 1e-20 and max(bwd64) < 1e-20, (fwd64, bwd64)
    fwd32, bwd32 = compare(leaves, views, hf.chunk64, torch.float32)
    assert max(fwd32) < FORWARD_NMSE_F32 and max(bwd32) < BACKWARD_NMSE_F32, (fwd32, bwd32)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_qwen35_27b_shape_with_packed_qkv(dtype):
    """Hk 16, Hv 48, head size 128, q/k/v as views into the conv output: dq/dk sum over the three
    value heads that read each key head, and the packed buffer's gradient is right."""
    leaves, views = make_inputs(1, 64, 16, 48, 128, 128, "weak", True, seed=27, packed=True)
    assert not views(leaves)[0].is_contiguous()
    fwd, bwd = compare(leaves, views, hf.chunk64, dtype)
    limit_f, limit_b = (1e-20, 1e-20) if dtype == torch.float64 else (FORWARD_NMSE_F32, BACKWARD_NMSE_F32)
    assert max(fwd) < limit_f and max(bwd) < limit_b, (fwd, bwd)


def test_decoding_step_matches_the_recurrent_function():
    leaves, views = make_inputs(2, 1, 2, 4, 32, 32, "strong", True, seed=5)
    fwd, bwd = compare(leaves, views, hf.recurrent64, torch.float64)
    assert max(fwd) < 1e-20 and max(bwd) < 1e-20


@pytest.mark.parametrize("backend", on_backends(("bfloat16",)))
def test_bfloat16_matches_the_fallback(backend):
    """bfloat16 q, k, v as transformers' fallback takes them: the fallback converts them to float32;
    gdn reads them as they are, with float32 states, and rounds o once to bfloat16. gdn normalises
    q and k in float32 and rounds them once to bfloat16, as FLA's kernel does (the fallback keeps
    them in float32): the fallback gets them normalised so."""
    leaves, views = make_inputs(1, 40, 2, 4, 32, 32, "weak", True, seed=6, dtype=torch.float32)
    q, k, v, g, beta, h0 = (x.detach() if x is not None else None for x in views(leaves))
    q16, k16, v16 = (x.to(torch.bfloat16) for x in (q, k, v))
    q_normed, k_normed = (hf.modeling_qwen3_5.l2norm(x.float(), dim=-1, eps=1e-6).to(x.dtype) for x in (q16, k16))
    o_ref, s_ref = hf.chunk(q_normed, k_normed, v16, g, beta, initial_state=h0, output_final_state=True)
    with gt.backend(backend):
        o, s = gt.chunk_gated_delta_rule(q16, k16, v16, g, beta, initial_state=h0, output_final_state=True,
                                         use_qk_l2norm_in_kernel=True)
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32
    assert nmse(o, o_ref) < 1e-5 and nmse(s, s_ref) < 1e-10  # the output's bf16 rounding; the state's f32


@pytest.mark.parametrize("kind", ["recurrent", "chunk"])
def test_fla_naive_references(kind):
    naive = fla_reference.naive()
    if naive is None:
        pytest.skip("FLA is not installed (set GDN_FLA_SITE to an FLA install)")
    fn = hf.in_float64(naive.naive_recurrent_gated_delta_rule if kind == "recurrent"
                       else naive.naive_chunk_gated_delta_rule)

    def reference(q, k, v, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel):
        # FLA's naive functions take equal head counts, unnormalised q/k, and (recurrent) beta before g.
        reps = v.shape[2] // q.shape[2]
        q, k = (hf.modeling_qwen3_5.l2norm(x.repeat_interleave(reps, dim=2)) for x in (q, k))
        return fn(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state, output_final_state=output_final_state)

    leaves, views = make_inputs(2, 70, 2, 4, 32, 48, "strong", True, seed=11)
    fwd, bwd = compare(leaves, views, reference, torch.float64)
    # The naive chunk function rounds its decay mask through float32 (`.float()`), so it is held to
    # float32 precision; the recurrent one is float64 throughout.
    limit = 1e-20 if kind == "recurrent" else 1e-13
    assert max(fwd) < limit and max(bwd) < limit, (fwd, bwd)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_on_the_cuda_backend_and_current_stream():
    import gdn
    if not gdn.backend_available("cuda"):
        pytest.skip("this build of gdn has no cuda backend")
    leaves, views = make_inputs(2, 100, 4, 8, 64, 64, "weak", True, seed=12, packed=True)
    d_out = torch.randn(2, 100, 8, 64, dtype=torch.float64)
    d_state = torch.randn(2, 8, 64, 64, dtype=torch.float64)
    o_ref, s_ref, loss_ref = run(hf.chunk64, views(leaves), d_out, d_state)
    grads_ref = torch.autograd.grad(loss_ref, leaves)
    cuda = [x.detach().float().cuda().requires_grad_() for x in leaves]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # the op runs on the caller's current stream
        o, s, loss = run(gt.chunk_gated_delta_rule, views(cuda), d_out.float().cuda(), d_state.float().cuda())
        grads = torch.autograd.grad(loss, cuda)
    torch.cuda.synchronize()
    assert o.device.type == "cuda"
    assert nmse(o.cpu(), o_ref) < FORWARD_NMSE_F32 and nmse(s.cpu(), s_ref) < FORWARD_NMSE_F32
    for a, b in zip(grads, grads_ref):
        assert nmse(a.cpu(), b) < BACKWARD_NMSE_F32
