"""gdn.integrations.transformers as users run it: assisted and padded generation with caches, empty
chunks, the kernels hub's wrapper and its environment switch, FLA importable, and layers that
bind the delta-rule functions on the instance (transformers before 5.1)."""

import os
import subprocess
import sys
import textwrap
import types

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import gdn  # noqa: E402
from gdn.integrations import transformers as gdn_hf  # noqa: E402

from transformers_support import (  # noqa: E402  (the fixtures are used by name)
    float64_compute, gdn_calls, generate, no_patch_leaks, tiny_model, tokens)


def assisted(model, assistant, prompt, steps, **kwargs):
    return model.generate(prompt, assistant_model=assistant, max_new_tokens=steps, min_new_tokens=steps,
                          do_sample=False, use_cache=True, pad_token_id=0, **kwargs)


def test_assisted_generation_matches_unpatched(gdn_calls):
    """The assistant drafts tokens that the model then checks in one multi-token step; transformers
    keeps the states of those tokens, and may send the delta rule a chunk with no tokens."""
    model, assistant = tiny_model("qwen3_5", seed=0), tiny_model("qwen3_5", seed=5)
    prompt = tokens(1, 7)
    with float64_compute("qwen3_5"):
        try:
            reference = assisted(model, assistant, prompt, 10)
        except ValueError as e:  # transformers before 5.25
            if "stateful" not in str(e):
                raise
            pytest.skip(f"transformers {transformers.__version__}: {e}")
        plain = generate(model, prompt, 10)
        assert not gdn_calls
        with gdn_hf.patched():
            sequences = assisted(model, assistant, prompt, 10)
    assert torch.equal(reference, plain)  # the premise: assisted greedy decoding is greedy decoding
    assert torch.equal(sequences, reference)
    # transformers keeps a state per drafted token: the chunk before them can have no tokens at all.
    assert any(T == 0 for T, _, _ in gdn_calls), gdn_calls


