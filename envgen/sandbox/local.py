"""Local backend: the sandbox supervisor as a host process, for trusted packs and machines without Docker.

Each sandbox is a private temporary dir (mode 0700, made with exclusive creation): `env/` (a private
copy of the pack's env/, so no tool ever learns the pack's path), `work/` (the episode's state), `tmp/`
(TMPDIR and HOME), and `io/` (the supervisor's FIFOs, and `hidden/` only while the verifier runs). The
supervisor (envs/runtime/supervisor.py) forks the runtime and the verifier, exactly as in a container.

Isolation, best first:

- as root: PID, mount and IPC namespaces (the supervisor is PID 1 there: closing kills every
  descendant, setsid'd or not; /proc shows only the sandbox, so the host's command lines, and the pack
  path on them, are out of sight; /tmp and /dev/shm are private tmpfs; IPC objects are private), the
  host's files hidden but the system's (every top-level dir but /usr, /etc, /bin, /lib... is an empty
  tmpfs: /root, /home, /opt, /srv, /var, /run, the checkout's folder) with only what the episode needs bound
  back (`_interpreter_paths`: the interpreter, its stdlib and site-packages, the runtime, the kit; the
  sandbox dir), so code the agent runs finds no pack, no project and no other sandbox; and the tools run as
  `nobody` when that user can read the interpreter and the runtime, otherwise as root (said once, on stderr);
- otherwise: a child subreaper that kills every descendant, setsid'd ones included, at each episode
  boundary and at close. /dev/shm and System V IPC are then shared with the host's other processes
  (they are not wiped), and the host's command lines are visible: use the Docker backend for packs you
  do not trust.

rlimits bound the runtime's CPU seconds, address space, open files, file size and (for an unprivileged
tool user) processes; a hard wall-clock deadline on the host covers a tool blocked in C code.
"""

from __future__ import annotations

import compileall
import functools
import json
import os
import shutil
import signal
import subprocess
import site
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

from ..errors import InputError, SandboxError
from ..pack.format import Pack
from ..paths import bundled
from .base import Sandbox, verifier_warmups
from .channel import runtime_line_bound
from .supervised import Control, Supervised

MAX_FILE_BYTES = 1 << 30
MAX_OPEN_FILES = 256
MAX_PROCS = 256
NOBODY = 65534
TMP_ROOT = "/tmp"


def describe_tools(env_dir: str | os.PathLike, python: str | None = None) -> list[dict]:
    """The OpenAI schemas of the tools in ``env_dir/tools.py``, as the runtime derives them."""
    with tempfile.TemporaryDirectory(prefix="envgen-describe-") as work:
        out = subprocess.run([python or sys.executable, "-I", "-B", str(bundled("envs") / "runtime" / "server.py"),
                              "--describe", "--env", str(env_dir), "--work", work],
                             capture_output=True, text=True, cwd=work, timeout=120)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"{env_dir}/tools.py: cannot derive tool schemas: {last}")
    return json.loads(out.stdout)


def _reachable(path: str, uid: int, gid: int) -> bool:
    """Whether `uid` (with only `gid`) can reach and read `path`, judged from mode bits (root's view)."""
    p = Path(path)
    for d in [*reversed(p.parents), p]:
        try:
            st = d.stat()
        except OSError:
            return False
        bits = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
        need = 0o1 if d != p or d.is_dir() else 0o4
        if not (st.st_mode >> bits) & need:
            return False
    return True


SYSTEM_DIRS = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys", "tmp"})
"""Top-level dirs a namespaced local sandbox keeps (the system: toolchains, libraries, configuration); every other
top-level entry (/root, /home, /opt, /srv, /var, /run, a checkout's folder) is hidden from it."""


def _interpreter_paths(python: str) -> list[str]:
    """What the sandbox's processes read outside the sandbox dir: the interpreter's binary dir and its prefix (a
    venv's site-packages included: the code family's tests run with it), the stdlib and site-packages, envgen's
    runtime and kit. Not the rest of ``sys.path``: the driving script's folder and PYTHONPATH entries (a checkout,
    a pack beside the script) are none of the episode's business (the runtime runs with ``-I``)."""
    paths = [str(Path(os.path.realpath(python)).parent.parent), str(bundled("envs") / "runtime"),
             str(bundled("verifiers")), str(Path(os.path.abspath(python)).parent.parent),  # install prefix, venv
             *_python_dirs(os.path.abspath(python))]
    return list(dict.fromkeys(p for p in paths if os.path.isdir(p)))


_PYTHON_DIRS = ("import json, site, sys, sysconfig; c = sysconfig.get_paths(); print(json.dumps([sys.prefix, "
                "sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, c['stdlib'], c['platstdlib'], c['purelib'], "
                "c['platlib'], *site.getsitepackages()]))")


