"""gdn as a PyTorch op with FLA's signature: ``chunk_gated_delta_rule``.

Layouts are FLA's: q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g and beta ``[B, T, HV]`` (g may
also be ``[B, T, HV, K]``: a gate per key channel), states ``[N, HV, K, V]``, with value head h
reading key head ``h // (HV // H)``. The op is registered with ``torch.library.custom_op``, so
autograd, ``torch.compile(fullgraph=True)`` and ``torch.autograd.gradcheck`` work; its backward
recomputes from the saved inputs (no per-token state is kept between forward and backward).

Where it computes: CPU tensors on the cpu backend (float32; float64 on the ref backend, the
float64 oracle), with ``torch.get_num_threads()`` threads; CUDA tensors on the cuda backend, on
the tensor's device and the current stream. bfloat16 and float16 inputs are computed in float32
and the output is returned in the input's dtype, as transformers' pure-PyTorch fallback does; the
final state stays in the compute dtype. ``with gdn.torch.backend("ref"):`` forces a backend.
"""

import contextlib
import math
import threading
from typing import Optional, Tuple

import torch

from . import _core, _errors, _gdn

__all__ = ["chunk_gated_delta_rule", "backend", "release_workspaces"]

_HEAD_MAP_GROUPED = _core.HEAD_MAPS["grouped"]
_override = threading.local()


@contextlib.contextmanager
def backend(name):
    """Run gdn.torch ops of this thread on backend ``name`` ("ref", "cpu", "cuda") inside the block."""
    previous = getattr(_override, "name", None)
    _override.name = name
    try:
        yield
    finally:
        _override.name = previous


def release_workspaces():
    """Frees the workspaces gdn's contexts keep between calls, on every thread (the backward of CUDA
    tensors runs on the autograd engine's own thread): on cuda, device memory that PyTorch's
    caching allocator does not see (about 540 MB after a 27B-shape backward at T = 4096). The
    next call allocates again; call it between steps, when no gdn call is running."""
    _core.release_workspaces()


def _context_for(t):
    forced = getattr(_override, "name", None)
    if t.device.type == "cpu":
        name = forced or ("ref" if t.dtype == torch.float64 else "cpu")
        return _core.default_context(name, threads=torch.get_num_threads())
    if t.device.type == "cuda":
        index = t.device.index if t.device.index is not None else torch.cuda.current_device()
        stream = torch.cuda.current_stream(index).cuda_stream
        return _core.default_context(forced or "cuda", device=index, stream=stream)
    raise _errors.UnsupportedError(f"gdn computes on cpu and cuda tensors, not on {t.device}")


def _empty(shape, like):
    """A fresh tensor for gdn to write; large host ones are backed by huge pages (fewer faults)."""
    t = torch.empty(shape, dtype=like.dtype, device=like.device)
    if t.device.type == "cpu":
        _gdn.advise_huge_pages(t)
    return t


def _state_shape(q, v, cu_seqlens):
    sequences = v.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return (sequences, v.shape[2], v.shape[3], q.shape[3])  # gdn's layout: key index innermost


# The ops take gdn's layouts (g and beta with their unit dimension, states key-innermost); the
# wrapper below converts from FLA's.
@torch.library.custom_op("gdn::gated_delta_rule_fwd", mutates_args=())
def _forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], scale: Optional[float],
                want_state: bool, l2norm: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    if l2norm:
        q, k = _normalized(q), _normalized(k)
    out = _empty(v.shape, v)
    states = _empty(_state_shape(q, v, cu_seqlens), v) if want_state else v.new_empty(0)
    _gdn.forward(_context_for(v)._native, q, k, v, g, beta, initial_state, out, states if want_state else None,
                 scale, _HEAD_MAP_GROUPED, False, cu_seqlens)
    return out, states


@_forward_op.register_fake
def _(q, k, v, g, beta, initial_state, cu_seqlens, scale, want_state, l2norm):
    states_shape = _state_shape(q, v, cu_seqlens) if want_state else (0,)
    return v.new_empty(v.shape), v.new_empty(states_shape)


