"""gdn inside other frameworks.

- ``gdn.integrations.transformers``: ``patch()`` / ``unpatch()`` / ``patched()`` route Hugging Face
  transformers' Qwen3.5, Qwen3.5-MoE and Qwen3-Next gated delta-net layers to gdn.

Each integration is imported on demand, so ``import gdn`` never imports the framework.
"""
