"""Hugging Face transformers' Qwen3.5, Qwen3.5-MoE and Qwen3-Next gated delta-net layers on gdn.

    import gdn.integrations.transformers as gdn_hf
    gdn_hf.patch()                 # -> ("qwen3_5", "qwen3_5_moe", "qwen3_next"): what now runs on gdn
    ...                            # models built or loaded before or after: prefill, training, decoding
    gdn_hf.unpatch()               # the originals back, exactly
    with gdn_hf.patched(): ...     # or for one block only

How: each of these models' layer (``Qwen3_5GatedDeltaNet``, ``Qwen3_5MoeGatedDeltaNet``,
``Qwen3NextGatedDeltaNet``) looks up two functions of its modeling module at every call:
``torch_chunk_gated_delta_rule`` (prefill and training) and ``torch_recurrent_gated_delta_rule``
(cached single-token decoding). ``patch()`` replaces those two module globals with thin adapters
over ``gdn.torch.chunk_gated_delta_rule``, so every layer of that model type, whenever it was
built, calls gdn; ``unpatch()`` puts back the very objects it replaced. Nothing else changes: the
convolution, the norms, the cache and the attention layers stay transformers' own.

What the adapters keep from transformers' functions: the positional order of their parameters,
q/k with the key-head count and v with the value-head count (value head h reads key head
``h // (HV // H)``), states ``[B, HV, K, V]``, ``use_qk_l2norm_in_kernel``, the scale
``1/sqrt(K)``, and the return value ``(o, final_state)`` with o in the input's dtype and
final_state None unless ``output_final_state``. What differs, on purpose: ``chunk_size`` is
ignored (gdn chooses its own blocking; the result is the same recurrence); the final state is in
gdn's compute dtype (float32, or float64 for float64 inputs, where transformers' function rounds
to float32) and is a transposed view, which the cache copies; ``cu_seqlens`` (packed sequences,
passed by the layer as ``cu_seq_lens_q``) works, where transformers' function refuses it without
FLA; a ``scale`` keyword, FLA's, is honoured. Any other keyword the layer passes is ignored, as
transformers' function ignores it.

Which transformers: the check is by structure, not by version string. A model is patched only
when its modeling module imports, has both functions with the parameters above (positional
order and ``**kwargs``), and its layer's ``forward`` reads both as module globals. When no known
model passes, ``patch()`` raises ``gdn.UnsupportedError`` saying, per model, what was found;
when some pass and a model that is present does not, it patches those that pass and warns
(``UserWarning``) about the others. Models that the installed transformers does not have at all
are left out silently (``patch()``'s return value says what was patched).
"""

import contextlib
import dis
import importlib
import inspect
import threading
import warnings

from .. import _errors
from .. import torch as _gdn_torch

__all__ = ["MODELS", "patch", "unpatch", "patched", "patched_models",
           "chunk_gated_delta_rule", "recurrent_gated_delta_rule"]

# Short name (the transformers subpackage) -> (modeling module, gated delta-net layer class).
MODELS = {
    "qwen3_5": ("transformers.models.qwen3_5.modeling_qwen3_5", "Qwen3_5GatedDeltaNet"),
    "qwen3_5_moe": ("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", "Qwen3_5MoeGatedDeltaNet"),
    "qwen3_next": ("transformers.models.qwen3_next.modeling_qwen3_next", "Qwen3NextGatedDeltaNet"),
}

_CHUNK = "torch_chunk_gated_delta_rule"
_RECURRENT = "torch_recurrent_gated_delta_rule"
# The leading parameters of transformers' functions, in order; both also take **kwargs.
_EXPECTED_PARAMETERS = {
    _CHUNK: ("query", "key", "value", "g", "beta", "chunk_size", "initial_state", "output_final_state",
             "use_qk_l2norm_in_kernel"),
    _RECURRENT: ("query", "key", "value", "g", "beta", "initial_state", "output_final_state",
                 "use_qk_l2norm_in_kernel"),
}