@functools.lru_cache(maxsize=None)
def _python_dirs(python: str) -> tuple[str, ...]:
    """`python`'s prefixes, stdlib and site-packages (asked once per interpreter; this one's without asking)."""
    if python == os.path.abspath(sys.executable):
        cfg = sysconfig.get_paths()
        return (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, cfg["stdlib"], cfg["platstdlib"],
                cfg["purelib"], cfg["platlib"], *site.getsitepackages())
    try:
        out = subprocess.run([python, "-I", "-c", _PYTHON_DIRS], capture_output=True, text=True, timeout=60)
        return tuple(json.loads(out.stdout)) if out.returncode == 0 else ()
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return ()


HOST_DIR_KEYS = frozenset({"modules"})
"""Verifier args naming host folders a pack's tests read on the local backend (the code family's node_modules from
``ENVGEN_NODE_MODULES`` or the source checkout): dependencies, bound into a namespaced sandbox like site-packages."""


def _pack_host_dirs(pack: Pack) -> list[str]:
    """The absolute, existing host dirs the pack's tasks name under HOST_DIR_KEYS in their verifier args, and the
    dirs of a host interpreter they name as ``python``."""
    found: list[str] = []

    def walk(obj, key: str | None = None) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, k)
        elif isinstance(obj, list):
            for v in obj:
                walk(v, key)
        elif key in HOST_DIR_KEYS and isinstance(obj, str) and os.path.isabs(obj) and os.path.isdir(obj):
            found.append(obj)
        elif key == "python" and isinstance(obj, str) and os.path.isabs(obj) and os.path.isfile(obj):
            found.extend(_interpreter_paths(obj))  # a test interpreter of the host's (the code family's)

    for t in pack.tasks:
        walk(t.verifier.args)
    return list(dict.fromkeys(found))


def _hidden_host_paths() -> list[str]:
    """The top-level entries of / a namespaced sandbox covers (see SYSTEM_DIRS)."""
    return sorted(os.path.join("/", e.name) for e in os.scandir("/")
                  if e.name not in SYSTEM_DIRS and not e.is_symlink())


AGENT_CODE_FAMILIES = frozenset({"interpreter", "code"})
"""Families whose tools run the policy's own code (a Python interpreter, a patch and its tests)."""
_said: set[str] = set()


def _say_once(text: str) -> None:
    with _identity_lock:
        if text in _said:
            return
        _said.add(text)
    print(text, file=sys.stderr)


_identity_lock = threading.Lock()
_identity: dict[str, tuple[int, int]] = {}


def tool_identity(python: str) -> tuple[int, int]:
    """(uid, gid) the tools run as: yours, or `nobody` when you are root and it can read what it needs."""
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    with _identity_lock:
        if python not in _identity:
            blocked = [p for p in _interpreter_paths(python) if not _reachable(p, NOBODY, NOBODY)]
            if blocked:
                print(f"envgen: the local sandbox runs as root and its tools run as root too: uid {NOBODY} cannot "
                      f"read {blocked[0]}; use --sandbox docker for packs you do not trust", file=sys.stderr)
                _identity[python] = (0, 0)
            else:
                _identity[python] = (NOBODY, NOBODY)
        return _identity[python]


