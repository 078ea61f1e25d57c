"""What bfloat16 costs in accuracy, through gdn.torch, beside FLA's bf16 contract.

    python bench/bf16_accuracy.py --tokens 512 [--shape 27b|80b] [--kda]

One problem at a model's delta-net shape (27b: Qwen3.5-27B, Hk 16, Hv 48; 80b: Qwen3-Next-80B-A3B,
Hk 16, Hv 32; head size 128, B = 1; --kda: a gate per key channel), with its values as a bf16
model makes them: q, k (normalised), v and beta representable in bfloat16, g = -exp(A_log)
softplus(a + dt_bias) in float32 (down to about -76), an initial state and both cotangents (of o
and of the final state). Every column computes the same function of the same values, forward and
backward through autograd, and is compared with the float64 oracle (gdn's ref backend on float64
tensors, which accumulates in double):

- F32 exact: gdn on float32 tensors (cpu backend), precision "exact";
- BF16 exact: gdn on bfloat16 q, k, v, beta and float32 g, precision "exact" (o and dq, dk, dv,
  dbeta come back bfloat16);
- BF16 mode: the same with precision "bf16" (chunk products with bf16 operands where the host
  multiplies bf16 natively; elsewhere it computes as exact, and the script says so);
- FLA naive bf16: FLA's own PyTorch reference on the bfloat16 tensors (it converts them to float32
  and keeps its state in float32: FLA's bf16 contract), its o rounded to bfloat16 as FLA's kernels
  return it, its gradients those of autograd (rounded once to each leaf's dtype). GDA runs FLA's
  chunked reference (naive_chunk_gated_delta_rule, 64-token chunks); KDA runs its token-by-token
  naive_recurrent_kda (its chunked one exponentiates positive gate differences, which overflow
  with a model's gates). FLA is read from its files, found as an installed package or under
  GDN_FLA_SITE (a site directory holding fla-core), without importing fla itself.

Metrics per tensor (o, the final state, dq, dk, dv, dg, dbeta, dh0): NMSE, sum (a - b)^2 / sum b^2,
and the worst element |a - b| / (|b| + rms(b)) (the metric of `gdn-ops test`), b the oracle's.
Prints one markdown table.
"""

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

import gdn
import gdn.torch as gt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests"))
from fla_reference import fla_file  # noqa: E402  (the tests' finder of FLA's files)

SHAPES = {"27b": dict(H=16, HV=48, K=128, V=128), "80b": dict(H=16, HV=32, K=128, V=128)}
TENSORS = ("o", "state", "dq", "dk", "dv", "dg", "dbeta", "dh0")
COLUMNS = ("F32 exact", "BF16 exact", "BF16 mode", "FLA naive bf16")


def problem(shape, T, kda, seed):
    """The values: q, k, v, beta bf16-representable (held in float64), g and h0 float32-representable,
    the cotangents of o (bf16-representable) and of the final state."""
    H, HV, K, V = shape["H"], shape["HV"], shape["K"], shape["V"]
    gen = torch.Generator().manual_seed(seed)
    bf16 = lambda x: x.to(torch.bfloat16).double()  # noqa: E731
    q = bf16(torch.nn.functional.normalize(torch.randn(1, T, H, K, generator=gen), dim=-1))
    k = bf16(torch.nn.functional.normalize(torch.randn(1, T, H, K, generator=gen), dim=-1))
    v = bf16(torch.randn(1, T, HV, V, generator=gen))
    beta = bf16(torch.sigmoid(torch.randn(1, T, HV, generator=gen)))
    A_log = torch.log(torch.empty(HV).uniform_(1, 16, generator=gen))
    a = torch.randn(1, T, HV, *((K,) if kda else ()), generator=gen)
    decay_rate = A_log.exp().view(HV, *((1,) if kda else ()))
    g = (-decay_rate * torch.nn.functional.softplus(a + 1.0)).double()
    h0 = (0.1 * torch.randn(1, HV, K, V, generator=gen)).double()
    d_out = bf16(torch.randn(1, T, HV, V, generator=gen))
    d_state = torch.randn(1, HV, K, V, generator=gen).double()
    return [q, k, v, g, beta, h0], d_out, d_state


def cast(inputs, qkv_dtype):
    """The inputs as a call of that dtype takes them: q, k, v, beta in it, g and h0 float32 (float64
    throughout for the oracle)."""
    wide = qkv_dtype == torch.float64
    q, k, v, g, beta, h0 = inputs
    return [x.to(qkv_dtype) for x in (q, k, v)] + [g.to(torch.float64 if wide else torch.float32),
                                                    beta.to(qkv_dtype), h0.to(torch.float64 if wide else torch.float32)]


