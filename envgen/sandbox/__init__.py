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
from .remote import PREFIX as REMOTE_PREFIX, RemoteSandbox, parse_remote

Backend = Literal["local", "docker", "auto"]
BACKENDS = ("local", "docker", "auto")
"""The backends named by one word; ``remote:URL`` (an ``envgen serve``) is the one that takes an address."""


def check_backend(backend: str) -> str:
    """``backend`` if it names a backend (one of BACKENDS, or ``remote:URL``), else an InputError naming the fix."""
    if isinstance(backend, str) and backend.startswith(REMOTE_PREFIX):
        parse_remote(backend)
        return backend
    if backend not in BACKENDS:
        raise InputError(f"unknown sandbox backend {backend!r}; use one of {', '.join(BACKENDS)} "
                         f"or remote:http://HOST:PORT")
    return backend


def open_sandbox(pack: Pack, backend: str = "local", **options) -> Sandbox:
    """A started sandbox for `pack`; `auto` is Docker when an engine answers, else local; ``remote:URL`` a
    session on an ``envgen serve`` (token from the URL or ENVGEN_SERVE_TOKEN).

    For Docker, ``pool=True`` takes containers from the process-wide warm pool."""
    check_backend(backend)
    if backend.startswith(REMOTE_PREFIX):
        sbx: Sandbox = RemoteSandbox(pack, backend, **options)
    elif backend == "local":
        sbx = LocalSandbox(pack, **options)
    else:
        if backend == "auto" and not docker_available():
            sbx = LocalSandbox(pack, **options)
        else:
            if options.get("pool") is True:
                options["pool"] = default_pool()
            sbx = DockerSandbox(pack, **options)
    return sbx.__enter__()


__all__ = ["Sandbox", "ToolResult", "Verdict", "LocalSandbox", "open_sandbox", "BACKENDS", "Backend",
           "RemoteSandbox", "check_backend"]
