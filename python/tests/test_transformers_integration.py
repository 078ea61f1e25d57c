"""gdn.integrations.transformers: tiny random Qwen3.5 / Qwen3.5-MoE / Qwen3-Next models, patched and not.

The parity tests run the models in float64 with transformers' internal float32 upcasts turned
into float64 ones (see float64_compute): transformers' pure-PyTorch gated delta rule casts its
inputs to float32, and its RMS norms round the residual stream to float32, which would bury
gdn's float64 result under float32 rounding. So both sides compute in float64 with transformers'
own code, and differ only in who computes the delta rule.
"""

import contextlib
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402

import gdn  # noqa: E402
import gdn.torch  # noqa: E402
from gdn.integrations import transformers as gdn_hf  # noqa: E402
from half_types import on_backends  # noqa: E402

from transformers_support import (  # noqa: E402  (the fixtures are used by name)
    CHUNK, PRESENT, RECURRENT, float64_compute, gdn_calls, generate, loss_and_grads, modeling, no_patch_leaks,
    relative_error, require, tiny_model, tokens)


@pytest.mark.parametrize("name", list(gdn_hf.MODELS))
def test_loss_and_every_gradient_match_unpatched_float64(name, gdn_calls):
    model = tiny_model(name)
    ids = tokens(2, 70)  # T = 70: more than one of transformers' 64-token chunks
    with float64_compute(name):
        loss_ref, grads_ref = loss_and_grads(model, ids)
        assert not gdn_calls
        with gdn_hf.patched() as now:
            assert name in now
            loss, grads = loss_and_grads(model, ids)
    assert gdn_calls == [(70, False, False)] * 2  # both linear-attention layers, no cache
    assert abs(loss.item() - loss_ref.item()) <= 1e-12 * abs(loss_ref.item())
    assert grads.keys() == grads_ref.keys()
    for param_name, grad_ref in grads_ref.items():
        assert grad_ref.abs().max() > 0 or "experts" in param_name or "gate" in param_name, param_name
        assert relative_error(grads[param_name], grad_ref) < 1e-10, param_name


@contextlib.contextmanager
def exact_gated_delta_rule(name):
    """In the block, the model's chunked gated delta rule computes in float64 on its float32 inputs
    and rounds only its outputs to float32: the float32 model with an exact op, so that what an
    implementation's gradients differ from it by is that op's own error."""
    module = modeling(name)
    real = getattr(module, CHUNK)

    def exact(query, key, value, g, beta, initial_state=None, **kwargs):
        with float64_compute(name):
            out, state = real(query.double(), key.double(), value.double(), g.double(), beta.double(),
                              initial_state=None if initial_state is None else initial_state.double(), **kwargs)
        return out.to(query.dtype), None if state is None else state.to(query.dtype)

    setattr(module, CHUNK, exact)
    try:
        yield
    finally:
        setattr(module, CHUNK, real)


def test_float32_is_at_least_as_accurate_as_transformers_own_float32_path(gdn_calls):
    """No harness: transformers as shipped (its fallback computes in float32) against gdn's float32 cpu
    backend. The losses against the same model's float64 truth; the gradients, parameter by
    parameter, against the float32 model whose gated delta rule is exact (float64 inside): against
    the float64 truth, layer 0's gradients pass through every later layer in float32 and sit at
    that floor (about 1e-5) for both, where rounding jitter, not the op, decides which is lower."""
    model = tiny_model("qwen3_5", dtype=torch.float32)
    ids = tokens(2, 70)
    loss_hf, grads_hf = loss_and_grads(model, ids)
    with gdn_hf.patched():
        loss_gdn, grads_gdn = loss_and_grads(model, ids)
    assert len(gdn_calls) == 2 and grads_gdn["model.layers.0.linear_attn.A_log"].dtype == torch.float32
    with exact_gated_delta_rule("qwen3_5"):
        _, grads_exact_op = loss_and_grads(model, ids)
    model = model.to(torch.float64)  # the same weights, exactly
    with float64_compute("qwen3_5"):
        loss_truth, _ = loss_and_grads(model, ids)
    assert abs(loss_gdn.item() - loss_truth.item()) <= 1e-5 * abs(loss_truth.item())
    assert abs(loss_hf.item() - loss_truth.item()) <= 1e-5 * abs(loss_truth.item())
    for param_name, reference in grads_exact_op.items():
        error_gdn = relative_error(grads_gdn[param_name].double(), reference.double())
        error_hf = relative_error(grads_hf[param_name].double(), reference.double())
        assert error_gdn > 0 and error_gdn <= error_hf, (param_name, error_gdn, error_hf)


