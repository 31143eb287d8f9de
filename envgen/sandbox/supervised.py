"""The host's side of a sandbox supervisor (envs/runtime/supervisor.py), shared by both backends.

A `Supervised` is one running supervisor and its io dir: the control channel, the runtime channel
(FIFOs made per spawn, so a channel is never reused by a later process), `hidden/` staging, and the
one-shot verifier. The backends differ only in how the supervisor is started (a container, or a host
process in its own namespaces) and what the io dir is called inside.

Verification (`verify`): every process of the episode is killed (the runtime itself included), then
`hidden/` is staged, then a fresh verifier process is forked from the supervisor (which never imports
tool code); its reply is read from its own new FIFO, so nothing else can write it; then it is killed,
`hidden/` removed, and a fresh runtime spawned for the next episode. That clean-up runs on a thread after
the verdict is returned (off the trainer's critical path: RL scores a batch of rollouts and only then uses
the sandboxes again); every other use of the box waits for it first (``settle``).
"""

from __future__ import annotations

import atexit
import errno
import itertools
import os
import shutil
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

from ..errors import SandboxError
from .channel import Channel

CTL_TIMEOUT_S = 15.0
START_TIMEOUT_S = 60.0
CTL_MAX_LINE = 1 << 20
VERIFY_MAX_LINE = 8 << 20
"""A verdict's reply (reward + details, which the verifier process caps at 1 MiB of JSON) fits in 8 MiB."""


def open_writer(path: str, wait_s: float) -> int:
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


def closer(*fds: int):
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


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link where the file system allows (staging hidden/ for every verdict then costs no copying)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


class Control:
    """A supervisor's control FIFOs, made in its io dir before it starts (their read end open first, so the
    supervisor's write-open succeeds at once). Start the supervisor, then `ready()`; `abort()` on failure."""

    def __init__(self, iodir: Path):
        self.iodir = iodir
        os.mkfifo(iodir / "ctl.in", 0o600)
        os.mkfifo(iodir / "ctl.out", 0o600)
        self.chan = Channel(os.open(iodir / "ctl.out", os.O_RDONLY | os.O_NONBLOCK), -1, max_line=CTL_MAX_LINE)

    def ready(self, alive: Callable[[], bool], what: str) -> tuple[Channel, dict]:
        """Wait for the supervisor's ready line; (the control channel, the ready line). A SandboxError names
        the supervisor log's last line when it does not come up."""
        ctl, ready, deadline = self.chan, None, time.monotonic() + START_TIMEOUT_S
        while ready is None and time.monotonic() < deadline:
            try:
                ready = ctl.recv(min(deadline, time.monotonic() + 0.5))
            except (EOFError, ValueError):
                break
            if ready is None and not alive():
                break
        if not ready or not ready.get("ok"):
            log = self.iodir / "supervisor.log"
            why = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
            raise SandboxError(f"{what}: the sandbox supervisor did not come up" + (f" ({why[0]})" if why else ""))
        os.set_blocking(ctl.rfd, True)
        ctl.wfd = open_writer(str(self.iodir / "ctl.in"), 5.0)
        ctl._close = closer(ctl.rfd, ctl.wfd)
        for fifo in ("ctl.in", "ctl.out"):  # the open fds stay valid; nothing can open these paths again
            os.unlink(self.iodir / fifo)
        return ctl, ready

    def abort(self) -> None:
        closer(self.chan.rfd, self.chan.wfd)()


