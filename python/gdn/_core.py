"""The low-level layer: the C API on arrays in ggml layout.

Array shapes are written outermost first, as numpy and torch print them: the reverse of the C
API's ``ne[]``. So, for Hk key heads of size Sk, Hv value heads of size Sv, T tokens, B
sequences (Bq of them for q and k) and K state snapshots:

=========  ==============================  ==============================================
array      shape                           notes
=========  ==============================  ==============================================
q, k       ``[Bq, T, Hk, Sk]``             rows contiguous; outer strides free (views into
                                           one packed projection buffer are read in place)
v          ``[B, T, Hv, Sv]``
g          ``[B, T, Hv, 1]`` or
           ``[B, T, Hv, Sk]``              log-decay: scalar per head (GDA) or per key channel (KDA)
beta       ``[B, T, Hv, 1]``
state      ``[B, Hv, Sv, Sk]``             key-major (key index innermost, ggml's layout)
                                           or value-major: a transposed view
                                           ``s.transpose(-1, -2)`` of a Hugging Face / FLA
                                           ``[..., K, V]`` tensor ``s``, read in place
out        ``[B, T, Hv, Sv]``
states     ``[K*B, Hv, Sv, Sk]``           slot s of sequence b at index s*B + b; slot 0 is
                                           the final state; either layout, as state
=========  ==============================  ==============================================

Element types (docs/SPEC.md section 3.1): float64 throughout, or q, k, v of one type among
float32, bfloat16 and float16 (beta that type or float32, g float32 or bfloat16) with float32
states; outputs and gradients allocated here take their input's type, states float32 (float64
in a float64 call). Nothing is converted: a combination outside the rule raises
:class:`gdn.ElementTypeError` with the library's message.

State pools (serving): with ``state_indices`` (int32 or int64, one per sequence, on the host or
the computing device), ``state`` is a pool ``[slots, Hv, Sv, Sk]``: sequence n starts from slot
``state_indices[n]`` and its final state goes to that slot of ``states`` (normally ``state``
itself: the pool updated in place). A negative index starts from zeros and writes nothing.
Non-negative indices must be distinct and below ``slots``.

``head_map`` says which key head value head h reads: ``"tiled"`` (``h % Hk``, ggml's
convention and the C API's default) or ``"grouped"`` (``h // (Hv // Hk)``, the Hugging Face /
FLA convention). ``gdn.torch`` takes FLA's layouts and always uses the grouped map.

Every call validates all of its arguments before anything is written; on error it raises the
:class:`gdn.Error` subclass of the status, with the library's message, and the outputs are
untouched.
"""

import threading
import weakref
from collections import namedtuple

import numpy as np

from . import _errors
from . import _gdn

HEAD_MAPS = {"tiled": 0, "grouped": 1}
# gdn_precision (docs/SPEC.md section 3.1): "exact" every product in float32 or better; "bf16" a
# backend may round its chunk products' operands to bfloat16 (F32 accumulation) where the
# hardware multiplies bfloat16 natively, and computes as "exact" elsewhere.
PRECISIONS = {"exact": 0, "bf16": 1}

Grads = namedtuple("Grads", "q k v g beta state")
Grads.__doc__ = "The six gradients of a backward call; an entry is None when it was not asked for."


def _stream_handle(stream):
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream
    if handle is None:
        raise _errors.InvalidArgumentError(
            f"stream must be an int (a cudaStream_t) or have .cuda_stream, not {type(stream).__name__}")
    return int(handle)


class Context:
    """One backend instance: its threads, its workspace, the message of its last error.

    ``backend``: ``"ref"``, ``"cpu"``, ``"cuda"`` or None for the fastest available.
    ``threads``: cpu worker threads (None: all cores). ``chunk_size``: None for the backend's
    default. ``device`` and ``stream``: the cuda device ordinal and stream (an int handle or a
    ``torch.cuda.Stream``; None: the default stream). A context is used by one thread at a time.
    """

    def __init__(self, backend=None, threads=None, chunk_size=None, device=0, stream=None):
        # What a C int holds; the library refuses what it cannot run (threads over 4096, say).
        for name, value in (("threads", threads), ("chunk_size", chunk_size), ("device", int(device))):
            if value is not None and (not isinstance(value, int) or not 0 <= value <= 2**31 - 1):
                raise _errors.InvalidArgumentError(f"{name} = {value!r} is not a non-negative int")
        self.threads = threads
        self.chunk_size = chunk_size
        self.device = int(device)
        self.stream = _stream_handle(stream)
        self._native = _gdn.Context(backend, threads or 0, chunk_size or 0, self.device, self.stream)

    @property
    def backend(self):
        """The backend's name: ``"ref"``, ``"cpu"`` or ``"cuda"``."""
        return self._native.backend

    @property
    def workspace_bytes(self):
        """Workspace bytes the context holds after its last successful call."""
        return self._native.workspace_bytes

    def release_workspace(self):
        """Frees the workspace the context keeps between calls (the next call allocates it again).

        On cuda the free is ordered on the context's stream. The workspace only grows: the 27B
        shape's backward at T = 4096 keeps about 540 MB of device memory outside PyTorch's
        caching allocator until released.
        """
        self._native.release_workspace()

    def __repr__(self):
        return (f"gdn.Context(backend={self.backend!r}, threads={self.threads}, "
                f"chunk_size={self.chunk_size}, device={self.device})")


