"""gdn as PyTorch ops with FLA's signatures: ``chunk_gated_delta_rule`` and, for decoding and
serving, ``fused_recurrent_gated_delta_rule``.

Layouts are FLA's: q, k ``[B, T, H, K]``, v ``[B, T, HV, V]``, g and beta ``[B, T, HV]`` (g may
also be ``[B, T, HV, K]``: a gate per key channel), states ``[N, HV, K, V]`` (``[N, HV, V, K]``
with ``state_v_first``), with value head h reading key head ``h // (HV // H)``. States are read
and written where they are, in either layout, by strides: no transpose, no copy. The ops are
registered with ``torch.library.custom_op``, so autograd, ``torch.compile(fullgraph=True)`` and
``torch.autograd.gradcheck`` work; the backward recomputes from the saved inputs (no per-token
state is kept between forward and backward).

Where it computes: CPU tensors on the cpu backend (float64 on the ref backend, the float64
oracle), with ``torch.get_num_threads()`` threads; CUDA tensors on the cuda backend, on the
tensor's device and the current stream. ``with gdn.torch.backend("ref"):`` forces a backend.

Element types (docs/SPEC.md section 3.1): bfloat16, float16 and float32 q, k, v of one dtype go to
the library as they are (no copy; views into one projection buffer read in place), with beta in
q's dtype or float32 and g in float32 or bfloat16; the output and the gradients of q, k, v come
back in q's dtype, those of g and beta in theirs; states are float32. The library reads each
element exactly and rounds each result once. A g or beta in another dtype (float16 g, say) is
converted to float32, a copy of that small tensor only; q, k, v of different dtypes are all
converted to float32; float64 anywhere makes a float64 call. ``precision="bf16"`` lets the
backend round its chunk products' operands to bfloat16 where the hardware multiplies bfloat16
natively (``"exact"``, the default, never does).
"""

import contextlib
import threading
from typing import Optional, Tuple

import torch

from .. import _core, _errors, _gdn
from .._fla_args import (activated_gate, activation_dtype, check_state, check_state_indices, gate_sum, prepare,
                         readable, readable_state, state_v_first_alias)

__all__ = ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "backend", "release_workspaces"]

_HEAD_MAP_GROUPED = _core.HEAD_MAPS["grouped"]


class _Override(threading.local):
    name = None  # no backend forced (a class attribute: read without a failed lookup, per call)


_override = _Override()


@contextlib.contextmanager
def backend(name):
    """Run gdn.torch ops of this thread on backend ``name`` ("ref", "cpu", "cuda") inside the block."""
    previous = _override.name
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
    forced = _override.name
    if t.is_cpu:
        name = forced or ("ref" if t.dtype == torch.float64 else "cpu")
        return _core.default_context(name, threads=torch.get_num_threads())
    if t.is_cuda:
        index = t.device.index if t.device.index is not None else torch.cuda.current_device()
        stream = torch.cuda.current_stream(index).cuda_stream
        return _core.default_context(forced or "cuda", device=index, stream=stream)
    raise _errors.UnsupportedError(f"gdn computes on cpu and cuda tensors, not on {t.device}")


def _state_dtype(x):
    """The dtype of a state in a call whose q/k/v are of dtype x (SPEC 3.1)."""
    return torch.float64 if x == torch.float64 else torch.float32


def _empty(shape, like, dtype=None):
    """A fresh tensor for gdn to write (in like's dtype unless given); large host ones are backed
    by huge pages (fewer faults)."""
    t = torch.empty(shape, dtype=dtype or like.dtype, device=like.device)
    if t.is_cpu and t.numel() * t.element_size() >= _gdn.huge_page_min_bytes:
        _gdn.advise_huge_pages(t)
    return t


def _empty_as(like):
    """_empty(like.shape, like), contiguous: the output of a decoding step (empty_like is the faster
    allocation, by about a microsecond)."""
    t = torch.empty_like(like, memory_format=torch.contiguous_format)
    if t.is_cpu and t.numel() * t.element_size() >= _gdn.huge_page_min_bytes:
        _gdn.advise_huge_pages(t)
    return t


def _state_shape(q, v, cu_seqlens, state_v_first):
    sequences = v.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    HV, K, V = v.shape[2], q.shape[3], v.shape[3]
    return (sequences, HV, V, K) if state_v_first else (sequences, HV, K, V)


