"""envgen container supervisor: PID 1 of a Docker sandbox (stdlib only; never imports envgen).

The host cannot afford a `docker exec` (~60-80 ms) for every chore of an episode, so one small root
process in the container does them over a JSON-lines control channel (two FIFOs in a bind-mounted
host directory), each in well under a millisecond:

    {"op": "spawn", "input": PATH, "output": PATH}  start the runtime server as the sandbox user, its
                                                   stdin/stdout wired to those FIFOs  -> {"pid": N}
    {"op": "kill", "keep": [PID, ...]}            SIGKILL every process but PID 1 and `keep`, then reap
    {"op": "wipe", "dirs": [DIR, ...]}            empty those dirs, as the sandbox user
    {"op": "ps"}                                  the live processes: [[pid, uid, state, name], ...]
    {"op": "ping"}

The supervisor holds the only root identity in the container; everything it starts runs as the
unprivileged sandbox user, which can neither signal it nor open its FIFOs. When the host closes the
control channel (including when the host process is killed) the supervisor kills everything and exits,
so the container stops (and, started with auto-remove, disappears).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import select
import shutil
import signal
import sys
import time
import traceback

KILL_ROUNDS_S = 5.0


def _open_fifo(path: str, flags: int, wait_s: float) -> int:
    """Open a FIFO without blocking forever: O_NONBLOCK write-opens fail with ENXIO until a reader exists."""
    end = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(path, flags | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO or time.monotonic() > end:
                raise
            time.sleep(0.002)
            continue
        os.set_blocking(fd, True)
        return fd


def _procs() -> list[tuple[int, int, str, str]]:
    """(pid, uid, state, name) of every process in this PID namespace but PID 1."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or entry == "1":
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            uid = os.stat(f"/proc/{entry}").st_uid
        except OSError:
            continue
        name = stat[stat.find("(") + 1: stat.rfind(")")]
        state = stat[stat.rfind(")") + 2: stat.rfind(")") + 3]
        out.append((int(entry), uid, state, name))
    return out


