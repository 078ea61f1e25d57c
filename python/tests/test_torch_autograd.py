"""gdn.torch as PyTorch machinery sees it: gradcheck, torch.compile, and bad input."""

import os
import shutil

import pytest
import torch

import gdn
import gdn.torch as gt
from torch_inputs import small_inputs


def test_gradcheck_on_the_ref_backend():
    inputs = small_inputs()

    def op(q, k, v, g, beta, h0):
        o, final = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
        return o, final

    with gt.backend("ref"):
        assert torch.autograd.gradcheck(op, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_gradcheck_with_gate_per_key_channel_and_l2norm():
    q, k, v, _, beta, h0 = small_inputs(seed=1)
    g = (-torch.rand(q.shape[0], q.shape[1], v.shape[2], q.shape[3], dtype=torch.float64)).requires_grad_()

    def op(q, k, v, g, beta, h0):
        return gt.chunk_gated_delta_rule(q, k, v, g, beta, scale=0.7, initial_state=h0, output_final_state=True,
                                         use_qk_l2norm_in_kernel=True)

    assert torch.autograd.gradcheck(op, (q, k, v, g, beta, h0), eps=1e-6, atol=1e-8, rtol=1e-6)


class DeltaLayer(torch.nn.Module):
    """A minimal layer around the op, as a model would call it."""

    def __init__(self, hidden, H, HV, K, V):
        super().__init__()
        self.H, self.HV, self.K, self.V = H, HV, K, V
        self.qkv = torch.nn.Linear(hidden, 2 * H * K + HV * V, bias=False)
        self.ab = torch.nn.Linear(hidden, 2 * HV, bias=False)
        self.out = torch.nn.Linear(HV * V, hidden, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = torch.split(self.qkv(x), [self.H * self.K, self.H * self.K, self.HV * self.V], dim=-1)
        a, b = self.ab(x).chunk(2, dim=-1)
        o, _ = gt.chunk_gated_delta_rule(q.reshape(B, T, self.H, self.K), k.reshape(B, T, self.H, self.K),
                                         v.reshape(B, T, self.HV, self.V), -torch.nn.functional.softplus(a),
                                         torch.sigmoid(b), use_qk_l2norm_in_kernel=True)
        return self.out(o.reshape(B, T, -1))


def _cxx_compiler_found():
    return any(shutil.which(c) for c in (os.environ.get("CXX"), "c++", "g++", "clang++") if c)


# inductor, torch.compile's default, generates C++ for the CPU ops around gdn's and so needs a
# compiler (torch's requirement, not gdn's); aot_eager traces the same graph through gdn's fake
# and autograd registrations without one, which is how a wheel installed without a compiler is tested.
@pytest.mark.parametrize("backend", [
    "aot_eager",
    pytest.param("inductor", marks=pytest.mark.skipif(not _cxx_compiler_found(),
                                                      reason="no C++ compiler for inductor's CPU code")),
])
def test_torch_compile_fullgraph_forward_and_backward(backend):
    torch.manual_seed(0)
    layer = DeltaLayer(32, 2, 4, 16, 8)
    x = torch.randn(2, 20, 32)
    eager_out = layer(x)
    eager_grads = torch.autograd.grad(eager_out.square().sum(), list(layer.parameters()))
    compiled = torch.compile(layer, fullgraph=True, backend=backend)
    out = compiled(x)
    grads = torch.autograd.grad(out.square().sum(), list(layer.parameters()))
    torch.testing.assert_close(out, eager_out, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, eager_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_opcheck():
    """PyTorch's own consistency checks of a custom op: schema, fake tensors, autograd registration."""
    q, k, v, g, beta, h0 = (x.detach().float() for x in small_inputs(T=5))
    for l2norm in (False, True):
        for state_v_first, state in ((False, h0), (True, h0.transpose(-1, -2).contiguous())):
            args = (q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), state, None, 0.0, True, l2norm, state_v_first, 0)
            torch.library.opcheck(torch.ops.gdn.gated_delta_rule_fwd.default, args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_l2norm_matches_torch_autograd(dtype):
    """The extension's one-pass row normalisation and its in-place backward, on a strided view
    (q split from a packed buffer), against the torch composition differentiated by autograd."""
    gen = torch.Generator().manual_seed(3)
    packed = torch.randn(2, 37, 3 * 4 * 16, generator=gen, dtype=dtype)
    x = packed[..., 16:16 + 4 * 16].unflatten(-1, (4, 16))  # [B, T, H, K], rows 192 floats apart
    x[0, 5, 2] = 0.0  # a zero row: eps keeps it finite
    dy = torch.randn(x.shape, generator=gen, dtype=dtype)
    xr = x.clone().requires_grad_(True)
    expected = xr * torch.rsqrt((xr * xr).sum(dim=-1, keepdim=True) + gdn.torch._L2NORM_EPS)
    expected.backward(dy)
    y = gdn.torch._normalized(x)
    dx = gdn.torch._normalized_backward(x, dy.clone())
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    assert y.is_contiguous() and torch.equal(x, packed[..., 16:16 + 4 * 16].unflatten(-1, (4, 16)))
    torch.testing.assert_close(y, expected.detach(), **tol)
    torch.testing.assert_close(dx, xr.grad, **tol)


def bad_calls():
    q, k, v, g, beta, h0 = (x.detach().float() for x in small_inputs(B=2, H=2, HV=4))
    return [
        ("q rank", dict(q=q[0]), gdn.ShapeError, "q must have 4 dimensions"),
        ("heads", dict(v=torch.randn(2, 6, 3, 3)), gdn.ShapeError, "not a multiple"),
        ("k shape", dict(k=k[..., :2]), gdn.ShapeError, "k has shape"),
        ("g shape", dict(g=g[:, :3]), gdn.ShapeError, "g has shape"),
        ("beta rank", dict(beta=beta[..., None]), gdn.ShapeError, "beta must have 3 dimensions"),
        ("state shape", dict(initial_state=h0[:1]), gdn.ShapeError, "initial_state"),
        ("integer", dict(v=v.int()), gdn.ElementTypeError, "floating-point"),
        ("mixed devices", dict(v=v.to("meta")), gdn.InvalidArgumentError, "meta"),
        ("scale", dict(scale=float("inf")), gdn.InvalidArgumentError, "scale"),
        ("not a tensor", dict(beta=beta.numpy()), gdn.InvalidArgumentError, "torch.Tensor"),
        ("packed batch", dict(cu_seqlens=torch.tensor([0, 3, 6])), gdn.ShapeError, "B must be 1"),
        ("offsets as a list", dict(cu_seqlens=[0, 3]), gdn.InvalidArgumentError, "cu_seqlens must be a torch.Tensor"),
        ("offsets on another device", dict(q=q[:1], k=k[:1], v=v[:1], g=g[:1], beta=beta[:1], initial_state=h0[:1],
                                           cu_seqlens=torch.tensor([0, 3]).to("meta")),
         gdn.InvalidArgumentError, "cu_seqlens is on meta"),
        ("no offsets", dict(q=q[:1], k=k[:1], v=v[:1], g=g[:1], beta=beta[:1], initial_state=None,
                            cu_seqlens=torch.zeros(0, dtype=torch.int64)), gdn.InvalidArgumentError, "N \\+ 1 >= 1"),
        ("scale not a number", dict(scale="0.1"), gdn.InvalidArgumentError, "scale"),
        ("head_first", dict(head_first=False), DeprecationWarning, "head_first has been removed"),
        ("context parallel", dict(cp_context=object()), gdn.UnsupportedError, "cp_context"),
    ], dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=h0)


@pytest.mark.parametrize("index", range(len(bad_calls()[0])))
def test_bad_input_raises_a_gdn_error_and_changes_nothing(index):
    cases, good = bad_calls()
    _, change, error, words = cases[index]
    args = {**good, **change}
    before = {name: t.clone() for name, t in args.items() if isinstance(t, torch.Tensor) and t.device.type == "cpu"}
    with pytest.raises(error, match=words):
        gt.chunk_gated_delta_rule(**args, output_final_state=True)
    for name, t in before.items():
        assert torch.equal(args[name], t), name
