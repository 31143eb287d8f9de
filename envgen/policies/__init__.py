"""Policies that act in an episode: the interface (``base``), oracle / null / OpenAI-compatible endpoints and
rollouts (``builtin``), and a local transformers model (``hf``, needs the rl extra)."""
