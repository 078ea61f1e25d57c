"""transformers' own pure-PyTorch gated delta rule, as references for gdn.torch.

transformers routes its functions to FLA's kernels when FLA is importable; the pure-PyTorch
bodies are their ``__wrapped__``. Those bodies cast every input to float32; ``in_float64`` runs the
same code with ``torch.float32`` meaning float64, so the algorithm itself can be compared at float64
precision (a ``tensor.float()`` method call inside such code still rounds to float32)."""

import types

import torch
from transformers.models.qwen3_5 import modeling_qwen3_5


def _pure(fn):
    return getattr(fn, "__wrapped__", fn)


class _Float64Torch:
    """The torch module, except that torch.float32 (and its alias torch.float) is torch.float64."""

    def __getattr__(self, name):
        return torch.float64 if name in ("float32", "float") else getattr(torch, name)


def in_float64(fn):
    return types.FunctionType(fn.__code__, {**fn.__globals__, "torch": _Float64Torch()}, fn.__name__,
                              fn.__defaults__, fn.__closure__)


chunk = _pure(modeling_qwen3_5.torch_chunk_gated_delta_rule)
recurrent = _pure(modeling_qwen3_5.torch_recurrent_gated_delta_rule)
chunk64 = in_float64(chunk)
recurrent64 = in_float64(recurrent)
