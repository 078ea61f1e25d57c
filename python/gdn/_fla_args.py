"""FLA's argument rules for gdn.torch's ops: the checks, with gdn's error classes and messages that
name the argument, and FLA's input conventions turned into the tensors gdn computes on."""

import math
import warnings
from collections import namedtuple

import torch

from . import _errors

# What the ops take: q, k, v (one dtype), the gate and beta with their unit dimension, each as the
# library takes it (SPEC 3.1), the scale as a float or None, host offsets, N sequences, the dtype
# of the states and that of the output the caller gets.
Prepared = namedtuple("Prepared", "q k v gate beta scale cu_seqlens sequences state_dtype out_dtype")

_HALF = (torch.bfloat16, torch.float16)


def _has_broadcast_stride(shape, strides):
    return 0 in strides and any(size > 1 and stride == 0 for size, stride in zip(shape, strides))


def readable(t):
    """t itself when gdn can read it in place (innermost stride 1, no broadcast strides), else a copy."""
    shape, strides = t.shape, t.stride()
    if (strides[-1] != 1 and shape[-1] > 1) or _has_broadcast_stride(shape, strides):
        return t.contiguous()
    return t


def readable_state(t):
    """A state t itself when gdn can read it in place (K or V contiguous: either layout, no broadcast
    strides), else a contiguous copy."""
    shape, strides = t.shape, t.stride()
    rows_contiguous = shape[-1] == 1 or strides[-1] == 1
    columns_contiguous = shape[-2] == 1 or strides[-2] == 1
    if not (rows_contiguous or columns_contiguous) or _has_broadcast_stride(shape, strides):
        return t.contiguous()
    return t


def call_dtypes(q, k, v):
    """The dtype q, k and v reach the library in, and that of the states (SPEC 3.1): float64 when
    any of them is float64 (the ref backend's oracle precision); else their common dtype, float32,
    bfloat16 or float16, as they are (no copy), with float32 states; float32 when they differ."""
    dtypes = (q.dtype, k.dtype, v.dtype)
    if torch.float64 in dtypes:
        return torch.float64, torch.float64
    if dtypes[0] == dtypes[1] == dtypes[2] and dtypes[0] in (torch.float32, *_HALF):
        return dtypes[0], torch.float32
    return torch.float32, torch.float32


def _small_dtypes(x, state_dtype, g, beta):
    """The dtypes g and beta reach the library in: as they are where SPEC 3.1 takes them (beta
    q's dtype or float32, g float32 or bfloat16), else float32 (float16 g, say: a copy of a tensor
    Sk or Sv times smaller than q or v); float64 in a float64 call."""
    if state_dtype == torch.float64:
        return torch.float64, torch.float64
    gate = g.dtype if g.dtype in (torch.float32, torch.bfloat16) else torch.float32
    beta_dtype = beta.dtype if beta.dtype in (x, torch.float32) else torch.float32
    return gate, beta_dtype


def _check_tensor(name, t, device):
    if not isinstance(t, torch.Tensor):
        raise _errors.InvalidArgumentError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
    if not t.is_floating_point():
        raise _errors.ElementTypeError(f"{name} has dtype {t.dtype}; gdn takes floating-point tensors")
    if t.device != device:
        raise _errors.InvalidArgumentError(f"{name} is on {t.device} but q is on {device}")


def _check_index_vector(name, t, device, what):
    if not isinstance(t, torch.Tensor):
        raise _errors.InvalidArgumentError(
            f"{name} must be a torch.Tensor (a 1-D int32 or int64 tensor of {what}), not {type(t).__name__}")
    if t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
        raise _errors.InvalidArgumentError(
            f"{name} must be a 1-D int32 or int64 tensor of {what}; got dtype {t.dtype}, shape {tuple(t.shape)}")
    if t.device != device and t.device.type != "cpu":
        raise _errors.InvalidArgumentError(
            f"{name} is on {t.device} but q is on {device} (on the host is fine too)")