_local = threading.local()
# Every thread's default contexts: the autograd engine runs the backward of CUDA tensors on a
# thread of its own, whose contexts release_workspaces() must reach too.
_every_default_context = weakref.WeakSet()
_every_default_context_lock = threading.Lock()


def release_workspaces():
    """Frees the workspaces of every thread's default contexts (those gdn.torch uses, the autograd
    engine's backward threads included). Call it between steps, when no gdn call is running."""
    with _every_default_context_lock:
        contexts = list(_every_default_context)
    for ctx in contexts:
        ctx.release_workspace()


def default_context(backend=None, device=0, stream=None, threads=None):
    """The calling thread's context for these settings, created on first use and kept. One per
    backend, device and stream: asked with another thread count, the thread's context there is
    replaced (its threads and workspace freed once no call holds it), so a program that changes
    torch's thread count keeps one pool and one workspace, not one per count it used."""
    key = (backend, int(device), _stream_handle(stream))
    cache = getattr(_local, "contexts", None)
    if cache is None:
        cache = _local.contexts = {}
    ctx = cache.get(key)
    if ctx is None or ctx.threads != threads:
        ctx = cache[key] = Context(backend, threads=threads, device=device, stream=stream)
        with _every_default_context_lock:
            _every_default_context.add(ctx)
    return ctx


def _head_map(head_map):
    if head_map in HEAD_MAPS:
        return HEAD_MAPS[head_map]
    raise _errors.InvalidArgumentError(f"head_map = {head_map!r}; expected 'tiled' or 'grouped'")


def precision_value(precision):
    """The gdn_precision value of ``"exact"`` or ``"bf16"``; anything else is a ValueError."""
    if isinstance(precision, str) and precision in PRECISIONS:
        return PRECISIONS[precision]
    raise _errors.InvalidArgumentError(f"precision = {precision!r}; expected 'exact' or 'bf16'")


def _scale(scale):
    """None: the library's default ``1/sqrt(Sk)``; any other value is used as given (0.0 included)."""
    if scale is None:
        return None
    try:
        return float(scale)
    except (TypeError, ValueError):
        raise _errors.InvalidArgumentError(f"scale = {scale!r} is not a number") from None


def _plain(array):
    """The array as the extension reads it: torch tensors detached from autograd."""
    if array is not None and getattr(array, "requires_grad", False):
        return array.detach()
    return array


def _empty(like, shape, state=False):
    """A new array of like's kind, element type and device; ``state``: a state for a call with
    q/k/v like ``like`` (float64 in a float64 call, float32 otherwise, as SPEC 3.1 has it)."""
    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype=np.float64 if state and like.dtype == np.float64 else
                        np.float32 if state else like.dtype)
    if type(like).__module__.split(".")[0] == "torch":
        import torch
        dtype = like.dtype
        if state:
            dtype = torch.float64 if dtype == torch.float64 else torch.float32
        return torch.empty(shape, dtype=dtype, device=like.device)
    raise _errors.InvalidArgumentError(
        f"gdn allocates numpy arrays and torch tensors only; pass the outputs for {type(like).__name__}")


def _shape(array):
    shape = getattr(array, "shape", None)
    if shape is None:
        raise _errors.InvalidArgumentError(
            f"gdn reads arrays (torch tensors, numpy arrays, anything with __dlpack__); got {type(array).__name__}")
    return tuple(int(n) for n in shape)


