"""gdn.forward / gdn.backward / gdn.Context on numpy arrays: results, layouts, errors."""

import numpy as np
import pytest

import gdn
from reference import nmse, recurrent_reference


def make_inputs(rng, B=2, T=37, Hk=2, Hv=4, Sk=16, Sv=8, gate_width=1, dtype=np.float64):
    """Arrays in gdn's layout ([B, T, H, S]; g and beta with their unit dimension)."""
    q = rng.standard_normal((B, T, Hk, Sk))
    k = rng.standard_normal((B, T, Hk, Sk))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, T, Hv, Sv))
    g = -rng.uniform(0.01, 0.5, (B, T, Hv, gate_width))
    beta = rng.uniform(0.1, 0.9, (B, T, Hv, 1))
    state = rng.standard_normal((B, Hv, Sv, Sk)) * 0.3
    return [x.astype(dtype) for x in (q, k, v, g, beta, state)]


def reference_of(q, k, v, g, beta, state, head_map):
    Hk, Hv = q.shape[2], v.shape[2]
    key_head = (lambda h: h % Hk) if head_map == "tiled" else (lambda h: h // (Hv // Hk))
    gate = g[..., 0] if g.shape[-1] == 1 else g
    o, final = recurrent_reference(q, k, v, gate, beta[..., 0], 1 / np.sqrt(q.shape[-1]),
                                   np.swapaxes(state, -1, -2), key_head)
    return o, np.swapaxes(final, -1, -2)  # back to gdn's key-innermost layout


@pytest.mark.parametrize("head_map", ["tiled", "grouped"])
@pytest.mark.parametrize("gate_width", [1, 16])
def test_forward_matches_independent_reference(head_map, gate_width):
    rng = np.random.default_rng(1)
    q, k, v, g, beta, state = make_inputs(rng, gate_width=gate_width)
    o_ref, final_ref = reference_of(q, k, v, g, beta, state, head_map)
    out, states = gdn.forward(q, k, v, g, beta, state, head_map=head_map, ctx=gdn.Context("ref"))
    assert nmse(out, o_ref) < 1e-24 and nmse(states, final_ref) < 1e-24
    # The cpu backend in float32 against the same truth, to the library's forward threshold.
    f32 = [x.astype(np.float32) for x in (q, k, v, g, beta, state)]
    out32, states32 = gdn.forward(*f32, head_map=head_map, ctx=gdn.Context("cpu", threads=2))
    assert out32.dtype == np.float32
    assert nmse(out32, o_ref) < 1e-10 and nmse(states32, final_ref) < 1e-10


def test_packed_views_are_read_in_place():
    """q, k, v as row views into one packed projection buffer: the same numbers as copies."""
    rng = np.random.default_rng(2)
    B, T, Hk, Hv, S = 1, 50, 2, 6, 16
    conv_dim = 2 * Hk * S + Hv * S
    qkv = rng.standard_normal((B, T, conv_dim)).astype(np.float32)
    q = qkv[..., :Hk * S].reshape(B, T, Hk, S)
    k = qkv[..., Hk * S:2 * Hk * S].reshape(B, T, Hk, S)
    v = qkv[..., 2 * Hk * S:].reshape(B, T, Hv, S)
    assert np.shares_memory(q, qkv) and not q.flags.c_contiguous
    g = -rng.uniform(0.01, 0.3, (B, T, Hv, 1)).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (B, T, Hv, 1)).astype(np.float32)
    ctx = gdn.Context("cpu", threads=2)
    out_view, st_view = gdn.forward(q, k, v, g, beta, ctx=ctx)
    out_copy, st_copy = gdn.forward(*(np.ascontiguousarray(x) for x in (q, k, v)), g, beta, ctx=ctx)
    np.testing.assert_array_equal(out_view, out_copy)
    np.testing.assert_array_equal(st_view, st_copy)
    # Gradients written straight into a packed gradient buffer, as a model's backward wants them.
    d_out = rng.standard_normal(out_view.shape).astype(np.float32)
    dqkv = np.zeros_like(qkv)
    dq = dqkv[..., :Hk * S].reshape(B, T, Hk, S)
    dk = dqkv[..., Hk * S:2 * Hk * S].reshape(B, T, Hk, S)
    dv = dqkv[..., 2 * Hk * S:].reshape(B, T, Hv, S)
    grads = gdn.backward(q, k, v, g, beta, d_out=d_out, dq=dq, dk=dk, dv=dv, ctx=ctx)
    assert grads.q is dq and grads.state is None
    copies = gdn.backward(*(np.ascontiguousarray(x) for x in (q, k, v)), g, beta, d_out=d_out, ctx=ctx)
    np.testing.assert_array_equal(dqkv[..., :Hk * S].reshape(B, T, Hk, S), copies.q)
    np.testing.assert_array_equal(dqkv[..., 2 * Hk * S:].reshape(B, T, Hv, S), copies.v)