def test_left_padded_batch_generation_matches_unpatched(gdn_calls):
    model = tiny_model("qwen3_next")
    prompt = tokens(2, 9, seed=4)
    mask = torch.ones_like(prompt)
    prompt[0, :3], mask[0, :3] = 0, 0  # the first prompt is 3 tokens shorter, padded on the left
    with float64_compute("qwen3_next"):
        reference = model.generate(prompt, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0)
        with gdn_hf.patched():
            sequences = model.generate(prompt, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(sequences, reference) and gdn_calls


@pytest.mark.parametrize("with_state", [True, False])
def test_a_chunk_without_tokens_returns_the_state_it_was_given(with_state):
    B, H, HV, K, V = 2, 2, 4, 16, 8
    q = k = torch.zeros(B, 0, H, K, dtype=torch.float64)
    v = torch.zeros(B, 0, HV, V, dtype=torch.float64)
    g = beta = torch.zeros(B, 0, HV, dtype=torch.float64)
    state = torch.randn(B, HV, K, V, dtype=torch.float64) if with_state else None
    for adapter in (gdn_hf.chunk_gated_delta_rule, gdn_hf.recurrent_gated_delta_rule):
        o, final = adapter(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True,
                           use_qk_l2norm_in_kernel=True)
        assert o.shape == (B, 0, HV, V) and o.dtype == torch.float64
        assert torch.equal(final, state) if with_state else torch.count_nonzero(final) == 0


def run_python(code, **env):
    """Runs ``code`` in a fresh interpreter (transformers decides at import where its layers route)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=600, cwd=os.path.dirname(__file__), env={**os.environ, **env})
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# Patches, builds a tiny model, and checks every linear-attention layer's call reached gdn.
_PATCH_AND_RUN = """
    import gdn.torch, torch
    from gdn.integrations import transformers as gdn_hf
    from transformers_support import PRESENT, tiny_model, tokens
    calls = []
    real = gdn.torch.chunk_gated_delta_rule
    gdn.torch.chunk_gated_delta_rule = lambda *a, **k: calls.append(1) or real(*a, **k)
    assert gdn_hf.patch() == PRESENT, gdn_hf.patched_models()
    model = tiny_model("qwen3_5", dtype=torch.float32)
    with torch.no_grad():
        model(tokens(1, 20), use_cache=False)
    assert len(calls) == 2, calls
"""


@pytest.mark.parametrize("use_hub_kernels", ["NO", "YES"])
def test_patch_whatever_use_hub_kernels_says(use_hub_kernels):
    run_python(_PATCH_AND_RUN, USE_HUB_KERNELS=use_hub_kernels)


def test_patch_with_fla_importable():
    """With FLA importable, transformers routes its layers to FLA's kernels (its own PyTorch code on
    CPU tensors); patch() still puts gdn in."""
    fla_site = os.environ.get("GDN_FLA_SITE")
    if not fla_site or not os.path.isdir(os.path.join(fla_site, "fla")):
        pytest.skip("no FLA install (set GDN_FLA_SITE)")
    run_python("import sys; sys.path.insert(0, %r); import fla\n" % fla_site + textwrap.dedent(_PATCH_AND_RUN))


def _instance_bound_modeling():
    """A modeling module written as transformers 4.57 to 5.0 write Qwen3-Next's layer: the layer's
    __init__ binds FLA's function when FLA is importable, else the module's own, on the instance."""
    module = types.ModuleType("instance_bound_modeling")

    def torch_chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False):
        return "transformers' chunk", None

    def torch_recurrent_gated_delta_rule(query, key, value, g, beta, initial_state, output_final_state,
                                         use_qk_l2norm_in_kernel=False):
        return "transformers' recurrent", None

    class GatedDeltaNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.chunk_gated_delta_rule = torch_chunk_gated_delta_rule
            self.recurrent_gated_delta_rule = torch_recurrent_gated_delta_rule

        def forward(self, q, k, v, g, beta, state=None):
            if state is None:
                return self.chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=None,
                                                   output_final_state=True, use_qk_l2norm_in_kernel=True)
            return self.recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=state,
                                                   output_final_state=True, use_qk_l2norm_in_kernel=True)

    module.torch_chunk_gated_delta_rule = torch_chunk_gated_delta_rule
    module.torch_recurrent_gated_delta_rule = torch_recurrent_gated_delta_rule
    module.GatedDeltaNet = GatedDeltaNet
    return module


def test_layers_that_bind_the_functions_on_the_instance(monkeypatch):
    module = _instance_bound_modeling()
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(gdn_hf, "MODELS", {"old_qwen3_next": (module.__name__, "GatedDeltaNet")})
    before = module.GatedDeltaNet()
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 5, 2, 8, generator=gen, dtype=torch.float64), torch.randn(1, 5, 2, 8, generator=gen,
                                                                                     dtype=torch.float64)
    v, g, beta = (torch.randn(1, 5, 2, 4, generator=gen, dtype=torch.float64), -torch.rand(1, 5, 2, generator=gen,
                  dtype=torch.float64), torch.rand(1, 5, 2, generator=gen, dtype=torch.float64))
    assert before(q, k, v, g, beta)[0] == "transformers' chunk"
    assert gdn_hf.patch() == ("old_qwen3_next",)
    after = module.GatedDeltaNet()
    for layer in (before, after):  # built before and after patch(): both on gdn
        o, state = layer(q, k, v, g, beta)
        expected, expected_state = gdn.torch.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True,
                                                                    use_qk_l2norm_in_kernel=True)
        assert torch.equal(o, expected) and torch.equal(state, expected_state)
        o, _ = layer(q[:, :1], k[:, :1], v[:, :1], g[:, :1], beta[:, :1], state=state)
        assert isinstance(o, torch.Tensor) and o.shape == (1, 1, 2, 4)
    assert gdn_hf.patched_models() == ("old_qwen3_next",)
    assert gdn_hf.unpatch() == ("old_qwen3_next",)
    for layer in (before, after):  # each instance's own binding is back
        assert layer(q, k, v, g, beta)[0] == "transformers' chunk"
        assert layer(q, k, v, g, beta, state=state)[0] == "transformers' recurrent"
    assert "chunk_gated_delta_rule" not in vars(module.GatedDeltaNet)


def _state_sized_allocations(model, prompt, steps, state_bytes):
    """Tensors of at least a layer's recurrent state's size that greedy generation allocates."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        sequences = generate(model, prompt, steps)
    return sequences, sum(1 for e in prof.events() if e.self_cpu_memory_usage >= state_bytes)


