"""Worker processes for the multi-process tests (DDP, context parallel): started with spawn,
joined with one deadline, killed if they hang; a worker's failure fails the test (its traceback
is printed by the worker itself).

Each worker leaves with os._exit, after flushing its output: once a process has called any
torch.library custom op (gdn.torch's ops are such), its gloo process group outlives
destroy_process_group (torch 2.15: its threads are still running afterwards), and tearing it
down as the interpreter exits can abort the process ("terminate called without an active
exception", seen on a CI run)."""

import os
import sys
import time
import traceback

import torch.multiprocessing as mp


def _worker(target, rank, args):
    status = 1
    try:
        target(rank, *args)
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def run_workers(target, world, args, what, timeout=300):
    """target(rank, *args) in `world` processes; asserts that every one finished and exited 0."""
    context = mp.get_context("spawn")
    workers = [context.Process(target=_worker, args=(target, rank, args)) for rank in range(world)]
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
