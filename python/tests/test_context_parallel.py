"""gdn.torch.distributed: a packed token stream split over 2 and 4 gloo processes gives one process's
outputs, final states and all six gradients.

Each worker takes its slice of a fixed global stream (slices of unequal lengths, sequences
crossing one or several rank boundaries, empty sequences), runs the context-parallel op and a
backward from fixed output and final-state gradients, and saves what it got; the test puts the
slices together (final states and initial-state gradients summed over ranks: each rank fills
the rows of its own sequences) and compares with gdn.torch.chunk_gated_delta_rule in one
process on the whole stream. float64 runs on the ref backend and must agree to 1e-12; float32
on the cpu backend, against the float64 result, to the library's thresholds (NMSE 1e-10
forward, 1e-9 backward). The store is a file, so nothing listens on a port.
"""

import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402

import gdn  # noqa: E402
import gdn.torch  # noqa: E402
import gdn.torch.distributed as gcp  # noqa: E402
from process_group import run_workers  # noqa: E402

FORWARD_NMSE_F32, BACKWARD_NMSE_F32 = 1e-10, 1e-9
NAMES = ("q", "k", "v", "g", "beta", "h0")

# (name, shape (H, HV, K, V), gate, decay, cu_seqlens, the ranks' slice lengths per world size)
CASES = [
    # Qwen3.5-27B's delta-net heads; one sequence crosses each boundary, another begins mid-slice.
    ("27b", (16, 48, 128, 128), "scalar", "weak", [0, 37, 90, 130], {2: [61, 69], 4: [20, 35, 40, 35]}),
    # A long sequence through several ranks whole (their summaries are transitions, which weak decay
    # keeps from vanishing), empty sequences at a boundary and at the end, a rank with no tokens.
    ("through", (2, 4, 32, 24), "scalar", "weak", [0, 5, 5, 100, 100, 120, 120],
     {2: [50, 70], 4: [30, 0, 40, 50]}),
    # KDA: a decay per key channel, strong; sequences ending exactly at rank boundaries.
    ("kda", (2, 4, 16, 20), "kda", "strong", [0, 30, 45, 80], {2: [45, 35], 4: [30, 15, 20, 15]}),
]


def make_inputs(case, dtype):
    _, (H, HV, K, V), gate, decay, offsets, _ = case
    T, N = offsets[-1], len(offsets) - 1
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(1, T, H, K, generator=gen, dtype=torch.float64)
    k = torch.randn(1, T, H, K, generator=gen, dtype=torch.float64)
    v = torch.randn(1, T, HV, V, generator=gen, dtype=torch.float64)
    a_log = {"strong": 1.0, "weak": -4.0}[decay]
    g_shape = (1, T, HV, K) if gate == "kda" else (1, T, HV)
    g = -torch.exp(torch.tensor(a_log, dtype=torch.float64)) * torch.nn.functional.softplus(
        torch.randn(*g_shape, generator=gen, dtype=torch.float64))
    beta = torch.sigmoid(torch.randn(1, T, HV, generator=gen, dtype=torch.float64))
    h0 = torch.randn(N, HV, K, V, generator=gen, dtype=torch.float64) * 0.5
    d_out = torch.randn(1, T, HV, V, generator=gen, dtype=torch.float64)
    d_final = torch.randn(N, HV, K, V, generator=gen, dtype=torch.float64)
    inputs = [x.to(dtype) for x in (q, k, v, g, beta, h0)]
    return inputs, d_out.to(dtype), d_final.to(dtype), torch.tensor(offsets, dtype=torch.int64)


def run(fn, inputs, d_out, d_final, cu_seqlens, **kw):
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    o, final = fn(*leaves[:5], initial_state=leaves[5], output_final_state=True, use_qk_l2norm_in_kernel=True,
                  cu_seqlens=cu_seqlens, **kw)
    ((o * d_out).sum() + (final * d_final).sum()).backward()
    return o.detach(), final.detach(), [x.grad for x in leaves]


def worker(rank, world, store, results, dtype_name):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        dtype = getattr(torch, dtype_name)
        for case in CASES:
            inputs, d_out, d_final, cu = make_inputs(case, dtype)
            sizes = case[5][world]
            t0, t1 = sum(sizes[:rank]), sum(sizes[:rank + 1])
            mine = [x[:, t0:t1] for x in inputs[:5]] + [inputs[5]]
            o, final, grads = run(gcp.chunk_gated_delta_rule, mine, d_out[:, t0:t1], d_final, cu)
            torch.save({"o": o, "final": final, "grads": grads}, os.path.join(results, f"{case[0]}-{rank}.pt"))
    finally:
        dist.destroy_process_group()


