"""gdn: the gated delta rule (Gated DeltaNet), forward and backward, exact and fast.

- ``gdn.forward`` / ``gdn.backward`` / ``gdn.Context``: the C API on numpy, torch or any DLPack
  arrays in ggml layout, zero copy (see ``gdn._core`` for the shapes).
- ``gdn.torch.chunk_gated_delta_rule``: a PyTorch op with FLA's signature and layouts, with
  autograd, ``torch.compile`` support, and CPU and CUDA tensors.
- ``gdn.integrations.transformers.patch()``: Hugging Face Qwen3.5 / Qwen3-Next layers on gdn.
"""

from ._errors import (AliasError, BackendError, ElementTypeError, Error, InvalidArgumentError,
                      LayoutError, OutOfMemoryError, ShapeError, UnknownBackendError,
                      UnsupportedError)
from ._core import Context, Grads, backend_available, backward, default_context, forward
from ._gdn import version as __version__

__all__ = [
    "Context", "Grads", "forward", "backward", "backend_available", "default_context",
    "Error", "InvalidArgumentError", "ShapeError", "LayoutError", "ElementTypeError",
    "AliasError", "UnsupportedError", "OutOfMemoryError", "BackendError", "UnknownBackendError",
]
