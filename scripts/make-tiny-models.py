#!/usr/bin/env python3
"""The tiny random Qwen3.5 and Qwen3-Next models of docs/GGML.md, as F32 GGUF files.

    python scripts/make-tiny-models.py --llama-cpp SRC [--out DIR] [--only qwen35|qwen3next]

Each model is made by transformers from a config with the Qwen3.5-27B delta-net dimensions (16 key
heads, 48 value heads, head size 128, conv kernel 4) and small everything else (hidden 512, MLP
1024, 4 layers: 3 linear attention, 1 full attention; vocabulary 1022), with random weights from a
fixed seed, saved as safetensors and converted to F32 GGUF by the pinned llama.cpp's own
convert_hf_to_gguf.py (SRC: its source folder, as scripts/setup-llama-cpp.sh prints it), with no
multi-token-prediction layers (these models have none).

The tokenizer is byte-level BPE: two special tokens, 256 byte tokens and the 676 merges of two
lowercase letters (the converter pads the vocabulary to 1022). Its pre-tokenizer is GPT-2's, which the converter would
recognise only by a hash of a known model's vocabulary: the script tells it "gpt-2" directly. The
tests feed token ids, so what the tokenizer splits does not matter; it only has to load.

Needs torch, transformers and tokenizers (the test environment of scripts/test-python.sh has
them). About a minute on 2 cores; 170-180 MB per model. Writes DIR/tiny-<name>-f32.gguf and
leaves DIR/tiny-<name>-hf (the transformers checkpoint) beside it.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DELTA_NET = dict(
    linear_num_key_heads=16,
    linear_num_value_heads=48,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
)
SMALL = dict(
    hidden_size=512,
    intermediate_size=1024,
    num_hidden_layers=4,
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=128,
    vocab_size=1022,
    max_position_embeddings=8192,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=0,
    pad_token_id=0,
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>"]


def model_config(name: str):
    if name == "qwen35":
        from transformers import Qwen3_5TextConfig

        return "Qwen3_5ForCausalLM", Qwen3_5TextConfig(**DELTA_NET, **SMALL)
    from transformers import Qwen3NextConfig

    # A small MoE (4 experts, 2 per token, a shared expert) on every layer, as the real model has.
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=256,
               shared_expert_intermediate_size=256, decoder_sparse_step=1, mlp_only_layers=[])
    return "Qwen3NextForCausalLM", Qwen3NextConfig(**DELTA_NET, **SMALL, **moe)


def save_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({ch: len(SPECIAL_TOKENS) + i for i, ch in enumerate(alphabet)})
    # llama.cpp refuses a BPE vocabulary without merges: every pair of lowercase letters (676).
    letters = "abcdefghijklmnopqrstuvwxyz"
    merges = [(a, b) for a in letters for b in letters]
    vocab.update({a + b: len(vocab) + i for i, (a, b) in enumerate(merges)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    end = SPECIAL_TOKENS[0]
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=end, eos_token=end, pad_token=end).save_pretrained(folder)


def save_checkpoint(name: str, folder: Path, seed: int) -> None:
    import torch
    import transformers

    architecture, config = model_config(name)
    config.architectures = [architecture]
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config).to(torch.float32).eval()
    model.save_pretrained(folder, safe_serialization=True)
    save_tokenizer(folder)


def convert(llama_cpp: Path, folder: Path, gguf: Path) -> None:
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    sys.path.insert(0, str(llama_cpp))
    import conversion.base
    import convert_hf_to_gguf

    conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(folder), "--outtype", "f32", "--no-mtp", "--outfile", str(gguf)]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="the pinned llama.cpp source folder")
    parser.add_argument("--out", type=Path, default=Path(os.path.expanduser("~/.cache/gdn/tiny-models")))
    parser.add_argument("--only", choices=["qwen35", "qwen3next"], help="make one model (default: both)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not (args.llama_cpp / "convert_hf_to_gguf.py").is_file():
        parser.error(f"{args.llama_cpp} has no convert_hf_to_gguf.py")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in [args.only] if args.only else ["qwen35", "qwen3next"]:
        folder, gguf = args.out / f"tiny-{name}-hf", args.out / f"tiny-{name}-f32.gguf"
        partial = gguf.with_name(gguf.name + ".part")
        save_checkpoint(name, folder, args.seed)
        convert(args.llama_cpp, folder, partial)
        partial.replace(gguf)  # only a whole file under the name the tests look for
        print(f"make-tiny-models: {gguf} ({gguf.stat().st_size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