_lock = threading.RLock()
_originals = {}  # short name -> {function name: the object patch() replaced}


def _gated_delta_rule(query, key, value, g, beta, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                      cu_seqlens, scale):
    # Looked up at call time, so that gdn.torch.chunk_gated_delta_rule stays the one entry point.
    return _gdn_torch.chunk_gated_delta_rule(
        query, key, value, g, beta, scale=scale, initial_state=initial_state,
        output_final_state=bool(output_final_state), cu_seqlens=cu_seqlens,
        use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel))


def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, *, cu_seqlens=None, scale=None, **ignored):
    """gdn in place of transformers' ``torch_chunk_gated_delta_rule`` (prefill and training).

    Same parameters in the same order; ``chunk_size`` and unknown keywords are ignored.
    """
    return _gated_delta_rule(query, key, value, g, beta, initial_state, output_final_state,
                             use_qk_l2norm_in_kernel, cu_seqlens, scale)


def recurrent_gated_delta_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, *, cu_seqlens=None, scale=None, **ignored):
    """gdn in place of transformers' ``torch_recurrent_gated_delta_rule`` (cached decoding).

    Same parameters in the same order; unknown keywords are ignored.
    """
    return _gated_delta_rule(query, key, value, g, beta, initial_state, output_final_state,
                             use_qk_l2norm_in_kernel, cu_seqlens, scale)


_ADAPTERS = {_CHUNK: chunk_gated_delta_rule, _RECURRENT: recurrent_gated_delta_rule}


def _transformers_version():
    try:
        import transformers
    except ImportError:
        return None
    return getattr(transformers, "__version__", "unknown")