@torch.library.custom_op("gdn::gated_delta_rule_bwd", mutates_args=())
def _backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                 initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor],
                 d_out: Optional[torch.Tensor], d_state: Optional[torch.Tensor], scale: Optional[float], l2norm: bool
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    grads = [_empty(t.shape, t) for t in (q, k, v, g, beta)]
    d_initial = _empty(initial_state.shape, v) if initial_state is not None else v.new_empty(0)
    q_used, k_used = (_normalized(q), _normalized(k)) if l2norm else (q, k)
    _gdn.backward(_context_for(v)._native, q_used, k_used, v, g, beta, initial_state, d_out, d_state, *grads,
                  d_initial if initial_state is not None else None, scale, _HEAD_MAP_GROUPED, False, cu_seqlens)
    if l2norm:
        grads[0], grads[1] = _normalized_backward(q, grads[0]), _normalized_backward(k, grads[1])
    return (*grads, d_initial)


@_backward_op.register_fake
def _(q, k, v, g, beta, initial_state, cu_seqlens, d_out, d_state, scale, l2norm):
    d_initial = initial_state.new_empty(initial_state.shape) if initial_state is not None else v.new_empty(0)
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), g.new_empty(g.shape),
            beta.new_empty(beta.shape), d_initial)


def _setup_context(ctx, inputs, output):
    q, k, v, g, beta, initial_state, cu_seqlens, scale, want_state, l2norm = inputs
    ctx.save_for_backward(q, k, v, g, beta, initial_state, cu_seqlens)
    ctx.scale = scale
    ctx.want_state = want_state
    ctx.l2norm = l2norm


def _backward(ctx, d_out, d_states):
    q, k, v, g, beta, initial_state, cu_seqlens = ctx.saved_tensors
    # The final state's gradient arrives through the transposed view the wrapper returned.
    d_state = _readable(d_states) if ctx.want_state and d_states is not None else None
    d_out = _readable(d_out) if d_out is not None else None
    dq, dk, dv, dg, dbeta, d_initial = _backward_op(q, k, v, g, beta, initial_state, cu_seqlens, d_out, d_state,
                                                    ctx.scale, ctx.l2norm)
    return dq, dk, dv, dg, dbeta, (d_initial if initial_state is not None else None), None, None, None, None


torch.library.register_autograd("gdn::gated_delta_rule_fwd", _backward, setup_context=_setup_context)


def _readable(t):
    """t itself when gdn can read it in place (innermost stride 1, no broadcast strides), else a copy."""
    for size, stride in zip(t.shape, t.stride()):
        if size > 1 and stride == 0:
            return t.contiguous()
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        return t.contiguous()
    return t


# use_qk_l2norm_in_kernel, as FLA and transformers define it: x / sqrt(sum(x^2) + eps) per row.
# It runs inside the ops (the backward recomputes it from the saved q and k) rather than as
# autograd-tracked torch ops, whose saved intermediates and fresh temporaries cost more than the
# normalisation itself; on the host, one fused pass of the extension.
_L2NORM_EPS = 1e-6


def _fused_rows(x):
    return (x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and x.numel() > 0
            and (x.shape[-1] == 1 or x.stride(-1) == 1))


def _normalized(x):
    """x with every row (last dimension) divided by its norm, in a fresh tensor."""
    if _fused_rows(x):
        y = _empty(x.shape, x)
        _gdn.l2norm_rows(x, y, _L2NORM_EPS, torch.get_num_threads())
        return y
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + _L2NORM_EPS)


def _normalized_backward(x, dy):
    """The gradient at x through _normalized, given the output's gradient dy (overwritten)."""
    if _fused_rows(x) and dy.is_contiguous():
        _gdn.l2norm_rows_backward(x, dy, _L2NORM_EPS, torch.get_num_threads())
        return dy
    inv = torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + _L2NORM_EPS)
    return inv * dy - x * (inv ** 3 * (x * dy).sum(dim=-1, keepdim=True))


