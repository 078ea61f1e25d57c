"""Random inputs of the gated delta rule in FLA's layouts, for the torch tests."""

import torch


def small_inputs(dtype=torch.float64, B=1, T=6, H=1, HV=2, K=4, V=3, seed=0, requires_grad=True):
    """q, k [B, T, H, K] (k normalised), v [B, T, HV, V], g (log decay) and beta [B, T, HV], h0 [B, HV, K, V]."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(B, T, HV, V, generator=gen, dtype=dtype)
    g = -torch.rand(B, T, HV, generator=gen, dtype=dtype)
    beta = torch.rand(B, T, HV, generator=gen, dtype=dtype)
    h0 = torch.randn(B, HV, K, V, generator=gen, dtype=dtype)
    return [x.requires_grad_(requires_grad) for x in (q, k, v, g, beta, h0)]
