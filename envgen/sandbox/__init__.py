"""Sandboxes: where an episode's tools and verifier run. `open_sandbox` picks the backend."""

from __future__ import annotations

from typing import Literal

from ..errors import EnvgenError
from ..pack import Pack
from .base import Sandbox, ToolResult, Verdict
from .local import LocalSandbox

Backend = Literal["local", "docker", "auto"]
BACKENDS = ("local", "docker", "auto")


def open_sandbox(pack: Pack, backend: str = "local", **options) -> Sandbox:
    """A started sandbox for `pack`; `auto` is Docker when an engine answers, else local."""
    if backend not in BACKENDS:
        raise EnvgenError(f"unknown sandbox backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "local":
        sbx: Sandbox = LocalSandbox(pack, **options)
    else:
        from .docker import DockerSandbox, docker_available

        if backend == "auto" and not docker_available():
            sbx = LocalSandbox(pack, **options)
        else:
            sbx = DockerSandbox(pack, **options)
    return sbx.__enter__()


__all__ = ["Sandbox", "ToolResult", "Verdict", "LocalSandbox", "open_sandbox", "BACKENDS", "Backend"]