def through_autograd(fn, inputs, d_out, d_state):
    """o, the final state and the gradients of the six inputs, as float64 tensors."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    o, state = fn(*leaves)
    grads = torch.autograd.grad((o, state), leaves, (d_out.to(o.dtype), d_state.to(state.dtype)))
    return [t.detach().double() for t in (o, state, *grads)]


def gdn_call(precision):
    def fn(q, k, v, g, beta, h0):
        return gt.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                         precision=precision)
    return fn


def fla_naive(kda):
    """FLA's naive reference function for GDA or KDA, loaded from its file (importing fla would load
    its Triton kernels), or None."""
    path = fla_file("ops", "kda" if kda else "gated_delta_rule", "naive.py")
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location(f"fla_naive_{'kda' if kda else 'gdn'}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.naive_recurrent_kda if kda else module.naive_chunk_gated_delta_rule


def fla_call(naive, kda, H, HV):
    """FLA's reference over bf16 tensors, one key head and the value heads that read it at a time
    (the heads are independent; this bounds what autograd keeps). FLA's GDA reference takes one head
    count, so q and k are repeated to the value heads after their conversion to float32, where the
    reference would convert them anyway: their gradients are summed in float32 and rounded once."""
    G = HV // H

    def fn(q, k, v, g, beta, h0):
        outs, states = [], []
        for j in range(H):
            heads = slice(j * G, (j + 1) * G)
            qj, kj = q[:, :, j:j + 1], k[:, :, j:j + 1]
            if kda:
                o, s = naive(qj, kj, v[:, :, heads], g[:, :, heads], beta[:, :, heads], initial_state=h0[:, heads],
                             output_final_state=True)
            else:
                qj, kj = (x.float().repeat_interleave(G, dim=2) for x in (qj, kj))
                o, s = naive(qj, kj, v[:, :, heads], g[:, :, heads], beta[:, :, heads], initial_state=h0[:, heads],
                             output_final_state=True)
            outs.append(o.to(q.dtype))  # FLA's kernels return o in q's dtype
            states.append(s)
        return torch.cat(outs, dim=2), torch.cat(states, dim=1)
    return fn


def nmse(a, b):
    return float(((a - b) ** 2).sum() / (b ** 2).sum().clamp_min(1e-300))


def worst(a, b):
    rms = float(b.pow(2).mean().sqrt())
    return float(((a - b).abs() / (b.abs() + rms)).max())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="27b")
    parser.add_argument("--kda", action="store_true", help="a gate per key channel")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = SHAPES[args.shape]
    inputs, d_out, d_state = problem(shape, args.tokens, args.kda, args.seed)

    with gt.backend("ref"):
        oracle = through_autograd(gdn_call("exact"), cast(inputs, torch.float64), d_out, d_state)
    results = {}
    with gt.backend("cpu"):
        results["F32 exact"] = through_autograd(gdn_call("exact"), cast(inputs, torch.float32), d_out, d_state)
        results["BF16 exact"] = through_autograd(gdn_call("exact"), cast(inputs, torch.bfloat16), d_out, d_state)
        results["BF16 mode"] = through_autograd(gdn_call("bf16"), cast(inputs, torch.bfloat16), d_out, d_state)
    naive = fla_naive(args.kda)
    if naive is not None:
        results["FLA naive bf16"] = through_autograd(fla_call(naive, args.kda, shape["H"], shape["HV"]),
                                                     cast(inputs, torch.bfloat16), d_out, d_state)

    mode_is_exact = all(torch.equal(a, b) for a, b in zip(results["BF16 mode"], results["BF16 exact"]))
    gmin = float(inputs[3].min())
    print(f"bf16_accuracy: {args.shape} shape (Hk {shape['H']}, Hv {shape['HV']}, head size {shape['K']}), "
          f"{'KDA' if args.kda else 'GDA'}, B = 1, T = {args.tokens}, g down to {gmin:.1f}, seed {args.seed}, "
          f"gdn {gdn.__version__}, {args.threads} threads; against gdn's ref backend on float64 tensors")
    if mode_is_exact:
        print('note: precision "bf16" gave precision "exact"\'s bits: this host computes it as exact')
    if naive is None:
        print("note: FLA not found (install fla-core, or set GDN_FLA_SITE to a site directory holding it)")
    print()
    columns = [c for c in COLUMNS if c in results]
    print("| tensor | " + " | ".join(f"{c} NMSE | worst" for c in columns) + " |")
    print("|---|" + "---|---|" * len(columns))
    label = "KDA" if args.kda else "GDA"
    for i, name in enumerate(TENSORS):
        cells = []
        for c in columns:
            a, b = results[c][i], oracle[i]
            if not torch.isfinite(a).all():
                cells += ["not finite", "-"]
            else:
                cells += [f"{nmse(a, b):.1e}", f"{worst(a, b):.1e}"]
        print(f"| {label} {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
