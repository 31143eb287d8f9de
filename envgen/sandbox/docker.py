"""Docker backend: one container per sandbox, the runtime server held open over FIFOs.

Call channel. Measured side by side on the 2-core reference host (no-op tool call round trip, p50;
bench/bench_docker.py, figures in bench/RESULTS.md):

    FIFOs in a bind-mounted host dir        0.08 ms   kernel pipe end to end, no daemon in the path
    `docker exec -i` socket, held open      0.23 ms   every line crosses dockerd + containerd-shim, framed
    attach socket to the main process       0.22 ms   same path; and a dead runtime ends the container
    `docker exec` per call                  184 ms    a new process (and Python) per call

FIFOs are the fastest (about 3x the held sockets, with a tighter p99) and the most robust: the Channel
reads plain JSON lines from raw fds (no stream demultiplexing), EOF/EPIPE report a dead runtime at once,
and dockerd is out of the hot path, so a busy daemon (16 concurrent episodes starting and removing
containers) adds no latency and no hijacked HTTP connection is held per sandbox. Their one requirement
is an engine that shares this host's file system (a local dockerd); a remote engine is refused with a
clear error.

Inside, a small root supervisor (envs/runtime/supervisor.py) is PID 1. Over its own control FIFOs it
spawns the runtime as the unprivileged sandbox user (a fork of a pre-imported server, ~10 ms), kills
stray processes and empties /tmp, /dev/shm and System V IPC, each in about a millisecond. That makes a
fresh runtime process per episode affordable, and a fresh verifier process per verdict (see
supervised.py). When this process dies its FIFO ends close, the supervisor kills everything and the
container (started with auto-remove) disappears; `gc()` sweeps whatever is left after a daemon restart.

Containment defaults: no network unless the pack's limits ask for it; read-only root with tmpfs /work
and /tmp (/tmp allows executing files: compiled languages run their test binaries from there); a private IPC namespace and /dev/shm; memory (no swap), CPU and pids limits; all capabilities
dropped except the supervisor's SETUID/SETGID/KILL; no-new-privileges; `hidden/` appears (at
/run/envgen/hidden) only while the verifier process runs, after every process of the episode is killed.
The io root on the host is private to its user (0700, refused otherwise).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .engine import _is_local, docker_available, engine  # noqa: F401  (docker_available: re-exported)
from ..errors import EnvgenError, InputError, SandboxError
from .images import ensure_pack_image, pack_image_tag, stderr_log
from .registry import pull
from ..pack.format import Pack
from .base import Sandbox, verifier_warmups
from .channel import Channel, runtime_line_bound
from .supervised import Control, Supervised

LABEL = "envgen.sandbox"
PIDS_LIMIT = 256
CTL_TIMEOUT_S = 15.0
START_TIMEOUT_S = 60.0
PYTHON = "/usr/bin/python3"
IO = "/run/envgen"
"""The bind-mounted host dir inside the container: control FIFOs, runtime FIFOs, and hidden/ at verify time."""
WORK, TMP, SHM = "/work", "/tmp", "/dev/shm"
SANDBOX_UID = 10001
SHM_BYTES = 64 << 20


# ---------------------------------------------------------------- the io root


def io_root() -> Path:
    """Host dir under which each container gets its bind-mounted io dir (ENVGEN_SANDBOX_DIR overrides).

    An io dir receives `hidden/` at verification time, so whoever can write the root could swap an io dir
    and read it: the root is created with mode 0700 and refused if it belongs to someone else or is
    writable by group or others."""
    root = Path(os.environ.get("ENVGEN_SANDBOX_DIR") or Path(tempfile.gettempdir()) / f"envgen-docker-{os.geteuid()}")
    try:
        root.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as e:
        raise SandboxError(f"{root}: cannot create the sandbox io root ({e.strerror}); set ENVGEN_SANDBOX_DIR") from None
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(f"{root}: the sandbox io root must be a directory of yours that no one else can write "
                           f"(found owner uid {st.st_uid}, mode {stat.filemode(st.st_mode)}); remove it or set "
                           "ENVGEN_SANDBOX_DIR")
    return root


def _proc_start(pid: int) -> str | None:
    """A process's start time in clock ticks: with the pid, it names one process even after pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return stat[stat.rfind(")") + 2:].split()[19]
    except (OSError, IndexError):
        return None