def _state_shape(q, v, slots):
    """[slots, Hv, Sv, Sk] for slots = K*B."""
    qs, vs = _shape(q), _shape(v)
    if len(qs) != 4 or len(vs) != 4:
        raise _errors.ShapeError(f"q and v must have 4 dimensions to size the state; got q {qs}, v {vs}")
    return (slots, vs[2], vs[3], qs[3])


def _sequences(v, cu_seqlens):
    """B, or N for N + 1 packed-sequence offsets."""
    if cu_seqlens is not None:
        return int(cu_seqlens.shape[0]) - 1
    vs = _shape(v)
    return vs[0] if len(vs) == 4 else 1


def forward(q, k, v, g, beta, state=None, *, out=None, states=None, snapshots=1, scale=None,
            head_map="tiled", cu_seqlens=None, state_indices=None, ctx=None, dry_run=False, precision="exact"):
    """The forward: returns ``(out, states)``.

    ``out`` and ``states`` are written in place when given; when None they are allocated (numpy
    or torch, like ``v``, key-major; ``out`` in v's dtype, ``states`` float32, or float64 in a
    float64 call); pass False for one that is not wanted. ``states`` holds
    ``snapshots`` slots per sequence. ``states`` may be exactly ``state`` (the in-place cache
    update of decoding). With ``state_indices`` (a pool), ``states`` None is ``state``: the pool
    is updated in place. ``scale`` None is ``1/sqrt(Sk)``; any number, 0.0 included, is used as
    given (a Python float reaches the library as a double). ``ctx`` None: the calling thread's
    context for the fastest backend. ``dry_run``: validate and ask the backend, compute and write
    nothing. ``precision``: ``"exact"`` (default) or ``"bf16"`` (gdn_problem.precision).
    """
    precision = precision_value(precision)
    q, k, v, g, beta, state = map(_plain, (q, k, v, g, beta, state))
    if out is None:
        out = _empty(v, _shape(v))
    if states is None and state_indices is not None and state is not None:
        states = state
    elif states is None:
        states = _empty(v, _state_shape(q, v, snapshots * _sequences(v, cu_seqlens)), state=True)
    ctx = ctx or default_context()
    _gdn.forward(ctx._native, q, k, v, g, beta, state, out if out is not False else None,
                 states if states is not False else None, _scale(scale), _head_map(head_map), dry_run,
                 _plain(cu_seqlens), _plain(state_indices), precision)
    return (out if out is not False else None, states if states is not False else None)


def backward(q, k, v, g, beta, state=None, *, d_out=None, d_states=None, dq=None, dk=None, dv=None,
             dg=None, dbeta=None, dstate=None, scale=None, head_map="tiled", cu_seqlens=None, state_indices=None,
             ctx=None, dry_run=False, precision="exact"):
    """The backward: the gradients of ``sum(d_out * out) + sum(d_states * states)`` with respect
    to q, k, v, g, beta and the initial state, as a :class:`Grads`.

    ``d_out`` / ``d_states`` None are zero (``d_states`` then has one slot). Each gradient is
    written in place when given, allocated like its input when None (``dstate`` only when
    ``state`` is given), and skipped when False. Gradients are overwritten, not accumulated. With
    ``state_indices``, ``state``, ``d_states`` and ``dstate`` are pools indexed alike; the slots
    no sequence names are left as they are in a given ``dstate`` (zero in an allocated one).
    ``precision`` as for :func:`forward`.
    """
    precision = precision_value(precision)
    q, k, v, g, beta, state, d_out, d_states = map(_plain, (q, k, v, g, beta, state, d_out, d_states))

    def target(given, like, default_wanted=True):
        if given is False or (given is None and not default_wanted):
            return None
        return _empty(like, _shape(like)) if given is None else given

    dq, dk, dv, dg, dbeta = (target(dq, q), target(dk, k), target(dv, v), target(dg, g), target(dbeta, beta))
    if dstate is None and state is None:
        dstate = None
    elif dstate is None:
        dstate = _empty(state, _shape(state))
        if state_indices is not None:
            dstate[...] = 0  # the slots no sequence names: zero gradient
    elif dstate is False:
        dstate = None
    ctx = ctx or default_context()
    _gdn.backward(ctx._native, q, k, v, g, beta, state, d_out, d_states, dq, dk, dv, dg, dbeta, dstate,
                  _scale(scale), _head_map(head_map), dry_run, _plain(cu_seqlens), _plain(state_indices), precision)
    return Grads(dq, dk, dv, dg, dbeta, dstate)


def backend_available(name):
    """Whether a backend is compiled in and can start here (a CUDA device exists, say)."""
    return _gdn.backend_available(name)
