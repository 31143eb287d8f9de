"""envgen sandbox supervisor (stdlib only; never imports envgen): the one trusted process of a sandbox.

Both backends run it: PID 1 of a Docker container, or the local backend's child on the host. The host
cannot afford a new process (or a `docker exec`, ~60-80 ms) for every chore of an episode, so this
process does them over a JSON-lines control channel (two FIFOs in the sandbox's io dir), each in well
under a millisecond:

    {"op": "spawn", "role": "runtime"|"verifier", "input": PATH, "output": PATH, "extra": [ARG, ...]}
                                                  fork a process with stdin/stdout wired to those FIFOs:
                                                  the runtime server (the agent's tools), or the one-shot
                                                  verifier (envs/runtime/verifier.py)  -> {"pid": N}
    {"op": "kill"}                                SIGKILL every process of the sandbox, wait until they are gone
                                                  -> {"killed": N, "strays": N (those not the runtime)}
    {"op": "wipe", "dirs": [DIR, ...], "ipc": B}  empty those dirs (and remove System V IPC objects), as the
                                                  sandbox user
    {"op": "ps"}                                  the live processes: [[pid, uid, state, name], ...]
    {"op": "ping"}

Both roles are forks of this process, which pre-imports the runtime server and the verifier (~5 ms a
spawn instead of ~100 ms for a new interpreter) and never imports tool code: a verifier is therefore a
process that no tool ever ran in, started after every process of the episode is gone.

Isolation (`--isolation`), chosen by the host:

- ``pid1``: already PID 1 of its own PID namespace (Docker). `kill(-1)` reaches every other process.
- ``namespaces``: (root on the host) unshare PID, mount and IPC namespaces and become PID 1 there, with
  a private /proc (the tools see no host process, hence no pack path on a command line), private tmpfs
  at /tmp and /dev/shm, a private System V IPC namespace, and the host's files out of sight: each
  ``--hide`` path (the host chooses: every top-level dir but the system's own) is covered by an empty
  tmpfs, and only the ``--keep`` dirs (the interpreter, its site-packages, the runtime, the kit, the
  sandbox dir) are bound back in place. If the supervisor dies, the kernel kills the whole namespace.
- ``subreaper``: (no privileges) a child subreaper: processes that detach with setsid are re-parented
  here, so `kill` finds every descendant by walking /proc.

Everything the supervisor starts runs as `--uid` (the unprivileged sandbox user where there is one);
when the host closes the control channel (including when the host process is killed) the supervisor
kills everything and exits.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import gc
import json
import os
import resource
import select
import shutil
import signal
import sys
import time
import traceback

KILL_ROUNDS_S = 5.0
CTL_MAX_LINE = 1 << 20
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 24, 36, 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
IPC_RMID = 0
RLIMITS = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS, "nofile": resource.RLIMIT_NOFILE,
           "fsize": resource.RLIMIT_FSIZE, "nproc": resource.RLIMIT_NPROC}

# ctypes for what the os module lacks on the Pythons the images carry (3.9+): unshare, mount, prctl,
# capset and the System V IPC removal calls. No stdlib module wraps these for a 3.9 interpreter, and
# this file must stay stdlib-only (it runs inside bare sandbox images).
_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target: str, fstype, flags: int, data=None) -> None:
    enc = (lambda x: x.encode() if isinstance(x, str) else x)
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


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


def _stat(pid: str) -> tuple[int, int, str, str] | None:
    """(ppid, uid, state, name) of one process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    close = stat.rfind(")")
    fields = stat[close + 2:].split()
    return int(fields[1]), uid, fields[0], stat[stat.find("(") + 1: close]


