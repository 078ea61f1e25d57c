"""bfloat16 and float16 in the tests: which backends take them, and results rounded once."""

import pytest
import torch

import gdn

HALF_DTYPES = (torch.bfloat16, torch.float16)


def backend_takes(name, dtype):
    """Whether backend ``name`` takes q/k/v of ``dtype`` (a dry run on a tiny problem: validated,
    nothing computed). False when the backend is not in this build."""
    if not gdn.backend_available(name):
        return False
    q = torch.zeros(1, 2, 1, 4, dtype=dtype)
    v = torch.zeros(1, 2, 1, 4, dtype=dtype)
    g, beta = torch.zeros(1, 2, 1, 1), torch.zeros(1, 2, 1, 1, dtype=dtype)
    try:
        gdn.forward(q, q, v, g, beta, ctx=gdn.Context(name), dry_run=True)
    except gdn.ElementTypeError:
        return False
    return True


def on_backends(dtype_names=("bfloat16", "float16")):
    """pytest parameters for the backends that compute half-type calls on the host: ref, which
    always takes them, and cpu, skipped with the reason while it refuses them."""
    cpu_ok = all(backend_takes("cpu", getattr(torch, d)) for d in dtype_names)
    return ["ref", pytest.param("cpu", marks=pytest.mark.skipif(
        not cpu_ok, reason="the cpu backend of this build refuses bfloat16/float16 q, k, v (GDN_ERROR_TYPE); "
                           "the test runs once it takes them"))]


def round_once(x, dtype):
    """x (float64 or float32) rounded once, to nearest with ties to even, to ``dtype``: what the
    library does with each result. torch's float64 -> bfloat16/float16 conversion rounds twice
    (through float32), so float64 is first rounded to float32 *to odd*: float32 keeps more than
    two bits beyond a bfloat16's or float16's significand, and rounding to odd there then to
    nearest gives the one correctly rounded result."""
    if dtype in (torch.float32, torch.float64) or x.dtype == torch.float32:
        return x.to(dtype)
    f = x.float()
    wide = f.double()
    truncated = torch.where(wide.abs() > x.abs(), torch.nextafter(f, torch.zeros_like(f)), f)
    odd = (truncated.view(torch.int32) | 1).view(torch.float32)
    return torch.where(wide != x, odd, f).to(dtype)