def _gdn_view(state, state_v_first):
    """gdn's [N, HV, V, K] view of a state in the caller's layout: the state itself when V-first
    (key-major), else the transposed view of its [N, HV, K, V] (value-major, read by strides)."""
    if state is None or state_v_first:
        return state
    return state.transpose(-1, -2)


# The ops take gdn's layouts for q, k, v, g and beta (g and beta with their unit dimension) and the
# caller's for states (state_v_first says which); the wrappers below convert from FLA's.
def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
             initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], scale: Optional[float],
             want_state: bool, l2norm: bool, state_v_first: bool, precision: int) -> Tuple[torch.Tensor, torch.Tensor]:
    if l2norm:
        q, k = _normalized(q), _normalized(k)
    out = _empty(v.shape, v)
    state_dtype = _state_dtype(v.dtype)
    states = _empty(_state_shape(q, v, cu_seqlens, state_v_first), v, state_dtype) if want_state \
        else v.new_empty(0, dtype=state_dtype)
    _gdn.forward(_context_for(v)._native, q, k, v, g, beta, _gdn_view(initial_state, state_v_first), out,
                 _gdn_view(states, state_v_first) if want_state else None, scale, _HEAD_MAP_GROUPED, False, cu_seqlens,
                 None, precision)
    return out, states


_forward_op = torch.library.custom_op("gdn::gated_delta_rule_fwd", mutates_args=())(_forward)


@_forward_op.register_fake
def _(q, k, v, g, beta, initial_state, cu_seqlens, scale, want_state, l2norm, state_v_first, precision):
    states_shape = _state_shape(q, v, cu_seqlens, state_v_first) if want_state else (0,)
    return v.new_empty(v.shape), v.new_empty(states_shape, dtype=_state_dtype(v.dtype))


@torch.library.custom_op("gdn::gated_delta_rule_bwd", mutates_args=())
def _backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                 initial_state: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor],
                 d_out: Optional[torch.Tensor], d_state: Optional[torch.Tensor], scale: Optional[float], l2norm: bool,
                 state_v_first: bool, precision: int
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    grads = [_empty(t.shape, t) for t in (q, k, v, g, beta)]  # each in its input's dtype (SPEC 3.1)
    d_initial = _empty(initial_state.shape, initial_state) if initial_state is not None else v.new_empty(0)
    q_used, k_used = (_normalized(q), _normalized(k)) if l2norm else (q, k)
    _gdn.backward(_context_for(v)._native, q_used, k_used, v, g, beta, _gdn_view(initial_state, state_v_first),
                  d_out, _gdn_view(d_state, state_v_first), *grads,
                  _gdn_view(d_initial, state_v_first) if initial_state is not None else None, scale, _HEAD_MAP_GROUPED,
                  False, cu_seqlens, None, precision)
    if l2norm:
        grads[0], grads[1] = _normalized_backward(q, grads[0]), _normalized_backward(k, grads[1])
    return (*grads, d_initial)


@_backward_op.register_fake
def _(q, k, v, g, beta, initial_state, cu_seqlens, d_out, d_state, scale, l2norm, state_v_first, precision):
    d_initial = initial_state.new_empty(initial_state.shape) if initial_state is not None else v.new_empty(0)
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), g.new_empty(g.shape),
            beta.new_empty(beta.shape), d_initial)


def _setup_context(ctx, inputs, output):
    q, k, v, g, beta, initial_state, cu_seqlens, scale, want_state, l2norm, state_v_first, precision = inputs
    # The inputs as given (bfloat16 views into the caller's projection, say): no copy is kept.
    ctx.save_for_backward(q, k, v, g, beta, initial_state, cu_seqlens)
    ctx.scale = scale
    ctx.want_state = want_state
    ctx.l2norm = l2norm
    ctx.state_v_first = state_v_first
    ctx.precision = precision


def _backward(ctx, d_out, d_states):
    q, k, v, g, beta, initial_state, cu_seqlens = ctx.saved_tensors
    d_state = readable_state(d_states) if ctx.want_state and d_states is not None else None
    d_out = readable(d_out) if d_out is not None else None
    dq, dk, dv, dg, dbeta, d_initial = _backward_op(q, k, v, g, beta, initial_state, cu_seqlens, d_out, d_state,
                                                    ctx.scale, ctx.l2norm, ctx.state_v_first, ctx.precision)
    return dq, dk, dv, dg, dbeta, (d_initial if initial_state is not None else None), None, None, None, None, None, None


