"""python -m gdn.bench: its no-binding baseline computes what the binding computes, and it runs."""

import subprocess
import sys

import torch

import gdn
from gdn import _capi


def test_c_api_baseline_matches_the_binding():
    """The ctypes mirror of gdn_problem must match the header's layout, or the baseline is wrong."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(1, 20, 2, 16, generator=gen), dim=-1) for _ in range(2))
    v = torch.randn(1, 20, 4, 8, generator=gen)
    g, beta = -torch.rand(1, 20, 4, 1, generator=gen), torch.rand(1, 20, 4, 1, generator=gen)
    ctx = _capi.Context("cpu", 1)
    out = torch.empty_like(v)
    ctx.forward(_capi.problem(q, k, v, g, beta), _capi.tensor(out), None)
    expected, _ = gdn.forward(q, k, v, g, beta, states=False, head_map="grouped", ctx=gdn.Context("cpu", threads=1))
    assert torch.equal(out, expected)


def test_bench_prints_both_tables():
    done = subprocess.run([sys.executable, "-m", "gdn.bench", "--tokens", "8", "--min-time", "0", "--min-runs", "1",
                           "--threads", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 8 |")]
    assert len(rows) == 4, done.stdout  # fwd and fwd+bwd, in each table