OWNER_LABELS = {"envgen.owner_host": socket.gethostname(), "envgen.owner_pid": str(os.getpid()),
          "envgen.owner_start": _proc_start(os.getpid()) or ""}


def _owner_alive(labels: dict[str, str]) -> bool:
    if labels.get("envgen.owner_host") != socket.gethostname():
        return True  # another machine's process: nothing here can tell, so leave it alone
    try:
        pid = int(labels.get("envgen.owner_pid", ""))
    except ValueError:
        return False
    return _proc_start(pid) == labels.get("envgen.owner_start")


# ---------------------------------------------------------------- one container


@dataclass(frozen=True)
class Spec:
    """Everything that makes two containers interchangeable (the warm pool's key)."""

    image: str
    pack: str
    network: bool
    memory_mb: int
    cpus: float
    output_limit: int
    step_timeout_s: float
    pids_limit: int = PIDS_LIMIT
    warm: tuple[str, ...] = ()
    """What the verifier loads ahead (see base.verifier_warmups)."""

    @classmethod
    def for_pack(cls, pack: Pack, image_id: str) -> Spec:
        lim = pack.manifest.limits
        return cls(image_id, pack.manifest.name, lim.network, lim.memory_mb, lim.cpus, lim.output_limit,
                   lim.step_timeout_s, warm=verifier_warmups(pack))

    def command(self) -> list[str]:
        runtime = [PYTHON, "-I", "-B", "/opt/envgen/runtime/server.py", "--env", "/env", "--work", WORK,
                   "--verifiers", "/opt/envgen/verifiers", "--output-limit", str(self.output_limit),
                   "--step-timeout", str(self.step_timeout_s)]
        verifier = [PYTHON, "-I", "-B", "/opt/envgen/runtime/verifier.py", "--verifiers", "/opt/envgen/verifiers",
                    "--work", WORK, *(f"--warm={w}" for w in self.warm)]
        return [PYTHON, "-I", "-B", "/opt/envgen/runtime/supervisor.py", "--io", IO, "--uid", str(SANDBOX_UID),
                "--gid", str(SANDBOX_UID), "--work", WORK, "--tmp", TMP, "--isolation", "pid1",
                "--verifier", json.dumps(verifier), "--", *runtime]

    def run_kwargs(self, iodir: Path, name: str) -> dict[str, Any]:
        import docker

        work_mb = max(64, self.memory_mb // 2)
        tmp_mb = max(32, self.memory_mb // 4)
        caps = ["SETUID", "SETGID", "KILL"]
        if os.geteuid() != 0:
            caps.append("DAC_OVERRIDE")  # the FIFOs belong to this (non-root) host user
        return dict(
            image=self.image, command=self.command(), name=name, hostname="sandbox", user="0:0",
            detach=True, auto_remove=True, read_only=True, working_dir=WORK,
            network_mode="bridge" if self.network else "none", ipc_mode="private", shm_size=SHM_BYTES,
            mem_limit=f"{self.memory_mb}m", memswap_limit=f"{self.memory_mb}m", nano_cpus=int(self.cpus * 1e9),
            pids_limit=self.pids_limit, cap_drop=["ALL"], cap_add=caps, security_opt=["no-new-privileges"],
            ulimits=[docker.types.Ulimit(name="core", soft=0, hard=0),
                     docker.types.Ulimit(name="nofile", soft=1024, hard=1024)],
            tmpfs={WORK: f"rw,exec,nosuid,nodev,size={work_mb}m,uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0755",
                   TMP: f"rw,exec,nosuid,nodev,size={tmp_mb}m,mode=1777"},
            mounts=[docker.types.Mount(target=IO, source=str(iodir), type="bind", read_only=False)],
            log_config=docker.types.LogConfig(type="none"),
            labels={LABEL: "1", "envgen.pack": self.pack, "envgen.io": str(iodir), **OWNER_LABELS},
        )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "pack"


class Box(Supervised):
    """One started container: its supervisor (PID 1) over FIFOs in a bind-mounted host io dir."""

    _seq = itertools.count(1)

    def __init__(self, client, spec: Spec, container, iodir: Path, ctl: Channel):
        super().__init__(ctl, iodir, IO, f"pack {spec.pack!r}", runtime_max_line=runtime_line_bound(spec.output_limit),
                         work=WORK, scratch=(TMP, SHM), ipc=True)
        self.client, self.spec, self.container = client, spec, container

    @property
    def id(self) -> str:
        return self.container.id

    @classmethod
    def start(cls, client, spec: Spec) -> Box:
        """Create and start a container and wait for its supervisor (about half a second)."""
        import docker

        root = io_root()
        name = f"envgen-{_slug(spec.pack)}-{os.getpid()}-{next(cls._seq)}-{secrets.token_hex(3)}"
        iodir = root / name
        iodir.mkdir(mode=0o711)  # exclusive: fails if anything already has this name
        os.chmod(iodir, 0o711)
        (iodir / "owner.json").write_text(json.dumps(OWNER_LABELS))

        control, container = Control(iodir), None
        try:
            try:
                container = client.containers.run(**spec.run_kwargs(iodir, name))
            except docker.errors.ImageNotFound:
                raise SandboxError(f"pack {spec.pack!r}: image {spec.image} is missing; "
                                   "run `envgen image build PACK`") from None
            except docker.errors.APIError as e:
                raise SandboxError(f"pack {spec.pack!r}: cannot start a container: {e.explanation or e}") from None
            try:
                ctl, _ = control.ready(lambda: _running(container), f"pack {spec.pack!r}")
            except SandboxError as e:
                raise SandboxError(f"{e}; the Docker backend needs a local engine that can bind-mount {root}") from None
        except BaseException:
            control.abort()
            if container is not None:
                _remove(container)
            shutil.rmtree(iodir, ignore_errors=True)
            raise
        return cls(client, spec, container, iodir, ctl)

    def destroy(self) -> None:
        """Remove the container and its io dir (idempotent). In a forked child: only drop the fds."""
        self.settle()
        self.dead = True
        mine = self.owner == os.getpid()
        try:
            if mine:
                _remove(self.container)  # first: closing the FIFOs would set auto-remove racing us
        finally:
            if self.chan is not None:
                self.chan.close()
                self.chan = None
            self.ctl.close()
            if mine:
                shutil.rmtree(self.iodir, ignore_errors=True)


def _running(container) -> bool:
    import docker

    try:
        container.reload()
    except docker.errors.NotFound:
        return False
    return container.status in ("created", "running")


def _remove(container, wait_s: float = 10.0) -> None:
    """Kill and remove a container; return once it is gone (auto-remove may be racing us to it)."""
    import docker

    try:
        container.remove(force=True)
        return
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as e:
        if e.status_code != 409:  # 409: a removal (auto-remove) is already under way
            raise
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            container.reload()
        except docker.errors.NotFound:
            return
        time.sleep(0.02)


def _after_fork_in_child() -> None:
    """A forked child gets its own engine connection (the supervised boxes drop their fds themselves)."""
    global _engine
    _engine = None


os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------- the sandbox


class DockerSandbox(Sandbox):
    """A pack's episodes in one container (or in containers from a warm pool).

    `image` overrides the pack's image (tag or id); without it the image of the pack's current env/ is
    used (its content-hash tag is recomputed, so an edited pack never runs a stale image), and built,
    reusing every present layer, when missing. `pool` is a WarmPool (`pool.default_pool()` is the process-wide
    one; `open_sandbox(pack, "docker", pool=True)` picks it) or None to start a container per sandbox.
    """

    backend = "docker"
    verifier_env_dir = "/env"

    def __init__(self, pack: Pack, *, image: str | None = None, pool=None, client=None):
        super().__init__(pack)
        self.client = client or engine()
        if not _is_local(self.client):
            raise SandboxError(f"the Docker engine at {self.client.api.base_url} is not local; the Docker sandbox "
                               "bind-mounts host FIFOs, so run envgen on the engine's host or use the local sandbox")
        self.image = _resolve_image(self.client, pack, image)
        self.spec = Spec.for_pack(pack, self.image)
        if pool is True:
            raise InputError("DockerSandbox takes a WarmPool, not True: pass envgen.sandbox.pool.default_pool(), "
                             "or open_sandbox(pack, 'docker', pool=True)")
        self.pool = pool or None

    def _open_box(self) -> Box:
        return self.pool.acquire(self.spec) if self.pool else Box.start(self.client, self.spec)

    def _close_box(self, box: Supervised) -> None:
        try:
            if self.pool is not None and not box.dead:
                self.pool.release(box)
            else:
                box.destroy()
        except Exception:
            pass

    @property
    def container_id(self) -> str | None:
        return self.box.id if self.box is not None else None


_image_ids: dict[str, str] = {}
"""Tag -> image id, per process: envgen's tags are content hashes, so a tag seen once keeps its content."""
_pack_tags: dict[tuple[str, str], str] = {}


def _resolve_image(client, pack: Pack, image: str | None) -> str:
    """The image id to run: `image` if given, else the image of the pack's current env/ and this envgen.

    The expected tag is recomputed from the files (not read from pack.json, which may predate an edit
    of env/ or an envgen upgrade); a missing image is pulled by the digest pack.json records when the build
    pushed it to a registry and the recorded tag is still the expected one, else built, reusing every
    present layer (and pulled by tag from ``ENVGEN_REGISTRY`` first, when that is set)."""
    import docker

    ref = image
    if ref is None:
        key = (str(pack.root), pack.manifest.version)
        if key not in _pack_tags:
            try:
                _pack_tags[key] = pack_image_tag(pack)
            except EnvgenError:
                if not pack.manifest.image.tag:
                    raise
                _pack_tags[key] = pack.manifest.image.tag  # a base envgen cannot rebuild: trust the record
        ref = _pack_tags[key]
    if ref not in _image_ids:
        try:
            _image_ids[ref] = client.images.get(ref).id
        except docker.errors.ImageNotFound:
            if image is not None:
                raise SandboxError(f"image {image!r} is not present; build it with `envgen image build PACK`") from None
            pushed = pack.manifest.image.repo_digest
            if pushed and pack.manifest.image.tag == ref and pull(client, pushed, ref, log=stderr_log):
                _image_ids[ref] = client.images.get(ref).id  # the build's own image, by digest: no rebuild
                return _image_ids[ref]
            tag, image_id = ensure_pack_image(pack, client=client, log=stderr_log)
            if tag != ref:
                raise SandboxError(f"pack {pack.manifest.name!r}: built {tag}, expected {ref}") from None
            _image_ids[ref] = image_id
        except docker.errors.APIError as e:
            raise SandboxError(f"cannot inspect image {ref!r}: {e.explanation or e}") from None
    return _image_ids[ref]


# ---------------------------------------------------------------- cleanup


def gc(client=None, all: bool = False) -> int:
    """Remove envgen sandbox containers whose owner process is dead (every one with `all`); return the count.

    A live owner's containers are never touched, whatever their state (paused, stopped, restarting).
    Io dirs of dead owners are swept too. `all` also breaks the sandboxes of live processes, this one
    included: use it when nothing should be running.
    """
    import docker

    client = client or engine()
    removed = 0
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        if all or not _owner_alive(c.labels):
            try:
                _remove(c)
                removed += 1
            except docker.errors.APIError:
                continue
            io = c.labels.get("envgen.io")
            if io and Path(io).parent == io_root():
                shutil.rmtree(io, ignore_errors=True)
    root = io_root()
    for d in root.iterdir():
        try:
            owner = json.loads((d / "owner.json").read_text())
        except (OSError, ValueError):
            owner = {}
        if all or not _owner_alive(owner):
            shutil.rmtree(d, ignore_errors=True)
    return removed
