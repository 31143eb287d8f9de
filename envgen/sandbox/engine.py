"""The shared Docker engine client: one connection pool for every sandbox and image build of this process.

Below both the Docker sandbox and the image builder, which each need the engine and one of which uses the
other. The ``docker`` SDK is imported where it is used, so a host without it still imports envgen.
"""

from __future__ import annotations

import threading

from ..errors import SandboxError

_engine_lock = threading.Lock()
_engine = None
_available: bool | None = None


def engine():
    """The shared docker client (one connection pool for every sandbox of this process)."""
    global _engine
    import docker  # the SDK loads when a sandbox or build first needs the engine

    with _engine_lock:
        if _engine is None:
            try:
                client = docker.from_env(timeout=120, max_pool_size=64)
                client.ping()
            except Exception as e:
                raise SandboxError(f"no Docker engine answers ({type(e).__name__}: {e}); start dockerd "
                                   "(.ci/setup-docker.sh) or use the local sandbox") from None
            _engine = client
        return _engine


def _is_local(client) -> bool:
    return client.api.base_url == "http+docker://localhost"


def docker_available(refresh: bool = False) -> bool:
    """True when a local Docker engine answers within 3 s (cached; `refresh` asks again).

    Local means a unix socket: the backend's FIFOs live in a host dir bind-mounted into the container,
    so an engine on another machine (tcp://, ssh://) cannot serve it and counts as unavailable.
    """
    global _available
    if _available is None or refresh:
        try:
            import docker  # see engine()

            client = docker.from_env(timeout=3)
            try:
                client.ping()
                _available = _is_local(client)
            finally:
                client.close()
        except Exception:
            _available = False
    return _available
