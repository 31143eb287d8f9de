"""Packs' episodes over the network (OpenEnv's protocol): the server (`server`) and a client (`client`).

``envgen serve PACK...`` runs `serve`; any OpenEnv ``EnvClient`` drives its sessions, and the remote sandbox
backend (``envgen.sandbox.remote``, ``sandbox="remote:URL"``) runs envgen's own consumers on it.
"""

from __future__ import annotations

from typing import Any, Callable

from ..pack.format import Pack


def serve(packs: list[Pack], *, host: str = "127.0.0.1", port: int = 8000, token: str | None = None,
          no_token: bool = False, backend: str = "local", max_sessions: int = 8, idle_timeout_s: float = 300.0,
          pool: bool = False, log: Callable[[str], None] = print, **uvicorn_options: Any) -> None:
    """Serve `packs` until interrupted. The token is `token`, else a new one (printed through `log`); none
    only with ``no_token`` on a loopback host."""
    import uvicorn

    from .server import build_app, resolve_token

    token = resolve_token(token, no_token, host)
    options = {"pool": True} if pool and backend in ("docker", "auto") else {}
    app = build_app(packs, backend=backend, token=token, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                    sandbox_options=options)
    names = ", ".join(f"{p.manifest.name}@{p.manifest.version[:12]}" for p in packs)
    log(f"serving {names} on http://{host}:{port} (sandbox {backend}, at most {max_sessions} sessions, "
        f"idle sessions closed after {idle_timeout_s:g} s)")
    log(f"token: {token}" if token else "no token required (loopback only)")
    log(f"connect: OpenEnv EnvClient(base_url='http://{host}:{port}') with Authorization: Bearer TOKEN, or "
        f"sandbox='remote:http://{host}:{port}' with ENVGEN_SERVE_TOKEN set")
    uvicorn.run(app, host=host, port=port, log_level=uvicorn_options.pop("log_level", "warning"),
                ws_max_size=64 << 20, **uvicorn_options)