def test_patched_training_lowers_the_loss(gdn_calls):
    model = tiny_model("qwen3_5", dtype=torch.float32).train()
    ids = tokens(4, 40)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    with gdn_hf.patched():
        for _ in range(5):
            optimizer.zero_grad(set_to_none=True)
            out = model(ids, labels=ids, use_cache=False)
            out.loss.backward()
            optimizer.step()
            losses.append(out.loss.item())
    assert len(gdn_calls) == 2 * 5
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.95 * losses[0], losses


def greedy_with_cache(model, prompt, steps):
    """Greedy decoding by hand, keeping the float64 logits (generate() hands them out in float32)."""
    with torch.no_grad():
        out = model(prompt, use_cache=True)
        logits, sequence = [out.logits[:, -1]], prompt
        for _ in range(steps - 1):
            sequence = torch.cat([sequence, logits[-1].argmax(-1, keepdim=True)], dim=1)
            out = model(sequence[:, -1:], past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits[:, -1])
    return torch.cat([sequence, logits[-1].argmax(-1, keepdim=True)], dim=1), torch.stack(logits)


@pytest.mark.parametrize("name", ["qwen3_5", "olmo_hybrid", "lara_mini", "qwen4_exp"])
def test_greedy_generation_with_cache_matches_unpatched(name, gdn_calls):
    model = tiny_model(name)
    prompt = tokens(2, 9)
    steps = 6
    with float64_compute(name):
        sequences_ref = generate(model, prompt, steps)
        by_hand_ref, logits_ref = greedy_with_cache(model, prompt, steps)
        assert not gdn_calls
        with gdn_hf.patched():
            sequences = generate(model, prompt, steps)
            # Prefill through the chunk function, then one cached single-token step per new token
            # after the first, each through the recurrent function with the cached state: all on gdn.
            prefill, decode = (9, False, True), (1, True, True)
            assert gdn_calls == [prefill] * 2 + [decode] * 2 * (steps - 1)
            by_hand, logits = greedy_with_cache(model, prompt, steps)
    assert torch.equal(sequences, sequences_ref) and torch.equal(by_hand, by_hand_ref)
    assert torch.equal(by_hand, sequences)
    assert logits.dtype == torch.float64 and relative_error(logits, logits_ref) < 1e-10


def test_multi_token_step_on_a_cache_matches_unpatched(gdn_calls):
    """A second multi-token forward on a filled cache: the chunk function with an initial state."""
    model = tiny_model("qwen3_next")
    ids = tokens(2, 20)

    def two_steps():
        first = model(ids[:, :12], use_cache=True)
        second = model(ids[:, 12:], past_key_values=first.past_key_values, use_cache=True)
        return torch.cat([first.logits, second.logits], dim=1)

    with float64_compute("qwen3_next"), torch.no_grad():
        logits_ref = two_steps()
        whole_ref = model(ids, use_cache=False).logits
        with gdn_hf.patched():
            logits = two_steps()
    assert relative_error(logits_ref, whole_ref) < 1e-10  # the premise: the cache carries the whole state
    assert relative_error(logits, logits_ref) < 1e-10
    assert gdn_calls == [(12, False, True)] * 2 + [(8, True, True)] * 2