torch.library.register_autograd("gdn::gated_delta_rule_fwd", _backward, setup_context=_setup_context)


# The in-place update of serving: the final states written over the initial ones, into the slots
# state_indices names when given (a state pool), with no state allocated or copied. No autograd:
# the initial state it would need is overwritten. g and beta are FLA's ([B, T, HV], or g
# [B, T, HV, K]) and the state in the caller's layout: the extension reads them so (fla_gates,
# state_kv), with no view made here.
def _update_in_place(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                     state: torch.Tensor, state_indices: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor],
                     scale: Optional[float], l2norm: bool, state_v_first: bool, precision: int) -> torch.Tensor:
    if l2norm:
        q, k = _normalized(q), _normalized(k)
    out = _empty_as(v)
    _gdn.forward(_context_for(v)._native, q, k, v, g, beta, state, out, state, scale, _HEAD_MAP_GROUPED, False,
                 cu_seqlens, state_indices, precision, True, not state_v_first)
    return out


_update_op = torch.library.custom_op("gdn::gated_delta_rule_update", mutates_args=("state",))(_update_in_place)


@_update_op.register_fake
def _(q, k, v, g, beta, state, state_indices, cu_seqlens, scale, l2norm, state_v_first, precision):
    return v.new_empty(v.shape)


def _plain_eager(*tensors):
    """Plain tensors (or None) outside torch.compile's tracing: an op's body may be called as it
    is, without the dispatcher's round trip through the registered op (about 15 us a call on the
    host, a twentieth of a 27B-shape decoding step). Anything else (tracing, fake or wrapped
    tensors) goes through the op."""
    for t in tensors:
        if type(t) is not torch.Tensor and t is not None:
            return False
    return not torch.compiler.is_compiling()


def _forward_call(p, state):
    """The forward's body itself where nothing needs the registered op: plain tensors, no
    autograd (no gradient wanted, as in inference and serving); else the op."""
    tensors = (p.q, p.k, p.v, p.gate, p.beta, state)
    if _plain_eager(*tensors) and not (torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in tensors)):
        return _forward
    return _forward_op


# use_qk_l2norm_in_kernel, as FLA and transformers define it: x / sqrt(sum(x^2) + eps) per row.
# It runs inside the ops (the backward recomputes it from the saved q and k) rather than as
# autograd-tracked torch ops, whose saved intermediates and fresh temporaries cost more than the
# normalisation itself; on the host, one fused pass of the extension.
_L2NORM_EPS = 1e-6
_HALF = (torch.bfloat16, torch.float16)


def _fused_rows(x):
    """Whether the extension's one-pass normalisation takes x: a host tensor of a floating dtype
    the library knows, its rows contiguous."""
    return (x.device.type == "cpu" and x.dtype in _CALL_DTYPES and x.numel() > 0
            and (x.shape[-1] == 1 or x.stride(-1) == 1))


def _normalized(x):
    """x with every row (last dimension) divided by its norm, in a fresh tensor of x's dtype.
    bfloat16 and float16 rows are normalised in float32 and rounded once to their dtype, as FLA's
    chunked function does (its decoding kernel, and vLLM's and SGLang's, keep them in float32
    registers: their outputs may differ from these in the last bit of bfloat16): on the host read
    and written in place by the extension (no float32 copy), elsewhere through a float32 copy."""
    if _fused_rows(x):
        y = _empty(x.shape, x)
        _gdn.l2norm_rows(x, y, _L2NORM_EPS, torch.get_num_threads())
        return y
    if x.dtype in _HALF:
        return _normalized(x.float()).to(x.dtype)
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + _L2NORM_EPS)


