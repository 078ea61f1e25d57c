#!/usr/bin/env python3
"""Where a cpu call's time goes, by step: the table of docs/PERF.md, "Where the time goes".

Samples `gdn-ops perf --no-fork` for one case with `perf record` (cpu-clock, so it works in
virtual machines without a PMU), then sums the library's samples by function into the steps of
the chunked form. The test kit's input generation and the peak probe run in the same process and
are left out: percentages are of the library's samples.

    bench/perf_steps.py [--gdn-ops build/tools/gdn-ops/gdn-ops] [--threads 2] [--seconds 6]
                        [--case 'Hv=48,T=4096,...'] [--op forward|backward]

Default case: the 27B shape at T = 4096 (GDA). Pass --case 'Hv=48,T=512,.*gate=channel' for KDA.
libc's memmove and memcpy are counted as the row gathers' (the library copies token rows with
them; the test kit's few copies are inside its own functions' time), which is the one
approximation.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# Steps, in the order the table lists them: the first pattern a function matches takes it.
STEPS = [
    # The F32 kernels per ISA, the bf16 ones (AVX512_BF16, AMX, their packing), not a namespace's
    # row conversions (the portable ones live in a namespace `generic` too).
    ("GEMM micro-kernels and packing", r"::(bf16_)?(avx512|avx2|sse2|neon|amx|generic)::(?!\w*_to_f)|bf16_detail|gemm"),
    ("next-chunk prefetches", r"PacedPrefetch|prefetch_rows"),
    ("streamed stores (outputs, checkpoints, kept Z)", r"stream_store_row|store_rows_streamed|store_token_rows"),
    ("triangles and substitutions", r"::add_rows|::trmm|chunk_deltas|solve_adjoint|lower_product"),
    ("gates, exp, decay masks, KDA's scaled rows", r"exp_to_float|kda_gated_rows|compute_gates|decayed_lower|"
     r"add_gates|span_add_fits|ChunkPlanner|plan_chunks|scale_rows|prepare_unit_chunk"),
    ("gate gradients (dots, pair terms)", r"dot_f64|row_dots_f64|gda_gate_terms|kda_pair_sums|"
     r"assemble_gate_gradient|products_f64|gate_dots"),
    ("row gathers", r"__memmove|memcpy|gather_rows|load_group_rows|load_row|_to_f32|_to_bf16|_to_f16"),
    ("state loads and stores", r"load_state|store_state|state_io"),
]
# Functions of the process that are not the library's call.
OUTSIDE = r"gdn::testkit|gdn::ops|__cos|__sin|__ieee754|^log@|^exp@|fill_normal|_dl_"


def shares_by_step(report):
    """The library's shares of the samples in `perf report --sort sym --stdio` text: per step (the
    first of STEPS whose pattern a function matches), the rest of the library's ("other") and
    those functions. The kernel's samples and the test kit's and the peak probe's are left out."""
    steps = {name: 0.0 for name, _ in STEPS}
    other, others = 0.0, []
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[(.)\]\s+(.*)$", line)
        if not m:
            continue
        share, symbol = float(m.group(1)), m.group(3)
        if m.group(2) == "k" or re.search(OUTSIDE, symbol):  # the kernel: the test kit's page faults
            continue
        for name, pattern in STEPS:
            if re.search(pattern, symbol):
                steps[name] += share
                break
        else:
            other += share
            others.append((share, symbol))
    return steps, other, others


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gdn-ops", default="build/tools/gdn-ops/gdn-ops")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=6.0, help="gdn-ops perf --min-time")
    parser.add_argument("--case", default=r"Hv=48,T=4096,B=1,Bq=1,gate=scalar,heads=tiled,qk=strided,s0=1,K=1,"
                                          r"g=mild,beta=rand\)$")
    parser.add_argument("--op", choices=["forward", "backward"], default="forward")
    parser.add_argument("--show-other", action="store_true", help="list the functions counted as other")
    args = parser.parse_args()
    op = "GATED_DELTA_NET" if args.op == "forward" else "GATED_DELTA_NET_BACK"
    if not os.access(args.gdn_ops, os.X_OK):
        sys.exit(f"{args.gdn_ops}: no gdn-ops there (build it: cmake --build build --target gdn-ops; or --gdn-ops PATH)")
    with tempfile.NamedTemporaryFile(suffix=".data") as data:
        try:
            run = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "1999", "-o", data.name, "--",
                                  args.gdn_ops, "perf", "--no-fork", "-b", "CPU", "-t", str(args.threads), "-o", op,
                                  "-p", args.case, "--min-time", str(args.seconds)],
                                 capture_output=True, text=True)
        except FileNotFoundError as e:
            sys.exit(f"{e.filename} not found: perf_steps needs perf (Debian: linux-perf) and a built gdn-ops")
        timed = [line for line in run.stdout.splitlines() if "timed [" in line]
        if run.returncode != 0 or len(timed) != 1:
            sys.exit(f"gdn-ops perf under perf record: exit {run.returncode}, {len(timed)} cases timed "
                     f"(the case pattern must match exactly one)\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
        report = subprocess.run(["perf", "report", "-i", data.name, "--no-children", "--sort", "sym", "--stdio",
                                 "-g", "none", "--percent-limit", "0"], capture_output=True, text=True)
        if report.returncode != 0:
            sys.exit(f"perf report: exit {report.returncode}\n{report.stderr[-2000:]}")
    steps, other, others = shares_by_step(report.stdout)
    library = sum(steps.values()) + other
    if library <= 0:
        sys.exit("no samples of the library: was gdn-ops built with its symbols?")
    case = re.sub(r"\s+", " ", timed[0].strip())
    print(f"{case}\n")
    print(f"| step | % of the library's samples ({library:.0f}% of the process's) |")
    print("|---|---|")
    for name, _ in STEPS:
        print(f"| {name} | {100 * steps[name] / library:.1f} |")
    print(f"| other | {100 * other / library:.1f} |")
    if args.show_other:
        for share, symbol in others:
            print(f"  other: {100 * share / library:.2f} {symbol}")


if __name__ == "__main__":
    main()
