"""Trains a small Gated DeltaNet layer with its sequences split over 2 processes (context parallel).

    python examples/context_parallel/train.py                 # 2 gloo processes, 400 steps
    python examples/context_parallel/train.py --check         # also: step 0's gradients against one process

The task is associative recall: a packed stream of sequences, each a list of key-value token
pairs followed by queries of earlier keys whose answer is the paired value. The stream is
split in two at its middle, so a sequence crosses from one rank to the other, and each rank
runs the layer on its own half: `gdn.torch.distributed.chunk_gated_delta_rule` passes the
state across the boundary (one all-gather forward, one backward). The parameters are
replicated, so each rank's gradients are summed over the ranks (an all-reduce) before the
optimizer steps: every rank then holds the same model. With --check, step 0's summed
gradients are compared with those of one process running the whole stream.
"""

import argparse
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import gdn.torch
import gdn.torch.distributed

VOCAB, KEYS = 64, 32          # tokens; the first KEYS are keys, the rest values
PAIRS, QUERIES = 8, 8         # per sequence
SEQUENCES = 5                 # per stream: 120 tokens, the middle inside the third sequence
D, H, HV, K, V = 64, 2, 4, 32, 32


class DeltaNetLayer(torch.nn.Module):
    """Embedding, a token shift (each position also sees the token before it, as the short
    convolution of a Gated DeltaNet layer does), one gated delta-net mixer (a residual), and a
    readout."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, D)
        self.shift = torch.nn.Linear(D, D, bias=False)
        self.qkv = torch.nn.Linear(D, 2 * H * K + HV * V, bias=False)
        self.decay_and_beta = torch.nn.Linear(D, 2 * HV)
        with torch.no_grad():  # slow decay to begin with (softplus(-6) = 0.0025 a token), as models initialise it
            self.decay_and_beta.bias[:HV] = -6.0
        self.mix = torch.nn.Linear(HV * V, D, bias=False)
        self.readout = torch.nn.Linear(D, VOCAB)

    def forward(self, tokens, previous, cu_seqlens, gated_delta_rule):
        """previous: the token before each one in its sequence, -1 at a sequence's start."""
        before = self.embed(previous.clamp(min=0)) * (previous >= 0).unsqueeze(-1)
        x = (self.embed(tokens) + self.shift(before))[None]  # [1, T, D]: one packed stream
        T = x.shape[1]
        q, k, v = self.qkv(x).split([H * K, H * K, HV * V], dim=-1)
        a, b = self.decay_and_beta(x).chunk(2, dim=-1)
        o, _ = gated_delta_rule(q.reshape(1, T, H, K), k.reshape(1, T, H, K), v.reshape(1, T, HV, V),
                                -F.softplus(a), b.sigmoid(), cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=True)
        return self.readout(x + self.mix(o.reshape(1, T, HV * V)))[0]


def stream(step):
    """One packed stream: tokens, each one's predecessor (-1 at a sequence's start), the targets
    (-100: not scored) and the sequences' offsets."""
    gen = torch.Generator().manual_seed(step)
    tokens, targets, offsets = [], [], [0]
    for _ in range(SEQUENCES):
        keys = torch.randperm(KEYS, generator=gen)[:PAIRS]
        values = torch.randint(KEYS, VOCAB, (PAIRS,), generator=gen)
        asked = torch.randint(0, PAIRS, (QUERIES,), generator=gen)
        pairs = torch.stack([keys, values], dim=1).flatten()
        tokens += [pairs, keys[asked]]
        targets += [torch.full((2 * PAIRS,), -100), values[asked]]
        offsets.append(offsets[-1] + 2 * PAIRS + QUERIES)
    tokens = torch.cat(tokens)
    previous = torch.cat([tokens.new_full((1,), -1), tokens[:-1]])
    previous[torch.tensor(offsets[:-1])] = -1
    return tokens, previous, torch.cat(targets), torch.tensor(offsets)


def train(rank, world, store, steps, check, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # the same initial model on every rank
        model = DeltaNetLayer()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for step in range(steps):
            tokens, previous, targets, offsets = stream(step)
            T = tokens.shape[0]
            t0, t1 = rank * T // world, (rank + 1) * T // world  # this rank's slice of the stream
            # (previous[t0] is the one token a rank reads from its neighbour's slice: the shift's halo.)
            logits = model(tokens[t0:t1], previous[t0:t1], offsets, gdn.torch.distributed.chunk_gated_delta_rule)
            # The mean over the whole stream's scored tokens, as this rank's share of a sum.
            scored = (targets != -100).sum()
            loss = F.cross_entropy(logits, targets[t0:t1], ignore_index=-100, reduction="sum") / scored
            optimizer.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            if check and step == 0:
                torch.save({n: p.grad.clone() for n, p in model.named_parameters()},
                           os.path.join(results, f"grads{rank}.pt"))
            optimizer.step()
            total = loss.detach().clone()
            dist.all_reduce(total)
            if rank == 0 and (step % 50 == 0 or step == steps - 1):
                print(f"step {step:4d}  loss {total.item():.4f}", flush=True)
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: a process that called a torch.library custom op
    # (gdn.torch's are) keeps its gloo group alive past destroy_process_group (torch 2.15), and
    # tearing that down at exit can abort the process ("terminate called without an active
    # exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def one_process_gradients():
    torch.manual_seed(0)
    model = DeltaNetLayer()
    tokens, previous, targets, offsets = stream(0)
    logits = model(tokens, previous, offsets, gdn.torch.chunk_gated_delta_rule)
    F.cross_entropy(logits, targets, ignore_index=-100).backward()
    return {n: p.grad for n, p in model.named_parameters()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--world", type=int, default=2, help="processes (gloo, on this host)")
    parser.add_argument("--check", action="store_true", help="compare step 0's gradients with one process's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        mp.spawn(train, args=(args.world, os.path.join(scratch, "store"), args.steps, args.check, scratch),
                 nprocs=args.world)
        if args.check:
            torch.set_num_threads(1)
            reference = one_process_gradients()
            worst = 0.0
            for rank in range(args.world):
                grads = torch.load(os.path.join(scratch, f"grads{rank}.pt"))
                for name, g in reference.items():
                    worst = max(worst, ((grads[name] - g).norm() / g.norm()).item())
            print(f"step 0: gradients of {args.world} processes against one, largest relative difference {worst:.2e}")
            if worst > 1e-5:
                raise SystemExit("the context-parallel gradients differ from one process's")


if __name__ == "__main__":
    main()