def test_backward_gives_the_gradient_of_the_forward():
    """Directional derivative by central differences of the float64 forward, every input."""
    rng = np.random.default_rng(3)
    inputs = make_inputs(rng, B=1, T=9, Sk=8, Sv=8)
    ctx = gdn.Context("ref")
    d_out = rng.standard_normal(inputs[2].shape)
    d_states = rng.standard_normal((1, 4, 8, 8))

    def loss(xs):
        out, states = gdn.forward(*xs, head_map="grouped", ctx=ctx)
        return float(np.sum(out * d_out) + np.sum(states * d_states))

    grads = gdn.backward(*inputs, d_out=d_out, d_states=d_states, head_map="grouped", ctx=ctx)
    for i, grad in enumerate(grads):
        direction = rng.standard_normal(inputs[i].shape)
        h = 1e-5
        plus = [x if j != i else x + h * direction for j, x in enumerate(inputs)]
        minus = [x if j != i else x - h * direction for j, x in enumerate(inputs)]
        numeric = (loss(plus) - loss(minus)) / (2 * h)
        analytic = float(np.sum(grad * direction))
        assert abs(numeric - analytic) <= 1e-6 * (1 + abs(numeric)), (i, numeric, analytic)


def test_snapshots_and_in_place_state_update():
    rng = np.random.default_rng(4)
    q, k, v, g, beta, state = make_inputs(rng, B=2, T=6, dtype=np.float32)
    ctx = gdn.Context("cpu", threads=1)
    _, states = gdn.forward(q, k, v, g, beta, state, out=False, snapshots=3, ctx=ctx)
    assert states.shape == (6, 4, 8, 16)
    _, final = gdn.forward(q, k, v, g, beta, state, out=False, ctx=ctx)
    assert nmse(states[:2], final) < 1e-12  # slot 0 is the final state (chunks cut differently)
    _, before_last = gdn.forward(q[:, :5], k[:, :5], v[:, :5], g[:, :5], beta[:, :5], state, out=False, ctx=ctx)
    assert nmse(states[2:4], before_last) < 1e-12  # slot 1: after token T-2
    # Decoding: the state updated in place, token by token, equals one call over the tokens.
    cache = state.copy()
    for t in range(6):
        sl = slice(t, t + 1)
        gdn.forward(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], cache, out=False, states=cache, ctx=ctx)
    assert nmse(cache, final) < 1e-10


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_value_major_pool_is_read_and_updated_in_place_by_strides(backend):
    """A numpy pool in FLA's layout [slots, Hv, Sk, Sv], passed as its transposed view: the named
    slots read and written where they are (states None: the pool itself), the same bits as the
    call on the gathered key-major states, the other slots untouched."""
    rng = np.random.default_rng(6)
    dtype = np.float64 if backend == "ref" else np.float32
    q, k, v, g, beta, _ = make_inputs(rng, B=2, T=3, dtype=dtype)
    pool = rng.standard_normal((5, 4, 16, 8)).astype(dtype)
    slots = np.array([4, 1], dtype=np.int64)
    ctx = gdn.Context(backend, threads=1) if backend == "cpu" else gdn.Context(backend)
    expected_out, expected_states = gdn.forward(q, k, v, g, beta, np.swapaxes(pool[slots], -1, -2).copy(), ctx=ctx)
    before = pool.copy()
    view = np.swapaxes(pool, -1, -2)
    out, states = gdn.forward(q, k, v, g, beta, view, state_indices=slots, ctx=ctx)
    assert states is view and np.shares_memory(states, pool)
    np.testing.assert_array_equal(out, expected_out)
    np.testing.assert_array_equal(np.swapaxes(pool[slots], -1, -2), expected_states)
    np.testing.assert_array_equal(pool[[0, 2, 3]], before[[0, 2, 3]])


def test_dry_run_writes_nothing_and_workspace_is_reported():
    rng = np.random.default_rng(5)
    q, k, v, g, beta, state = make_inputs(rng, dtype=np.float32)
    ctx = gdn.Context("cpu", threads=2)
    out = np.full(v.shape, 7.0, dtype=np.float32)
    gdn.forward(q, k, v, g, beta, state, out=out, states=False, ctx=ctx, dry_run=True)
    assert np.all(out == 7.0)
    gdn.forward(q, k, v, g, beta, state, out=out, states=False, ctx=ctx)
    assert not np.all(out == 7.0)
    assert ctx.backend == "cpu" and ctx.workspace_bytes > 0


