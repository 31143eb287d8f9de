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
stray processes and empties /tmp, each in about a millisecond. That makes a fresh runtime process per
episode affordable: one is started right after verification (the old one held the verifier's inputs)
or at a reset after an episode that ran anything. When this process dies its FIFO ends close, the
supervisor kills everything and the container (started with auto-remove) disappears; `gc()` sweeps
whatever is left after a daemon restart.

Containment defaults: no network unless the pack's limits ask for it; read-only root with tmpfs /work
and /tmp; memory (no swap), CPU and pids limits; all capabilities dropped except the supervisor's
SETUID/SETGID/KILL; no-new-privileges; `hidden/` appears (at /run/envgen/hidden) only for the verify
step, after every process but the runtime is killed, and the runtime is replaced after verification.
"""

from __future__ import annotations

import atexit
import errno
import itertools
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SandboxError
from ..pack import Pack
from .base import Channel, Sandbox, ToolResult

LABEL = "envgen.sandbox"
PIDS_LIMIT = 256
CTL_TIMEOUT_S = 15.0
START_TIMEOUT_S = 60.0
PYTHON = "/usr/bin/python3"
IO = "/run/envgen"
"""The bind-mounted host dir inside the container: control FIFOs, runtime FIFOs, and hidden/ at verify time."""
WORK, TMP = "/work", "/tmp"
SANDBOX_UID = 10001


# ---------------------------------------------------------------- the engine


_engine_lock = threading.Lock()
_engine = None
_available: bool | None = None


def engine():
    """The shared docker client (one connection pool for every sandbox of this process)."""
    global _engine
    import docker

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
            import docker

            client = docker.from_env(timeout=3)
            try:
                client.ping()
                _available = _is_local(client)
            finally:
                client.close()
        except Exception:
            _available = False
    return _available


def io_root() -> Path:
    """Host dir under which each container gets its bind-mounted io dir (ENVGEN_SANDBOX_DIR overrides)."""
    return Path(os.environ.get("ENVGEN_SANDBOX_DIR") or Path(tempfile.gettempdir()) / "envgen-docker")


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

    @classmethod
    def for_pack(cls, pack: Pack, image_id: str) -> Spec:
        lim = pack.manifest.limits
        return cls(image_id, pack.manifest.name, lim.network, lim.memory_mb, lim.cpus, lim.output_limit,
                   lim.step_timeout_s)

    def command(self) -> list[str]:
        runtime = [PYTHON, "-I", "-B", "/opt/envgen/runtime/server.py", "--env", "/env", "--work", WORK,
                   "--verifiers", "/opt/envgen/verifiers", "--output-limit", str(self.output_limit),
                   "--step-timeout", str(self.step_timeout_s)]
        return [PYTHON, "-I", "-B", "/opt/envgen/runtime/supervisor.py", "--io", IO, "--uid", str(SANDBOX_UID),
                "--gid", str(SANDBOX_UID), "--work", WORK, "--", *runtime]

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
            network_mode="bridge" if self.network else "none",
            mem_limit=f"{self.memory_mb}m", memswap_limit=f"{self.memory_mb}m", nano_cpus=int(self.cpus * 1e9),
            pids_limit=self.pids_limit, cap_drop=["ALL"], cap_add=caps, security_opt=["no-new-privileges"],
            ulimits=[docker.types.Ulimit(name="core", soft=0, hard=0),
                     docker.types.Ulimit(name="nofile", soft=1024, hard=1024)],
            tmpfs={WORK: f"rw,nosuid,nodev,size={work_mb}m,uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0755",
                   TMP: f"rw,nosuid,nodev,size={tmp_mb}m,mode=1777"},
            mounts=[docker.types.Mount(target=IO, source=str(iodir), type="bind", read_only=False)],
            log_config=docker.types.LogConfig(type="none"),
            labels={LABEL: "1", "envgen.pack": self.pack, "envgen.io": str(iodir), **OWNER_LABELS},
        )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "pack"


def _open_writer(path: str, wait_s: float) -> int:
    """Open a FIFO's write end once its reader is there, never blocking past `wait_s`."""
    end = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO or time.monotonic() > end:
                raise
            time.sleep(0.002)
            continue
        os.set_blocking(fd, True)
        return fd


def _closer(*fds: int):
    """A close callback that closes its fds exactly once (a second close could hit a reused fd number)."""
    done = []

    def close() -> None:
        if not done:
            done.append(True)
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    return close


_boxes: weakref.WeakSet = weakref.WeakSet()


class Box:
    """One started container: its supervisor's control channel, its host io dir, its runtime channel."""

    _seq = itertools.count(1)

    def __init__(self, client, spec: Spec, container, iodir: Path, ctl: Channel):
        self.client, self.spec, self.container, self.iodir, self.ctl = client, spec, container, iodir, ctl
        self.chan: Channel | None = None
        self.fresh = False
        """True while `chan` is a runtime spawned ahead of use whose ready line nobody has read yet."""
        self.runtime_pid: int | None = None
        self.dead = False
        self.idle_since = time.monotonic()
        self._gen = 0
        self._ids = itertools.count(1)
        self.owner = os.getpid()
        _boxes.add(self)

    @property
    def id(self) -> str:
        return self.container.id

    @classmethod
    def start(cls, client, spec: Spec) -> Box:
        """Create and start a container and wait for its supervisor (about half a second)."""
        import docker

        root = io_root()
        root.mkdir(parents=True, exist_ok=True)
        name = f"envgen-{_slug(spec.pack)}-{os.getpid()}-{next(cls._seq)}-{secrets.token_hex(3)}"
        iodir = root / name
        iodir.mkdir(mode=0o711)
        os.chmod(iodir, 0o711)
        (iodir / "owner.json").write_text(json.dumps(OWNER_LABELS))
        os.mkfifo(iodir / "ctl.in", 0o600)
        os.mkfifo(iodir / "ctl.out", 0o600)
        rfd = os.open(iodir / "ctl.out", os.O_RDONLY | os.O_NONBLOCK)
        ctl = Channel(rfd, -1)
        container = None
        try:
            try:
                container = client.containers.run(**spec.run_kwargs(iodir, name))
            except docker.errors.ImageNotFound:
                raise SandboxError(f"pack {spec.pack!r}: image {spec.image} is missing; "
                                   "run `envgen image build PACK`") from None
            except docker.errors.APIError as e:
                raise SandboxError(f"pack {spec.pack!r}: cannot start a container: {e.explanation or e}") from None
            ready, deadline = None, time.monotonic() + START_TIMEOUT_S
            while ready is None and time.monotonic() < deadline:
                try:
                    ready = ctl.recv(min(deadline, time.monotonic() + 0.5))
                except (EOFError, ValueError):
                    break
                if ready is None and not _running(container):
                    break
            if not ready or not ready.get("ok"):
                log = iodir / "supervisor.log"
                why = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
                raise SandboxError(
                    f"pack {spec.pack!r}: the container's supervisor did not come up"
                    + (f" ({why[0]})" if why else "")
                    + f"; the Docker backend needs a local engine that can bind-mount {root}")
            os.set_blocking(rfd, True)
            ctl.wfd = _open_writer(str(iodir / "ctl.in"), 5.0)
            ctl._close = _closer(rfd, ctl.wfd)
        except BaseException:
            _closer(rfd, ctl.wfd)()
            if container is not None:
                _remove(container)
            shutil.rmtree(iodir, ignore_errors=True)
            raise
        for fifo in ("ctl.in", "ctl.out"):  # the open fds stay valid; nothing can open these paths again
            os.unlink(iodir / fifo)
        return cls(client, spec, container, iodir, ctl)

    # -- the supervisor

    def request(self, req: dict, timeout: float = CTL_TIMEOUT_S) -> dict:
        if self.dead:
            raise SandboxError(f"pack {self.spec.pack!r}: the sandbox container is gone")
        req["id"] = next(self._ids)
        try:
            self.ctl.send(req)
            deadline = time.monotonic() + timeout
            while True:
                reply = self.ctl.recv(deadline)
                if reply is None or reply.get("id") == req["id"]:
                    break
        except (EOFError, OSError, ValueError) as e:
            self.dead = True
            raise SandboxError(f"pack {self.spec.pack!r}: the sandbox container died ({type(e).__name__})") from None
        if reply is None:
            self.dead = True
            raise SandboxError(f"pack {self.spec.pack!r}: the container's supervisor did not answer "
                               f"{req['op']!r} within {timeout:g} s")
        if not reply.get("ok"):
            raise SandboxError(f"pack {self.spec.pack!r}: sandbox {req['op']} failed: {reply['error']['message']}")
        return reply

    def ping(self) -> bool:
        try:
            self.request({"op": "ping"}, 5.0)
            return True
        except SandboxError:
            return False

    def processes(self) -> list[dict]:
        """The container's processes but the supervisor: [{pid, uid, state, name}]."""
        procs = self.request({"op": "ps"})["procs"]
        return [dict(zip(("pid", "uid", "state", "name"), p)) for p in procs]

    # -- the runtime

    def _spawn(self) -> Channel:
        self._gen += 1
        host_in, host_out = self.iodir / f"rt{self._gen}.in", self.iodir / f"rt{self._gen}.out"
        os.mkfifo(host_in, 0o600)
        os.mkfifo(host_out, 0o600)
        rfd = os.open(host_out, os.O_RDONLY | os.O_NONBLOCK)
        hold = os.open(host_in, os.O_RDWR)  # a writer from the start, so no reader sees EOF before ours opens
        wfd = -1
        try:
            reply = self.request({"op": "spawn", "input": f"{IO}/{host_in.name}", "output": f"{IO}/{host_out.name}"})
            wfd = _open_writer(str(host_in), 5.0)
        except BaseException:
            _closer(rfd, wfd)()
            raise
        finally:
            os.close(hold)  # from here the runtime is the only reader: its death is EPIPE on our next write
            for p in (host_in, host_out):
                try:
                    os.unlink(p)
                except OSError:
                    pass
        os.set_blocking(rfd, True)
        self.runtime_pid = reply["pid"]
        return Channel(rfd, wfd, close=_closer(rfd, wfd))

    def runtime(self) -> Channel:
        """A channel to a runtime whose ready line is unread: the one spawned ahead, or a new one."""
        if self.chan is not None and self.fresh:
            self.fresh = False
            return self.chan
        self.stop_runtime()
        self.chan = self._spawn()
        return self.chan

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        """Wait until the spawned-ahead runtime has written its ready line (left unread for its user)."""
        if self.chan is None or not self.fresh:
            return False
        return bool(self.chan._poll.poll(timeout * 1000))

    def prespawn(self) -> int:
        """Replace the runtime with a fresh process now, so whoever needs it next finds it started.

        Returns how many processes were killed on the way (the old runtime included)."""
        killed = self.stop_runtime()
        self.chan = self._spawn()
        self.fresh = True
        return killed

    def stop_runtime(self) -> int:
        """Kill the runtime and every other process of the sandbox; return the count (never raises)."""
        chan, self.chan, self.fresh, self.runtime_pid = self.chan, None, False, None
        if chan is not None:
            chan.close()
        if not self.dead:
            try:
                return self.request({"op": "kill", "keep": []})["killed"]
            except SandboxError:
                pass
        return 0

    def kill_strays(self) -> int:
        """Kill every process but the runtime; return how many."""
        keep = [self.runtime_pid] if self.runtime_pid else []
        return self.request({"op": "kill", "keep": keep})["killed"]

    def wipe(self, *dirs: str) -> None:
        self.request({"op": "wipe", "dirs": list(dirs)})

    # -- hidden/

    def stage_hidden(self, src: Path) -> str | None:
        """Copy hidden/ into the io dir: root-owned for the sandbox user, readable and unwritable."""
        dest = self.iodir / "hidden"
        shutil.rmtree(dest, ignore_errors=True)
        if not src.is_dir():
            return None
        shutil.copytree(src, dest, symlinks=False)
        for d, _, files in os.walk(dest):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        return f"{IO}/hidden"

    def unstage_hidden(self) -> None:
        shutil.rmtree(self.iodir / "hidden", ignore_errors=True)

    # -- lifecycle

    def recycle(self) -> None:
        """Back to pristine for another sandbox: no processes, empty /work and /tmp, a fresh runtime."""
        self.unstage_hidden()
        self.stop_runtime()
        self.wipe(WORK, TMP)
        self.prespawn()
        self.idle_since = time.monotonic()

    def destroy(self) -> None:
        """Remove the container and its io dir (idempotent). In a forked child: only drop the fds."""
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
            _boxes.discard(self)


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


@atexit.register
def _destroy_all() -> None:
    for box in list(_boxes):
        try:
            box.destroy()
        except Exception:
            pass


def _after_fork_in_child() -> None:
    """A forked child (a process pool worker) drops its copies of the parent's FIFO ends, so the parent's
    containers still stop when the parent dies, and gets its own engine connection."""
    global _engine
    _engine = None
    for box in list(_boxes):
        box.dead = True
        for chan in (box.chan, box.ctl):
            if chan is not None:
                chan.close()
        _boxes.discard(box)


os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------- the sandbox


class DockerSandbox(Sandbox):
    """A pack's episodes in one container (or in containers from a warm pool).

    `image` overrides the pack's image (tag or id); without it the image of the pack's current env/ is
    used (its content-hash tag is recomputed, so an edited pack never runs a stale image), and built,
    reusing every present layer, when missing. `pool` is a WarmPool, True for the process-wide default
    pool, or None to start a container per sandbox.
    """

    backend = "docker"

    def __init__(self, pack: Pack, *, image: str | None = None, pool=None, client=None):
        super().__init__(pack)
        self.client = client or engine()
        if not _is_local(self.client):
            raise SandboxError(f"the Docker engine at {self.client.api.base_url} is not local; the Docker sandbox "
                               "bind-mounts host FIFOs, so run envgen on the engine's host or use the local sandbox")
        self.image = _resolve_image(self.client, pack, image)
        self.spec = Spec.for_pack(pack, self.image)
        if pool is True:
            from .pool import default_pool

            pool = default_pool()
        self.pool = pool or None
        self.box: Box | None = None
        self.strays_killed = 0
        """Processes the agent's tools left behind that were killed at episode boundaries (for reports)."""
        self._dirty = False
        self._deadline = float("inf")

    # -- backend hooks

    def _spawn(self) -> Channel:
        for attempt in (1, 2):
            if self.box is not None and self.box.dead:
                self._drop_box()
            if self.box is None:
                self.box = self.pool.acquire(self.spec) if self.pool else Box.start(self.client, self.spec)
            try:
                return self.box.runtime()
            except SandboxError:
                if attempt == 2 or not self.box.dead:
                    raise
        raise AssertionError("unreachable")

    def _kill(self) -> None:
        if self.box is not None:
            self.box.stop_runtime()

    def _stage_hidden(self) -> str | None:
        if self._chan is None:
            self._start()
        self.strays_killed += self.box.kill_strays()
        return self.box.stage_hidden(self.pack.hidden_dir)

    def _unstage_hidden(self) -> None:
        box = self.box
        if box is None:
            return
        box.unstage_hidden()
        # The runtime just held the verifier's inputs (references, hidden modules) in memory: the next
        # episode gets a new process, started now so it is ready by the next reset.
        try:
            box.prespawn()  # the strays are already gone (killed before staging)
        except SandboxError:
            pass
        self._chan = None
        self._dirty = True

    def _release(self) -> None:
        box, self.box = self.box, None
        if box is None:
            return
        if self.pool is not None:
            self.pool.release(box)
        else:
            box.destroy()

    def _drop_box(self) -> None:
        box, self.box = self.box, None
        if box is not None:
            box.destroy()

    # -- episode boundaries

    def reset(self) -> None:
        """A fresh runtime process (nothing the last episode started survives), empty /tmp, pristine /work.

        After a verify the fresh runtime was started then, so this costs a hello and the runtime's
        reset (restoring /work from /env); otherwise one fork in the container (~10 ms).
        """
        box = self.box
        if self._dirty and box is not None and not box.dead:
            try:
                if not box.fresh:
                    self.strays_killed += max(0, box.prespawn() - 1)
                    self._chan = None
                box.wipe(TMP)
            except SandboxError:
                pass  # the container died: the reset request below replaces it
        super().reset()
        self._dirty = False
        self._deadline = time.monotonic() + self.limits.episode_timeout_s

    def call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> ToolResult:
        """A tool call, refused once the episode's wall-clock limit has passed, and never allowed past it."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            return ToolResult.failure("episode_timeout", f"the episode ran past its "
                                      f"{self.limits.episode_timeout_s:g} s limit; no more tool calls")
        self._dirty = True
        return super().call(tool, args, min(timeout or self.limits.step_timeout_s, left))

    def processes(self) -> list[dict]:
        """The container's processes but its supervisor (the runtime and whatever the tools started)."""
        if self.box is None:
            return []
        return self.box.processes()

    @property
    def container_id(self) -> str | None:
        return self.box.id if self.box is not None else None

    def __del__(self):
        try:
            if self.box is not None or self._chan is not None:
                self.close()
        except Exception:
            pass


_image_ids: dict[str, str] = {}
"""Tag -> image id, per process: envgen's tags are content hashes, so a tag seen once keeps its content."""
_pack_tags: dict[tuple[str, str], str] = {}


def _resolve_image(client, pack: Pack, image: str | None) -> str:
    """The image id to run: `image` if given, else the image of the pack's current env/ and this envgen.

    The expected tag is recomputed from the files (not read from pack.json, which may predate an edit
    of env/ or an envgen upgrade); a missing image is built, reusing every present layer."""
    import docker

    from ..errors import EnvgenError
    from ..images import ensure_pack_image, pack_image_tag, stderr_log

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

    Stopped ones always go. Io dirs of dead owners are swept too. `all` also breaks the sandboxes of
    live processes, this one included: use it when nothing should be running.
    """
    import docker

    client = client or engine()
    removed = 0
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        if all or c.status not in ("running", "created", "restarting") or not _owner_alive(c.labels):
            try:
                _remove(c)
                removed += 1
            except docker.errors.APIError:
                continue
            io = c.labels.get("envgen.io")
            if io and Path(io).parent == io_root():
                shutil.rmtree(io, ignore_errors=True)
    root = io_root()
    if root.is_dir():
        for d in root.iterdir():
            try:
                owner = json.loads((d / "owner.json").read_text())
            except (OSError, ValueError):
                owner = {}
            if all or not _owner_alive(owner):
                shutil.rmtree(d, ignore_errors=True)
    return removed