def _load(path: str, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _remove_ipc() -> int:
    """Remove every System V IPC object this process may remove (its own uid's); return the count."""
    removed = 0
    calls = {"shm": lambda i: _libc.shmctl(i, IPC_RMID, None), "sem": lambda i: _libc.semctl(i, 0, IPC_RMID),
             "msg": lambda i: _libc.msgctl(i, IPC_RMID, None)}
    for kind, rm in calls.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 1 and rm(int(cols[1])) == 0:
                removed += 1
    return removed


class Supervisor:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.me = os.getpid()
        self.runtime_pid: int | None = None
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": a.home,
                    "TMPDIR": a.tmp, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0",
                    "PYTHONDONTWRITEBYTECODE": "1", "USER": "sandbox"}
        for key in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"):
            if os.environ.get(key):
                self.env[key] = os.environ[key]
        self.rlimits = [(RLIMITS[k], tuple(v)) for k, v in json.loads(a.rlimits or "{}").items()]
        self.roles = {"runtime": self._zygote(a.runtime, "envgen_runtime_server"),
                      "verifier": self._zygote(json.loads(a.verifier), "envgen_runtime_verifier")}
        gc.freeze()  # what is imported now stays out of the children's collections: no copy-on-write storm

    @staticmethod
    def _zygote(cmd: list[str], name: str):
        """(module, script, args) for `python ... SCRIPT.py ARGS` with SCRIPT defining main(argv), imported here
        once so each spawn is a fork; (None, None, cmd) to exec anything else as given."""
        script = next((c for c in cmd if c.endswith(".py")), None)
        if script is None or not os.path.basename(cmd[0]).startswith("python"):
            return None, None, cmd
        try:
            import sqlite3  # noqa: F401  (warm for the tools; a fork shares it for free)

            module = _load(script, name)
            args = cmd[cmd.index(script) + 1:]
            if callable(getattr(module, "main", None)):
                if callable(getattr(module, "prepare", None)):
                    module.prepare(args)  # e.g. the verifier imports its kit once, here
                return module, script, args
        except Exception:
            _log(traceback.format_exc())
        return None, None, cmd

    # -- processes of the sandbox

    def _procs(self) -> list[tuple[int, int, str, str]]:
        """(pid, uid, state, name) of every process of the sandbox but this one."""
        table = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.me:
                st = _stat(entry)
                if st is not None:
                    table[int(entry)] = st
        if self.a.isolation != "subreaper":
            return [(pid, uid, state, name) for pid, (_, uid, state, name) in table.items()]
        # Not alone in a PID namespace: the sandbox is this process's descendants (setsid'd ones included,
        # since a subreaper inherits the orphans).
        out, frontier = [], {self.me}
        while frontier:
            kids = [pid for pid, st in table.items() if st[0] in frontier]
            out += [(pid, *table[pid][1:]) for pid in kids]
            frontier = set(kids)
            for pid in kids:
                del table[pid]
        return out

    # -- ops

    def op_ping(self, req):
        return {"ok": True}

    def op_spawn(self, req):
        role = req.get("role", "runtime")
        module, script, args = self.roles[role]
        args = [*args, *[str(x) for x in req.get("extra") or []]]
        uid = self.a.uid if role == "runtime" else self.a.verifier_uid
        fd_in = _open_fifo(req["input"], os.O_RDONLY, 5.0)
        fd_out = _open_fifo(req["output"], os.O_WRONLY, 5.0)
        pid = os.fork()
        if pid == 0:  # child: become the sandbox user and run the role; never return
            code = 127
            try:
                os.setsid()
                try:
                    with open("/proc/self/oom_score_adj", "w") as f:
                        f.write("1000")  # under memory pressure the kernel kills this one, never the supervisor
                except OSError:
                    pass
                os.dup2(fd_in, 0)
                os.dup2(fd_out, 1)
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 2)
                os.closerange(3, 65536)
                if role == "runtime":
                    for which, limit in self.rlimits:
                        resource.setrlimit(which, limit)
                    if self.a.isolation == "namespaces" and uid == 0:
                        _drop_capabilities()  # the tools run as root here: root by name only
                if os.geteuid() == 0 and uid != 0:
                    os.setgroups([])
                    os.setgid(self.a.gid)
                    os.setuid(uid)
                os.chdir(self.a.work)
                os.environ.clear()
                os.environ.update(self.env)
                if module is not None:
                    sys.argv = [script, *args]
                    module.main(args)
                    code = 0
                else:
                    os.execve(args[0], args, self.env)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            finally:
                os._exit(code)
        os.close(fd_in)
        os.close(fd_out)
        if role == "runtime":
            self.runtime_pid = pid
        return {"ok": True, "pid": pid}

    def op_kill(self, req):
        """SIGKILL every process of the sandbox but this one, and wait until they are gone."""
        runtime, self.runtime_pid = self.runtime_pid, None
        if os.getpid() == 1:
            killed = self._kill_namespace()
        else:
            killed = self._kill_descendants()
        left = [p for p in self._procs() if p[2] not in ("Z", "X")] if None in killed else []
        killed.discard(None)
        return {"ok": True, "killed": len(killed), "strays": len(killed - {runtime}), "left": len(left)}

    def _kill_namespace(self) -> set:
        """kill(-1) from PID 1 signals every other process in the namespace in one pass under the tasklist
        lock, so not even a fork bomb can slip a child past it; every orphan is re-parented to PID 1, so
        reaping until no child is left means the namespace is empty (no /proc scan, no fixed sleeps)."""
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        killed, end = set(), time.monotonic() + KILL_ROUNDS_S
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return killed
            if pid == 0:
                if time.monotonic() > end:
                    return killed | {None}  # something would not die: the caller counts what is left
                time.sleep(0.0001)
            elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
                killed.add(pid)

    def _kill_descendants(self) -> set:
        """Without a namespace of its own: kill the descendants found in /proc (a subreaper inherits the
        orphans, setsid'd or not), in rounds until none is left."""
        killed, end = set(), time.monotonic() + KILL_ROUNDS_S
        while True:
            self._reap()
            live = [p[0] for p in self._procs() if p[2] not in ("Z", "X")]
            if not live:
                return killed
            if time.monotonic() > end:
                return killed | {None}
            killed.update(live)
            for pid in live:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.0005)

    def op_wipe(self, req):
        """Empty dirs (and drop IPC objects) as the sandbox user (seteuid keeps root in the saved uid: no fork)."""
        dirs = [d for d in req.get("dirs") or [] if os.path.isabs(d)]
        failed, switch = [], os.geteuid() == 0 and self.a.uid != 0
        if switch:
            os.setegid(self.a.gid)
            os.seteuid(self.a.uid)
        try:
            for d in dirs:
                for entry in os.listdir(d):
                    p = os.path.join(d, entry)
                    if any(k == p or k.startswith(p + "/") for k in self.a.keep):
                        continue  # the sandbox's own dirs, bound into a private /tmp
                    try:
                        if os.path.isdir(p) and not os.path.islink(p):
                            shutil.rmtree(p)
                        else:
                            os.unlink(p)
                    except OSError:
                        failed.append(p)
            ipc = _remove_ipc() if req.get("ipc") else 0
        finally:
            if switch:
                os.seteuid(0)
                os.setegid(0)
        if failed:
            return {"ok": False, "error": {"type": "wipe", "message": f"could not remove {failed[:3]}"}}
        return {"ok": True, "ipc": ipc}

    def op_ps(self, req):
        return {"ok": True, "procs": [list(p) for p in self._procs()], "runtime": self.runtime_pid}

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
                return  # the host closed the control channel: it is done with this sandbox, or dead
            buf += chunk
            if len(buf) > CTL_MAX_LINE and buf.find(b"\n") < 0:
                return  # not the host speaking: stop everything
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

    def kill_all(self) -> None:
        self.op_kill({})