def _normalized_backward(x, dy):
    """The gradient at x through _normalized, given the output's gradient dy (overwritten when x and
    dy are host tensors of one dtype; for bfloat16 and float16, computed in float32 and rounded once)."""
    if _fused_rows(x) and dy.dtype == x.dtype and dy.is_contiguous():
        _gdn.l2norm_rows_backward(x, dy, _L2NORM_EPS, torch.get_num_threads())
        return dy
    if x.dtype in _HALF:
        return _normalized_backward(x.float(), dy.float()).to(x.dtype)
    inv = torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + _L2NORM_EPS)
    return inv * dy - x * (inv ** 3 * (x * dy).sum(dim=-1, keepdim=True))


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, *, precision="exact", **kwargs):
    """The gated delta rule over a batch, as ``fla.ops.gated_delta_rule.chunk_gated_delta_rule``.

    FLA's parameters, in FLA's order, with FLA's meaning: ``scale`` None is ``1/sqrt(K)`` and any
    other value (0.0 included) is used as given; ``use_beta_sigmoid_in_kernel`` takes beta as
    logits (``allow_neg_eigval``: ``2 * sigmoid``); ``state_v_first`` keeps states as
    ``[N, HV, V, K]``; ``cu_seqlens`` (N + 1 offsets, B = 1) packs sequences, the recurrence
    restarting at each offset, zero-length sequences included; ``cu_seqlens_cpu`` is the same
    offsets on the host (read there, no device synchronisation); ``chunk_indices`` and
    ``chunk_size`` are FLA's blocking and are ignored (gdn blocks its own way; the result is the
    same recurrence), ``chunk_size`` after FLA's check (16, 32 or 64); ``transpose_state_layout``
    is FLA's old name of ``state_v_first``; keywords ``use_gate_in_kernel``, ``A_log``,
    ``dt_bias`` compute ``g = -exp(A_log) * softplus(g + dt_bias)`` first. ``head_first`` is refused as FLA refuses
    it; ``cp_context`` (FLA's context parallel) is not supported. Keyword-only, gdn's own:
    ``precision``, ``"exact"`` (default) or ``"bf16"`` (see the module's documentation).

    Returns ``(o, final_state)``: o ``[B, T, HV, V]`` in q's dtype; final_state ``[N, HV, K, V]``
    (``[N, HV, V, K]`` with ``state_v_first``), contiguous, float32 (float64 when any of q, k, v
    is float64), None unless ``output_final_state``. bfloat16, float16 and float32 q, k, v of one
    dtype are passed as they are (see the module's documentation for g and beta); inputs that mix
    dtypes as FLA allows (say float32 q/k with float16 v/beta) are converted to float32. States in
    either layout are read and written in place by strides: a float32 ``initial_state`` (float64
    in a float64 call) with its K or V dimension contiguous is not copied; one in another dtype is
    converted. T = 0 (or B = 0) returns an empty o and the initial state.
    """
    if "head_first" in kwargs:
        raise DeprecationWarning("head_first has been removed. Inputs must be in `[B, T, H, ...]` format.")
    if cp_context is not None:
        raise _errors.UnsupportedError("cp_context: gdn.torch does not run FLA's context parallel")
    state_v_first = state_v_first_alias(state_v_first, kwargs)
    chunk_size = kwargs.pop("chunk_size", 64)
    if chunk_size not in (16, 32, 64):
        raise _errors.InvalidArgumentError(f"`chunk_size` must be 16, 32, or 64 for Gated Delta Rule, got {chunk_size} "
                                           "(checked as FLA checks it; gdn chooses its own blocking)")
    precision = _core.precision_value(precision)
    p = prepare(q, k, v, g, beta, scale, use_beta_sigmoid_in_kernel, allow_neg_eigval, cu_seqlens, cu_seqlens_cpu,
                kwargs)
    state = None
    if initial_state is not None:
        check_state(initial_state, q, v, p.sequences, state_v_first)
        state = readable_state(initial_state.to(p.state_dtype))
    o, final_state = _forward_call(p, state)(p.q, p.k, p.v, p.gate, p.beta, state, p.cu_seqlens, p.scale,
                                             bool(output_final_state), bool(use_qk_l2norm_in_kernel),
                                             bool(state_v_first), precision)
    return o.to(p.out_dtype), (final_state if output_final_state else None)