def check_inputs(q, k, v, g, beta, cu_seqlens):
    """Checks q, k, v, g, beta and the offsets; returns N, the number of sequences. (Run on every
    decoding step: shapes are compared as torch.Size, made tuples only for the messages.)"""
    device = q.device if isinstance(q, torch.Tensor) else None
    _check_tensor("q", q, device)
    _check_tensor("k", k, device)
    _check_tensor("v", v, device)
    _check_tensor("g", g, device)
    _check_tensor("beta", beta, device)
    qs, ks, vs, gs, bs = q.shape, k.shape, v.shape, g.shape, beta.shape
    if len(qs) != 4 or len(ks) != 4 or len(vs) != 4 or len(bs) != 3:
        for name, shape, rank in (("q", qs, 4), ("k", ks, 4), ("v", vs, 4), ("beta", bs, 3)):
            if len(shape) != rank:
                raise _errors.ShapeError(f"{name} must have {rank} dimensions ([B, T, H, K] for q/k, [B, T, HV, V] "
                                         f"for v, [B, T, HV] for g/beta); got shape {tuple(shape)}")
    if len(gs) not in (3, 4):
        raise _errors.ShapeError(f"g must be [B, T, HV] (or [B, T, HV, K]: a gate per key channel); "
                                 f"got shape {tuple(gs)}")
    B, T, H, K = qs
    HV, V = vs[2], vs[3]
    if ks != qs:
        raise _errors.ShapeError(f"k has shape {tuple(ks)} but q has {tuple(qs)}")
    if vs[0] != B or vs[1] != T:
        raise _errors.ShapeError(f"v has shape {tuple(vs)}: its [B, T] must be q's {(B, T)}")
    if H == 0 or K == 0 or HV == 0 or V == 0:
        raise _errors.ShapeError(f"q has shape {tuple(qs)} and v {tuple(vs)}: head counts and head sizes "
                                 "must be at least 1 (only B and T may be 0)")
    if HV % H != 0:
        raise _errors.ShapeError(f"v has {HV} heads, not a multiple of q/k's {H} heads")
    gate_shape = (B, T, HV) if len(gs) == 3 else (B, T, HV, K)
    if gs != gate_shape:
        raise _errors.ShapeError(f"g has shape {tuple(gs)}; expected {gate_shape}")
    if bs != (B, T, HV):
        raise _errors.ShapeError(f"beta has shape {tuple(bs)}; expected {(B, T, HV)}")
    if cu_seqlens is None:
        return B
    _check_index_vector("cu_seqlens", cu_seqlens, q.device, "N + 1 offsets, as FLA takes it")
    if cu_seqlens.shape[0] < 1:
        raise _errors.InvalidArgumentError(
            f"cu_seqlens must be a 1-D int32 or int64 tensor of N + 1 >= 1 offsets; got dtype {cu_seqlens.dtype}, "
            f"shape {tuple(cu_seqlens.shape)}")
    if B != 1:
        raise _errors.ShapeError(f"with cu_seqlens the sequences are packed along T, so B must be 1, not {B}")
    return cu_seqlens.shape[0] - 1


def check_state(state, q, v, sequences, state_v_first, pooled=False):
    """initial_state: [N, HV, K, V] ([N, HV, V, K] with state_v_first); a pool has any slot count."""
    _check_tensor("initial_state", state, q.device)
    HV, K, V = v.shape[2], q.shape[3], v.shape[3]
    inner = (HV, V, K) if state_v_first else (HV, K, V)
    layout = f"[{'slots' if pooled else 'N'}, HV, {'V, K' if state_v_first else 'K, V'}]"
    if state.dim() != 4 or tuple(state.shape[1:]) != inner or (not pooled and state.shape[0] != sequences):
        expected = f"[slots, *{inner}]" if pooled else (sequences, *inner)
        raise _errors.ShapeError(f"initial_state has shape {tuple(state.shape)}; expected {layout} = {expected}")


def check_state_indices(indices, sequences, device):
    """One slot per sequence, int32 or int64, on q's device or the host."""
    _check_index_vector("ssm_state_indices", indices, device, "one state slot per sequence")
    if indices.shape[0] != sequences:
        raise _errors.ShapeError(
            f"ssm_state_indices has {indices.shape[0]} entries for {sequences} sequences: one slot per sequence")


def _scale(scale):
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise _errors.InvalidArgumentError(f"scale = {scale!r} must be a number (or None for 1/sqrt(K))")
    if not math.isfinite(scale):
        raise _errors.InvalidArgumentError(f"scale = {scale} is not finite")
    return float(scale)


def activation_dtype(q, k, v):
    """The dtype FLA's activations (the gate from raw g, beta from logits, g + gk) are computed in:
    float32 whatever the inputs' dtype (bf16 arithmetic would round each by up to 0.4%), float64
    in a float64 call (SPEC 3.1: float64 anywhere in q, k, v makes the whole call float64)."""
    wide = any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in (q, k, v))
    return torch.float64 if wide else torch.float32