_LOG: str | None = None


def _log(text: str) -> None:
    if _LOG:
        try:
            with open(_LOG, "a") as f:
                f.write(text.rstrip() + "\n")
        except OSError:
            pass


def _enter_namespaces(a: argparse.Namespace) -> str:
    """Become PID 1 of new PID, mount and IPC namespaces with private /proc, /tmp and /dev/shm.

    Returns the isolation reached: "namespaces", or "subreaper" when the kernel refuses (the caller
    then protects itself as a subreaper). The process that called this stays outside as the waiting
    parent, and the namespace dies with it (PR_SET_PDEATHSIG)."""
    try:
        _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    except OSError as e:
        _log(f"namespaces unavailable ({e}); falling back to a subreaper")
        return "subreaper"
    pid = os.fork()
    if pid:
        signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        os._exit(0)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    # A fresh /tmp and empty hidden dirs; the dirs the sandbox needs from under them (the sandbox's own
    # dirs under the host's /tmp, an interpreter under /root or /opt) are bound back in place.
    keep = [os.open(d, os.O_PATH) for d in a.keep]
    covered = ["/tmp"]
    for h in a.hide:
        try:
            if os.path.isdir(h) and not os.path.islink(h):
                _mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
                covered.append(h)
            elif os.path.isfile(h) and not os.path.islink(h):
                _mount("/dev/null", h, None, MS_BIND)
        except OSError as e:
            _log(f"cannot hide {h}: {e}")
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for d, fd in zip(a.keep, keep):
        if any(os.path.commonpath([d, c]) == c for c in covered):
            os.makedirs(d, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", d, None, MS_BIND | MS_REC)
        os.close(fd)
    _read_only_host(writable={"/tmp", "/dev/shm", *a.writable})
    return "namespaces"


_MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024, "nodiratime": 2048,
                "relatime": 1 << 21}


