"""Locate the folders envgen ships beside its code (envs/, verifiers/, agents/, rl/, data/), and its cache.

One function, so the same code works from a wheel (folders under ``envgen/_bundled``) and from a
checkout (folders at the repository root).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent
BUNDLED = ("envs", "verifiers", "agents", "rl", "data")


@cache
def bundled(name: str) -> Path:
    """Return the path of a bundled folder, e.g. ``bundled("envs")`` or ``bundled("rl/templates")``."""
    top = name.split("/", 1)[0]
    if top not in BUNDLED:
        raise ValueError(f"unknown bundled folder {name!r}; expected one of {', '.join(BUNDLED)}")
    for root in (_PKG / "_bundled", _PKG.parent):
        path = root / name
        if path.exists():
            return path
    raise FileNotFoundError(f"bundled folder {name!r} is missing from this envgen install ({_PKG})")


def cache_dir() -> Path:
    """envgen's one cache folder: ``ENVGEN_CACHE``, else ``$XDG_CACHE_HOME/envgen`` (default ``~/.cache/envgen``).

    Everything envgen keeps between runs lives under it unless a flag says otherwise: the state store
    (``state.sqlite``, unless ``ENVGEN_STORE`` names another), work dirs, pulled packs, image caches and
    the content-hash cache.
    """
    explicit = os.environ.get("ENVGEN_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return (Path(base) / "envgen").resolve()
