"""python -m gdn.bench: transformers' pure-PyTorch gated delta rule against gdn, side by side.

At the Qwen3.5-27B delta-net shape (16 key heads shared by 48 value heads, head size 128, B = 1,
inputs as the model makes them: q, k, v split from one packed projection buffer, q and k
normalised by the op, g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)), for each T: the
forward, and forward + backward through autograd. Every measurement runs in its own process, so
its peak memory is its own. Also times the C API called directly (ctypes, no binding) against
gdn.torch on the same pre-normalised inputs: what the Python layers cost.

gdn is measured in two processes, before and after transformers, and its runs pooled.
The bfloat16 table does the same with the inputs in bfloat16 as a bf16 model makes them (the
projection and beta bfloat16, g float32): transformers' fallback (which computes in float32),
gdn with precision="exact" and gdn with precision="bf16", each reading the bfloat16 tensors as
they are; where gdn's backend in this build refuses bfloat16, its cells say so.
Columns: median wall ms over the runs, median CPU ms (all threads), peak resident memory added
by the runs over what the process held before them (inputs built, libraries set up by a small
run; MB), and for gdn the canonical GFLOP/s (forward 8 Sk Sv, backward 24 Sk Sv per token
and value head).

``--alternated`` times instead the three ways gdn.torch can run a bf16 model's call, in one
process, alternated call by call with the first of each round rotating, so that whatever else
the machine does weighs on all alike: float32 inputs, the bfloat16 inputs with
precision="exact", and with precision="bf16"; each row gives the medians (and ranges) and the
per-round time ratios. ``--flush-denormal`` runs it with subnormal floats flushed to zero
(``torch.set_flush_denormal``, set before gdn's threads start, which inherit it): a model's
strong decays (g down to about -76) make subnormal float32 intermediates, which the x86 cores
compute on at a fraction of their speed.

Decoding as a server runs it: one token (T = 1) for each of B requests whose states sit in a
pool in FLA's layout ``[2B, HV, K, V]``, at reversed slots with gaps, updated in place:
``gdn.torch.fused_recurrent_gated_delta_rule(..., ssm_state_indices=...)`` against the C API on
the same call (the same pool, by strides), returning a new o or writing it into ``out=``; and ``gdn.torch.chunk_gated_delta_rule`` on the same
token from B FLA-layout initial states, returning fresh final states, against the C API reading
the same states and writing its final states into a buffer it keeps. Both run under
``torch.no_grad()`` entered once, as a serving step runs its whole forward.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

SHAPE = dict(H=16, HV=48, K=128, V=128)
IMPLS = ("transformers", "gdn", "gdn.torch-raw", "c-api")
# The bfloat16 table's measurements: implementation, precision (gdn's), as one name each.
BF16_IMPLS = {"transformers-bf16": ("transformers", None), "gdn-bf16": ("gdn", "exact"),
              "gdn-bf16-mode": ("gdn", "bf16")}


def _rss_mb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def _inputs(T, seed=0, dtype=None):
    """The packed projection, g and beta; with ``dtype`` (bfloat16), the projection and beta in it
    and g in float32, as a bfloat16 Qwen3.5 layer computes them."""
    import torch
    H, HV, K, V = SHAPE["H"], SHAPE["HV"], SHAPE["K"], SHAPE["V"]
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(1, T, 2 * H * K + HV * V, generator=gen)
    a, b = torch.randn(1, T, HV, generator=gen), torch.randn(1, T, HV, generator=gen)
    A_log, dt_bias = torch.log(torch.empty(HV).uniform_(1, 16, generator=gen)), torch.ones(HV)
    g = -A_log.exp() * torch.nn.functional.softplus(a + dt_bias)
    if dtype is not None:
        return qkv.to(dtype), g, torch.sigmoid(b.to(dtype))
    return qkv, g, torch.sigmoid(b)


def _split(qkv):
    H, HV, K, V = SHAPE["H"], SHAPE["HV"], SHAPE["K"], SHAPE["V"]
    B, T, _ = qkv.shape
    q, k, v = qkv.split([H * K, H * K, HV * V], dim=-1)
    return q.reshape(B, T, H, K), k.reshape(B, T, H, K), v.reshape(B, T, HV, V)


def _runner(impl, T, backward):
    """A function that runs the measured work once."""
    import torch
    dtype = torch.bfloat16 if impl in BF16_IMPLS else None
    impl, precision = BF16_IMPLS.get(impl, (impl, "exact"))
    qkv, g, beta = _inputs(T, dtype=dtype)
    d_out = torch.randn(1, T, SHAPE["HV"], SHAPE["V"], dtype=dtype)
    if impl in ("gdn.torch-raw", "c-api"):  # q and k normalised beforehand, outside the timing
        q, k, v = _split(qkv)
        q, k = (torch.nn.functional.normalize(x, dim=-1, eps=1e-6).contiguous() for x in (q, k))
        qkv = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2)], dim=-1)
    if impl == "c-api":
        return _c_api_runner(qkv, g, beta, d_out, backward)
    if impl == "transformers":
        from transformers.models.qwen3_5 import modeling_qwen3_5
        fn = getattr(modeling_qwen3_5.torch_chunk_gated_delta_rule, "__wrapped__",
                     modeling_qwen3_5.torch_chunk_gated_delta_rule)
    else:
        import functools
        from gdn.torch import chunk_gated_delta_rule
        fn = functools.partial(chunk_gated_delta_rule, precision=precision)
    l2norm = impl != "gdn.torch-raw"
    leaves = [qkv, g, beta]

    def run():
        xs = [x.detach().requires_grad_(backward) for x in leaves]
        q, k, v = _split(xs[0])
        o, _ = fn(q, k, v, g=xs[1], beta=xs[2], use_qk_l2norm_in_kernel=l2norm)
        if backward:
            torch.autograd.backward(o, d_out)
    return run


def _gdn_torch_context(like):
    """The context gdn.torch computes with for tensors like ``like``: the baseline borrows it."""
    import gdn.torch
    return gdn.torch._context_for(like)


def _c_api_runner(qkv, g, beta, d_out, backward):
    import torch
    from gdn import _capi
    q, k, v = _split(qkv)
    problem = _capi.problem(q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1))
    ctx = _capi.Context(shared=_gdn_torch_context(v))
    out = torch.empty_like(v)
    grads = [torch.empty_like(x) for x in (q, k, v, g, beta)]
    out_t, d_out_t = _capi.tensor(out), _capi.tensor(d_out)
    grads_t = _capi.Grads(*(_capi.tensor(x) for x in grads[:3]), _capi.tensor(grads[3].unsqueeze(-1)),
                          _capi.tensor(grads[4].unsqueeze(-1)), _capi.Tensor())

    def run():
        ctx.forward(problem, out_t, None)
        if backward:
            ctx.backward(problem, d_out_t, None, grads_t)
    run.keep_alive = (ctx, out, grads, q, k, v, g, beta, d_out)
    return run


def _worker(impl, T, backward, threads, min_time, min_runs):
    import torch
    torch.set_num_threads(threads)
    # One small run first, so that the libraries' one-time set-up (kernel registries, thread
    # pools, lazily loaded code) is not counted as the measured call's memory.
    _runner(impl, 64, backward)()
    run = _runner(impl, T, backward)
    baseline = _rss_mb("VmRSS")
    run()  # warm-up: first-touch allocations, workspace
    walls, cpus = [], []
    start = time.perf_counter()
    while len(walls) < min_runs or time.perf_counter() - start < min_time:
        w0, c0 = time.perf_counter(), time.process_time()
        run()
        walls.append((time.perf_counter() - w0) * 1e3)
        cpus.append((time.process_time() - c0) * 1e3)
    print(json.dumps(dict(walls=walls, cpus=cpus, peak_mb=_rss_mb("VmHWM") - baseline)))


def _overhead_worker(T, backward, threads, min_time, min_runs):
    import torch
    torch.set_num_threads(threads)
    _alternately(_runner("c-api", T, backward), _runner("gdn.torch-raw", T, backward), min_time, min_runs)


# The --alternated rows: gdn.torch on one bf16 model's call three ways (names as in _runner).
ALTERNATED = (("f32", "gdn"), ("bf16 exact", "gdn-bf16"), ("bf16 mode", "gdn-bf16-mode"))


def _alternated_worker(T, backward, threads, min_time, min_runs, flush_denormal):
    import torch
    if flush_denormal and not torch.set_flush_denormal(True):
        raise RuntimeError("--flush-denormal: this CPU cannot flush subnormals (torch.set_flush_denormal)")
    torch.set_num_threads(threads)
    runs = [_runner(impl, T, backward) for _, impl in ALTERNATED]
    for run in runs:
        run()  # warm-up: first-touch allocations, workspace
    times = [[] for _ in runs]
    start = time.perf_counter()
    while len(times[0]) < min_runs or time.perf_counter() - start < min_time:
        first = len(times[0]) % len(runs)
        for i in [(first + j) % len(runs) for j in range(len(runs))]:
            t0 = time.perf_counter()
            runs[i]()
            times[i].append((time.perf_counter() - t0) * 1e3)
    print(json.dumps(dict(times=times)))


def _spread(values, fmt):
    """median (min-max) of values, each formatted with fmt."""
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def _alternated_table(args):
    flush = " --flush-denormal" if args.flush_denormal else ""
    print(f"gdn.torch, bf16 model inputs (Qwen3.5-27B delta-net shape, B = 1, q and k normalised by the op, "
          f"g = -exp(A_log) softplus(a + dt_bias)), {args.threads} threads, subnormals {'flushed' if flush else 'kept'}: float32 inputs, "
          f"bfloat16 with precision exact, bfloat16 with precision bf16, alternated call by call in one process")
    print()
    print("| T | pass | rounds | f32 ms | bf16 exact ms | bf16 mode ms | bf16 exact / f32 time | f32 / bf16 mode time |")
    print("|---|---|---|---|---|---|---|---|")
    for T in args.tokens:
        for backward in (False, True):
            cmd = [sys.executable, "-m", "gdn.bench", "--worker", "alternated", str(T), "1" if backward else "0",
                   "--threads", str(args.threads), "--min-time", str(args.min_time), "--min-runs",
                   str(args.min_runs)] + ([flush.strip()] if flush else [])
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"alternated T={T} failed:\n{done.stderr[-2000:]}")
            f32, exact, mode = json.loads(done.stdout.strip().splitlines()[-1])["times"]
            print(f"| {T} | {'fwd+bwd' if backward else 'fwd'} | {len(f32)} | {_spread(f32, '.1f')} "
                  f"| {_spread(exact, '.1f')} | {_spread(mode, '.1f')} "
                  f"| {_spread([e / f for e, f in zip(exact, f32)], '.2f')} "
                  f"| {_spread([f / m for f, m in zip(f32, mode)], '.2f')} |", flush=True)


def _decode_inputs(B, seed=0):
    """One decoding step of B requests, q and k normalised; their states in a pool of 2B slots in
    FLA's layout, at slots 2B-1, 2B-3, ..., 1 (reversed, with gaps)."""
    import torch
    H, HV, K, V = SHAPE["H"], SHAPE["HV"], SHAPE["K"], SHAPE["V"]
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.nn.functional.normalize(torch.randn(B, 1, H, K, generator=gen), dim=-1) for _ in range(2))
    v = torch.randn(B, 1, HV, V, generator=gen)
    g, beta = -torch.rand(B, 1, HV, generator=gen), torch.rand(B, 1, HV, generator=gen)
    pool = 0.1 * torch.randn(2 * B, HV, K, V, generator=gen)
    slots = torch.arange(2 * B - 1, 0, -2, dtype=torch.int32)
    return q, k, v, g, beta, pool, slots