def _compile(env: Path, python: str) -> None:
    """Byte-compile the private env/ once, so each episode's fresh runtime loads its tools without compiling
    them (~12 ms for a 400-line tools.py). Compiling runs no tool code."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        compileall.compile_dir(env, quiet=2)
    else:
        subprocess.run([python, "-I", "-m", "compileall", "-q", str(env)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120, check=False)


def _outermost(paths: list[str]) -> list[str]:
    """The paths not inside another of them (binding a dir keeps what is under it visible too)."""
    real = sorted({os.path.realpath(p) for p in paths})
    return [p for p in real if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in real)]


class LocalBox(Supervised):
    """A supervisor running on the host in a private sandbox dir."""

    def __init__(self, ctl, root: Path, proc: subprocess.Popen, ready: dict, name: str, runtime_max_line: int):
        ns = ready.get("isolation") == "namespaces"
        super().__init__(ctl, root / "io", str(root / "io"), name, runtime_max_line=runtime_max_line,
                         work=str(root / "work"), scratch=(str(root / "tmp"), *((TMP_ROOT, "/dev/shm") if ns else ())),
                         ipc=ns)
        self.root, self.proc, self.isolation = root, proc, ready.get("isolation")

    @classmethod
    def start(cls, pack: Pack, python: str, isolation: str | None = None) -> LocalBox:
        lim = pack.manifest.limits
        uid, gid = tool_identity(python)
        root = Path(tempfile.mkdtemp(prefix="envgen-sbx-"))
        try:
            os.chmod(root, 0o711)
            shutil.copytree(pack.env_dir, root / "env", ignore=shutil.ignore_patterns("__pycache__", "Dockerfile"))
            _compile(root / "env", python)
            for d in ("work", "tmp"):
                (root / d).mkdir(mode=0o700)
                if os.geteuid() == 0:
                    os.chown(root / d, uid, gid)
            (root / "io").mkdir(mode=0o700)
            rlimits = {"cpu": [int(lim.episode_timeout_s) + 1, int(lim.episode_timeout_s) + 6],
                       "as": [lim.memory_mb << 20] * 2, "nofile": [MAX_OPEN_FILES] * 2, "fsize": [MAX_FILE_BYTES] * 2}
            if uid != 0:  # root ignores RLIMIT_NPROC
                rlimits["nproc"] = [MAX_PROCS] * 2
            runtime = [python, "-I", "-B", str(bundled("envs") / "runtime" / "server.py"), "--env", str(root / "env"),
                       "--work", str(root / "work"), "--verifiers", str(bundled("verifiers")),
                       "--output-limit", str(lim.output_limit),
                       "--step-timeout", str(lim.step_timeout_s)]
            verifier = [python, "-I", "-B", str(bundled("envs") / "runtime" / "verifier.py"),
                        "--verifiers", str(bundled("verifiers")), "--work", str(root / "work"),
                        *(f"--warm={w}" for w in verifier_warmups(pack))]
            isolation = isolation or ("namespaces" if os.geteuid() == 0 else "subreaper")
            keep = _outermost([str(root), *_interpreter_paths(python), *_pack_host_dirs(pack)])
            hide = _hidden_host_paths() if isolation == "namespaces" else []
            cmd = [python, "-I", "-B", str(bundled("envs") / "runtime" / "supervisor.py"), "--io", str(root / "io"),
                   "--uid", str(uid), "--gid", str(gid), "--verifier-uid", str(os.geteuid()),
                   "--work", str(root / "work"), "--home", str(root / "tmp"), "--tmp", str(root / "tmp"),
                   "--isolation", isolation, *(f"--keep={k}" for k in keep), *(f"--hide={h}" for h in hide),
                   *(f"--writable={root / d}" for d in ("work", "tmp")), "--rlimits", json.dumps(rlimits),
                   "--verifier", json.dumps(verifier), "--", *runtime]
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "TZ": "UTC",
                   "PYTHONHASHSEED": "0"}
            for key in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
                if os.environ.get(key):
                    env[key] = os.environ[key]
            name = f"pack {pack.manifest.name!r}"
            control, proc = Control(root / "io"), None
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, cwd=root / "work", env=env,
                                        start_new_session=True, close_fds=True)
                ctl, ready = control.ready(lambda: proc.poll() is None, name)
            except BaseException:
                control.abort()
                if proc is not None:
                    _stop(proc)
                raise
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        if ready.get("isolation") != "namespaces" and pack.manifest.family in AGENT_CODE_FAMILIES:
            _say_once(f"envgen: pack {pack.manifest.name!r} runs the agent's own code, and without root the local "
                      f"sandbox cannot hide the host's files from it (this pack's included); use --sandbox docker "
                      f"to train or check on it")
        return cls(ctl, root, proc, ready, name, runtime_line_bound(lim.output_limit))

    def destroy(self) -> None:
        """Stop the supervisor (it kills every process of the sandbox) and remove the sandbox dir."""
        self.settle()
        self.dead = True
        if self.chan is not None:
            self.chan.close()
            self.chan = None
        self.ctl.close()
        if self.owner == os.getpid():
            _stop(self.proc)
            shutil.rmtree(self.root, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    """Wait for a supervisor whose control channel is closed; kill it if it does not exit."""
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


class LocalSandbox(Sandbox):
    """`python`: the interpreter for the supervisor, runtime and verifier (default: this one).
    `isolation`: "namespaces" (root only) or "subreaper"; default: the best this process can have."""

    backend = "local"

    def __init__(self, pack: Pack, python: str | None = None, isolation: str | None = None):
        if isolation not in (None, "namespaces", "subreaper"):
            raise InputError(f"unknown local isolation {isolation!r}; use namespaces or subreaper")
        super().__init__(pack)
        self.python = python or sys.executable
        self.isolation = isolation

    def _open_box(self) -> LocalBox:
        return LocalBox.start(self.pack, self.python, self.isolation)

    def _close_box(self, box: Supervised) -> None:
        try:
            box.destroy()
        except Exception:
            pass

    @property
    def verifier_env_dir(self) -> str:
        if self.box is None:
            raise SandboxError(f"pack {self.pack.manifest.name!r}: the sandbox is not started")
        return str(self.box.root / "env")

    @property
    def root(self) -> Path | None:
        """The sandbox dir on the host (None before the first episode)."""
        return self.box.root if self.box is not None else None
