"""An independent float64 reference for the tests: the recurrence written out per token in numpy,
straight from the math (decay, delta rule, rank-1 write, read-out), with FLA's layouts."""

import numpy as np


def recurrent_reference(q, k, v, g, beta, scale, initial_state=None, key_head_of=None):
    """q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV] or [B, T, HV, K]; beta [B, T, HV];
    initial_state [B, HV, K, V]. Returns o [B, T, HV, V] and the final state [B, HV, K, V]."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if key_head_of is None:
        key_head_of = lambda h: h // (HV // H)  # noqa: E731  grouped, as FLA
    o = np.zeros((B, T, HV, V))
    final = np.zeros((B, HV, K, V))
    for b in range(B):
        for h in range(HV):
            kh = key_head_of(h)
            S = np.zeros((K, V)) if initial_state is None else np.array(initial_state[b, h], dtype=np.float64)
            for t in range(T):
                decay = np.exp(np.asarray(g[b, t, h], dtype=np.float64))
                S = (decay[:, None] if decay.ndim else decay) * S
                kt, qt = k[b, t, kh].astype(np.float64), q[b, t, kh].astype(np.float64)
                delta = beta[b, t, h] * (v[b, t, h] - S.T @ kt)
                S = S + np.outer(kt, delta)
                o[b, t, h] = scale * (S.T @ qt)
            final[b, h] = S
    return o, final


def nmse(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    denom = float(np.sum(b * b))
    return float(np.sum((a - b) ** 2)) / (denom if denom > 0 else 1.0)
