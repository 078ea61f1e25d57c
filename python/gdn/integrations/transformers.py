"""Hugging Face transformers' gated delta-net layers on gdn: Qwen3.5, Qwen3.5-MoE, Qwen3-Next, and
OLMo-Hybrid, LaraMini and Qwen4-Exp (transformers 5.25).

    import gdn.integrations.transformers as gdn_hf
    gdn_hf.patch()                 # -> ("qwen3_5", "qwen3_5_moe", "qwen3_next", ...): what now runs on gdn
    ...                            # models built or loaded before or after: prefill, training, decoding
    gdn_hf.unpatch()               # the originals back, exactly
    with gdn_hf.patched(): ...     # or for one block only

How: ``patch()`` targets what each model's layer (``Qwen3_5GatedDeltaNet``,
``Qwen3_5MoeGatedDeltaNet``, ``Qwen3NextGatedDeltaNet``, ... : ``MODELS``) actually calls, read
from its ``forward``'s bytecode. transformers has written these layers two ways:

- the layer looks up two functions of its modeling module at every call,
  ``torch_chunk_gated_delta_rule`` (prefill, training) and ``torch_recurrent_gated_delta_rule``
  (cached decoding): ``patch()`` replaces those two module globals. Whatever transformers put
  there (the plain function, a wrapper that routes to FLA, or the ``kernels`` hub's module
  standing in for the function) is what gets replaced, so neither FLA nor the hub's wrapper nor
  ``USE_HUB_KERNELS`` decides where the layer's call goes;
- the layer's ``__init__`` binds the functions on the instance (``self.chunk_gated_delta_rule =
  fla_function or torch_chunk_gated_delta_rule``, and ``self.recurrent_gated_delta_rule``):
  ``patch()`` puts a class attribute on the layer that answers gdn's adapter for every instance,
  built before or after, and keeps what each instance assigned, for ``unpatch()``.

Every layer of that model type then calls gdn; ``unpatch()`` puts back the very objects it
replaced. Where the modeling module has a ``causal_conv1d_fn`` (the layer's short convolution),
it is wrapped so that packed sequences are convolved one by one (_SegmentedConvolution below);
otherwise the convolution is transformers' own call, and so are the norms, the cache and the
attention layers. ``Cache.get_recurrent_state`` is wrapped, while anything is patched, only
to observe which state the cache hands to a layer (the decoding step updates that one in place:
_cache_states).

What the adapters keep from transformers' functions: the positional order of their parameters,
q/k with the key-head count and v with the value-head count (value head h reads key head
``h // (HV // H)``), states ``[B, HV, K, V]``, ``use_qk_l2norm_in_kernel``, the scale
``1/sqrt(K)``, and the return value ``(o, final_state)`` with o in the input's dtype and
final_state None unless ``output_final_state``. A chunk with no tokens (assisted generation
sends them) returns an empty o and the initial state. What differs, on purpose: ``chunk_size`` is
ignored (gdn chooses its own blocking; the result is the same recurrence); the final state is in
gdn's state dtype (float32, or float64 for float64 inputs, where transformers' function rounds
to float32); the decoding step updates the cache's state in place (``recurrent_gated_delta_rule``
below: no state allocated or copied per token); ``cu_seqlens`` (packed sequences, passed by
the layer as ``cu_seq_lens_q``) works, the convolution before it included, where transformers'
function refuses it without FLA; a ``scale`` keyword, FLA's, is honoured. Any other keyword the
layer passes is ignored, as transformers' function ignores it.

Which transformers: the check is by structure, not by version string. A model is patched only
when its modeling module imports, its layer's ``forward`` calls the two functions one of the two
ways above, and transformers' own functions take the parameters above in that order. When no
known model passes, ``patch()`` raises ``gdn.UnsupportedError`` saying, per model, what was found;
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

import torch

from . import _cache_states
from .. import _errors
from .. import torch as _gdn_torch
from .._fla_args import call_dtypes as _call_dtypes
from .._fla_args import readable_state

__all__ = ["MODELS", "patch", "unpatch", "patched", "patched_models",
           "chunk_gated_delta_rule", "recurrent_gated_delta_rule"]

# Short name (the transformers subpackage) -> (modeling module, gated delta-net layer class).
MODELS = {
    "qwen3_5": ("transformers.models.qwen3_5.modeling_qwen3_5", "Qwen3_5GatedDeltaNet"),
    "qwen3_5_moe": ("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", "Qwen3_5MoeGatedDeltaNet"),
    "qwen3_next": ("transformers.models.qwen3_next.modeling_qwen3_next", "Qwen3NextGatedDeltaNet"),
    # Since transformers 5.25: the same two functions, called the same way.
    "olmo_hybrid": ("transformers.models.olmo_hybrid.modeling_olmo_hybrid", "OlmoHybridGatedDeltaNet"),
    "lara_mini": ("transformers.models.lara_mini.modeling_lara_mini", "LaraMiniGatedDeltaNet"),
    "qwen4_exp": ("transformers.models.qwen4_exp.modeling_qwen4_exp", "Qwen4ExpTextGatedDeltaNet"),
}

_CHUNK = "torch_chunk_gated_delta_rule"
_RECURRENT = "torch_recurrent_gated_delta_rule"
# The leading parameters of transformers' functions, in order.
_EXPECTED_PARAMETERS = {
    _CHUNK: ("query", "key", "value", "g", "beta", "chunk_size", "initial_state", "output_final_state",
             "use_qk_l2norm_in_kernel"),
    _RECURRENT: ("query", "key", "value", "g", "beta", "initial_state", "output_final_state",
                 "use_qk_l2norm_in_kernel"),
}
# Keywords the adapters take beyond those (FLA's, which transformers' functions may name too).
_KNOWN_KEYWORDS = ("cu_seqlens", "scale")
# Layers that bind the functions on the instance: attribute name -> the module function it falls back to.
_INSTANCE_ATTRIBUTES = {"chunk_gated_delta_rule": _CHUNK, "recurrent_gated_delta_rule": _RECURRENT}

_lock = threading.RLock()
_originals = {}  # short name -> {("global" | "attribute", name): the object patch() replaced, or _ABSENT}
_ABSENT = object()
# Why a model is patched: by patch() (until unpatch()), and by how many patched() blocks now
# running, on any thread; a block's exit unpatches a model only when neither remains.
_explicit = set()
_blocks = {}

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


def _updatable_in_place(initial_state, output_final_state, tensors):
    """Whether the decoding step can write its final state over ``initial_state``: the cache's own
    state, just read by the layer from a cache that keeps no copy of its past (_cache_states), the
    layer asks for the final state (to store it over that very tensor), the state is in the call's
    state dtype (float32; float64 for float64 inputs) with K or V contiguous, and no gradient flows."""
    if initial_state is None or not output_final_state or not _cache_states.handed_out(initial_state):
        return False
    query, key, value = tensors[:3]
    if initial_state.dtype != _call_dtypes(query, key, value)[1] or readable_state(initial_state) is not initial_state:
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in (*tensors, initial_state)))


def recurrent_gated_delta_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, *, cu_seqlens=None, scale=None, **ignored):
    """gdn in place of transformers' ``torch_recurrent_gated_delta_rule`` (cached decoding).

    Same parameters in the same order; unknown keywords are ignored. When ``initial_state`` is the
    cache's own state, read by the layer from a cache that does not record its past, and the layer
    asks for the final state (and the state is float32, or float64 for float64 inputs, with no
    gradient), the step updates it in place and returns it as the final state, which the layer
    then stores into itself (a copy onto itself, which torch skips): no state is allocated or
    copied per generated token. Otherwise a new final state, as transformers' function returns.
    """
    if _updatable_in_place(initial_state, output_final_state, (query, key, value, g, beta)):
        return _gdn_torch.fused_recurrent_gated_delta_rule(
            query, key, value, g, beta=beta, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens,
            use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel), inplace_final_state=True)
    return _gated_delta_rule(query, key, value, g, beta, initial_state, output_final_state,
                             use_qk_l2norm_in_kernel, cu_seqlens, scale)


_ADAPTERS = {_CHUNK: chunk_gated_delta_rule, _RECURRENT: recurrent_gated_delta_rule}

_CONVOLUTION = "causal_conv1d_fn"
# The keywords that carry packed sequences' boundaries (and their maxima) from the model's call.
_PACKING_KEYWORDS = ("cu_seq_lens_q", "cu_seq_lens_k", "cu_seqlens", "max_length_q", "max_length_k", "seq_idx")


class _SegmentedConvolution:
    """transformers' ``causal_conv1d_fn`` (whatever the module holds: the PyTorch fallback or a hub
    kernel), run sequence by sequence when the layer passes packed sequences' boundaries.

    Packed sequences reach the delta rule, which keeps them apart, through the layer's short causal
    convolution, whose PyTorch fallback ignores the boundaries: the first kernel-width - 1 tokens
    of each sequence would see the end of the one before, and the recurrence would carry that
    into the whole sequence. Without boundaries the call is the original's, as it was.
    """

    def __init__(self, original):
        self.original = original

    def __call__(self, hidden_states, weight, bias=None, activation=None, **kwargs):
        offsets = kwargs.get("cu_seq_lens_q", kwargs.get("cu_seqlens"))
        if offsets is None:
            return self.original(hidden_states, weight, bias, activation=activation, **kwargs)
        rest = {key: value for key, value in kwargs.items() if key not in _PACKING_KEYWORDS}
        bounds = [int(x) for x in offsets.tolist()]
        tokens = hidden_states.shape[-1]
        if hidden_states.shape[0] != 1 or not bounds or bounds[0] != 0 or bounds[-1] != tokens:
            raise ValueError(
                f"packed sequences: the offsets {bounds[:4]}{'...' if len(bounds) > 4 else ''} (ending at "
                f"{bounds[-1] if bounds else None}) do not cut the convolution's {tokens} tokens of a batch of "
                f"{hidden_states.shape[0]} (packed sequences are one batch row, and cannot be run on a cache)")
        parts = [self.original(hidden_states[..., a:b], weight, bias, activation=activation, **rest)
                 for a, b in zip(bounds, bounds[1:]) if b > a]
        if not parts:
            return self.original(hidden_states, weight, bias, activation=activation, **rest)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _installed_as(kind, key, current):
    """Whether ``current`` (what the owner holds at ``key``) is what patch() installs there."""
    if key == _CONVOLUTION:
        return isinstance(current, _SegmentedConvolution)
    adapter = _ADAPTERS[key if kind == "global" else _INSTANCE_ATTRIBUTES[key]]
    return current is adapter or (isinstance(current, _InstanceAdapter) and current.adapter is adapter)


class _InstanceAdapter:
    """A class attribute that makes ``layer.<name>`` gdn's adapter on every instance of the layer.

    A data descriptor wins over the instance's own dictionary, so instances built before
    ``patch()`` call gdn too; what an instance assigns (its ``__init__`` binding FLA's or
    transformers' function) is stored in its dictionary as usual, where it is found again once
    ``unpatch()`` removes this attribute.
    """

    def __init__(self, name, adapter):
        self.name, self.adapter = name, adapter

    def __get__(self, instance, owner=None):
        return self.adapter  # a plain function: called as layer.<name>(query, ...), with no self

    def __set__(self, instance, value):
        instance.__dict__[self.name] = value

    def __delete__(self, instance):
        instance.__dict__.pop(self.name, None)


def _transformers_version():
    try:
        import transformers
    except ImportError:
        return None
    return getattr(transformers, "__version__", "unknown")


def _call_signature(function):
    """The signature a call of ``function`` binds to. A torch module standing in for a function (the
    ``kernels`` hub's wrapper) is called through ``forward``, whose signature is the function's."""
    if isinstance(function, torch.nn.Module):
        return inspect.signature(function.forward)
    return inspect.signature(function)  # follows __wrapped__


def _signature_problem(function_name, function, need_var_keyword):
    """Why ``function`` is not called the way the adapter expects, or None when it is."""
    if not callable(function):
        return f"{function_name} is not callable"
    try:
        parameters = list(_call_signature(function).parameters.values())
    except (TypeError, ValueError) as e:
        return f"{function_name} has no readable signature ({e})"
    expected = _EXPECTED_PARAMETERS[function_name]
    leading = tuple(p.name for p in parameters[:len(expected)]
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    has_var_keyword = any(p.kind == p.VAR_KEYWORD for p in parameters)
    if leading != expected or (need_var_keyword and not has_var_keyword):
        found = ", ".join(str(p) for p in parameters)
        needs = " and take **kwargs" if need_var_keyword else ""
        return f"{function_name}({found}) does not start with ({', '.join(expected)}){needs}"
    # A parameter the adapters do not know (a padding mask, say) may change the result: the
    # adapters would drop what the layer passes in it.
    unknown = [p.name for p in parameters[len(expected):]
               if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in _KNOWN_KEYWORDS]
    if unknown:
        return f"{function_name} takes parameters gdn's adapter does not know: {', '.join(unknown)}"
    return None


def _names_read_by(function):
    """(globals, attributes) that the body of ``function`` (under its decorators) loads."""
    code = inspect.unwrap(function).__code__
    instructions = list(dis.get_instructions(code))
    loaded_globals = {i.argval for i in instructions if i.opname == "LOAD_GLOBAL"}
    attributes = {i.argval for i in instructions if i.opname in ("LOAD_ATTR", "LOAD_METHOD")}
    return loaded_globals, attributes


def _targets(name):
    """Where model ``name``'s layer looks up the two functions, as ((kind, key, adapter), ...) with the
    module, or (None, (absent, reason)) when the model cannot be patched."""
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
        loaded_globals, attributes = _names_read_by(layer.forward)
    except (AttributeError, TypeError) as e:
        return None, (False, f"{layer_name}.forward cannot be inspected ({e})")
    targets = []
    for function_name, adapter in _ADAPTERS.items():
        if not hasattr(module, function_name):
            return None, (False, f"{module_name} has no {function_name}")
        attribute = next(a for a, f in _INSTANCE_ATTRIBUTES.items() if f == function_name)
        if function_name in loaded_globals:
            targets.append(("global", function_name, adapter))
        elif attribute in attributes:
            targets.append(("attribute", attribute, adapter))
        else:
            return None, (False, f"{layer_name}.forward calls neither the module's {function_name} nor "
                                 f"self.{attribute}")
        current = getattr(module, function_name)
        if current is not adapter:
            # Bound on the instance, the function may be FLA's; the call site passes keywords then.
            problem = _signature_problem(function_name, current, need_var_keyword=targets[-1][0] == "global")
            if problem:
                return None, (False, f"{module_name}: {problem}")
    convolution = getattr(module, _CONVOLUTION, None)
    if callable(convolution):
        original = convolution.original if isinstance(convolution, _SegmentedConvolution) else convolution
        targets.append(("global", _CONVOLUTION, _SegmentedConvolution(original)))
    return (module, layer, tuple(targets)), None


def _owner(found, kind):
    module, layer, _ = found
    return module if kind == "global" else layer


def _install(found, kind, key, adapter):
    owner = _owner(found, kind)
    if kind == "global":
        setattr(owner, key, adapter)
    else:
        setattr(owner, key, _InstanceAdapter(key, adapter))


def _is_installed(found, kind, key):
    current = _owner(found, kind).__dict__.get(key, _ABSENT) if kind == "attribute" else getattr(found[0], key, _ABSENT)
    return _installed_as(kind, key, current)


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
    """Route the gated delta-net layers of transformers' models (``MODELS``) to gdn.

    ``models``: None for every model the installed transformers has, or short names from
    ``MODELS`` (all of which must then be patchable). Idempotent. Returns the tuple of short names
    now running on gdn. Raises ``gdn.UnsupportedError`` (nothing patched) when none of the
    requested models can be patched, with the reason for each; warns about a present model whose
    structure is not what gdn knows, when others are patched.
    """
    with _lock:
        now = _patch(models)
        _explicit.update(now)
    return now


def _patch(models):
    names = _select(models)
    version = _transformers_version()
    if version is None:
        raise _errors.UnsupportedError("gdn.integrations.transformers.patch(): transformers is not installed")
    with _lock:
        # Inspect everything first: either the call fails and changes nothing, or it patches.
        inspected = {name: _targets(name) for name in names}
        ok = [name for name in names if inspected[name][0] is not None]
        failures = {name: inspected[name][1] for name in names if inspected[name][0] is None}
        if not ok or (models is not None and failures):
            reasons = "; ".join(f"{name}: {reason}" for name, (_, reason) in failures.items())
            raise _errors.UnsupportedError(
                f"gdn cannot patch {'any of ' if not ok else ''}{tuple(failures)} in transformers {version}: "
                f"{reasons}. gdn.integrations.transformers knows these models' gated delta-net layers as transformers "
                f"4.57 to 5.25 write them; nothing was patched")
        for name in ok:
            found = inspected[name][0]
            saved = _originals.setdefault(name, {})
            for kind, key, adapter in found[2]:
                if not _is_installed(found, kind, key):
                    owner = _owner(found, kind)
                    saved[(kind, key)] = getattr(owner, key) if kind == "global" else owner.__dict__.get(key, _ABSENT)
                    _install(found, kind, key, adapter)
        _cache_states.install()
    changed = {name: reason for name, (absent, reason) in failures.items() if not absent}
    if changed:
        warnings.warn("gdn.integrations.transformers.patch(): left on transformers' own functions (structure "
                      f"not as gdn knows it, transformers {version}): " +
                      "; ".join(f"{n}: {r}" for n, r in changed.items()), UserWarning, stacklevel=4)
    return tuple(ok)


def unpatch(models=None):
    """Put back the functions ``patch()`` replaced (all models, or those named). Returns the names restored.

    A function that something else has replaced since ``patch()`` is left as it is, with a warning.
    It unpatches also what a ``patched()`` block still running patched.
    """
    names = _select(models)
    with _lock:
        _explicit.difference_update(names)
        return _unpatch(names)


def _unpatch(names):
    restored = []
    with _lock:
        for name in names:
            saved = _originals.pop(name, None)
            if not saved:
                continue
            module = importlib.import_module(MODELS[name][0])
            layer = getattr(module, MODELS[name][1])
            for (kind, key), original in saved.items():
                owner = module if kind == "global" else layer
                if not _is_installed((module, layer, ()), kind, key):
                    warnings.warn(f"gdn.integrations.transformers.unpatch(): {owner.__name__}.{key} was replaced after "
                                  "gdn patched it; left as it is", UserWarning, stacklevel=4)
                elif original is _ABSENT:
                    delattr(owner, key)
                else:
                    setattr(owner, key, original)
            restored.append(name)
        if not _originals:
            _cache_states.remove()
    return tuple(restored)


def patched_models():
    """The short names of the models whose layers now call gdn's adapters."""
    import sys
    result = []
    with _lock:
        for name, (module_name, layer_name) in MODELS.items():
            module = sys.modules.get(module_name)
            saved = _originals.get(name)
            if module is None or not saved:
                continue
            found = (module, getattr(module, layer_name, None), ())
            if all(_is_installed(found, kind, key) for kind, key in saved):
                result.append(name)
    return tuple(result)


@contextlib.contextmanager
def patched(models=None):
    """``patch(models)`` for the duration of a ``with`` block; yields its return value.

    On exit a model is unpatched only when nothing else keeps it patched: ``patch()`` (before or
    during the block), or another ``patched()`` block still running, on this thread or another.
    """
    with _lock:
        now = _patch(models)
        for name in now:
            _blocks[name] = _blocks.get(name, 0) + 1
    try:
        yield now
    finally:
        with _lock:
            for name in now:
                _blocks[name] -= 1
            done = tuple(n for n in now if not _blocks[n] and n not in _explicit)
            if done:
                _unpatch(done)