class Supervisor:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.runtime_pid: int | None = None
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": a.home,
                    "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0",
                    "PYTHONDONTWRITEBYTECODE": "1", "USER": "sandbox"}
        for key in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"):
            if os.environ.get(key):
                self.env[key] = os.environ[key]
        self.zygote, self.script, self.args = self._zygote(a.runtime)

    @staticmethod
    def _zygote(cmd: list[str]):
        """Import the runtime server here once, so each spawn is a fork (~5 ms), not a new Python (~100 ms).

        Applies when the command is `python ... SCRIPT.py ARGS` and SCRIPT defines main(argv); anything
        else is exec'd as given. The imports are the server's own plus sqlite3, which most packs' tools use.
        """
        script = next((c for c in cmd if c.endswith(".py")), None)
        if script is None or not os.path.basename(cmd[0]).startswith("python"):
            return None, None, None
        try:
            import importlib.util
            import sqlite3  # noqa: F401  (warm for the tools; a fork shares it for free)

            spec = importlib.util.spec_from_file_location("envgen_runtime_server", script)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            if not callable(getattr(module, "main", None)):
                return None, None, None
        except Exception:
            _log(traceback.format_exc())
            return None, None, None
        return module, script, cmd[cmd.index(script) + 1:]

    # -- ops

    def op_ping(self, req):
        return {"ok": True}

    def op_spawn(self, req):
        fd_in = _open_fifo(req["input"], os.O_RDONLY, 5.0)
        fd_out = _open_fifo(req["output"], os.O_WRONLY, 5.0)
        pid = os.fork()
        if pid == 0:  # child: become the sandbox user and run the runtime; never return
            code = 127
            try:
                os.setsid()
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write("1000")  # under memory pressure the kernel kills the runtime, never PID 1
                os.dup2(fd_in, 0)
                os.dup2(fd_out, 1)
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 2)
                os.closerange(3, 65536)
                os.setgroups([])
                os.setgid(self.a.gid)
                os.setuid(self.a.uid)
                os.chdir(self.a.work)
                os.environ.clear()
                os.environ.update(self.env)
                if self.zygote is not None:
                    sys.argv = [self.script, *self.args]
                    self.zygote.main(self.args)
                    code = 0
                else:
                    os.execve(self.a.runtime[0], self.a.runtime, self.env)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            finally:
                os._exit(code)
        os.close(fd_in)
        os.close(fd_out)
        self.runtime_pid = pid
        return {"ok": True, "pid": pid}

    def op_kill(self, req):
        keep = {int(p) for p in req.get("keep") or []}
        targets = {p[0] for p in _procs() if p[0] not in keep and p[2] not in ("Z", "X")}
        if not keep:
            # kill(-1) from PID 1 signals every other process in the namespace in one pass under the
            # tasklist lock, so not even a fork bomb can slip a child past it.
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        end = time.monotonic() + KILL_ROUNDS_S
        while True:
            self._reap()
            live = [p[0] for p in _procs() if p[0] not in keep and p[2] not in ("Z", "X")]
            if not live or time.monotonic() > end:
                break
            targets.update(live)
            for pid in live:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.001)
        if self.runtime_pid is not None and self.runtime_pid not in keep:
            self.runtime_pid = None
        return {"ok": True, "killed": len(targets), "left": len(live)}

    def op_wipe(self, req):
        """Empty dirs as the sandbox user (seteuid keeps root in the saved uid, so no fork is needed)."""
        dirs = [d for d in req.get("dirs") or [] if os.path.isabs(d)]
        failed = []
        os.setegid(self.a.gid)
        os.seteuid(self.a.uid)
        try:
            for d in dirs:
                for entry in os.listdir(d):
                    p = os.path.join(d, entry)
                    try:
                        if os.path.isdir(p) and not os.path.islink(p):
                            shutil.rmtree(p)
                        else:
                            os.unlink(p)
                    except OSError:
                        failed.append(p)
        finally:
            os.seteuid(0)
            os.setegid(0)
        if failed:
            return {"ok": False, "error": {"type": "wipe", "message": f"could not remove {failed[:3]}"}}
        return {"ok": True}

    def op_ps(self, req):
        return {"ok": True, "procs": [list(p) for p in _procs()], "runtime": self.runtime_pid}

    # -- loop

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.runtime_pid:
                self.runtime_pid = None

    def serve(self, ctl_in: int, ctl_out: int) -> None:
        poll = select.poll()
        poll.register(ctl_in, select.POLLIN | select.POLLHUP | select.POLLERR)
        buf = bytearray()
        while True:
            events = poll.poll(200)
            self._reap()
            if not events:
                continue
            try:
                chunk = os.read(ctl_in, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return  # the host closed the control channel: it is done with this container, or dead
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line, buf = bytes(buf[:nl]), buf[nl + 1:]
                try:
                    req = json.loads(line)
                    reply = getattr(self, "op_" + req["op"])(req)
                except Exception as e:
                    req = req if isinstance(req, dict) else {}
                    reply = {"ok": False, "error": {"type": type(e).__name__, "message": str(e)}}
                    _log(traceback.format_exc())
                if "id" in req:
                    reply["id"] = req["id"]
                os.write(ctl_out, json.dumps(reply).encode() + b"\n")


_LOG: str | None = None


def _log(text: str) -> None:
    if _LOG:
        try:
            with open(_LOG, "a") as f:
                f.write(text.rstrip() + "\n")
        except OSError:
            pass


def main(argv=None) -> None:
    global _LOG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--io", required=True, help="bind-mounted host dir holding ctl.in and ctl.out")
    ap.add_argument("--uid", type=int, required=True)
    ap.add_argument("--gid", type=int, required=True)
    ap.add_argument("--work", default="/work")
    ap.add_argument("--home", default="/tmp")
    ap.add_argument("runtime", nargs=argparse.REMAINDER, help="-- then the runtime server's command line")
    a = ap.parse_args(argv)
    if a.runtime and a.runtime[0] == "--":
        a.runtime = a.runtime[1:]
    if not a.runtime:
        ap.error("the runtime command is missing")
    _LOG = os.path.join(a.io, "supervisor.log")
    sys.dont_write_bytecode = True
    try:
        # Control FIFOs: the host already holds ctl.out's read end, so the write-open succeeds at once;
        # ctl.in is opened non-blocking so no writer is needed yet (poll ignores a FIFO that never had one).
        ctl_in = os.open(os.path.join(a.io, "ctl.in"), os.O_RDONLY | os.O_NONBLOCK)
        ctl_out = _open_fifo(os.path.join(a.io, "ctl.out"), os.O_WRONLY, 10.0)
        os.write(ctl_out, json.dumps({"ok": True, "ready": True, "python": sys.version.split()[0]}).encode() + b"\n")
        Supervisor(a).serve(ctl_in, ctl_out)
    except BaseException:
        _log(traceback.format_exc())
    finally:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)


if __name__ == "__main__":
    main()