def _signature_problem(function_name, function):
    """Why ``function`` is not called the way the adapter expects, or None when it is."""
    if not callable(function):
        return f"{function_name} is not callable"
    try:
        parameters = list(inspect.signature(function).parameters.values())  # follows __wrapped__
    except (TypeError, ValueError) as e:
        return f"{function_name} has no readable signature ({e})"
    expected = _EXPECTED_PARAMETERS[function_name]
    leading = tuple(p.name for p in parameters[:len(expected)]
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    has_var_keyword = any(p.kind == p.VAR_KEYWORD for p in parameters)
    if leading != expected or not has_var_keyword:
        found = ", ".join(str(p) for p in parameters)
        return f"{function_name}({found}) does not start with ({', '.join(expected)}) and take **kwargs"
    return None


def _globals_read_by(function):
    code = inspect.unwrap(function).__code__
    return {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}


def _inspect(name):
    """(module, None) when model ``name`` can be patched (or already is), else (None, (absent, reason))."""
    module_name, layer_name = MODELS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            return None, (True, f"{module_name} is not in this transformers")
        return None, (False, f"importing {module_name} failed: {e}")
    except Exception as e:  # a present but broken module: say so, do not hide it
        return None, (False, f"importing {module_name} failed: {type(e).__name__}: {e}")
    layer = getattr(module, layer_name, None)
    if not inspect.isclass(layer) or not callable(getattr(layer, "forward", None)):
        return None, (False, f"{module_name} has no layer class {layer_name}")
    try:
        read = _globals_read_by(layer.forward)
    except (AttributeError, TypeError) as e:
        return None, (False, f"{layer_name}.forward cannot be inspected ({e})")
    for function_name in (_CHUNK, _RECURRENT):
        if not hasattr(module, function_name):
            return None, (False, f"{module_name} has no {function_name}")
        if function_name not in read:
            return None, (False, f"{layer_name}.forward does not call the module's {function_name}")
        current = getattr(module, function_name)
        if current is not _ADAPTERS[function_name]:
            problem = _signature_problem(function_name, current)
            if problem:
                return None, (False, f"{module_name}: {problem}")
    return module, None


def _select(models):
    if models is None:
        return tuple(MODELS)
    names = (models,) if isinstance(models, str) else tuple(models)
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        raise _errors.InvalidArgumentError(
            f"models {names!r}: gdn knows how to patch {tuple(MODELS)}" +
            (f"; unknown: {unknown}" if unknown else "; none given"))
    return names


def patch(models=None):
    """Route the gated delta-net layers of transformers' Qwen3.5 / Qwen3.5-MoE / Qwen3-Next to gdn.

    ``models``: None for every model the installed transformers has, or short names from
    ``MODELS`` (all of which must then be patchable). Idempotent. Returns the tuple of short names
    now running on gdn. Raises ``gdn.UnsupportedError`` (nothing patched) when none of the
    requested models can be patched, with the reason for each; warns about a present model whose
    structure is not what gdn knows, when others are patched.
    """
    names = _select(models)
    version = _transformers_version()
    if version is None:
        raise _errors.UnsupportedError("gdn.integrations.transformers.patch(): transformers is not installed")
    with _lock:
        # Inspect everything first: either the call fails and changes nothing, or it patches.
        inspected = {name: _inspect(name) for name in names}
        ok = [name for name in names if inspected[name][0] is not None]
        failures = {name: inspected[name][1] for name in names if inspected[name][0] is None}
        if not ok or (models is not None and failures):
            reasons = "; ".join(f"{name}: {reason}" for name, (_, reason) in failures.items())
            raise _errors.UnsupportedError(
                f"gdn cannot patch {'any of ' if not ok else ''}{tuple(failures)} in transformers {version}: "
                f"{reasons}. gdn.integrations.transformers knows these models' gated delta-net layers as transformers "
                f"5.23 writes them; nothing was patched")
        for name in ok:
            module = inspected[name][0]
            saved = _originals.setdefault(name, {})
            for function_name, adapter in _ADAPTERS.items():
                current = getattr(module, function_name)
                if current is not adapter:
                    saved[function_name] = current
                    setattr(module, function_name, adapter)
    changed = {name: reason for name, (absent, reason) in failures.items() if not absent}
    if changed:
        warnings.warn("gdn.integrations.transformers.patch(): left on transformers' own functions (structure "
                      f"not as gdn knows it, transformers {version}): " +
                      "; ".join(f"{n}: {r}" for n, r in changed.items()), UserWarning, stacklevel=2)
    return tuple(ok)


def unpatch(models=None):
    """Put back the functions ``patch()`` replaced (all models, or those named). Returns the names restored.

    A function that something else has replaced since ``patch()`` is left as it is, with a warning.
    """
    names = _select(models)
    restored = []
    with _lock:
        for name in names:
            saved = _originals.pop(name, None)
            if not saved:
                continue
            module = importlib.import_module(MODELS[name][0])
            for function_name, original in saved.items():
                if getattr(module, function_name, None) is _ADAPTERS[function_name]:
                    setattr(module, function_name, original)
                else:
                    warnings.warn(f"gdn.integrations.transformers.unpatch(): {MODELS[name][0]}.{function_name} "
                                  "was replaced after gdn patched it; left as it is", UserWarning, stacklevel=2)
            restored.append(name)
    return tuple(restored)


def patched_models():
    """The short names of the models whose two functions are now gdn's adapters."""
    import sys
    result = []
    for name, (module_name, _) in MODELS.items():
        module = sys.modules.get(module_name)
        if module is not None and all(getattr(module, f, None) is a for f, a in _ADAPTERS.items()):
            result.append(name)
    return tuple(result)


@contextlib.contextmanager
def patched(models=None):
    """``patch(models)`` for the duration of a ``with`` block; yields its return value.

    On exit it unpatches only what it patched: models patched before the block stay patched.
    """
    with _lock:
        before = set(patched_models())
        now = patch(models)
    try:
        yield now
    finally:
        ours = tuple(n for n in now if n not in before)
        if ours:
            unpatch(ours)