def _decode_worker(B, threads, min_time, min_runs, op="fused"):
    import torch
    from gdn import _capi
    from gdn.torch import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    torch.set_num_threads(threads)
    q, k, v, g, beta, pool, slots = _decode_inputs(B)
    ctx = _capi.Context(shared=_gdn_torch_context(v))
    out = torch.empty_like(v)
    out_t = _capi.tensor(out)
    if op in ("fused", "fused-out"):
        pool_by_strides = pool.transpose(-1, -2)  # gdn's [slots, HV, V, K], value-major: the same memory
        problem = _capi.problem(q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), pool_by_strides, state_indices=slots)
        pool_t = _capi.tensor(pool_by_strides)

        def direct():
            ctx.forward(problem, out_t, pool_t)

        out_b = torch.empty_like(v) if op == "fused-out" else None  # the output buffer a decoding loop keeps

        def binding():
            fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=pool, ssm_state_indices=slots,
                                             out=out_b)
    else:
        states = pool[slots.long()]  # the requests' states, FLA's [B, HV, K, V]
        final = torch.empty_like(states)
        problem = _capi.problem(q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), states.transpose(-1, -2))
        final_t = _capi.tensor(final.transpose(-1, -2))

        def direct():
            ctx.forward(problem, out_t, final_t)

        def binding():
            chunk_gated_delta_rule(q, k, v, g, beta=beta, initial_state=states, output_final_state=True)
    with torch.no_grad():
        _alternately(direct, binding, min_time, min_runs)