def _check(q, k, v, g, beta, initial_state, cu_seqlens, state_v_first):
    """FLA's argument rules, with gdn's error classes and messages that name the argument."""
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    if initial_state is not None:
        tensors["initial_state"] = initial_state
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise _errors.InvalidArgumentError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
        if not t.is_floating_point():
            raise _errors.ElementTypeError(f"{name} has dtype {t.dtype}; gdn takes floating-point tensors")
        if t.device != q.device:
            raise _errors.InvalidArgumentError(f"{name} is on {t.device} but q is on {q.device}")
    for name, rank in (("q", 4), ("k", 4), ("v", 4), ("beta", 3)):
        if tensors[name].dim() != rank:
            raise _errors.ShapeError(f"{name} must have {rank} dimensions ([B, T, H, K] for q/k, [B, T, HV, V] "
                                     f"for v, [B, T, HV] for g/beta); got shape {tuple(tensors[name].shape)}")
    if g.dim() not in (3, 4):
        raise _errors.ShapeError(f"g must be [B, T, HV] (or [B, T, HV, K]: a gate per key channel); "
                                 f"got shape {tuple(g.shape)}")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if tuple(k.shape) != tuple(q.shape):
        raise _errors.ShapeError(f"k has shape {tuple(k.shape)} but q has {tuple(q.shape)}")
    if tuple(v.shape[:2]) != (B, T):
        raise _errors.ShapeError(f"v has shape {tuple(v.shape)}: its [B, T] must be q's {(B, T)}")
    if H == 0 or K == 0 or HV == 0 or V == 0:
        raise _errors.ShapeError(f"q has shape {tuple(q.shape)} and v {tuple(v.shape)}: head counts and head sizes "
                                 "must be at least 1 (only B and T may be 0)")
    if HV % H != 0:
        raise _errors.ShapeError(f"v has {HV} heads, not a multiple of q/k's {H} heads")
    gate_shape = (B, T, HV) if g.dim() == 3 else (B, T, HV, K)
    if tuple(g.shape) != gate_shape:
        raise _errors.ShapeError(f"g has shape {tuple(g.shape)}; expected {gate_shape}")
    if tuple(beta.shape) != (B, T, HV):
        raise _errors.ShapeError(f"beta has shape {tuple(beta.shape)}; expected {(B, T, HV)}")
    sequences = B
    if cu_seqlens is not None:
        if not isinstance(cu_seqlens, torch.Tensor):
            raise _errors.InvalidArgumentError(
                f"cu_seqlens must be a torch.Tensor (a 1-D int32 or int64 tensor of N + 1 offsets, as FLA takes it), "
                f"not {type(cu_seqlens).__name__}")
        if cu_seqlens.dim() != 1 or cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.shape[0] < 1:
            raise _errors.InvalidArgumentError(
                f"cu_seqlens must be a 1-D int32 or int64 tensor of N + 1 >= 1 offsets; got dtype {cu_seqlens.dtype}, "
                f"shape {tuple(cu_seqlens.shape)}")
        if cu_seqlens.device != q.device and cu_seqlens.device.type != "cpu":
            raise _errors.InvalidArgumentError(
                f"cu_seqlens is on {cu_seqlens.device} but q is on {q.device} (offsets on the host are fine too)")
        if B != 1:
            raise _errors.ShapeError(f"with cu_seqlens the sequences are packed along T, so B must be 1, not {B}")
        sequences = cu_seqlens.shape[0] - 1
    expected = (sequences, HV, V, K) if state_v_first else (sequences, HV, K, V)
    if initial_state is not None and tuple(initial_state.shape) != expected:
        raise _errors.ShapeError(f"initial_state has shape {tuple(initial_state.shape)}; expected "
                                 f"[N, HV, {'V, K' if state_v_first else 'K, V'}] = {expected}")


