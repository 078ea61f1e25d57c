"""The benchmarks: python -m gdn.bench's no-binding baseline computes what the binding computes, and it runs;
bench/context_parallel.py's slices hold the whole's values, and its memory mode runs; bench/perf_steps.py
counts each function's samples in its step; bench/perf_in_turn.py pairs two builds' times case by case."""

import subprocess
import sys

import pytest
import torch

import gdn
import gdn.torch
from gdn import _capi


def test_c_api_baseline_matches_the_binding():
    """The ctypes mirror of gdn_problem must match the header's layout, or the baseline is wrong."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(1, 20, 2, 16, generator=gen), dim=-1) for _ in range(2))
    v = torch.randn(1, 20, 4, 8, generator=gen)
    g, beta = -torch.rand(1, 20, 4, 1, generator=gen), torch.rand(1, 20, 4, 1, generator=gen)
    ctx = _capi.Context("cpu", 1)
    out = torch.empty_like(v)
    ctx.forward(_capi.problem(q, k, v, g, beta), _capi.tensor(out), None)
    expected, _ = gdn.forward(q, k, v, g, beta, states=False, head_map="grouped", ctx=gdn.Context("cpu", threads=1))
    assert torch.equal(out, expected)


def bench_backend_takes_bf16():
    from gdn import bench
    return bench._gdn_takes_bf16()


def test_c_api_baseline_passes_bf16_and_precision():
    """The ctypes mirror with bfloat16 tensors and precision set: the binding's bits (on ref)."""
    gen = torch.Generator().manual_seed(1)
    q, k = (torch.nn.functional.normalize(torch.randn(1, 20, 2, 16, generator=gen), dim=-1).bfloat16()
            for _ in range(2))
    v = torch.randn(1, 20, 4, 8, generator=gen).bfloat16()
    g, beta = -torch.rand(1, 20, 4, 1, generator=gen), torch.rand(1, 20, 4, 1, generator=gen).bfloat16()
    out = torch.empty_like(v)
    _capi.Context("ref", 1).forward(_capi.problem(q, k, v, g, beta, precision=1), _capi.tensor(out), None)
    expected, _ = gdn.forward(q, k, v, g, beta, states=False, head_map="grouped", ctx=gdn.Context("ref"),
                              precision="bf16")
    assert out.dtype == torch.bfloat16 and torch.equal(out, expected)


def test_decoding_baseline_updates_the_pool_as_the_binding_does():
    """The decoding rows' C API call (an FLA-layout pool by strides, reversed slots with gaps) and
    gdn.torch's give the same bits, in the same slots, leaving the others as they were."""
    from gdn import bench
    q, k, v, g, beta, pool, slots = bench._decode_inputs(3)
    by_capi, by_torch = pool.clone(), pool.clone()
    view = by_capi.transpose(-1, -2)
    out = torch.empty_like(v)
    _capi.Context("cpu", 1).forward(_capi.problem(q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), view,
                                                  state_indices=slots), _capi.tensor(out), _capi.tensor(view))
    with torch.no_grad(), gdn.torch.backend("cpu"):
        o, final = gdn.torch.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, initial_state=by_torch,
                                                              ssm_state_indices=slots)
    assert final is by_torch and torch.equal(o, out) and torch.equal(by_torch, by_capi)
    named = slots.long()
    assert not torch.equal(by_capi[named], pool[named])
    untouched = [s for s in range(pool.shape[0]) if s not in named.tolist()]
    assert torch.equal(by_capi[untouched], pool[untouched])


def test_chunk_decoding_baseline_computes_what_the_binding_returns():
    """The chunk decoding rows' C API call (FLA-layout states by strides, final states into a kept
    buffer) and gdn.torch.chunk_gated_delta_rule give the same bits."""
    from gdn import bench
    q, k, v, g, beta, pool, slots = bench._decode_inputs(3)
    states = pool[slots.long()]
    final, out = torch.empty_like(states), torch.empty_like(v)
    _capi.Context("cpu", 1).forward(_capi.problem(q, k, v, g.unsqueeze(-1), beta.unsqueeze(-1), states.transpose(-1, -2)),
                                    _capi.tensor(out), _capi.tensor(final.transpose(-1, -2)))
    with torch.no_grad(), gdn.torch.backend("cpu"):
        o, returned = gdn.torch.chunk_gated_delta_rule(q, k, v, g, beta=beta, initial_state=states,
                                                       output_final_state=True)
    assert torch.equal(o, out) and torch.equal(returned, final)


