"""A real ``envgen serve`` in a subprocess for the serve tests and bench (started, waited for, stopped)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def need_openenv() -> None:
    """Skip the calling test module when openenv-core (the serve extra) is missing; under CI=true fail instead,
    so a CI without the extra cannot pass by skipping."""
    import pytest

    try:
        import openenv.core.env_server  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            raise RuntimeError(f"CI=true but openenv-core is missing ({e}): install envgen[serve]") from e
        pytest.skip(f"envgen serve needs the serve extra (openenv-core): {e}", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m envgen serve PACKS ARGS`` on a free loopback port; ``url``, ``token``, ``pid``. ``token``:
    the one to give, None for --no-token, "" to let the server generate one (it is then in `output`)."""

    def __init__(self, packs: list[str], *args: str, token: str | None = "test-token-123", timeout: float = 180.0):
        self.port = free_port()
        self.token = token
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "envgen", "serve", *packs, "--port", str(self.port), *args]
        cmd += ["--token", token] if token else [] if token == "" else ["--no-token"]  # "": generated
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.pop("ENVGEN_SERVE_TOKEN", None)
        import tempfile

        self.log = tempfile.NamedTemporaryFile("w+", prefix="envgen-serve-", suffix=".log")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, text=True)
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"envgen serve exited {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("envgen serve did not answer /health in time")
            time.sleep(0.1)

    @property
    def auth_url(self) -> str:
        """The base URL with the token as the password (what a stock OpenEnv EnvClient can carry)."""
        return f"http://envgen:{self.token}@127.0.0.1:{self.port}"

    def metrics(self) -> dict:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.get(self.url + "/metrics", headers=headers, timeout=5.0).json()

    def wait_metrics(self, pred, timeout: float = 15.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if pred(m) or time.monotonic() > deadline:
                return m
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        """What the server printed so far (its token line, warnings, tracebacks)."""
        self.log.flush()
        return Path(self.log.name).read_text()
