"""Sandboxes: where an episode's tools and verifier run. `open_sandbox` picks the backend."""

from __future__ import annotations

from typing import Literal

from ..errors import InputError
from ..pack.format import Pack
from .engine import docker_available
from .base import Sandbox, ToolResult, Verdict
from .docker import DockerSandbox
from .local import LocalSandbox
from .pool import default_pool

Backend = Literal["local", "docker", "auto"]
BACKENDS = ("local", "docker", "auto")


def open_sandbox(pack: Pack, backend: str = "local", **options) -> Sandbox:
    """A started sandbox for `pack`; `auto` is Docker when an engine answers, else local.

    For Docker, ``pool=True`` takes containers from the process-wide warm pool."""
    if backend not in BACKENDS:
        raise InputError(f"unknown sandbox backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "local":
        sbx: Sandbox = LocalSandbox(pack, **options)
    else:
        if backend == "auto" and not docker_available():
            sbx = LocalSandbox(pack, **options)
        else:
            if options.get("pool") is True:
                options["pool"] = default_pool()
            sbx = DockerSandbox(pack, **options)
    return sbx.__enter__()


__all__ = ["Sandbox", "ToolResult", "Verdict", "LocalSandbox", "open_sandbox", "BACKENDS", "Backend"]
