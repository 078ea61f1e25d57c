#!/usr/bin/env python3
"""Two builds' `gdn-ops perf` timings, their processes run in turn: does a change pay?

    bench/perf_in_turn.py OLD_GDN_OPS NEW_GDN_OPS [--rounds 8] [--threads 2] [--min-time 1]
                          [-p PATTERN] [-o OP]

Each round runs both binaries on the same cases (which of them goes first alternates, so that
neither always follows the other), and each case is timed the way `gdn-ops perf` times it:
repeated calls of one build in a process of its own. Prints, per case, each build's median time
over the rounds with its range, the ratio of the medians (new / old) and the quartiles of the
per-round ratios.

Why not only bench/ab_calls: it alternates two copies of the library call by call in one
process, which once read 0.96-0.97 in both orders for a change that took the same time here
(docs/PERF.md, "What did not pay"). Copy each build's gdn-ops aside (cp build/tools/gdn-ops/gdn-ops
/tmp/gdn-ops-old) before building the next; nothing else should run on the host meanwhile.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def timed_ms(document):
    """Case label -> ms of every timed result in a `gdn-ops perf --output json` document."""
    return {r["case"]: r["metrics"]["ms"] for r in document["results"] if r.get("verdict") == "timed"}


def summarise(rounds):
    """rounds: a list of (old, new) dicts of case -> ms. Per case present in every round of both
    builds, in the first round's order: (case, old ms list, new ms list, ratio of the medians,
    per-round ratios sorted)."""
    if not rounds:
        return []
    cases = [c for c in rounds[0][0] if all(c in old and c in new for old, new in rounds)]
    out = []
    for case in cases:
        old = [o[case] for o, _ in rounds]
        new = [n[case] for _, n in rounds]
        ratios = sorted(n / o for o, n in zip(old, new))
        out.append((case, old, new, statistics.median(new) / statistics.median(old), ratios))
    return out


def quartiles(xs):
    """The first and third quartiles of a sorted list (nearest rank)."""
    return xs[len(xs) // 4], xs[(3 * len(xs)) // 4]


def run(gdn_ops, args):
    cmd = [gdn_ops, "perf", "-b", "CPU", "-t", str(args.threads), "--min-time", str(args.min_time), "-p",
           args.pattern, "--output", "json"]
    if args.op:
        cmd += ["-o", args.op]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    times = timed_ms(json.loads(done.stdout))
    if not times:
        sys.exit(f"{gdn_ops}: no case timed (pattern {args.pattern!r})")
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-time", type=float, default=1.0, help="gdn-ops perf --min-time, per case")
    parser.add_argument("-p", "--pattern", default=r"Hv=48,T=4096,B=1,Bq=1,gate=scalar,heads=tiled,qk=strided,"
                        r"s0=1,K=1,g=mild,beta=rand\)$", help="gdn-ops perf -p (default: the 27B shape, T = 4096)")
    parser.add_argument("-o", "--op", help="gdn-ops perf -o: GATED_DELTA_NET or GATED_DELTA_NET_BACK")
    args = parser.parse_args()
    for path in (args.old, args.new):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path}: not an executable gdn-ops")
    rounds = []
    for r in range(args.rounds):
        first, second = (args.old, args.new) if r % 2 == 0 else (args.new, args.old)
        a, b = run(first, args), run(second, args)
        rounds.append((a, b) if r % 2 == 0 else (b, a))
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)
    print(f"{args.rounds} rounds, {args.threads} threads; ms: median [range]; new / old: ratio of the medians "
          f"(per-round quartiles)")
    for case, old, new, ratio, per_round in summarise(rounds):
        q1, q3 = quartiles(per_round)
        print(f"{case}\n  old {statistics.median(old):.4g} [{min(old):.4g}-{max(old):.4g}]  "
              f"new {statistics.median(new):.4g} [{min(new):.4g}-{max(new):.4g}]  new / old {ratio:.3f} "
              f"({q1:.3f}-{q3:.3f})")


if __name__ == "__main__":
    main()