def spawn(world, dtype_name, tmp_path):
    run_workers(worker, world, (world, str(tmp_path / "store"), str(tmp_path), dtype_name), "context-parallel")


def joined(tmp_path, case, world):
    """The ranks' results as one process's: slices concatenated, per-sequence rows summed."""
    ranks = [torch.load(tmp_path / f"{case[0]}-{r}.pt") for r in range(world)]
    o = torch.cat([r["o"] for r in ranks], dim=1)
    final = sum(r["final"] for r in ranks)
    grads = [torch.cat([r["grads"][i] for r in ranks], dim=1) for i in range(5)]
    grads.append(sum(r["grads"][5] for r in ranks))
    return o, final, grads


def nmse(a, b):
    a, b = a.double(), b.double()
    return float(((a - b) ** 2).sum() / (b * b).sum().clamp_min(1e-300))


def relative_error(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("world", [2, 4])
def test_float64_split_equals_one_process(world, tmp_path):
    spawn(world, "float64", tmp_path)
    torch.set_num_threads(1)
    for case in CASES:
        inputs, d_out, d_final, cu = make_inputs(case, torch.float64)
        o_ref, final_ref, grads_ref = run(gdn.torch.chunk_gated_delta_rule, inputs, d_out, d_final, cu)
        o, final, grads = joined(tmp_path, case, world)
        assert relative_error(o, o_ref) < 1e-12, case[0]
        assert relative_error(final, final_ref) < 1e-12, case[0]
        for name, grad, grad_ref in zip(NAMES, grads, grads_ref):
            assert grad_ref.abs().max() > 0, (case[0], name)
            assert relative_error(grad, grad_ref) < 1e-12, (case[0], name)


def test_float64_premise_a_slice_alone_differs(tmp_path):
    """Without the other ranks' summaries a rank's slice gives other outputs (so the tests above
    test the exchange): the second rank's slice of the 27B case, computed alone."""
    case = CASES[0]
    inputs, d_out, d_final, cu = make_inputs(case, torch.float64)
    o_ref, _, _ = run(gdn.torch.chunk_gated_delta_rule, inputs, d_out, d_final, cu)
    t0 = case[5][2][0]
    alone = [x[:, t0:] for x in inputs[:5]]
    local = torch.tensor([0, 90 - t0, 130 - t0])  # its two sequences, the first cut at t0
    o_alone, _ = gdn.torch.chunk_gated_delta_rule(*alone, initial_state=inputs[5][1:], cu_seqlens=local,
                                                  use_qk_l2norm_in_kernel=True)
    assert relative_error(o_alone, o_ref[:, t0:]) > 1e-3


def test_float32_split_within_the_thresholds(tmp_path):
    spawn(2, "float32", tmp_path)
    torch.set_num_threads(1)
    for case in CASES:
        inputs, d_out, d_final, cu = make_inputs(case, torch.float64)
        o_ref, final_ref, grads_ref = run(gdn.torch.chunk_gated_delta_rule, inputs, d_out, d_final, cu)
        o, final, grads = joined(tmp_path, case, 2)
        assert o.dtype == torch.float32
        assert nmse(o, o_ref) < FORWARD_NMSE_F32, case[0]
        assert nmse(final, final_ref) < FORWARD_NMSE_F32, case[0]
        for name, grad, grad_ref in zip(NAMES, grads, grads_ref):
            assert nmse(grad, grad_ref) < BACKWARD_NMSE_F32, (case[0], name)


def test_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is initialised in this process")
    x = torch.zeros(1, 4, 1, 8)
    with pytest.raises(gdn.InvalidArgumentError, match="process group"):
        gcp.chunk_gated_delta_rule(x, x, x, torch.zeros(1, 4, 1), torch.ones(1, 4, 1))


def test_example_trains_with_one_process_gradients():
    """examples/context_parallel/train.py, three steps: its own check of step 0's gradients passes."""
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "context_parallel" / "train.py"
    if not example.exists():
        pytest.skip("the example is in the source tree (this is a copy of the tests)")
    r = subprocess.run([sys.executable, str(example), "--steps", "3", "--check"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "step 0: gradients of 2 processes against one" in r.stdout, r.stdout


# ---- DDP and FSDP over the other dimension -------------------------------------------------------
# 4 processes: 2 data-parallel replicas, each splitting its stream over 2 context-parallel ranks
# (rank = 2 * replica + slice). DDP (or FSDP, sharding over all 4) averages their gradients, so
# each rank's loss is its slice's share of its stream's loss times the context-parallel size: the
# average is then the mean over the streams of each stream's gradient (summed over its slices).
DDP_T, DDP_D, DDP_OFFSETS, DDP_CUT = 50, 12, [0, 17, 50], 23


class _Mixer(torch.nn.Module):
    """One gated delta-net mixer with a residual over a packed stream [1, T, D]: 2 key heads, 4
    value heads, key size 8, value size 6."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(DDP_D, 2 * 2 * 8 + 4 * 6, bias=False)
        self.decay_and_beta = torch.nn.Linear(DDP_D, 2 * 4)
        self.out = torch.nn.Linear(4 * 6, DDP_D, bias=False)

    def forward(self, x, op, **kw):
        T = x.shape[1]
        q, k, v = self.qkv(x).split([16, 16, 24], dim=-1)
        a, b = self.decay_and_beta(x).chunk(2, dim=-1)
        o, _ = op(q.reshape(1, T, 2, 8), k.reshape(1, T, 2, 8), v.reshape(1, T, 4, 6), -torch.nn.functional.softplus(a),
                  b.sigmoid(), cu_seqlens=torch.tensor(DDP_OFFSETS), use_qk_l2norm_in_kernel=True, **kw)
        return x + self.out(o.reshape(1, T, 24))


def _ddp_model():
    torch.manual_seed(0)
    return _Mixer().to(torch.float64)


def _ddp_data():
    gen = torch.Generator().manual_seed(3)
    return (torch.randn(2, DDP_T, DDP_D, generator=gen, dtype=torch.float64),
            torch.randn(2, DDP_T, DDP_D, generator=gen, dtype=torch.float64))


def _ddp_worker(rank, store, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=4)
    try:
        cp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates every group
        replica, part = divmod(rank, 2)
        ddp = torch.nn.parallel.DistributedDataParallel(_ddp_model())
        x, y = _ddp_data()
        t0, t1 = (0, DDP_CUT) if part == 0 else (DDP_CUT, DDP_T)
        out = ddp(x[replica:replica + 1, t0:t1], gcp.chunk_gated_delta_rule, group=cp_groups[replica])
        share = ((out - y[replica:replica + 1, t0:t1]) ** 2).sum() / (DDP_T * DDP_D)
        (2 * share).backward()
        torch.save({n.removeprefix("module."): p.grad for n, p in ddp.named_parameters()},
                   os.path.join(results, f"ddp{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _fsdp_worker(rank, store, results):
    """As _ddp_worker, with the parameters sharded by FSDP (fully_shard) over the 4 ranks, as
    training frameworks shard over the data- and context-parallel dimensions flattened: the
    reduce-scatter averages over all 4, like DDP's all-reduce."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=4)
    try:
        cp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        replica, part = divmod(rank, 2)
        model = _ddp_model()
        fully_shard(model, mesh=init_device_mesh("cpu", (4,)))
        x, y = _ddp_data()
        t0, t1 = (0, DDP_CUT) if part == 0 else (DDP_CUT, DDP_T)
        out = model(x[replica:replica + 1, t0:t1], gcp.chunk_gated_delta_rule, group=cp_groups[replica])
        share = ((out - y[replica:replica + 1, t0:t1]) ** 2).sum() / (DDP_T * DDP_D)
        (2 * share).backward()
        torch.save({n: p.grad.full_tensor() for n, p in model.named_parameters()}, os.path.join(results, f"fsdp{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("wrapper", ["ddp", "fsdp"])
def test_data_parallel_over_replicas_of_context_parallel_pairs(wrapper, tmp_path):
    worker = _ddp_worker if wrapper == "ddp" else _fsdp_worker
    run_workers(worker, 4, (str(tmp_path / "store"), str(tmp_path)), f"{wrapper} x context-parallel")
    torch.set_num_threads(1)
    model = _ddp_model()
    x, y = _ddp_data()
    losses = [((model(x[r:r + 1], gdn.torch.chunk_gated_delta_rule) - y[r:r + 1]) ** 2).mean() for r in range(2)]
    (sum(losses) / 2).backward()
    for rank in range(4):
        grads = torch.load(tmp_path / f"{wrapper}{rank}.pt")
        for name, p in model.named_parameters():
            assert p.grad.abs().max() > 0, name
            assert relative_error(grads[name], p.grad) < 1e-12, (rank, name)


# ---- bfloat16, no states, no offsets -----------------------------------------------------------
# A model's training call: bfloat16 q, k, v, beta (float32 g), q and k normalised in the op, no
# initial or final state, the ranks' slices one sequence (cu_seqlens None). The split's own
# roundings are float32's (the summaries), far below bfloat16's, so its error against the float64
# truth is one process's bfloat16 call's, within 1% per tensor (measured: within 2e-5). Both ways:
# q and k normalised in float32 but not rounded to bfloat16, as one process rounds them, made the
# split's error 0.6 of one process's.


def _bf16_inputs():
    inputs, d_out, _, _ = make_inputs(CASES[0], torch.float64)
    q, k, v, g, beta, _ = inputs
    return [q.bfloat16(), k.bfloat16(), v.bfloat16(), g.float(), beta.bfloat16()], d_out.bfloat16()


def _bf16_run(fn, inputs, d_out, **kw):
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    o, final = fn(*leaves, use_qk_l2norm_in_kernel=True, **kw)
    assert final is None
    (o.float() * d_out.float()).sum().backward()
    return o.detach(), [x.grad for x in leaves]


def _bf16_worker(rank, store, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        inputs, d_out = _bf16_inputs()
        t0, t1 = (0, 61) if rank == 0 else (61, inputs[0].shape[1])
        o, grads = _bf16_run(gcp.chunk_gated_delta_rule, [x[:, t0:t1] for x in inputs], d_out[:, t0:t1])
        # The output is the caller's own tensor, as one process's is: contiguous, not a view.
        assert o.is_contiguous() and o._base is None and o.dtype == torch.bfloat16
        torch.save({"o": o, "grads": grads}, os.path.join(results, f"bf16-{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_bfloat16_without_states_or_offsets_as_one_process(tmp_path):
    run_workers(_bf16_worker, 2, (str(tmp_path / "store"), str(tmp_path)), "bfloat16 context-parallel")
    torch.set_num_threads(1)
    ranks = [torch.load(tmp_path / f"bf16-{r}.pt") for r in range(2)]
    o = torch.cat([r["o"] for r in ranks], dim=1)
    grads = [torch.cat([r["grads"][i] for r in ranks], dim=1) for i in range(5)]
    inputs, d_out = _bf16_inputs()
    o_one, grads_one = _bf16_run(gdn.torch.chunk_gated_delta_rule, inputs, d_out)
    o_true, grads_true = _bf16_run(gdn.torch.chunk_gated_delta_rule, [x.double() for x in inputs], d_out.double())
    for name, split, one, truth in zip(("o",) + NAMES[:5], [o] + grads, [o_one] + grads_one, [o_true] + grads_true):
        assert split.dtype == one.dtype, name
        ratio = relative_error(split, truth) / relative_error(one, truth)
        assert abs(ratio - 1) <= 0.01, (name, ratio)


def _disagreeing_worker(rank, store, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        x, v = torch.randn(1, 10, 1, 8), torch.randn(1, 10, 1, 4)
        g, beta = -torch.rand(1, 10, 1), torch.rand(1, 10, 1)
        offsets = torch.tensor([0, 5, 20] if rank == 0 else [0, 20])
        with pytest.raises(gdn.InvalidArgumentError, match="the ranks' calls differ"):
            gcp.chunk_gated_delta_rule(x, x, v, g, beta, cu_seqlens=offsets)
        with pytest.raises(gdn.InvalidArgumentError, match="the ranks' calls differ"):
            gcp.chunk_gated_delta_rule(x, x, v, g, beta, output_final_state=rank == 0)
        # q/k/v of another dtype, another scale: each a different call
        with pytest.raises(gdn.InvalidArgumentError, match="the ranks' calls differ"):
            gcp.chunk_gated_delta_rule(*((x, x, v) if rank == 0 else (x.double(), x.double(), v.double())), g, beta)
        with pytest.raises(gdn.InvalidArgumentError, match="the ranks' calls differ"):
            gcp.chunk_gated_delta_rule(x, x, v, g, beta, scale=0.5 if rank == 0 else 0.25)
        # A rank that refuses its own arguments raises its error; the other is not left waiting.
        bad = torch.tensor([0, 25, 20] if rank == 1 else [0, 5, 20])
        with pytest.raises(gdn.InvalidArgumentError, match="never decrease" if rank == 1 else "rank 1 of the group"):
            gcp.chunk_gated_delta_rule(x, x, v, g, beta, cu_seqlens=bad)
        h0 = torch.zeros(1 if rank == 0 else 2, 1, 8, 4)
        with pytest.raises(gdn.ShapeError if rank == 1 else gdn.InvalidArgumentError,
                           match="initial_state" if rank == 1 else "refused"):
            gcp.chunk_gated_delta_rule(x, x, v, g, beta, initial_state=h0)
        # After all that, the same call on both ranks runs.
        o, _ = gcp.chunk_gated_delta_rule(x, x, v, g, beta)
        assert o.shape == v.shape
    finally:
        dist.destroy_process_group()


def test_ranks_that_disagree_or_refuse_all_get_an_error_not_a_hang(tmp_path):
    run_workers(_disagreeing_worker, 2, (str(tmp_path / "store"), str(tmp_path)), "disagreeing", timeout=120)