def _compute_dtype(q, k, v):
    """float64 when any of q, k, v is float64 (the ref backend, exact), else float32."""
    return torch.float64 if torch.float64 in (q.dtype, k.dtype, v.dtype) else torch.float32


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, **kwargs):
    """The gated delta rule over a batch, as ``fla.ops.gated_delta_rule.chunk_gated_delta_rule``.

    FLA's parameters, in FLA's order, with FLA's meaning: ``scale`` None is ``1/sqrt(K)`` and any
    other value (0.0 included) is used as given; ``use_beta_sigmoid_in_kernel`` takes beta as
    logits (``allow_neg_eigval``: ``2 * sigmoid``); ``state_v_first`` keeps states as
    ``[N, HV, V, K]`` (gdn's own layout: no transpose at all); ``cu_seqlens`` (N + 1 offsets, B = 1)
    packs sequences, the recurrence restarting at each offset, zero-length sequences included;
    ``cu_seqlens_cpu`` is the same offsets on the host (read there, no device synchronisation);
    ``chunk_indices`` and ``chunk_size`` are FLA's blocking and are ignored (gdn blocks its own
    way; the result is the same recurrence); keywords ``use_gate_in_kernel``, ``A_log``,
    ``dt_bias`` compute ``g = -exp(A_log) * softplus(g + dt_bias)`` first. ``head_first`` is
    refused as FLA refuses it; ``cp_context`` (FLA's context parallel) is not supported.

    Returns ``(o, final_state)``: o ``[B, T, HV, V]`` in q's dtype; final_state ``[N, HV, K, V]``
    (``[N, HV, V, K]`` with ``state_v_first``) in the compute dtype (float32, or float64 when any
    of q, k, v is float64), None unless ``output_final_state``. Inputs may mix floating dtypes as
    FLA allows (say float32 q/k with float16 v/beta): each is converted to the compute dtype. The
    final state is a transposed view of gdn's key-innermost buffer: passing it back as
    ``initial_state`` costs no copy. T = 0 (or B = 0) returns an empty o and the initial state.
    """
    if "head_first" in kwargs:
        raise DeprecationWarning("head_first has been removed. Inputs must be in `[B, T, H, ...]` format.")
    if cp_context is not None:
        raise _errors.UnsupportedError("cp_context: gdn.torch does not run FLA's context parallel")
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise _errors.InvalidArgumentError("allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True (as in FLA)")
    if kwargs.get("use_gate_in_kernel", False):
        A_log, dt_bias = kwargs.get("A_log"), kwargs.get("dt_bias")
        if A_log is None:
            raise _errors.InvalidArgumentError("use_gate_in_kernel=True needs A_log")
        g = -A_log.exp() * torch.nn.functional.softplus(g if dt_bias is None else g + dt_bias)
    _check(q, k, v, g, beta, initial_state, cu_seqlens, state_v_first)
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise _errors.InvalidArgumentError(f"scale = {scale!r} must be a number (or None for 1/sqrt(K))")
        if not math.isfinite(scale):
            raise _errors.InvalidArgumentError(f"scale = {scale} is not finite")
        scale = float(scale)
    if use_beta_sigmoid_in_kernel:
        beta = beta.sigmoid() * 2 if allow_neg_eigval else beta.sigmoid()
    if cu_seqlens is not None:
        # Read on the host when the caller has the offsets there; strided views become contiguous.
        host = cu_seqlens_cpu if isinstance(cu_seqlens_cpu, torch.Tensor) else cu_seqlens
        cu_seqlens = host.contiguous()
    compute = _compute_dtype(q, k, v)
    out_dtype = q.dtype
    q, k, v, g, beta = (t.to(compute) for t in (q, k, v, g, beta))
    gate = g.unsqueeze(-1) if g.dim() == 3 else g
    state = None
    if initial_state is not None:
        state = initial_state.to(compute)
        state = _readable(state) if state_v_first else state.transpose(-1, -2).contiguous()
    o, states = _forward_op(_readable(q), _readable(k), _readable(v), _readable(gate), _readable(beta.unsqueeze(-1)),
                            state, cu_seqlens, scale, bool(output_final_state), bool(use_qk_l2norm_in_kernel))
    final_state = None
    if output_final_state:
        final_state = states if state_v_first else states.transpose(-1, -2)
    return o.to(out_dtype), final_state