def _check_updatable(state, p, inputs):
    """The state the in-place update writes: in the call's state dtype, addressable as it is, no autograd."""
    if state.dtype != p.state_dtype:
        raise _errors.ElementTypeError(
            f"initial_state has dtype {state.dtype}; updated in place it must be in the state dtype {p.state_dtype} "
            "(float64 when any of q, k, v is float64, else float32)")
    if readable_state(state) is not state:
        raise _errors.LayoutError(
            f"initial_state has strides {tuple(state.stride())}; updated in place it must have its K or V dimension "
            "contiguous and no broadcast (zero) strides")
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (*inputs, state)):
        raise _errors.UnsupportedError(
            "the in-place state update (inplace_final_state, or state indices) has no autograd: it overwrites the "
            "initial state the backward needs. Run it under torch.no_grad(), or pass inplace_final_state=False")
    # (Under torch.compile the registered op runs, which torch checks so itself.)
    if not torch.compiler.is_compiling() and state.is_inference() and not torch.is_inference_mode_enabled():
        raise _errors.InvalidArgumentError(
            "initial_state is an inference tensor: update it in place inside torch.inference_mode()")


def _gathered(pool, indices):
    """The initial states the slots name, one per sequence, zero for a negative index (a copy)."""
    slots = indices.to(device=pool.device, dtype=torch.int64)
    if slots.numel() and int(slots.max()) >= pool.shape[0]:
        raise _errors.ShapeError(f"ssm_state_indices names slot {int(slots.max())} of a pool of {pool.shape[0]} slots")
    if pool.shape[0] == 0:  # a pool of no slots: every index is negative (checked above)
        return pool.new_zeros((slots.numel(), *pool.shape[1:]))
    gathered = pool.index_select(0, slots.clamp(min=0))
    return gathered.masked_fill((slots < 0).view(-1, 1, 1, 1), 0)


# The floating dtypes a call's tensors may have (docs/SPEC.md section 3.1 says which go where).
_CALL_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)