def activated_gate(g, A_log, dt_bias, dtype=torch.float32):
    """FLA's ``use_gate_in_kernel``: the log decay ``-exp(A_log) * softplus(g + dt_bias)`` from raw g,
    in ``dtype`` or wider. A_log has one value per value head; dt_bias one per head, or for a gate
    per key channel (g ``[B, T, HV, K]``) one per head and channel (``[HV * K]`` or ``[HV, K]``), as
    FLA's gated delta rule and KDA gates take them."""
    if A_log is None:
        raise _errors.InvalidArgumentError("use_gate_in_kernel=True needs A_log")
    if g is None:
        raise _errors.InvalidArgumentError("use_gate_in_kernel=True needs g (the raw pre-activation)")
    if g.dim() not in (3, 4):
        raise _errors.ShapeError(f"g is {list(g.shape)}: [B, T, HV] or [B, T, HV, K]")
    HV, per_channel = g.shape[2], g.dim() == 4
    if A_log.numel() != HV:
        raise _errors.ShapeError(f"A_log is {list(A_log.shape)}: one value per value head ({HV})")
    dtype = torch.promote_types(torch.promote_types(g.dtype, A_log.dtype), dtype)
    x = g.to(dtype)
    if dt_bias is not None:
        K = g.shape[3] if per_channel else 1
        if dt_bias.numel() not in {HV, HV * K}:
            raise _errors.ShapeError(f"dt_bias is {list(dt_bias.shape)}: one value per value head ({HV})"
                                     + (f" or per head and key channel ({HV} x {K})" if per_channel else ""))
        bias = dt_bias.to(torch.promote_types(dtype, dt_bias.dtype)).reshape(HV, -1)
        x = x + (bias if per_channel else bias.reshape(HV))
    rate = A_log.to(x.dtype).exp().reshape((HV, 1) if per_channel else (HV,))
    return -rate * torch.nn.functional.softplus(x)


def gate_sum(g, gk, dtype=torch.float32):
    """FLA's g and gk applied together: their sum in ``dtype`` or wider (as FLA's kernel adds them in
    float32 registers), gk alone without g."""
    if g is None:
        return gk
    wide = torch.promote_types(torch.promote_types(g.dtype, gk.dtype), dtype)
    return gk.to(wide) + g.to(wide).unsqueeze(-1)


def _readable_per_head(t):
    """A [B, T, HV] g or beta as the extension reads it with a unit innermost dimension (fla_gates):
    t itself unless it has broadcast strides; a per-channel gate as readable() takes it."""
    if t.dim() == 3:
        return t.contiguous() if _has_broadcast_stride(t.shape, t.stride()) else t
    return readable(t)


def state_v_first_alias(state_v_first, kwargs):
    """state_v_first with FLA's deprecated name for it, ``transpose_state_layout``, taken from
    kwargs as FLA takes it: warned about, and refused together with state_v_first."""
    if "transpose_state_layout" not in kwargs:
        return state_v_first
    if state_v_first:
        raise _errors.InvalidArgumentError(
            "Cannot pass both `state_v_first` and the deprecated `transpose_state_layout`.")
    warnings.warn("`transpose_state_layout` is deprecated and renamed to `state_v_first`.", DeprecationWarning,
                  stacklevel=3)
    return bool(kwargs.pop("transpose_state_layout"))


def prepare(q, k, v, g, beta, scale, use_beta_sigmoid_in_kernel, allow_neg_eigval, cu_seqlens, cu_seqlens_cpu,
            kwargs, unit_dims=True):
    """FLA's conventions applied and checked: the gate computed in the op when asked
    (``use_gate_in_kernel``, ``A_log``, ``dt_bias`` in kwargs), beta from logits, the offsets on the
    host when the caller has them there, every input in a dtype the library takes (call_dtypes:
    bfloat16 and float16 as they are) and readable in place. g and beta get their unit dimension
    (gdn's layout) unless ``unit_dims`` is False (FLA's, for the extension's fla_gates reading)."""
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise _errors.InvalidArgumentError("allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True (as in FLA)")
    if kwargs.get("use_gate_in_kernel", False):
        g = activated_gate(g, kwargs.get("A_log"), kwargs.get("dt_bias"), activation_dtype(q, k, v))
    sequences = check_inputs(q, k, v, g, beta, cu_seqlens)
    scale = _scale(scale)
    if use_beta_sigmoid_in_kernel:
        # In float32 from half logits (float64 in a float64 call), kept so, as FLA's kernels compute
        # it (the library takes an F32 beta beside half q, k, v).
        logits = beta.to(torch.promote_types(beta.dtype, activation_dtype(q, k, v)))
        beta = logits.sigmoid() * 2 if allow_neg_eigval else logits.sigmoid()
    if cu_seqlens is not None:
        # Read on the host when the caller has the offsets there; strided views become contiguous.
        host = cu_seqlens_cpu if isinstance(cu_seqlens_cpu, torch.Tensor) else cu_seqlens
        cu_seqlens = host.contiguous()
    x, state_dtype = call_dtypes(q, k, v)
    gate_dtype, beta_dtype = _small_dtypes(x, state_dtype, g, beta)
    out_dtype = q.dtype
    q, k, v = (t if t.dtype == x else t.to(x) for t in (q, k, v))
    g = g if g.dtype == gate_dtype else g.to(gate_dtype)
    beta = beta if beta.dtype == beta_dtype else beta.to(beta_dtype)
    if unit_dims:
        gate, beta = readable(g.unsqueeze(-1) if g.dim() == 3 else g), readable(beta.unsqueeze(-1))
    else:
        gate, beta = _readable_per_head(g), _readable_per_head(beta)
    return Prepared(readable(q), readable(k), readable(v), gate, beta, scale, cu_seqlens, sequences, state_dtype,
                    out_dtype)
