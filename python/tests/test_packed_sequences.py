"""Packed sequences (cu_seqlens, docs/VARLEN.md) through gdn.torch: a packed call gives what the
per-sequence calls give (outputs, final states, every gradient), the offsets may be int32 or
int64, and bad offsets raise the library's error."""

import pytest
import torch

import gdn
import gdn.torch as gt

LENGTHS = [3, 1, 7, 2]


def packed_inputs(dtype=torch.float64, H=1, HV=2, K=4, V=3, seed=3):
    gen = torch.Generator().manual_seed(seed)
    T, N = sum(LENGTHS), len(LENGTHS)
    q = torch.randn(1, T, H, K, generator=gen, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(1, T, H, K, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(1, T, HV, V, generator=gen, dtype=dtype)
    g = -torch.rand(1, T, HV, generator=gen, dtype=dtype)
    beta = torch.rand(1, T, HV, generator=gen, dtype=dtype)
    h0 = torch.randn(N, HV, K, V, generator=gen, dtype=dtype)
    return [x.requires_grad_() for x in (q, k, v, g, beta, h0)]


def offsets(dtype):
    cu = [0]
    for n in LENGTHS:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=dtype)


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_packed_equals_per_sequence_calls(backend, index_dtype):
    dtype = torch.float64 if backend == "ref" else torch.float32
    q, k, v, g, beta, h0 = packed_inputs(dtype)
    cu = offsets(index_dtype)
    gen = torch.Generator().manual_seed(9)
    d_o = torch.randn(v.shape, generator=gen, dtype=dtype)
    d_final = torch.randn(h0.shape, generator=gen, dtype=dtype)
    with gt.backend(backend):
        o, final = gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu)
        packed_grads = torch.autograd.grad((o * d_o).sum() + (final * d_final).sum(), (q, k, v, g, beta, h0))
        pieces_o, pieces_final = [], []
        pieces_grads = [[] for _ in range(6)]
        for n in range(len(LENGTHS)):
            a, b = int(cu[n]), int(cu[n + 1])
            args = [t[:, a:b] for t in (q, k, v, g, beta)] + [h0[n:n + 1]]
            o_n, final_n = gt.chunk_gated_delta_rule(*args[:5], initial_state=args[5], output_final_state=True)
            grads_n = torch.autograd.grad((o_n * d_o[:, a:b]).sum() + (final_n * d_final[n:n + 1]).sum(),
                                          (q, k, v, g, beta, h0))
            pieces_o.append(o_n)
            pieces_final.append(final_n)
            for i in range(6):
                pieces_grads[i].append(grads_n[i])
    assert torch.equal(o, torch.cat(pieces_o, dim=1))
    assert torch.equal(final, torch.cat(pieces_final, dim=0))
    for i, name in enumerate(["dq", "dk", "dv", "dg", "dbeta", "dh0"]):
        assert torch.equal(packed_grads[i], sum(pieces_grads[i])), name


def test_gradcheck_across_boundaries_on_ref():
    inputs = packed_inputs()
    cu = offsets(torch.int64)

    def op(q, k, v, g, beta, h0):
        return gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu)

    with gt.backend("ref"):
        assert torch.autograd.gradcheck(op, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("bad, words", [
    ([0, 5, 3, 13], "must not decrease"),
    ([0, 5, 13, 9], r"cu_seqlens\[3\] = 9 < cu_seqlens\[2\] = 13"),
    ([1, 5, 9, 13], "first offset must be 0"),
    ([0, 5, 9, 12], "last offset must be"),
])
def test_bad_offsets_raise_the_library_error(bad, words):
    q, k, v, g, beta, _ = packed_inputs()
    with gt.backend("ref"), pytest.raises(gdn.ShapeError, match=words):
        gt.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor(bad))
