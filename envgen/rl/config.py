"""Training configs from YAML: the DeepSeek-V3.2 preset (``rl/configs/deepseek_v32.yaml``) and any other file
of ``EnvgenGRPOConfig`` fields. The YAML file is the single source of the preset's values; the Python
helper only loads it, so ``envgen train --config`` and ``deepseek_v32_config()`` cannot drift apart."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..paths import bundled

DEEPSEEK_V32 = "deepseek_v32.yaml"


def config_path(name_or_path: str | os.PathLike) -> Path:
    """A config file: a path, or the name of a bundled one (``deepseek_v32`` or ``deepseek_v32.yaml``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    name = path.name if path.suffix else f"{path.name}.yaml"
    bundled_path = bundled("rl/configs") / name
    if bundled_path.is_file():
        return bundled_path
    raise InputError(f"{name_or_path}: no such config file (bundled configs: "
                      f"{', '.join(sorted(p.name for p in bundled('rl/configs').glob('*.yaml')))})")


def config_values(name_or_path: str | os.PathLike) -> dict[str, Any]:
    """The key/values of a YAML config (an ``env`` mapping, as TRL's parser allows, is applied to os.environ)."""
    import yaml

    path = config_path(name_or_path)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: a config must be a YAML mapping of training arguments")
    for key, value in (data.pop("env", None) or {}).items():
        os.environ[str(key)] = str(value)
    return data


def load_config(name_or_path: str | os.PathLike, **overrides: Any):
    """An ``EnvgenGRPOConfig`` from a YAML file, with ``overrides`` on top (e.g. ``output_dir``, ``max_steps``)."""
    from .trainer import EnvgenGRPOConfig  # torch, trl: the rl extra, loaded only when a config is built

    values = {**config_values(name_or_path), **overrides}
    known = {f.name for f in dataclasses.fields(EnvgenGRPOConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise InputError(f"{config_path(name_or_path)}: unknown training arguments {unknown}")
    try:
        return EnvgenGRPOConfig(**values)
    except (ValueError, TypeError) as e:  # transformers/TRL validation, e.g. bf16 asked for on a CPU
        hint = " (on a CPU: --set bf16=false --set use_cpu=true)" if "bf16" in str(e) else ""
        raise InputError(f"{config_path(name_or_path)}: {str(e).splitlines()[0]}{hint}") from None


def deepseek_v32_config(**overrides: Any):
    """The DeepSeek-V3.2 preset as an ``EnvgenGRPOConfig`` (a ``GRPOConfig``): GRPO loss, R - mean(R)
    advantages, unbiased KL, off-policy sequence masking (delta 0.5, a tuned value), keep sampling mask
    and keep routing. ``overrides`` replace preset values."""
    return load_config(DEEPSEEK_V32, **overrides)
