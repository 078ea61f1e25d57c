"""The C API called directly through ctypes, with no binding in between: the baseline against
which ``python -m gdn.bench`` measures what the nanobind/torch layers cost. The extension module
links libgdn in and exports its C symbols, so this reads them from there."""

import ctypes

from . import _gdn

_F32, _F64, _F16, _BF16, _I32, _I64 = 0, 1, 2, 3, 4, 5


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("type", ctypes.c_int), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_int64 * 4)]


class Problem(ctypes.Structure):
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("g", Tensor), ("beta", Tensor), ("state", Tensor),
                ("scale", ctypes.c_double), ("scale_is_explicit", ctypes.c_int), ("head_map", ctypes.c_int),
                ("cu_seqlens", Tensor),  # packed sequences (docs/VARLEN.md); zeroed = absent
                ("state_indices", Tensor),  # state pools (docs/SPEC.md section 3.2); zeroed = absent
                ("precision", ctypes.c_int)]  # gdn_precision (docs/SPEC.md section 3.1); 0 = exact


class Grads(ctypes.Structure):
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("g", Tensor), ("beta", Tensor), ("state", Tensor)]


class Params(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int), ("device", ctypes.c_int), ("stream", ctypes.c_void_p),
                ("chunk_size", ctypes.c_int)]


_lib = ctypes.CDLL(_gdn.__file__)
_lib.gdn_context_default_params.restype = Params
_lib.gdn_last_error.restype = ctypes.c_char_p


def tensor(t):
    """A gdn_tensor over a CPU torch tensor of up to 4 dimensions (shape reversed into ne): floats
    (float64, float32, float16, bfloat16), or int32 / int64 indices. A size-1 dimension gets the
    stride past the span of those inside it."""
    if t is None:
        return Tensor()
    item = t.element_size()
    ne = list(reversed(t.shape)) + [1] * (4 - t.dim())
    nb = [s * item for s in reversed(t.stride())] + [0] * (4 - t.dim())
    for i in range(4):
        if ne[i] == 1:
            nb[i] = max([item] + [nb[j] * ne[j] for j in range(i)])
    kind = {"torch.float64": _F64, "torch.float32": _F32, "torch.float16": _F16, "torch.bfloat16": _BF16,
            "torch.int64": _I64, "torch.int32": _I32}[str(t.dtype)]
    return Tensor(t.data_ptr(), kind, (ctypes.c_int64 * 4)(*ne), (ctypes.c_int64 * 4)(*nb))


class Context:
    """A gdn_context of its own (backend, threads), or ``shared=`` a ``gdn.Context``'s, borrowed: the
    same threads and workspace as the binding's calls, so that a comparison does not set two thread
    pools against each other on the same cores."""

    def __init__(self, backend=None, threads=None, shared=None):
        self.owner = shared
        self.ptr = ctypes.c_void_p(shared._native.address if shared is not None else None)
        if shared is not None:
            return
        params = _lib.gdn_context_default_params()
        params.n_threads = threads
        if _lib.gdn_context_create(backend.encode(), ctypes.byref(params), ctypes.byref(self.ptr)) != 0:
            raise RuntimeError("gdn_context_create failed")

    def __del__(self):
        if self.owner is None and self.ptr:
            _lib.gdn_context_free(self.ptr)

    def _check(self, status):
        if status != 0:
            raise RuntimeError(_lib.gdn_last_error(self.ptr).decode())

    def forward(self, problem, out, states):
        self._check(_lib.gdn_forward(self.ptr, ctypes.byref(problem), ctypes.byref(out) if out else None,
                                     ctypes.byref(states) if states else None))

    def backward(self, problem, d_out, d_states, grads):
        self._check(_lib.gdn_backward(self.ptr, ctypes.byref(problem), ctypes.byref(d_out) if d_out else None,
                                      ctypes.byref(d_states) if d_states else None, ctypes.byref(grads)))


def problem(q, k, v, g, beta, state=None, grouped=True, state_indices=None, precision=0):
    """``state`` in gdn's [B, Hv, Sv, Sk] (a transposed view of a [..., K, V] tensor is value-major);
    ``precision`` a gdn_precision value."""
    return Problem(tensor(q), tensor(k), tensor(v), tensor(g), tensor(beta), tensor(state), 0.0, 0,
                   1 if grouped else 0, Tensor(), tensor(state_indices), precision)
