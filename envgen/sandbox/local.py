"""Local backend: the runtime as a subprocess with rlimits, in a private temporary work dir.

For trusted packs and machines without Docker. rlimits bound CPU seconds, address space, open files,
file size and (for non-root users) processes; the runtime runs in its own process group, and closing
kills the whole group. `hidden/` is copied in only for verification.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

from ..errors import EnvgenError
from ..pack import Pack
from ..paths import bundled
from .base import Channel, Sandbox

MAX_FILE_BYTES = 1 << 30
MAX_OPEN_FILES = 256
MAX_PROCS = 256


def describe_tools(env_dir: str | os.PathLike, python: str | None = None) -> list[dict]:
    """The OpenAI schemas of the tools in ``env_dir/tools.py``, as the runtime derives them."""
    with tempfile.TemporaryDirectory(prefix="envgen-describe-") as work:
        out = subprocess.run([python or sys.executable, "-I", "-B", str(bundled("envs") / "runtime" / "server.py"),
                              "--describe", "--env", str(env_dir), "--work", work],
                             capture_output=True, text=True, cwd=work, timeout=120)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvgenError(f"{env_dir}/tools.py: cannot derive tool schemas: {last}")
    return json.loads(out.stdout)


class LocalSandbox(Sandbox):
    backend = "local"

    def __init__(self, pack: Pack, python: str | None = None):
        super().__init__(pack)
        self.python = python or sys.executable
        self.root = tempfile.mkdtemp(prefix="envgen-sbx-")
        self.work = os.path.join(self.root, "work")
        self.hidden = os.path.join(self.root, "hidden")
        os.makedirs(self.work)
        self._proc: subprocess.Popen | None = None

    def _limits(self) -> None:
        lim = self.limits
        cpu = int(lim.episode_timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        mem = lim.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        if os.getuid() != 0:  # root ignores RLIMIT_NPROC; the Docker backend's pids limit covers untrusted packs
            resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCS, MAX_PROCS))

    def _spawn(self) -> Channel:
        lim = self.limits
        cmd = [self.python, "-I", "-B", str(bundled("envs") / "runtime" / "server.py"),
               "--env", str(self.pack.env_dir.resolve()), "--work", self.work,
               "--verifiers", str(bundled("verifiers")),
               "--output-limit", str(lim.output_limit), "--step-timeout", str(lim.step_timeout_s)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.root, "TMPDIR": self.root,
               "LANG": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0"}
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      cwd=self.work, env=env, start_new_session=True, preexec_fn=self._limits,
                                      close_fds=True)
        return Channel(self._proc.stdout.fileno(), self._proc.stdin.fileno())

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def _stage_hidden(self) -> str | None:
        src = self.pack.root / "hidden"
        if not src.is_dir():
            return None
        shutil.rmtree(self.hidden, ignore_errors=True)
        shutil.copytree(src, self.hidden)
        return self.hidden

    def _unstage_hidden(self) -> None:
        shutil.rmtree(self.hidden, ignore_errors=True)

    def _release(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