def _alternately(direct, binding, min_time, min_runs):
    """The C API and gdn.torch alternately in one process, so that whatever else the machine does
    weighs on both alike, each first in every other pair; the overhead is the median of the
    pairwise ratios."""
    direct(), binding()
    pairs = []
    start = time.perf_counter()
    while len(pairs) < min_runs or time.perf_counter() - start < min_time:
        first, second = (direct, binding) if len(pairs) % 2 == 0 else (binding, direct)
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        times = ((t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3)
        pairs.append(times if first is direct else times[::-1])
    print(json.dumps(dict(direct_ms=statistics.median(p[0] for p in pairs),
                          binding_ms=statistics.median(p[1] for p in pairs),
                          ratio=statistics.median(p[1] / p[0] for p in pairs), runs=len(pairs))))


def _summary(*measurements):
    """Medians over the runs of one or more worker processes; the largest peak."""
    walls = [w for m in measurements for w in m["walls"]]
    cpus = [c for m in measurements for c in m["cpus"]]
    return dict(wall_ms=statistics.median(walls), cpu_ms=statistics.median(cpus), runs=len(walls),
                peak_mb=max(m["peak_mb"] for m in measurements))


def _measure(impl, T, backward, args):
    cmd = [sys.executable, "-m", "gdn.bench", "--worker", impl, str(T), "1" if backward else "0",
           "--threads", str(args.threads), "--min-time", str(args.min_time), "--min-runs", str(args.min_runs)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{impl} T={T} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _gdn_takes_bf16():
    """Whether the backend gdn.torch picks for host tensors takes bfloat16 q, k, v (a dry run)."""
    import torch
    import gdn
    import gdn.torch
    x = torch.zeros(1, 2, 1, 4, dtype=torch.bfloat16)
    try:
        gdn.forward(x, x, x, torch.zeros(1, 2, 1, 1), x[..., :1], ctx=gdn.torch._context_for(x), dry_run=True)
    except gdn.ElementTypeError:
        return False
    return True


def _cell(m):
    return f"{m['wall_ms']:.1f} ({m['cpu_ms']:.0f})"


def _bf16_table(args):
    takes = _gdn_takes_bf16()
    print()
    print("bfloat16 inputs (the projection and beta bfloat16, g float32): transformers' fallback against gdn,")
    print('precision="exact" and precision="bf16", each cell its own process')
    print()
    print("| T | pass | transformers ms (CPU ms) | gdn exact ms (CPU ms) | gdn bf16 mode ms (CPU ms) "
          "| transformers peak MB | gdn exact peak MB | gdn bf16 mode peak MB |")
    print("|---|---|---|---|---|---|---|---|")
    for T in args.tokens:
        for backward in (False, True):
            gdn_impls = ("gdn-bf16", "gdn-bf16-mode") if takes else ()
            before = {impl: _measure(impl, T, backward, args) for impl in gdn_impls}
            hf = _summary(_measure("transformers-bf16", T, backward, args))
            ours = {impl: _summary(before[impl], _measure(impl, T, backward, args)) for impl in gdn_impls}
            refused = "refused by the backend"
            times = [_cell(ours[i]) if takes else refused for i in ("gdn-bf16", "gdn-bf16-mode")]
            peaks = [f"{ours[i]['peak_mb']:.0f}" if takes else "-" for i in ("gdn-bf16", "gdn-bf16-mode")]
            print(f"| {T} | {'fwd+bwd' if backward else 'fwd'} | {_cell(hf)} | {times[0]} | {times[1]} "
                  f"| {hf['peak_mb']:.0f} | {peaks[0]} | {peaks[1]} |", flush=True)


def _gflops(T, backward, wall_ms):
    per_token = (8 + (24 if backward else 0)) * SHAPE["K"] * SHAPE["V"] * SHAPE["HV"]
    return per_token * T / (wall_ms * 1e-3) / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m gdn.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 4096], help="T values (default 512 4096)")
    parser.add_argument("--threads", type=int, default=2, help="threads for torch and gdn (default 2)")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds of runs per measurement")
    parser.add_argument("--min-runs", type=int, default=3)
    parser.add_argument("--decode-batches", type=int, nargs="*", default=[1, 16],
                        help="B values of the decoding rows (default 1 16; none: no decoding rows)")
    parser.add_argument("--overhead-only", action="store_true", help="only the binding's cost (no transformers)")
    parser.add_argument("--no-bf16", action="store_true", help="no bfloat16 table")
    parser.add_argument("--alternated", action="store_true",
                        help="only gdn.torch on float32, bfloat16 exact and bfloat16 mode, alternated call by call")
    parser.add_argument("--flush-denormal", action="store_true",
                        help="with --alternated: subnormal floats flushed to zero (torch.set_flush_denormal)")
    parser.add_argument("--worker", nargs=3, metavar=("IMPL", "T", "BACKWARD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flush_denormal and not (args.alternated or args.worker):
        parser.error("--flush-denormal applies to --alternated")
    if args.worker:
        impl, T, backward = args.worker
        if impl == "alternated":
            return _alternated_worker(int(T), backward == "1", args.threads, args.min_time, args.min_runs,
                                      args.flush_denormal)
        if impl == "overhead":
            return _overhead_worker(int(T), backward == "1", args.threads, args.min_time, args.min_runs)
        if impl in ("decode", "decode-out", "decode-chunk"):
            op = {"decode": "fused", "decode-out": "fused-out", "decode-chunk": "chunk"}[impl]
            return _decode_worker(int(T), args.threads, args.min_time, args.min_runs, op)
        return _worker(impl, int(T), backward == "1", args.threads, args.min_time, args.min_runs)
    if args.alternated:
        return _alternated_table(args)

    print(f"gdn.bench: Qwen3.5-27B delta-net shape (Hk {SHAPE['H']}, Hv {SHAPE['HV']}, head size {SHAPE['K']}), "
          f"B = 1, float32, {args.threads} threads; each cell its own process")
    print()
    if not args.overhead_only:
        print("| T | pass | transformers ms (CPU ms) | gdn ms (CPU ms) | speedup wall / CPU | transformers peak MB "
              "| gdn peak MB | gdn GFLOP/s |")
        print("|---|---|---|---|---|---|---|---|")
    overheads = []
    for T in args.tokens:
        for backward in (False, True):
            overheads.append((T, backward, _measure("overhead", T, backward, args)))
            if args.overhead_only:
                continue
            # gdn runs before and after the fallback (its runs pooled): the machine's speed can
            # drift within the fallback's half minute, and gdn measured only after it carries
            # whatever state the fallback left (freed gigabytes, a hot or cold cache) alone.
            before = _measure("gdn", T, backward, args)
            hf = _summary(_measure("transformers", T, backward, args))
            ours = _summary(before, _measure("gdn", T, backward, args))
            print(f"| {T} | {'fwd+bwd' if backward else 'fwd'} | {hf['wall_ms']:.1f} ({hf['cpu_ms']:.0f}) "
                  f"| {ours['wall_ms']:.1f} ({ours['cpu_ms']:.0f}) "
                  f"| {hf['wall_ms'] / ours['wall_ms']:.1f}x / {hf['cpu_ms'] / ours['cpu_ms']:.1f}x "
                  f"| {hf['peak_mb']:.0f} | {ours['peak_mb']:.0f} | {_gflops(T, backward, ours['wall_ms']):.1f} |",
                  flush=True)
    if not args.overhead_only and not args.no_bf16:
        _bf16_table(args)
    print()
    print("What the binding costs: gdn.torch against the C API called directly (ctypes), same pre-normalised")
    print("inputs, run alternately in one process; overhead = median of the pairwise time ratios")
    print()
    print("| T | pass | C API ms | gdn.torch ms | overhead |")
    print("|---|---|---|---|---|")
    for T, backward, m in overheads:
        print(f"| {T} | {'fwd+bwd' if backward else 'fwd'} | {m['direct_ms']:.2f} | {m['binding_ms']:.2f} "
              f"| {100 * (m['ratio'] - 1):+.1f}% |")
    if args.decode_batches:
        print()
        print("Decoding, T = 1, against the C API on the same call, run alternately in one process:")
        print("fused_recurrent_gated_delta_rule updating an FLA-layout state pool in place (ssm_state_indices),")
        print("returning a new o (as FLA does) or writing o into a buffer the loop keeps (out=, as the C API call);")
        print("chunk_gated_delta_rule from FLA-layout states to fresh final states")
        print()
        print("| op | B | T | C API ms | gdn.torch ms | overhead |")
        print("|---|---|---|---|---|---|")
        for impl, op in (("decode", "fused_recurrent"), ("decode-out", "fused_recurrent out="), ("decode-chunk", "chunk")):
            for B in args.decode_batches:
                m = _measure(impl, B, False, args)
                print(f"| {op} | {B} | 1 | {m['direct_ms']:.3f} | {m['binding_ms']:.3f} "
                      f"| {100 * (m['ratio'] - 1):+.1f}% |", flush=True)


if __name__ == "__main__":
    main()