class Supervised:
    """One started supervisor: control requests, the runtime channel, hidden/ staging and verification.

    `iodir` is the host path of the io dir; `guest_io` the same dir as the supervisor sees it.
    """

    def __init__(self, ctl: Channel, iodir: Path, guest_io: str, name: str, *, runtime_max_line: int,
                 work: str, scratch: tuple[str, ...], ipc: bool):
        self.ctl, self.iodir, self.guest_io, self.name = ctl, iodir, guest_io, name
        self.runtime_max_line = runtime_max_line
        self.work, self.scratch, self.ipc = work, scratch, ipc
        """The work dir (as the supervisor sees it); the dirs emptied at every reset (TMPDIR, and /tmp and
        /dev/shm where they are private); whether System V IPC objects are removed too."""
        self.chan: Channel | None = None
        self.fresh = False
        """True while `chan` is a runtime spawned ahead of use whose ready line nobody has read yet."""
        self.runtime_pid: int | None = None
        self.dead = False
        self.idle_since = time.monotonic()
        self._gen = 0
        self._ids = itertools.count(1)
        self.owner = os.getpid()
        self._after: threading.Thread | None = None
        """The clean-up a verify left running (see ``verify``)."""
        _live.add(self)

    def settle(self) -> None:
        """Wait for the clean-up the last verify left running; every use of the box starts here, so the box
        is only ever used by one thread at a time."""
        after = self._after
        if after is not None and after is not threading.current_thread():
            after.join()
            self._after = None

    def destroy(self) -> None:
        """Stop the supervisor and remove what it used (idempotent). In a forked child: only drop the fds."""
        raise NotImplementedError

    # -- the supervisor

    def request(self, req: dict, timeout: float = CTL_TIMEOUT_S) -> dict:
        self.settle()
        if self.dead:
            raise SandboxError(f"{self.name}: the sandbox is gone")
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
            raise SandboxError(f"{self.name}: the sandbox supervisor died ({type(e).__name__})") from None
        if reply is None:
            self.dead = True
            raise SandboxError(f"{self.name}: the sandbox supervisor did not answer {req['op']!r} within {timeout:g} s")
        if not reply.get("ok"):
            raise SandboxError(f"{self.name}: sandbox {req['op']} failed: {reply['error']['message']}")
        return reply

    def ping(self) -> bool:
        try:
            self.request({"op": "ping"}, 5.0)
            return True
        except SandboxError:
            return False

    def processes(self) -> list[dict]:
        """The sandbox's processes but the supervisor: [{pid, uid, state, name}]."""
        procs = self.request({"op": "ps"})["procs"]
        return [dict(zip(("pid", "uid", "state", "name"), p)) for p in procs]

    def _spawn(self, role: str, max_line: int, extra: tuple[str, ...] = ()) -> Channel:
        self._gen += 1
        host_in, host_out = self.iodir / f"{role}{self._gen}.in", self.iodir / f"{role}{self._gen}.out"
        os.mkfifo(host_in, 0o600)
        os.mkfifo(host_out, 0o600)
        rfd = os.open(host_out, os.O_RDONLY | os.O_NONBLOCK)
        hold = os.open(host_in, os.O_RDWR)  # a writer from the start, so no reader sees EOF before ours opens
        wfd = -1
        try:
            reply = self.request({"op": "spawn", "role": role, "input": f"{self.guest_io}/{host_in.name}",
                                  "output": f"{self.guest_io}/{host_out.name}", "extra": list(extra)})
            wfd = open_writer(str(host_in), 5.0)
        except BaseException:
            closer(rfd, wfd)()
            raise
        finally:
            os.close(hold)  # from here the child is the only reader: its death is EPIPE on our next write
            for p in (host_in, host_out):
                try:
                    os.unlink(p)
                except OSError:
                    pass
        os.set_blocking(rfd, True)
        if role == "runtime":
            self.runtime_pid = reply["pid"]
        return Channel(rfd, wfd, close=closer(rfd, wfd), max_line=max_line)

    # -- the runtime

    def runtime(self) -> Channel:
        """A channel to a runtime whose ready line is unread: the one spawned ahead (a new episode's), or a
        new one that keeps the work dir as it is (a restart mid-episode)."""
        self.settle()
        if self.chan is not None and self.fresh:
            self.fresh = False
            return self.chan
        self.stop_runtime()
        self.chan = self._spawn("runtime", self.runtime_max_line)
        return self.chan

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        """Wait until the spawned-ahead runtime has written its ready line (left unread for its user)."""
        self.settle()
        if self.chan is None or not self.fresh:
            return False
        return bool(self.chan._poll.poll(timeout * 1000))

    def prespawn(self) -> int:
        """Replace the runtime with a fresh process now, so whoever needs it next finds it started.

        Returns how many processes the tools had left behind (killed on the way)."""
        killed = self.stop_runtime()
        self.chan = self._spawn("runtime", self.runtime_max_line, ("--restore",))
        self.fresh = True
        return killed

    def stop_runtime(self) -> int:
        """Kill the runtime and every other process of the sandbox; return how many were not the runtime
        (what the tools left behind). Never raises."""
        self.settle()
        chan, self.chan, self.fresh, self.runtime_pid = self.chan, None, False, None
        if chan is not None:
            chan.close()
        if not self.dead:
            try:
                return self.request({"op": "kill"})["strays"]
            except SandboxError:
                pass
        return 0

    def wipe(self, *dirs: str, ipc: bool = False) -> None:
        self.request({"op": "wipe", "dirs": list(dirs), "ipc": ipc})

    def wipe_scratch(self) -> None:
        """Empty the episode scratch space (TMPDIR, /tmp, /dev/shm where private; IPC objects)."""
        self.wipe(*self.scratch, ipc=self.ipc)

    # -- verification

    def stage_hidden(self, src: Path | None) -> str | None:
        """Link (or copy) hidden/ into the io dir; return its path as the verifier sees it. `src` is the
        sandbox's prepared copy (see Sandbox._hidden_source): its modes already make it readable and
        unwritable for the verifier's user, and links share them."""
        self.settle()
        dest = self.iodir / "hidden"
        shutil.rmtree(dest, ignore_errors=True)
        if src is None or not src.is_dir():
            return None
        shutil.copytree(src, dest, symlinks=False, copy_function=_link_or_copy)
        return f"{self.guest_io}/hidden"

    def unstage_hidden(self) -> None:
        self.settle()
        shutil.rmtree(self.iodir / "hidden", ignore_errors=True)

    def verify(self, request: dict[str, Any], hidden_src: Path | None, timeout: float) -> tuple[dict, int]:
        """Judge a finished episode in a fresh process; return (the verifier's reply, strays killed first).

        Never raises for the verifier's own failure (a crash, a timeout, an oversized reply): those come
        back as an error reply. The runtime is gone afterwards; a fresh one is spawned ahead, on a thread
        that the box's next use waits for (``settle``)."""
        killed = self.stop_runtime()
        if self.dead:
            raise SandboxError(f"{self.name}: the sandbox is gone")
        try:
            request = {**request, "hidden": self.stage_hidden(hidden_src), "timeout": timeout}
            chan = self._spawn("verifier", VERIFY_MAX_LINE)
            try:
                chan.send(request)
                reply = chan.recv(time.monotonic() + timeout + 2.0)
                if reply is None:
                    reply = {"ok": False, "error": {"type": "timeout", "message":
                             f"the verifier did not answer within {timeout + 2.0:g} s"}}
            except (EOFError, OSError, ValueError) as e:
                reply = {"ok": False, "error": {"type": "crashed", "message": f"the verifier process failed: {e}"}}
            finally:
                chan.close()
        except BaseException:
            self._after_verify()
            raise
        self._after = threading.Thread(target=self._after_verify, name=f"{self.name}-after-verify", daemon=True)
        self._after.start()
        return reply, killed

    def _after_verify(self) -> None:
        """Nothing of the episode is left: the verifier and its strays killed, hidden/ gone, the scratch space
        emptied, and the next runtime started now (restoring the work dir). Never raises."""
        self.stop_runtime()
        self.unstage_hidden()
        try:
            self.wipe_scratch()
            self.chan, self.fresh = self._spawn("runtime", self.runtime_max_line, ("--restore",)), True
        except (SandboxError, OSError):
            pass  # the next reset starts one (or replaces a dead sandbox)

    def recycle(self) -> None:
        """Back to pristine for another sandbox: no processes, empty work and scratch dirs, a fresh runtime."""
        self.settle()
        self.unstage_hidden()
        self.stop_runtime()
        self.wipe(self.work, *self.scratch, ipc=self.ipc)
        self.prespawn()
        self.idle_since = time.monotonic()


_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _destroy_all() -> None:
    for box in list(_live):
        try:
            box.destroy()
        except Exception:
            pass


def _after_fork_in_child() -> None:
    """A forked child (a process-pool worker) drops its copies of the parent's FIFO ends, so the parent's
    sandboxes still stop when the parent dies."""
    for box in list(_live):
        box.dead = True
        for chan in (box.chan, box.ctl):
            if chan is not None:
                chan.close()
        _live.discard(box)


os.register_at_fork(after_in_child=_after_fork_in_child)