def test_decoding_updates_the_cache_state_in_place_with_no_state_allocated_per_token(monkeypatch):
    """Each generated token's step writes the new state over the cache's own tensor: the number of
    state-sized allocations does not grow with the number of tokens (transformers' own step makes
    several per layer and token, which shows the measure sees them)."""
    model = tiny_model("qwen3_5")
    prompt = tokens(2, 9)
    config = model.config
    state_bytes = (2 * config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim
                   * torch.float64.itemsize)
    steps = (2, 6)
    with float64_compute("qwen3_5"):
        plain = {n: _state_sized_allocations(model, prompt, n, state_bytes) for n in steps}
        with gdn_hf.patched():
            ours = {n: _state_sized_allocations(model, prompt, n, state_bytes) for n in steps}
    for n in steps:
        assert torch.equal(ours[n][0], plain[n][0])
    linear_layers, more_tokens = 2, steps[1] - steps[0]
    assert plain[steps[1]][1] - plain[steps[0]][1] >= linear_layers * more_tokens, plain
    assert ours[steps[1]][1] == ours[steps[0]][1], ours

    # And the state each step updates is the cache's, at the same address every token.
    seen = []
    real = gdn.torch.fused_recurrent_gated_delta_rule

    def spy(*args, initial_state=None, **kwargs):
        o, final = real(*args, initial_state=initial_state, **kwargs)
        seen.append((initial_state.data_ptr(), final is initial_state))
        return o, final

    monkeypatch.setattr(gdn.torch, "fused_recurrent_gated_delta_rule", spy)
    with float64_compute("qwen3_5"), gdn_hf.patched(), torch.no_grad():
        out = model(prompt, use_cache=True)
        cache = out.past_key_values
        addresses = {i: cache.layers[i].recurrent_states[0].data_ptr() for i in (0, 2)}
        for _ in range(3):
            out = model(out.logits[:, -1:].argmax(-1), past_key_values=cache, use_cache=True)
    assert len(seen) == 2 * 3 and all(in_place for _, in_place in seen)
    assert {address for address, _ in seen} == set(addresses.values())
    assert {i: cache.layers[i].recurrent_states[0].data_ptr() for i in (0, 2)} == addresses


def test_decoding_step_leaves_a_state_the_cache_did_not_hand_out_alone():
    """A caller's own state, or one of the per-token states a multi-token step keeps in a list:
    the step returns a new final state and leaves the one it was given as it was."""
    gen = torch.Generator().manual_seed(2)
    q, k = (torch.randn(2, 1, 2, 16, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 1, 4, 8, generator=gen, dtype=torch.float64)
    g, beta = -torch.rand(2, 1, 4, generator=gen, dtype=torch.float64), torch.rand(2, 1, 4, generator=gen,
                                                                               dtype=torch.float64)
    state = torch.randn(2, 4, 16, 8, generator=gen, dtype=torch.float64)
    before = state.clone()
    with gdn_hf.patched(), torch.no_grad():
        _, final = gdn_hf.recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=state,
                                                     output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert final is not state and torch.equal(state, before) and not torch.equal(final, before)