@pytest.mark.parametrize("mutate, error, words", [
    (lambda a: a.update(q=np.concatenate([a["q"], a["q"][:, :, :1]], 2),
                        k=np.concatenate([a["k"], a["k"][:, :, :1]], 2)), gdn.ShapeError, "does not divide"),
    (lambda a: a.update(q=a["q"][..., :8]), gdn.ShapeError, "q"),
    (lambda a: a.update(v=a["v"].astype(np.float64)), gdn.ElementTypeError, "v"),
    (lambda a: a.update(v=a["v"].astype(np.int32)), gdn.ElementTypeError, "v has an element type"),
    (lambda a: a.update(q=a["q"][None, None]), gdn.ShapeError, "q has 6 dimensions"),
    (lambda a: a.update(g=a["g"][:, :0]), gdn.ShapeError, r"g\.ne\[2\] = 0"),
    (lambda a: a.update(q=a["q"][..., ::-1]), gdn.LayoutError, "q"),
    (lambda a: a.update(scale=float("nan")), gdn.InvalidArgumentError, "scale"),
    (lambda a: a.update(head_map="sideways"), gdn.InvalidArgumentError, "head_map"),
])
def test_bad_input_raises_and_writes_nothing(mutate, error, words):
    rng = np.random.default_rng(6)
    q, k, v, g, beta, state = make_inputs(rng, dtype=np.float32)
    args = dict(q=q, k=k, v=v, g=g, beta=beta, state=state, scale=None, head_map="tiled")
    mutate(args)
    out = np.full(v.shape, 3.0, dtype=np.float32)
    states = np.full(state.shape, 5.0, dtype=np.float32)
    with pytest.raises(error, match=words) as info:
        gdn.forward(args.pop("q"), args.pop("k"), args.pop("v"), args.pop("g"), args.pop("beta"),
                    args.pop("state"), out=out, states=states, ctx=gdn.Context("cpu"), **args)
    assert isinstance(info.value, gdn.Error)
    assert np.all(out == 3.0) and np.all(states == 5.0)


def test_unknown_backend_and_output_overlap():
    with pytest.raises(gdn.UnknownBackendError, match="unknown backend"):
        gdn.Context("tpu")
    rng = np.random.default_rng(7)
    q, k, v, g, beta, _ = make_inputs(rng, dtype=np.float32)
    q_before = q.copy()
    with pytest.raises(gdn.AliasError):
        gdn.backward(q, k, v, g, beta, d_out=v, dq=q, ctx=gdn.Context("cpu"))  # dq written over q
    np.testing.assert_array_equal(q, q_before)


def test_release_workspace_frees_and_the_next_call_allocates_again():
    rng = np.random.default_rng(8)
    q, k, v, g, beta, state = make_inputs(rng, dtype=np.float32)
    ctx = gdn.Context("cpu", threads=2)
    out_first, _ = gdn.forward(q, k, v, g, beta, state, states=False, ctx=ctx)
    assert ctx.workspace_bytes > 0
    ctx.release_workspace()
    assert ctx.workspace_bytes == 0
    out_second, _ = gdn.forward(q, k, v, g, beta, state, states=False, ctx=ctx)
    assert ctx.workspace_bytes > 0 and np.array_equal(out_first, out_second)


@pytest.mark.parametrize("params, words", [
    (dict(threads=100000), "n_threads = 100000 is more than 4096"),
    (dict(threads=2**40), "threads = 1099511627776"),
    (dict(threads=-1), "threads = -1"),
    (dict(chunk_size=-3), "chunk_size = -3"),
    (dict(chunk_size=2**31), "chunk_size = 2147483648"),
    (dict(device=-1), "device = -1"),
])
def test_absurd_context_parameters_raise_naming_them(params, words):
    with pytest.raises(gdn.InvalidArgumentError, match=words):
        gdn.Context("cpu", **params)


def test_chunk_sizes_that_do_not_divide_t_compute_what_ref_does():
    rng = np.random.default_rng(11)
    inputs = make_inputs(rng, dtype=np.float32)
    want, _ = gdn.forward(*inputs, ctx=gdn.Context("ref"))
    for chunk_size in (1, 3, 7, 2**31 - 1):
        got, _ = gdn.forward(*inputs, ctx=gdn.Context("cpu", threads=2, chunk_size=chunk_size))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_release_workspaces_reaches_every_threads_contexts():
    """gdn.torch's contexts are per thread, and autograd runs a CUDA backward on a thread of its own."""
    import threading
    rng = np.random.default_rng(9)
    inputs = make_inputs(rng, dtype=np.float32)
    held = []

    def worker():
        ctx = gdn.default_context("cpu", threads=1)
        gdn.forward(*inputs, states=False, ctx=ctx)
        held.append(ctx)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert held[0].workspace_bytes > 0
    gdn._core.release_workspaces()
    assert held[0].workspace_bytes == 0


def test_a_threads_default_context_follows_the_thread_count_asked():
    """One default context per backend, device and stream on a thread: asked with another thread
    count it is replaced, so a program that changes the count keeps one pool and one workspace."""
    first = gdn.default_context("cpu", threads=1)
    assert gdn.default_context("cpu", threads=1) is first
    second = gdn.default_context("cpu", threads=2)
    assert second is not first and second.threads == 2
    assert gdn.default_context("cpu", threads=2) is second
    cached = [c for c in gdn._core._local.contexts.values() if c.backend == "cpu"]
    assert cached == [second]


def test_an_argument_that_is_not_an_array_raises_a_gdn_error():
    rng = np.random.default_rng(5)
    q, k, v, g, beta, state = make_inputs(rng)
    with pytest.raises(gdn.InvalidArgumentError, match="got list"):
        gdn.forward(q, k, v.tolist(), g, beta, state)
