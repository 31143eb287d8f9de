"""RL integration: packs as TRL GRPO environments, thinking-retention templates, DeepSeek-V3.2 stabilizers.

Attributes load on first use, so ``import envgen.rl`` stays light: the pack adapter and the template
helpers need no torch; the trainer, the stabilizers and the tiny offline models import torch, trl and
transformers (the ``rl`` extra) only when they are touched.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "environment_class": "env",
    "environment_factories": "env",
    "pack_dataset": "env",
    "pack_key": "env",
    "verifier_reward": "env",
    "ToolPrefetch": "concurrency",
    "FAMILIES": "templates",
    "template_path": "templates",
    "chat_template": "templates",
    "response_template": "templates",
    "install_template": "templates",
    "EnvgenGRPOConfig": "trainer",
    "EnvgenGRPOTrainer": "trainer",
    "deepseek_v32_config": "config",
    "load_config": "config",
    "train": "training",
    "build_trainer": "training",
    "summarize": "training",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'envgen.rl' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
