"""DistributedDataParallel over gdn.torch: 2 processes on gloo (CPU) get one process's gradients.

Each worker takes half of a fixed global batch, runs a small model whose layer calls
gdn.torch.chunk_gated_delta_rule (float64, so the ref backend), backpropagates through DDP
(gloo all-reduce of the gradients, averaged), takes one SGD step, and saves its gradients and
parameters; the test compares them with one process's on the whole batch. The store is a file,
so nothing listens on a port.
"""

import os

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gdn.torch  # noqa: E402
from process_group import run_workers  # noqa: E402

WORLD_SIZE = 2
GLOBAL_BATCH, T, D = 4, 33, 24
LR = 0.1


class DeltaNetBlock(torch.nn.Module):
    """One gated delta-net mixer with a residual: 2 key heads, 4 value heads, key size 8, value size 6."""

    def __init__(self, heads=2, value_heads=4, key_size=8, value_size=6):
        super().__init__()
        self.shape = heads, value_heads, key_size, value_size
        self.qkv = torch.nn.Linear(D, 2 * heads * key_size + value_heads * value_size, bias=False)
        self.decay_and_beta = torch.nn.Linear(D, 2 * value_heads)
        self.out = torch.nn.Linear(value_heads * value_size, D, bias=False)

    def forward(self, x):
        H, HV, K, V = self.shape
        B, T_, _ = x.shape
        q, k, v = self.qkv(x).split([H * K, H * K, HV * V], dim=-1)  # views into one projection
        a, b = self.decay_and_beta(x).chunk(2, dim=-1)
        o, state = gdn.torch.chunk_gated_delta_rule(
            q.reshape(B, T_, H, K), k.reshape(B, T_, H, K), v.reshape(B, T_, HV, V), -F.softplus(a), b.sigmoid(),
            output_final_state=True, use_qk_l2norm_in_kernel=True)
        return x + self.out(o.reshape(B, T_, HV * V)), state


def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(DeltaNetBlock()).to(torch.float64)


def global_batch():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(GLOBAL_BATCH, T, D, dtype=torch.float64, generator=generator)
    y = torch.randn(GLOBAL_BATCH, T, D, dtype=torch.float64, generator=generator)
    return x, y


def loss_of(model, x, y):
    """A mean over the batch (so DDP's averaged gradients are the global batch's); the final state counts too."""
    out, state = model(x)
    return F.mse_loss(out, y) + 0.1 * state.pow(2).mean()


def train_one_step(model, x, y):
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loss = loss_of(model, x, y)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    optimizer.step()
    return grads


def worker(rank, store, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD_SIZE)
    try:
        model = build_model()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        x, y = global_batch()
        share = GLOBAL_BATCH // WORLD_SIZE
        grads = train_one_step(ddp, x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share])
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
        torch.save({"grads": {n.removeprefix("module."): g for n, g in grads.items()}, "params": params},
                   os.path.join(results, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def relative_error(a, b):
    return ((a - b).norm() / b.norm()).item()


def test_ddp_gradients_equal_one_process_on_the_global_batch(tmp_path):
    run_workers(worker, WORLD_SIZE, (str(tmp_path / "store"), str(tmp_path)), "DDP", timeout=120)

    torch.set_num_threads(1)
    x, y = global_batch()
    single = build_model()
    grads_ref = train_one_step(single, x, y)
    params_ref = dict(single.named_parameters())
    first_half = train_one_step(build_model(), x[:GLOBAL_BATCH // WORLD_SIZE], y[:GLOBAL_BATCH // WORLD_SIZE])

    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(WORLD_SIZE)]
    for name, grad_ref in grads_ref.items():
        assert grad_ref.abs().max() > 0, name
        # The premise: one rank's own half alone gives other gradients, so the all-reduce is what is tested.
        assert relative_error(first_half[name], grad_ref) > 1e-3, name
        for result in ranks:
            assert relative_error(result["grads"][name], grad_ref) < 1e-12, name
            assert relative_error(result["params"][name], params_ref[name].detach()) < 1e-12, name
        assert torch.equal(ranks[0]["grads"][name], ranks[1]["grads"][name]), name