def test_bench_prints_every_table():
    done = subprocess.run([sys.executable, "-m", "gdn.bench", "--tokens", "8", "--min-time", "0", "--min-runs", "1",
                           "--threads", "1", "--decode-batches", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 8 |")]
    assert len(rows) == 6, done.stdout  # fwd and fwd+bwd, in each table (float32, bfloat16, binding)
    bf16_rows = rows[2:4]
    if bench_backend_takes_bf16():
        assert not any("refused" in row for row in bf16_rows), done.stdout
    else:
        assert all(row.count("refused by the backend") == 2 for row in bf16_rows), done.stdout
    decoding = [line for line in done.stdout.splitlines() if line.startswith(("| fused_recurrent | 2 | 1 |",
                                                                                 "| chunk | 2 | 1 |"))]
    assert len(decoding) == 2, done.stdout


def test_alternated_rows_time_the_three_calls():
    """--alternated: one row per T and pass, every cell a median with its range; with
    --flush-denormal too (where the CPU can flush subnormals)."""
    can_flush = torch.set_flush_denormal(True)
    torch.set_flush_denormal(False)
    for extra in [[]] + ([["--flush-denormal"]] if can_flush else []):
        done = subprocess.run([sys.executable, "-m", "gdn.bench", "--alternated", "--tokens", "8", "--min-time", "0",
                               "--min-runs", "2", "--threads", "1", *extra], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
        rows = [line for line in done.stdout.splitlines() if line.startswith("| 8 |")]
        assert len(rows) == 2, done.stdout
        for row in rows:
            cells = row.strip("| ").split(" | ")
            assert cells[2] == "2" and all("(" in c and "-" in c for c in cells[3:]), row
        assert ("flushed" if extra else "kept") in done.stdout


def _bench_script(name):
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / name
    if not path.is_file():
        pytest.skip("the benchmark is in the source tree (this is a copy of the tests)")
    spec = importlib.util.spec_from_file_location(path.stem + "_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


def _context_parallel_bench():
    return _bench_script("context_parallel.py")


def test_perf_steps_counts_each_function_in_its_step():
    """bench/perf_steps.py: a function's samples go to the first step that names it, the rest of
    the library's to other; the kernel's, the test kit's and the peak probe's to none."""
    steps, _ = _bench_script("perf_steps.py")
    report = """# Samples: 1K of event 'cpu-clock'
    40.00%  [.] void gdn::cpu::avx512::micro<4, 6>(long, float const*, long)
     5.00%  [.] gdn::cpu::PacedPrefetch::step()
     4.00%  [.] gdn::cpu::stream_store_row(gdn_type, float const*, long, void*)
     3.00%  [.] __memmove_avx512_unaligned_erms
     1.25%  [.] void gdn::cpu::bf16_amx::block<2>(long, unsigned short const*)
     0.50%  [.] gdn::cpu::(anonymous namespace)::generic::bf16_to_f32(unsigned short const*, float*, long)
     2.50%  [.] gdn::cpu::(anonymous namespace)::add_rows_avx512(float, float const*, long)
     2.00%  [.] gdn::cpu::exp_to_float(double const*, float*, long)
     1.50%  [.] gdn::cpu::row_dots_f64(long, long, float const*, float const*, double*)
     1.00%  [.] gdn::cpu::load_state(gdn_tensor const&, gdn::Dims const&, long, long, float*, long)
     0.75%  [.] __memset_avx512_unaligned_erms
     9.00%  [.] gdn::ops::(anonymous namespace)::fma_avx512(long)
     6.00%  [k] clear_page_erms
     4.00%  [.] gdn::testkit::(anonymous namespace)::fill_normal(float*, long)
     3.00%  [.] __cos_fma
"""
    shares, other, others = steps.shares_by_step(report)
    assert shares == {
        "GEMM micro-kernels and packing": 41.25,
        "next-chunk prefetches": 5.0,
        "streamed stores (outputs, checkpoints, kept Z)": 4.0,
        "triangles and substitutions": 2.5,
        "gates, exp, decay masks, KDA's scaled rows": 2.0,
        "gate gradients (dots, pair terms)": 1.5,
        "row gathers": 3.5,
        "state loads and stores": 1.0,
    }
    assert other == 0.75 and [symbol for _, symbol in others] == ["__memset_avx512_unaligned_erms"]


def test_perf_in_turn_pairs_each_rounds_times_by_case():
    """bench/perf_in_turn.py: the timed cases of a gdn-ops perf JSON document, and per case the
    medians' ratio and the per-round ratios, over the cases every round of both builds timed."""
    in_turn, _ = _bench_script("perf_in_turn.py")
    document = {"results": [
        {"case": "A(T=1)", "verdict": "timed", "metrics": {"ms": 2.0}},
        {"case": "B(T=2)", "verdict": "failed", "metrics": {}},
    ]}
    assert in_turn.timed_ms(document) == {"A(T=1)": 2.0}
    rounds = [({"x": 10.0, "y": 4.0}, {"x": 9.0, "y": 4.0}),
              ({"x": 12.0, "y": 4.0}, {"x": 9.0}),  # y was not timed by the new build this round
              ({"x": 11.0, "y": 4.0}, {"x": 11.0, "y": 5.0})]
    [(case, old, new, ratio, per_round)] = in_turn.summarise(rounds)
    assert case == "x" and old == [10.0, 12.0, 11.0] and new == [9.0, 9.0, 11.0]
    assert ratio == 9.0 / 11.0 and per_round == sorted([0.9, 0.75, 1.0])
    assert in_turn.quartiles([1, 2, 3, 4]) == (2, 4)
    assert in_turn.summarise([]) == []


def test_context_parallel_bench_slices_hold_the_wholes_values():
    """bench/context_parallel.py --memory: a rank draws its slice alone, and it holds what the
    whole sequence holds there (else ranks and one process would compute different problems)."""
    bench, _ = _context_parallel_bench()
    shape = (2, 4, 8, 8)
    (whole, d_whole) = bench.slice_inputs(3000, 0, 3000, shape)
    for t0, t1 in ((0, 1000), (1000, 2500), (2500, 3000), (1023, 1025)):
        part, d_part = bench.slice_inputs(3000, t0, t1, shape)
        for a, b in zip(part[:5], whole[:5]):
            assert torch.equal(a, b[:, t0:t1])
        assert torch.equal(part[5], whole[5]) and torch.equal(d_part, d_whole[:, t0:t1])


def test_context_parallel_bench_memory_mode_runs():
    _, path = _context_parallel_bench()
    done = subprocess.run([sys.executable, str(path), "--memory", "--tokens", "512", "--shape", "80b"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| one process |" in done.stdout and "| 2 ranks |" in done.stdout, done.stdout
