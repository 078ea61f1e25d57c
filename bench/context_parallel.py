"""What context parallel costs and gives on one host: gdn.torch.distributed over gloo processes
against one process, at a model's delta-net shape.

    python bench/context_parallel.py [--tokens 4096] [--ranks 2] [--rounds 5] [--shape 27b|80b]
    python bench/context_parallel.py --memory [--tokens 65536] [--ranks 2]

One sequence of --tokens tokens, float32, q and k normalised by the op (as models call it), an
initial state, forward and backward from fixed cotangents. Times, in alternating rounds (so
that the host's load weighs on both alike):

- one process, --ranks threads, the whole sequence (gdn.torch.chunk_gated_delta_rule);
- --ranks gloo processes, one thread each, each its equal slice (gdn.torch.distributed), the
  sequence crossing every boundary: the wall time of the slowest rank, per call, measured
  between barriers.

Prints the medians and ranges, over the rounds, of each round's median forward and forward +
backward per configuration.

--memory: what a rank holds and computes against one process, each configuration in fresh
processes of one thread that make only their own slice of the inputs (drawn block by block, so
every slice holds the values of the whole): one forward + backward through autograd after one
warm-up step, per process its peak resident memory (ru_maxrss: torch and the inputs included)
and its CPU time for the step (time.process_time: every thread of the process, waits for the
other ranks included where gloo spins). Prints per configuration the largest peak over its
processes and the sum of their CPU times, and context parallel's against one process's.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SHAPES = {"27b": (16, 48, 128, 128), "80b": (16, 32, 128, 128)}


_BLOCK = 1024  # tokens drawn per generator seed


def slice_inputs(T, t0, t1, shape, seed=0):
    """Tokens [t0, t1) of one sequence of T (q, k, v, g, beta, and the initial state whole; the
    output's cotangent), drawn in blocks of _BLOCK tokens from a seed per block, so that a rank
    makes its slice alone, with the values the whole holds, into tensors of the slice's size (no
    copy of the slice is left behind)."""
    H, HV, K, V = shape
    n = t1 - t0
    q, k, d_out = torch.empty(1, n, H, K), torch.empty(1, n, H, K), torch.empty(1, n, HV, V)
    v, g, beta = torch.empty(1, n, HV, V), torch.empty(1, n, HV), torch.empty(1, n, HV)
    for b0 in range(t0 // _BLOCK * _BLOCK, t1, _BLOCK):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + b0 // _BLOCK)
        m = min(_BLOCK, T - b0)
        lo, hi = max(t0, b0), min(t1, b0 + m)  # the block's tokens in the slice
        for x, draw in ((q, lambda: torch.randn(1, m, H, K, generator=gen)),
                        (k, lambda: torch.randn(1, m, H, K, generator=gen)),
                        (v, lambda: torch.randn(1, m, HV, V, generator=gen)),
                        (g, lambda: -torch.nn.functional.softplus(torch.randn(1, m, HV, generator=gen)) * 0.05),
                        (beta, lambda: torch.rand(1, m, HV, generator=gen)),
                        (d_out, lambda: torch.randn(1, m, HV, V, generator=gen))):
            x[:, lo - t0:hi - t0] = draw()[:, lo - b0:hi - b0]
    h0 = 0.1 * torch.randn(1, HV, K, V, generator=torch.Generator().manual_seed(seed * 1_000_003 - 1))
    return (q, k, v, g, beta, h0), d_out


def memory_worker(rank, world, store, T, shape, out):
    """One process of --memory: world = 0 is the one-process configuration."""
    import resource
    torch.set_num_threads(1)
    if world > 0:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        import gdn.torch.distributed as gcp
        fn = gcp.chunk_gated_delta_rule
        t0, t1 = rank * T // world, (rank + 1) * T // world
    else:
        import gdn.torch
        fn = gdn.torch.chunk_gated_delta_rule
        t0, t1 = 0, T
    args, d_out = slice_inputs(T, t0, t1, shape)
    timed_call(fn, args, d_out, True)  # warm-up: the contexts' workspaces
    if world > 0:
        dist.barrier()
    cpu = time.process_time()
    wall = timed_call(fn, args, d_out, True)
    cpu = time.process_time() - cpu
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    torch.save({"cpu_s": cpu, "wall_s": wall, "peak_mb": peak_mb}, f"{out}.{rank}")
    if world > 0:
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def memory_table(args, shape):
    with tempfile.TemporaryDirectory() as scratch:
        rows = {}
        for name, world in (("one process", 0), (f"{args.ranks} ranks", args.ranks)):
            out = os.path.join(scratch, f"mem{world}")
            mp.spawn(memory_worker, args=(world, os.path.join(scratch, f"store{world}"), args.tokens, shape, out),
                     nprocs=max(world, 1))
            rows[name] = [torch.load(f"{out}.{r}") for r in range(max(world, 1))]
    H, HV, K, V = shape
    print(f"{args.shape} delta-net shape (H {H}, HV {HV}, K {K}, V {V}), T = {args.tokens}, float32, one forward + "
          f"backward through autograd, processes of one thread")
    print("| configuration | peak resident MB per process | largest against one process | CPU s (all processes) "
          "| against one process | wall s per process |")
    print("|---|---|---|---|---|---|")
    one = rows["one process"][0]
    for name, results in rows.items():
        peak = max(r["peak_mb"] for r in results)
        cpu = sum(r["cpu_s"] for r in results)
        peaks = ", ".join(f"{r['peak_mb']:.0f}" for r in results)
        cpus = " + ".join(f"{r['cpu_s']:.2f}" for r in results)
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in results)
        print(f"| {name} | {peaks} | {peak / one['peak_mb']:.2f} | {cpus} = {cpu:.2f} | {cpu / one['cpu_s']:.2f} "
              f"| {walls} |")
    return 0


def timed_call(fn, args, d_out, backward):
    leaves = [x.detach().clone().requires_grad_(backward) for x in args]
    start = time.perf_counter()
    o, _ = fn(*leaves[:5], initial_state=leaves[5], use_qk_l2norm_in_kernel=True)
    if backward:
        (o * d_out).sum().backward()
    return time.perf_counter() - start


def worker(rank, world, store, T, shape, rounds, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    import gdn.torch.distributed as gcp
    t0, t1 = rank * T // world, (rank + 1) * T // world
    mine, d_out = slice_inputs(T, t0, t1, shape)
    times = {"fwd": [], "fwd+bwd": []}
    for r in range(rounds + 1):  # round 0 warms up
        for name, backward in (("fwd", False), ("fwd+bwd", True)):
            dist.barrier()
            dt = torch.tensor([timed_call(gcp.chunk_gated_delta_rule, mine, d_out, backward)])
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            if r > 0:
                times[name].append(dt.item())
    if rank == 0:
        torch.save(times, out)
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # (see examples/context_parallel/train.py: the gloo group outlives destroy_process_group)


def one_process(T, shape, threads, rounds):
    import gdn.torch
    torch.set_num_threads(threads)
    args, d_out = slice_inputs(T, 0, T, shape)
    times = {"fwd": [], "fwd+bwd": []}
    for r in range(rounds + 1):
        for name, backward in (("fwd", False), ("fwd+bwd", True)):
            dt = timed_call(gdn.torch.chunk_gated_delta_rule, args, d_out, backward)
            if r > 0:
                times[name].append(dt)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=None, help="default 4096, with --memory 65536")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="alternations; each times 3 calls of each kind")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="27b")
    parser.add_argument("--memory", action="store_true", help="peak memory and CPU time per process (see above)")
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    if args.tokens is None:
        args.tokens = 65536 if args.memory else 4096
    if args.memory:
        return memory_table(args, shape)
    results = {"one process": {"fwd": [], "fwd+bwd": []}, "context parallel": {"fwd": [], "fwd+bwd": []}}
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.rounds):
            single = one_process(args.tokens, shape, args.ranks, 3)
            out = os.path.join(scratch, f"cp{r}.pt")
            mp.spawn(worker, args=(args.ranks, os.path.join(scratch, f"store{r}"), args.tokens, shape, 3, out),
                     nprocs=args.ranks)
            split = torch.load(out)
            for name in ("fwd", "fwd+bwd"):
                results["one process"][name].append(statistics.median(single[name]))
                results["context parallel"][name].append(statistics.median(split[name]))
    H, HV, K, V = shape
    print(f"{args.shape} delta-net shape (H {H}, HV {HV}, K {K}, V {V}), T = {args.tokens}, float32, "
          f"{args.ranks} threads in one process against {args.ranks} processes of one thread; "
          f"medians (ranges) of {args.rounds} alternating rounds, ms")
    print("| configuration | forward | forward + backward |")
    print("|---|---|---|")
    for config, times in results.items():
        cells = [f"{statistics.median(times[n]) * 1e3:.1f} ({min(times[n]) * 1e3:.1f}-{max(times[n]) * 1e3:.1f})"
                 for n in ("fwd", "fwd+bwd")]
        print(f"| {config} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
