"""What the transformers tests share: tiny random Qwen3.5 / Qwen3.5-MoE / Qwen3-Next models, float64
compute through transformers' own code, and fixtures that keep patches from leaking and record
the calls that reach gdn."""

import importlib

import pytest
import torch
import torch.nn.functional as F
import transformers

import gdn.torch
from gdn.integrations import transformers as gdn_hf

CHUNK, RECURRENT = "torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"
VOCAB = 61


def modeling(name):
    return importlib.import_module(gdn_hf.MODELS[name][0])


def _present(name):
    try:
        modeling(name)
    except ModuleNotFoundError:
        return False
    return True


# The models this transformers has (Qwen3-Next only before 5.1).
PRESENT = tuple(name for name in gdn_hf.MODELS if _present(name))


def require(name):
    """Skips the calling test when this transformers does not have model ``name``."""
    if name not in PRESENT:
        pytest.skip(f"transformers {transformers.__version__} has no {name}")


@pytest.fixture(autouse=True)
def no_patch_leaks():
    """Every test starts and ends with transformers' own functions in place."""
    originals = {name: (getattr(modeling(name), CHUNK), getattr(modeling(name), RECURRENT)) for name in PRESENT}
    gdn_hf.unpatch()
    yield
    gdn_hf.unpatch()
    for name, (chunk, recurrent) in originals.items():
        assert getattr(modeling(name), CHUNK) is chunk and getattr(modeling(name), RECURRENT) is recurrent


class _TorchComputingInFloat64:
    """The torch module, except that the dtypes transformers upcasts to are float64."""

    float32 = torch.float64
    float = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


_tensor_float = torch.Tensor.float


def _float_keeping_float64(self, *args, **kwargs):
    return self if self.dtype == torch.float64 else _tensor_float(self, *args, **kwargs)


class float64_compute:
    """In the block, a modeling module's code upcasts to float64 where it upcasts to float32.

    Two ways transformers upcasts: ``x.to(torch.float32)`` (the module's global ``torch`` is
    swapped for one whose float32 is float64) and ``x.float()`` in its RMS norms and gates (for the
    block, ``Tensor.float`` leaves a float64 tensor as it is). Without the second, every norm would
    round the residual stream to float32 and hide differences below 1e-7.
    """

    def __init__(self, name):
        self.module = modeling(name)

    def __enter__(self):
        self.saved = self.module.torch
        self.module.torch = _TorchComputingInFloat64()
        torch.Tensor.float = _float_keeping_float64

    def __exit__(self, *exc):
        torch.Tensor.float = _tensor_float
        self.module.torch = self.saved


def tiny_model(name, dtype=torch.float64, seed=0):
    """Linear, full, linear attention layers; 2 key heads, 4 value heads (grouped), head size 16."""
    require(name)
    common = dict(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=3, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                  linear_key_head_dim=16, linear_value_head_dim=24, linear_conv_kernel_dim=4,
                  layer_types=["linear_attention", "full_attention", "linear_attention"],
                  max_position_embeddings=256, initializer_range=0.1, attn_implementation="sdpa",
                  experts_implementation="eager")  # grouped_mm takes no float64
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)
    if name == "qwen3_5":
        config, model_class = transformers.Qwen3_5TextConfig(intermediate_size=96, **common), \
            transformers.Qwen3_5ForCausalLM
    elif name == "qwen3_5_moe":
        config, model_class = transformers.Qwen3_5MoeTextConfig(**moe, **common), transformers.Qwen3_5MoeForCausalLM
    elif name == "olmo_hybrid":  # no head_dim; default special tokens past the tiny vocabulary
        config = transformers.OlmoHybridConfig(intermediate_size=96, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                               **{k: v for k, v in common.items() if k != "head_dim"})
        model_class = transformers.OlmoHybridForCausalLM
    elif name == "lara_mini":
        config, model_class = transformers.LaraMiniConfig(**moe, **common), transformers.LaraMiniForCausalLM
    elif name == "qwen4_exp":  # its n-gram embeddings, hyper-connections and indexed attention, made tiny
        exotic = dict(hc_count=2, hc_lowrank=8, ple_embed_dim=16, ngram_size=2, heads_per_ngram=2,
                      ngram_vocab_size_base=256, make_ngram_vocab_size_divisible_by=8, split_ngram_parts=2,
                      indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=16,
                      indexer_compress_ratio=4)
        layers = dict(common, layer_types=["linear_attention", "indexed_attention", "linear_attention"])
        config, model_class = transformers.Qwen4ExpTextConfig(**moe, **exotic, **layers), \
            transformers.Qwen4ExpForCausalLM
    else:
        config, model_class = transformers.Qwen3NextConfig(intermediate_size=96, **moe, **common), \
            transformers.Qwen3NextForCausalLM
    torch.manual_seed(seed)
    return model_class(config).to(dtype).eval()


def tokens(batch, length, seed=1):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(ids, use_cache=False).logits
    # The loss in the logits' dtype (transformers' own loss function upcasts to float32).
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss.backward()
    # (Parameters the loss does not reach have no gradient: Qwen4-Exp's unused n-gram tables, say.)
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def relative_error(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


@pytest.fixture
def gdn_calls(monkeypatch):
    """Records (T, has initial state, wants final state) of every call that reaches gdn.torch's
    two functions; an in-place update (the decoding step) wants its final state."""
    calls = []

    def recording(real):
        def call(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, **kwargs):
            wanted = bool(output_final_state or kwargs.get("inplace_final_state"))
            calls.append((q.shape[1], initial_state is not None, wanted))
            return real(q, k, v, g, beta=beta, scale=scale, initial_state=initial_state,
                        output_final_state=output_final_state, **kwargs)
        return call

    for name in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"):
        monkeypatch.setattr(gdn.torch, name, recording(getattr(gdn.torch, name)))
    return calls


def generate(model, prompt, steps):
    return model.generate(prompt, max_new_tokens=steps, min_new_tokens=steps, do_sample=False, use_cache=True,
                          pad_token_id=0)
