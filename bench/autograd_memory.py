"""What gdn.torch's forward + backward holds in memory, in one fresh process.

    python bench/autograd_memory.py --tokens 4096 --backend cpu --dtype bfloat16 [--precision bf16]

At the Qwen3.5-27B delta-net shape (Hk 16, Hv 48, head size 128, B = 1), inputs as a bf16 model
makes them: q, k, v split from one packed projection, beta in the same dtype, g float32, q and k
normalised by the op. Prints one JSON line: the inputs' size, the peak resident memory the
forward + backward adds over what the process held before it (inputs built, libraries set up by
a small call; the kernel's peak counter is reset first), the bytes autograd keeps for the backward
and how many of them are the caller's own tensors (views share their storage: no extra memory).
"""

import argparse
import json
import time

import torch

import gdn.torch

H, HV, K, V = 16, 48, 128, 128


def _resident_mb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _inputs(T, dtype):
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(1, T, 2 * H * K + HV * V, generator=gen).to(dtype)
    g = -torch.rand(1, T, HV, generator=gen)
    beta = torch.rand(1, T, HV, generator=gen).to(dtype)
    d_out = torch.randn(1, T, HV, V, generator=gen).to(dtype)
    return qkv, g, beta, d_out


def _forward_backward(qkv, g, beta, d_out, saved, precision):
    leaves = [x.detach().requires_grad_() for x in (qkv, g, beta)]
    q, k, v = leaves[0].split([H * K, H * K, HV * V], dim=-1)
    q, k, v = q.unflatten(-1, (H, K)), k.unflatten(-1, (H, K)), v.unflatten(-1, (HV, V))

    def keep(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        o, _ = gdn.torch.chunk_gated_delta_rule(q, k, v, g=leaves[1], beta=leaves[2], use_qk_l2norm_in_kernel=True,
                                                precision=precision)
    torch.autograd.backward(o, d_out)
    return leaves


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--backend", default="cpu", help="cpu or ref (gdn.torch.backend)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--precision", default="exact", choices=["exact", "bf16"],
                        help="gdn.torch's precision (bf16: chunk products with bf16 operands where the host has them)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    with gdn.torch.backend(args.backend):
        _forward_backward(*_inputs(64, dtype), [], args.precision)
        inputs = _inputs(args.tokens, dtype)
        saved = []
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets the peak (VmHWM) to the current resident size
        baseline = _resident_mb("VmRSS")
        start = time.perf_counter()
        _forward_backward(*inputs, saved, args.precision)
        wall = time.perf_counter() - start
        peak = _resident_mb("VmHWM") - baseline
    own = {t.untyped_storage().data_ptr() for t in inputs[:3]}
    mb = 2.0 ** -20
    print(json.dumps(dict(
        tokens=args.tokens, backend=args.backend, dtype=args.dtype, precision=args.precision,
        gdn=gdn.__version__,
        inputs_mb=round(sum(t.numel() * t.element_size() for t in inputs) * mb, 1),
        peak_added_mb=round(peak, 1),
        saved_mb=round(sum(t.numel() * t.element_size() for t in saved) * mb, 1),
        saved_not_the_callers_mb=round(sum(t.numel() * t.element_size() for t in saved
                                           if t.untyped_storage().data_ptr() not in own) * mb, 1),
        saved_dtypes=sorted({str(t.dtype).replace("torch.", "") for t in saved}),
        wall_s=round(wall, 1))))


if __name__ == "__main__":
    main()
