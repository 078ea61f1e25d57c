"""Which recurrent state the decoding step may overwrite: the tensor the cache has just handed to
the layer, from a cache layer that keeps no copy of its past.

transformers' Qwen3.5 / Qwen3-Next layer reads its state with ``Cache.get_recurrent_state`` and,
after the delta rule, stores the final state with ``update_recurrent_state``, which copies it into
that same tensor of the cache's. Writing the final state over the tensor directly saves a state
allocation and a copy per generated token and leaves the cache holding what it would hold. It is
wrong in two cases, which a function of the state alone cannot tell apart: the cache records its
past (assisted generation: ``update_recurrent_state`` clones the current state into a history
*after* the step, to roll back to), and a state that is not the cache's (the per-token states a
multi-token step keeps in a list). So ``install()`` wraps ``Cache.get_recurrent_state`` to note,
per thread, the tensor it last handed out from a layer that does not record its past, and only
that tensor is updated in place.
"""

import functools
import threading
import weakref

import torch

_local = threading.local()
_lock = threading.Lock()
_installed = None  # (the Cache class, its own get_recurrent_state) while the wrapper is in place


def _observing(original):
    @functools.wraps(original)
    def get_recurrent_state(self, layer_idx, *args, **kwargs):
        state = original(self, layer_idx, *args, **kwargs)
        if torch.compiler.is_compiling():  # traced code keeps transformers' functional step
            return state
        recording = getattr(self, "is_recording_past", None)
        kept_apart = isinstance(state, torch.Tensor) and not (recording is not None and recording(layer_idx))
        _local.handed_out = weakref.ref(state) if kept_apart else None
        return state
    return get_recurrent_state


def install():
    """Wraps transformers' ``Cache.get_recurrent_state`` (idempotent). False when this transformers'
    cache has no such method: then no state is ever updated in place."""
    global _installed
    from transformers import cache_utils
    with _lock:
        if _installed is not None:
            return True
        original = cache_utils.Cache.__dict__.get("get_recurrent_state")
        if original is None:
            return False
        cache_utils.Cache.get_recurrent_state = _observing(original)
        _installed = (cache_utils.Cache, original)
        return True


def remove():
    """Puts transformers' own ``get_recurrent_state`` back (left alone if something replaced the wrapper)."""
    global _installed
    with _lock:
        if _installed is None:
            return
        cache, original = _installed
        current = cache.__dict__.get("get_recurrent_state")
        if getattr(current, "__wrapped__", None) is original:
            cache.get_recurrent_state = original
        _installed = None
        _local.__dict__.pop("handed_out", None)


def handed_out(state):
    """Whether ``state`` is the tensor the cache last handed out, from a layer that does not record
    its past. Asked once per reading: the answer is then forgotten."""
    if torch.compiler.is_compiling():
        return False
    ref = getattr(_local, "handed_out", None)
    _local.handed_out = None
    return ref is not None and ref() is state
