"""transformers' own pure-PyTorch gated delta rule, as references for gdn.torch.

What a module-level name holds differs between transformers releases: the plain function, a
``functools.wraps`` wrapper that routes to FLA, or (with the ``kernels`` package) an
``nn.Module`` instance that stands in for the function. The function's source is the one thing
every release has, so the references are compiled from it: the ``def`` as written in the modeling
module, without its decorators, in the module's namespace. ``in_float64`` compiles the same source
with ``torch.float32`` meaning float64, so the algorithm itself can be compared at float64
precision (a ``tensor.float()`` method call inside such code still rounds to float32)."""

import ast
import inspect
import textwrap

import torch
from transformers.models.qwen3_5 import modeling_qwen3_5


class _Float64Torch:
    """The torch module, except that torch.float32 (and its alias torch.float) is torch.float64."""

    def __getattr__(self, name):
        return torch.float64 if name in ("float32", "float") else getattr(torch, name)


def _compiled(source, name, namespace, torch_module):
    """The function ``name`` defined in ``source``, undecorated, run in ``namespace`` with ``torch`` bound to ``torch_module``."""
    tree = ast.parse(textwrap.dedent(source))
    definition = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)
    definition.decorator_list = []
    scope = {**namespace, "torch": torch_module}
    exec(compile(ast.Module(body=[definition], type_ignores=[]), f"<{name}>", "exec"), scope)
    return scope[name]


def _from_transformers(name, torch_module):
    return _compiled(inspect.getsource(modeling_qwen3_5), name, vars(modeling_qwen3_5), torch_module)


def in_float64(fn):
    """A plain function (FLA's naive references, say) compiled with float32 meaning float64."""
    return _compiled(inspect.getsource(fn), fn.__name__, fn.__globals__, _Float64Torch())


chunk = _from_transformers("torch_chunk_gated_delta_rule", torch)
recurrent = _from_transformers("torch_recurrent_gated_delta_rule", torch)
chunk64 = _from_transformers("torch_chunk_gated_delta_rule", _Float64Torch())
recurrent64 = _from_transformers("torch_recurrent_gated_delta_rule", _Float64Torch())