def _decoding_step(q, k, v, g, beta, scale, state, indices, l2norm, v_first, precision, out):
    """The serving engines' decoding step in place, on the extension's one-call path
    (``_gdn.decoding_step``: it checks what only this path needs and what the library cannot, and
    calls the library). Returns o, or None where the general path must run: an argument the path
    does not take (a subclass or fake tensor, autograd wanted, FLA's other ranks or dtypes), or a
    call the library refuses without writing anything; the general path then checks every
    argument in Python, with messages in FLA's terms, or copies an input it cannot read in place."""
    if torch.compiler.is_compiling() or type(v) is not torch.Tensor:
        return None
    if l2norm:  # normalised first (the extension then checks the normalised q and k): what it needs
        if not (type(q) is torch.Tensor and type(k) is torch.Tensor and q.dtype in _CALL_DTYPES and k.dtype == q.dtype
                and q.dim() == 4 and k.dim() == 4) or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)):
            return None
        q, k = _normalized(q), _normalized(k)
    return _gdn.decoding_step(_context_for(v)._native, q, k, v, g, beta, state, indices, out, scale, not v_first,
                              precision)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                                     use_gate_in_kernel=False, A_log=None, dt_bias=None,
                                     use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False,
                                     cu_seqlens=None, *, ssm_state_indices=None, initial_state_indices=None,
                                     inplace_final_state=None, precision="exact", out=None, **kwargs):
    """The gated delta rule token by token, as ``fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule``,
    with the continuous batching of serving engines: the decoding step.

    FLA's parameters, in FLA's order, with FLA's meaning (see :func:`chunk_gated_delta_rule` for
    those they share): ``g`` None is no decay; ``gk`` ``[B, T, HV, K]`` is a log decay per key
    channel (applied with ``g`` when both are given); ``beta`` None is ones;
    ``transpose_state_layout`` is FLA's old name of ``state_v_first``. gdn computes what FLA's
    kernel computes, in its own blocking. Not supported (``gdn.UnsupportedError``): ``gv`` (a
    decay per value channel), a beta per value channel, and vLLM's ``num_accepted_tokens``.

    Keyword-only, as serving engines name them:

    - ``ssm_state_indices`` (vLLM; ``initial_state_indices``, SGLang's name, is the same): int32
      or int64 ``[N]``, on q's device or the host. ``initial_state`` is then a pool
      ``[slots, HV, K, V]`` (``[slots, HV, V, K]`` with ``state_v_first``, the layout of vLLM's
      and SGLang's pools): sequence n starts from slot ``ssm_state_indices[n]``. A negative index
      (SGLang's and vLLM's padding slot) starts from zeros and writes nothing; its output is still
      computed. Non-negative indices must be
      distinct and below ``slots`` (``gdn.AliasError``, ``gdn.ShapeError`` otherwise).
    - ``inplace_final_state``: the final states written over the initial ones, into the pool's
      slots with indices, into ``initial_state`` without: no state is allocated or copied, and the
      returned final state is ``initial_state`` itself. Default: True with indices (vLLM's
      default), False without (FLA's behaviour). In place needs ``initial_state`` in float32
      (float64 in a float64 call), with its K or V dimension contiguous, and no autograd (run it under
      ``torch.no_grad()``). ``inplace_final_state=False`` with indices reads the pool's slots
      (copied out) and returns the final states ``[N, HV, K, V]`` as FLA does, with autograd.
    - ``precision``: ``"exact"`` (default) or ``"bf16"``, as for :func:`chunk_gated_delta_rule`.
    - ``out``: a tensor ``[B, T, HV, V]`` in v's dtype that receives o (and is returned as o), as
      PyTorch's ``out=`` arguments: a decoding loop that keeps its output buffer allocates nothing
      per step. Not with autograd.

    Returns ``(o, final_state)``: o ``[B, T, HV, V]`` in v's dtype (as FLA's decoding function; the
    chunked one returns q's); final_state as above, or as :func:`chunk_gated_delta_rule` returns it
    (None unless ``output_final_state``).
    """
    if (not kwargs and cu_seqlens is None and initial_state is not None and g is not None and beta is not None
            and gk is None and gv is None and not use_gate_in_kernel and not use_beta_sigmoid_in_kernel
            and not allow_neg_eigval and (ssm_state_indices is None or initial_state_indices is None)
            and (inplace_final_state or (inplace_final_state is None
                                         and (ssm_state_indices is not None or initial_state_indices is not None)))):
        indices = ssm_state_indices if ssm_state_indices is not None else initial_state_indices
        o = _decoding_step(q, k, v, g, beta, scale, initial_state, indices, bool(use_qk_l2norm_in_kernel),
                           bool(state_v_first), _core.precision_value(precision), out)
        if o is not None:
            return o, initial_state
    if out is not None:
        _check_out(out, q, v, (q, k, v, g, gk, beta, initial_state, A_log, dt_bias))
    o, final_state = _fused_recurrent(q, k, v, g, gk, gv, beta, scale, initial_state, output_final_state,
                                      use_qk_l2norm_in_kernel, use_gate_in_kernel, A_log, dt_bias,
                                      use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first, cu_seqlens,
                                      ssm_state_indices, initial_state_indices, inplace_final_state, precision, kwargs)
    return (o if out is None else out.copy_(o)), final_state


def _check_out(out, q, v, inputs):
    """out= before anything is computed or written: o's shape and dtype (v's), no autograd."""
    if not isinstance(out, torch.Tensor) or not isinstance(q, torch.Tensor) or not isinstance(v, torch.Tensor):
        raise _errors.InvalidArgumentError(f"out is a tensor for o, like v; got {type(out).__name__}")
    if out.shape != v.shape or out.dtype != v.dtype or out.device != v.device:
        raise _errors.InvalidArgumentError(
            f"out is {tuple(out.shape)} {out.dtype} on {out.device}; o is {tuple(v.shape)} {v.dtype} on {v.device}")
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (*inputs, out)):
        raise _errors.UnsupportedError("out= has no autograd: run under torch.no_grad(), or leave out unset")
    if any(stride == 0 and size > 1 for size, stride in zip(out.shape, out.stride())):
        raise _errors.LayoutError(f"out has strides {tuple(out.stride())}: an output's elements must not overlap")
    # As the library refuses an output over an input (ALIAS): o copied over the pool would undo
    # its update. By address range, as the general path has no finer test.
    names = ("q", "k", "v", "g", "gk", "beta", "initial_state", "A_log", "dt_bias")
    for name, t in zip(names, inputs):
        if isinstance(t, torch.Tensor) and _spans_meet(out, t):
            raise _errors.AliasError(f"out overlaps {name} in memory: o would be written over it")
    if not torch.compiler.is_compiling() and out.is_inference() and not torch.is_inference_mode_enabled():
        raise _errors.InvalidArgumentError("out is an inference tensor: write it inside torch.inference_mode()")