@pytest.mark.parametrize("backend", on_backends(("bfloat16",)))
def test_adapters_keep_transformers_return_conventions(backend):
    torch.manual_seed(3)
    B, T, H, HV, K, V = 2, 5, 2, 4, 16, 8
    q, k = torch.randn(B, T, H, K), torch.randn(B, T, H, K)
    v = torch.randn(B, T, HV, V).to(torch.bfloat16)
    q, k = q.to(torch.bfloat16), k.to(torch.bfloat16)
    g, beta = -torch.rand(B, T, HV), torch.rand(B, T, HV).to(torch.bfloat16)
    require("qwen3_5")  # the reference: Qwen3.5's function, which repeats the key heads itself
    import hf_reference as hf
    reference = hf.chunk
    # gdn normalises bfloat16 q and k in float32 and rounds them once to bfloat16, as FLA's kernel
    # does; transformers' function keeps them in float32. The reference gets them normalised as gdn's.
    q_normed, k_normed = (hf.modeling_qwen3_5.l2norm(x.float(), dim=-1, eps=1e-6).to(x.dtype) for x in (q, k))
    for adapter in (gdn_hf.chunk_gated_delta_rule, gdn_hf.recurrent_gated_delta_rule):
        with gdn.torch.backend(backend):
            o, state = adapter(q, k, v, g=g, beta=beta, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=True, cu_seqlens=None, output_attentions=False,
                               position_ids=None)
            assert o.dtype == torch.bfloat16 and o.shape == (B, T, HV, V) and state is None
            o, state = adapter(q, k, v, g=g, beta=beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
        o_ref, state_ref = reference(q_normed, k_normed, v, g=g, beta=beta, output_final_state=True)
        assert state.shape == state_ref.shape == (B, HV, K, V) and state.dtype == state_ref.dtype == torch.float32
        assert relative_error(state, state_ref) < 1e-5
        assert relative_error(o.double(), o_ref.double()) < 1e-2  # bfloat16 output rounding


def test_adapter_honours_packed_sequences():
    """cu_seqlens (the layer's cu_seq_lens_q), which transformers' own function refuses without FLA."""
    torch.manual_seed(4)
    lengths, H, HV, K, V = (7, 12), 1, 2, 16, 16
    T = sum(lengths)
    q, k = F.normalize(torch.randn(1, T, H, K, dtype=torch.float64), dim=-1), torch.randn(1, T, H, K,
                                                                                       dtype=torch.float64)
    v, g, beta = torch.randn(1, T, HV, V, dtype=torch.float64), -torch.rand(1, T, HV, dtype=torch.float64), \
        torch.rand(1, T, HV, dtype=torch.float64)
    cu = torch.tensor([0, lengths[0], T], dtype=torch.int32)
    require("qwen3_5")
    import hf_reference as hf
    o, state = gdn_hf.chunk_gated_delta_rule(q, k, v, g=g, beta=beta, output_final_state=True, cu_seqlens=cu,
                                             use_qk_l2norm_in_kernel=True)
    for i, (start, end) in enumerate(((0, lengths[0]), (lengths[0], T))):
        part = [t[:, start:end] for t in (q, k, v, g, beta)]
        o_ref, state_ref = hf.chunk64(*part, output_final_state=True, use_qk_l2norm_in_kernel=True)
        assert relative_error(o[:, start:end], o_ref) < 1e-12
        assert relative_error(state[i], state_ref[0]) < 1e-12


@pytest.mark.parametrize("name", ["qwen3_5", "qwen3_next"])
def test_packed_sequences_give_what_separate_sequences_give(name):
    """Padding-free training (DataCollatorWithFlattening: position_ids and cu_seq_lens_q) through
    a whole model of linear-attention layers: the short convolution keeps the sequences apart as
    the delta rule does (its PyTorch fallback alone would run across them)."""
    require(name)
    config = tiny_model(name).config
    config.layer_types = ["linear_attention", "linear_attention"]
    config.num_hidden_layers = 2
    torch.manual_seed(0)
    model = type(tiny_model(name))(config).double().eval()
    a, b = tokens(1, 11, seed=3), tokens(1, 7, seed=4)
    offsets = torch.tensor([0, 11, 18], dtype=torch.int32)
    packing = dict(position_ids=torch.cat([torch.arange(11), torch.arange(7)])[None], cu_seq_lens_q=offsets,
                   cu_seq_lens_k=offsets, max_length_q=11, max_length_k=11, use_cache=False)
    with gdn_hf.patched():
        separate = torch.cat([model(a, use_cache=False).logits, model(b, use_cache=False).logits], 1)
        packed = model(torch.cat([a, b], 1), **packing).logits
    assert relative_error(packed, separate) < 1e-12


def test_patch_is_idempotent_and_unpatch_restores_the_very_originals():
    require("qwen3_5")  # transformers >= 5.1: the layers call module globals
    convolutions = {name: modeling(name).causal_conv1d_fn for name in PRESENT}
    originals = {name: (getattr(modeling(name), CHUNK), getattr(modeling(name), RECURRENT)) for name in PRESENT}
    assert gdn_hf.patched_models() == ()
    assert gdn_hf.patch() == PRESENT
    assert gdn_hf.patch() == PRESENT
    for name in PRESENT:
        assert getattr(modeling(name), CHUNK) is gdn_hf.chunk_gated_delta_rule
        assert getattr(modeling(name), RECURRENT) is gdn_hf.recurrent_gated_delta_rule
    others = tuple(n for n in PRESENT if n != "qwen3_next")
    assert gdn_hf.unpatch("qwen3_next") == ("qwen3_next",)
    assert gdn_hf.patched_models() == others
    assert gdn_hf.unpatch() == others
    assert gdn_hf.unpatch() == ()
    for name, (chunk, recurrent) in originals.items():
        assert getattr(modeling(name), CHUNK) is chunk and getattr(modeling(name), RECURRENT) is recurrent
        assert modeling(name).causal_conv1d_fn is convolutions[name]


def test_overlapping_blocks_and_a_patch_inside_a_block_keep_what_they_patched():
    """patched() blocks on two threads overlap: the first to end leaves the other's models patched;
    an explicit patch() inside a block outlives it."""
    require("qwen3_5")
    first, second = gdn_hf.patched(), gdn_hf.patched("qwen3_5")
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gdn_hf.patched_models() == ("qwen3_5",)
    second.__exit__(None, None, None)
    assert gdn_hf.patched_models() == ()
    with gdn_hf.patched():
        gdn_hf.patch("qwen3_next")
    assert gdn_hf.patched_models() == ("qwen3_next",)
    gdn_hf.unpatch()


def test_a_parameter_the_adapter_does_not_know_leaves_the_model_unpatched(monkeypatch):
    """A later transformers whose function takes, say, a padding mask: the adapter would drop it."""
    require("qwen3_5")
    def with_mask(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                  use_qk_l2norm_in_kernel=False, attention_mask=None, **kwargs):
        raise AssertionError("never called")

    monkeypatch.setattr(modeling("qwen3_5"), CHUNK, with_mask)
    with pytest.warns(UserWarning, match="qwen3_5.*does not know: attention_mask"):
        assert gdn_hf.patch() == tuple(n for n in PRESENT if n != "qwen3_5")
    gdn_hf.unpatch()


def test_context_manager_leaves_an_outer_patch_in_place():
    require("qwen3_5")  # transformers >= 5.1: the layers call module globals
    gdn_hf.patch("qwen3_5")
    with gdn_hf.patched() as now:
        assert now == PRESENT == gdn_hf.patched_models()
    assert gdn_hf.patched_models() == ("qwen3_5",)
    with pytest.raises(RuntimeError), gdn_hf.patched("qwen3_next"):
        raise RuntimeError("the block fails")
    assert gdn_hf.patched_models() == ("qwen3_5",)


def test_unknown_model_names_are_refused():
    with pytest.raises(gdn.InvalidArgumentError, match="qwen2"):
        gdn_hf.patch(["qwen3_5", "qwen2"])
    assert gdn_hf.patched_models() == ()


def test_changed_signature_is_refused_or_skipped_with_a_warning(monkeypatch):
    require("qwen3_5")  # transformers >= 5.1: the layers call module globals
    def renamed(query, key, value, beta, g, **kwargs):  # g and beta swapped: not the convention gdn knows
        raise AssertionError("never called")

    monkeypatch.setattr(modeling("qwen3_5"), CHUNK, renamed)
    with pytest.raises(gdn.UnsupportedError, match=r"qwen3_5.*torch_chunk_gated_delta_rule"):
        gdn_hf.patch(["qwen3_5", "qwen3_next"])
    assert gdn_hf.patched_models() == ()  # the request failed as a whole: nothing patched
    with pytest.warns(UserWarning, match="qwen3_5"):
        assert gdn_hf.patch() == tuple(n for n in PRESENT if n != "qwen3_5")
    assert getattr(modeling("qwen3_5"), CHUNK) is renamed


def test_layer_that_no_longer_calls_the_module_function_is_refused(monkeypatch):
    layer = modeling("qwen3_next").Qwen3NextGatedDeltaNet

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        return hidden_states

    monkeypatch.setattr(layer, "forward", forward)
    with pytest.raises(gdn.UnsupportedError, match="calls neither"):
        gdn_hf.patch("qwen3_next")


def test_transformers_without_any_known_model_raises(monkeypatch):
    monkeypatch.setattr(gdn_hf, "MODELS", {"qwen9": ("transformers.models.qwen9.modeling_qwen9", "Qwen9Layer")})
    with pytest.raises(gdn.UnsupportedError, match=r"qwen9.*not in this transformers.*nothing was patched"):
        gdn_hf.patch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gdn_hf.unpatch() == ()