def _read_only_host(writable: set[str]) -> None:
    """Remount every mount of this namespace read-only but /proc, /dev and `writable` (each bound onto
    itself first, so it is a mount of its own): tools that run as root here cannot change the host's
    files (the verifier kit, a pack, envgen itself), and without CAP_SYS_ADMIN (see _drop_capabilities)
    they cannot remount. Each mount is its own: a failure is logged and the rest go on."""
    for d in sorted(writable):
        if os.path.isdir(d) and d not in ("/tmp", "/dev/shm"):
            _mount(d, d, None, MS_BIND | MS_REC)
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    points = {}
    for m in mounts:
        point = m[4].encode().decode("unicode_escape")
        points[point] = sum(_MOUNT_FLAGS.get(o, 0) for o in m[5].split(","))
    for point, flags in sorted(points.items(), key=lambda kv: kv[0].count("/")):
        if point in writable or point.startswith(("/proc", "/dev")):
            continue
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError as e:
            _log(f"read-only remount of {point} failed: {e}")


def _drop_capabilities() -> None:
    """Give up every capability for good (bounding set, then effective/permitted/inheritable), and forbid
    regaining any through exec: a tool running as uid 0 is then root only by name."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # EINVAL: past the last capability this kernel knows

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    _check(_libc.capset(ctypes.byref(Header(_LINUX_CAPABILITY_VERSION_3, 0)), (Data * 2)()), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")


def main(argv=None) -> None:
    global _LOG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--io", required=True, help="io dir holding ctl.in and ctl.out (bind-mounted in a container)")
    ap.add_argument("--uid", type=int, required=True, help="uid of the runtime (the agent's tools)")
    ap.add_argument("--gid", type=int, required=True)
    ap.add_argument("--verifier-uid", type=int, help="uid of the verifier process (default: --uid)")
    ap.add_argument("--work", default="/work")
    ap.add_argument("--home", default="/tmp")
    ap.add_argument("--tmp", default="/tmp", help="TMPDIR of the spawned processes")
    ap.add_argument("--isolation", choices=("pid1", "namespaces", "subreaper"), default="pid1")
    ap.add_argument("--keep", action="append", default=[],
                    help="(namespaces) host dirs to keep visible in /tmp and under the --hide dirs")
    ap.add_argument("--hide", action="append", default=[],
                    help="(namespaces) host dirs (or files) to cover with an empty tmpfs (/dev/null)")
    ap.add_argument("--writable", action="append", default=[],
                    help="(namespaces) the dirs that stay writable; the rest of the host is read-only")
    ap.add_argument("--rlimits", help='JSON {"cpu"|"as"|"nofile"|"fsize"|"nproc": [soft, hard]} for the runtime')
    ap.add_argument("--verifier", required=True, help="JSON list: the verifier's command line")
    ap.add_argument("runtime", nargs=argparse.REMAINDER, help="-- then the runtime server's command line")
    a = ap.parse_args(argv)
    if a.runtime and a.runtime[0] == "--":
        a.runtime = a.runtime[1:]
    if not a.runtime:
        ap.error("the runtime command is missing")
    if a.verifier_uid is None:
        a.verifier_uid = a.uid
    _LOG = os.path.join(a.io, "supervisor.log")
    sys.dont_write_bytecode = True
    sup = None
    try:
        if a.isolation == "namespaces":
            a.isolation = _enter_namespaces(a)
        if a.isolation == "subreaper":
            _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl")
        # Control FIFOs: the host already holds ctl.out's read end, so the write-open succeeds at once;
        # ctl.in is opened non-blocking so no writer is needed yet (poll ignores a FIFO that never had one).
        ctl_in = os.open(os.path.join(a.io, "ctl.in"), os.O_RDONLY | os.O_NONBLOCK)
        ctl_out = _open_fifo(os.path.join(a.io, "ctl.out"), os.O_WRONLY, 10.0)
        sup = Supervisor(a)
        os.write(ctl_out, json.dumps({"ok": True, "ready": True, "python": sys.version.split()[0],
                                      "isolation": a.isolation}).encode() + b"\n")
        sup.serve(ctl_in, ctl_out)
    except BaseException:
        _log(traceback.format_exc())
    finally:
        if sup is not None:
            sup.kill_all()
        elif os.getpid() == 1:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
    os._exit(0)


if __name__ == "__main__":
    main()
