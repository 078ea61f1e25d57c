"""Worker processes for the multi-process tests (DDP, context parallel): started with spawn,
joined with a deadline, killed if they hang; a worker's failure fails the test (its traceback
is printed by the worker itself)."""

import time

import torch.multiprocessing as mp


def run_workers(target, world, args, what, timeout=300):
    """target(rank, *args) in `world` processes; asserts that every one finished and exited 0."""
    context = mp.get_context("spawn")
    workers = [context.Process(target=target, args=(rank, *args)) for rank in range(world)]
    for p in workers:
        p.start()
    deadline = time.monotonic() + timeout  # one for all: a hang is reported after `timeout`, not world times it
    for p in workers:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [p.pid for p in workers if p.is_alive()]
    for p in workers:
        if p.is_alive():
            p.kill()
            p.join()
    assert not hung, f"{what} workers {hung} did not finish in {timeout} s"
    assert [p.exitcode for p in workers] == [0] * world, f"a {what} worker failed (its traceback is above)"