def _spans_meet(a, b):
    """Whether the address ranges of two tensors' elements intersect (same device, both non-empty)."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False

    def span(t):
        last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def _fused_recurrent(q, k, v, g, gk, gv, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                     use_gate_in_kernel, A_log, dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval, state_v_first,
                     cu_seqlens, ssm_state_indices, initial_state_indices, inplace_final_state, precision, kwargs):
    """fused_recurrent_gated_delta_rule's general path: every argument checked and converted."""
    state_v_first = state_v_first_alias(state_v_first, kwargs)
    if kwargs.get("num_accepted_tokens") is not None:
        raise _errors.UnsupportedError("num_accepted_tokens (vLLM's speculative decoding): gdn.torch does not take it")
    if gv is not None:
        raise _errors.UnsupportedError("gv (a decay per value channel): gdn's decay is per head or per key channel")
    if ssm_state_indices is not None and initial_state_indices is not None:
        raise _errors.InvalidArgumentError(
            "ssm_state_indices and initial_state_indices are one argument under vLLM's and SGLang's names: pass one")
    indices = ssm_state_indices if ssm_state_indices is not None else initial_state_indices
    precision = _core.precision_value(precision)
    if use_gate_in_kernel:
        g = activated_gate(g, A_log, dt_bias, activation_dtype(q, k, v))
    if isinstance(v, torch.Tensor) and v.dim() == 4:
        if beta is None:
            beta = v.new_ones(v.shape[:3])
        if g is None and gk is None:
            g = v.new_zeros(v.shape[:3])
    if isinstance(beta, torch.Tensor) and beta.dim() == 4:
        raise _errors.UnsupportedError("beta [B, T, HV, V] (one per value channel): gdn takes one beta per head")
    if gk is not None:
        if not isinstance(gk, torch.Tensor) or gk.dim() != 4:
            raise _errors.ShapeError(f"gk is {list(gk.shape) if isinstance(gk, torch.Tensor) else type(gk).__name__}: "
                                     "[B, T, HV, K], a log decay per key channel")
        g = gate_sum(g, gk, activation_dtype(q, k, v))
    if inplace_final_state is None:
        inplace_final_state = indices is not None
    # In place, g and beta go to the extension as FLA gives them (fla_gates): no views made.
    p = prepare(q, k, v, g, beta, scale, use_beta_sigmoid_in_kernel, allow_neg_eigval, cu_seqlens, None, {},
                unit_dims=not inplace_final_state)._replace(out_dtype=v.dtype)  # FLA's o here is like v
    l2norm, v_first = bool(use_qk_l2norm_in_kernel), bool(state_v_first)
    if indices is not None:
        if initial_state is None:
            raise _errors.InvalidArgumentError("ssm_state_indices name slots of initial_state, the state pool: pass it")
        check_state(initial_state, q, v, p.sequences, v_first, pooled=True)
        check_state_indices(indices, p.sequences, q.device)
        indices = indices.contiguous()  # a column of a block table, say: the library reads N contiguous integers
    elif initial_state is not None:
        check_state(initial_state, q, v, p.sequences, v_first)
    if inplace_final_state:
        if initial_state is None:
            raise _errors.InvalidArgumentError(
                "inplace_final_state=True writes the final states over initial_state: pass it")
        _check_updatable(initial_state, p, (q, k, v, g, beta))
        update = _update_in_place if _plain_eager(p.q, p.v, initial_state) else _update_op
        o = update(p.q, p.k, p.v, p.gate, p.beta, initial_state, indices, p.cu_seqlens, p.scale, l2norm, v_first,
                   precision)
        return (o if o.dtype == p.out_dtype else o.to(p.out_dtype)), initial_state
    state = initial_state if indices is None else _gathered(initial_state, indices)
    if state is not None:
        state = readable_state(state.to(p.state_dtype))
    o, final_state = _forward_call(p, state)(p.q, p.k, p.v, p.gate, p.beta, state, p.cu_seqlens, p.scale,
                                             bool(output_final_state), l2norm, v_first, precision)
    return o.to(p.out_dtype), (final_state if output_final_state else None)
