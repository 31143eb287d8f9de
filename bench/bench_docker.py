"""Docker sandbox: call latency by channel, reset with the warm pool vs a cold start, and a soak.

1. No-op tool call through DockerSandbox (FIFOs) vs the other ways to reach a runtime in a container,
   measured side by side: `docker exec -i` and attach sockets through dockerd (the alternatives the
   backend's design comment weighs), and `docker exec` per call (the naive design; the CLI is the
   baseline here on purpose).
2. Sandbox open + reset from the warm pool vs a cold container start; reset in place after a verified
   episode (the PackEnv.reset path).
3. Soak: N concurrent Docker episodes (default 16) for --soak-seconds, sandboxes reopened every few
   episodes through a shared pool; afterwards no envgen container may be left, and dockerd/containerd/
   host memory may not grow.

`--write` records the figures in bench/RESULTS.md under "## Docker sandbox". Needs a local dockerd and
the base image (.ci/setup-docker.sh); the tiny test pack's image is built on first use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import make_tiny_pack  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_local import bench_sandbox  # noqa: E402

from envgen.episodes.episode import replay  # noqa: E402
from envgen.sandbox.images import build_pack_image, stderr_log  # noqa: E402
from envgen.sandbox.docker import LABEL, DockerSandbox, engine, io_root  # noqa: E402
from envgen.sandbox.pool import WarmPool  # noqa: E402

RUNTIME = ["python3", "-I", "-B", "/opt/envgen/runtime/server.py", "--env", "/env", "--work", "/work"]
NOOP = json.dumps({"op": "call", "tool": "noop", "args": {}})


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def row(name: str, xs: list[float]) -> str:
    return f"| {name} | {len(xs)} | {pct(xs, .5):.3f} | {pct(xs, .99):.3f} |"


# ---------------------------------------------------------------- 1. call latency


class _Framed:
    """JSON lines over a docker stream socket (8-byte frame headers: stream id, payload size)."""

    def __init__(self, sock):
        self.sock = getattr(sock, "_sock", sock)
        self.raw = b""
        self.out = b""

    def send(self, line: str) -> None:
        self.sock.sendall(line.encode() + b"\n")

    def readline(self) -> bytes:
        while b"\n" not in self.out:
            while len(self.raw) < 8 or len(self.raw) < 8 + struct.unpack(">I", self.raw[4:8])[0]:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise EOFError("stream closed")
                self.raw += chunk
            size = struct.unpack(">I", self.raw[4:8])[0]
            if self.raw[0] == 1:
                self.out += self.raw[8:8 + size]
            self.raw = self.raw[8 + size:]
        line, _, self.out = self.out.partition(b"\n")
        return line

    def roundtrips(self, n: int) -> list[float]:
        self.send(json.dumps({"op": "reset"}))
        self.readline()
        out = []
        for i in range(n + 300):
            t = time.perf_counter()
            self.send(NOOP)
            reply = self.readline()
            if i >= 300:
                out.append(time.perf_counter() - t)
        assert b'"ok"' in reply
        return out


def _container(image: str, command: list[str], **kw):
    return engine().containers.run(image, command, detach=True, user="10001:10001", network_mode="none",
                                   tmpfs={"/work": "uid=10001,gid=10001"}, labels={LABEL: "1", "envgen.bench": "1"},
                                   working_dir="/work", **kw)


def bench_exec_socket(image: str, n: int) -> list[float]:
    c = _container(image, ["sleep", "infinity"])
    try:
        ex = engine().api.exec_create(c.id, RUNTIME, stdin=True, stdout=True, stderr=False, user="10001:10001",
                                      workdir="/work")
        ch = _Framed(engine().api.exec_start(ex["Id"], socket=True))
        ch.readline()  # ready
        return ch.roundtrips(n)
    finally:
        c.remove(force=True)


def bench_attach_socket(image: str, n: int) -> list[float]:
    c = _container(image, ["sh", "-c", "read go && exec " + " ".join(RUNTIME)], stdin_open=True)
    try:
        ch = _Framed(engine().api.attach_socket(c.id, params={"stdin": 1, "stdout": 1, "stream": 1}))
        ch.send("go")  # attached before the runtime prints its ready line
        ch.readline()
        return ch.roundtrips(n)
    finally:
        c.remove(force=True)


def bench_exec_per_call(image: str, n: int, runtime: bool) -> list[float]:
    """`docker exec` per call: a new runtime per call (what 'no held process' costs), or just `true`."""
    c = _container(image, ["sleep", "infinity"])
    req = (json.dumps({"op": "reset"}) + "\n" + NOOP + "\n").encode()
    out = []
    try:
        for _ in range(n):
            cmd = ["docker", "exec", "-i", "-u", "10001:10001", "-w", "/work", c.id,
                   *(RUNTIME if runtime else ["true"])]
            t = time.perf_counter()
            p = subprocess.run(cmd, input=req, capture_output=True, check=True)
            out.append(time.perf_counter() - t)
            assert not runtime or b'"content": "ok"' in p.stdout
    finally:
        c.remove(force=True)
    return out


# ---------------------------------------------------------------- 2. reset


def bench_cold_open(pack, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        s = DockerSandbox(pack).__enter__()
        s.reset()
        out.append(time.perf_counter() - t)
        s.close()
    return out


def bench_pool_open(pack, n: int) -> tuple[list[float], int]:
    out = []
    with WarmPool(size=2) as pool:
        pool.prewarm(pack, wait=True)
        for _ in range(n):
            deadline = time.monotonic() + 10
            while pool.idle() == 0 and time.monotonic() < deadline:  # a rollout's own run time would cover this
                time.sleep(0.005)
            t = time.perf_counter()
            s = DockerSandbox(pack, pool=pool).__enter__()
            s.reset()
            out.append(time.perf_counter() - t)
            task = pack.tasks[0]
            assert replay(s, task, task.reference.calls, "").verdict.reward == 1.0
            s.close()
        hits = pool.hits
    return out, hits


def bench_reset_in_place(pack, n: int) -> tuple[list[float], list[float]]:
    """Reset in the same container: right after a verified episode, and after a short agent pause."""
    now, paused = [], []
    with DockerSandbox(pack) as s:
        for i in range(2 * n):
            task = pack.tasks[i % len(pack.tasks)]
            assert replay(s, task, task.reference.calls, "").verdict.reward == 1.0
            if i % 2:
                time.sleep(0.05)
            t = time.perf_counter()
            s.reset()
            (paused if i % 2 else now).append(time.perf_counter() - t)
    return now, paused


# ---------------------------------------------------------------- 3. soak


def _rss_kb(pid: int | str) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pids(name: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if open(f"/proc/{d}/comm").read().strip() == name:
                    out.append(int(d))
            except OSError:
                pass
    return out


def _cgroup_mb(cid: str) -> float:
    """A container's memory use (its processes, page cache and tmpfs) from its cgroup, v1 or v2."""
    for path in (f"/sys/fs/cgroup/memory/docker/{cid}/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/memory/system.slice/docker-{cid}.scope/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.current",
                 f"/sys/fs/cgroup/docker/{cid}/memory.current"):
        try:
            return int(open(path).read()) / (1 << 20)
        except OSError:
            continue
    return 0.0


def snapshot() -> dict:
    mem = {line.split(":")[0]: int(line.split()[1]) for line in open("/proc/meminfo")}
    ours = engine().containers.list(all=True, filters={"label": [LABEL, f"envgen.owner_pid={os.getpid()}"]})
    mine = f"-{os.getpid()}-"  # this process's containers and io dirs only: other jobs may share the engine
    return {
        "containers": len(ours),
        "sandboxes_mb": sum(_cgroup_mb(c.id) for c in ours),
        "io_dirs": len([d for d in io_root().iterdir() if mine in d.name]) if io_root().is_dir() else 0,
        "dockerd_mb": sum(_rss_kb(p) for p in _pids("dockerd")) / 1024,
        "containerd_mb": sum(_rss_kb(p) for p in _pids("containerd")) / 1024,
        "shims": len(_pids("containerd-shim")) + len(_pids("containerd-shim-runc-v2")),  # machine-wide
        "host_used_mb": (mem["MemTotal"] - mem["MemAvailable"]) / 1024,
        "bench_mb": _rss_kb("self") / 1024,
        "bench_fds": len(os.listdir("/proc/self/fd")),
    }


def soak(pack, workers: int, seconds: float, reopen_every: int) -> dict:
    before = snapshot()
    stats = {"episodes": 0, "failures": 0, "errors": [], "latency": []}
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    samples = []

    def worker(k: int) -> None:
        i = 0
        while time.monotonic() < stop:
            try:
                with DockerSandbox(pack, pool=pool) as s:
                    for _ in range(reopen_every):
                        if time.monotonic() >= stop:
                            break
                        task = pack.tasks[(k + i) % len(pack.tasks)]
                        t = time.perf_counter()
                        s.reset()
                        for _ in range(3):
                            assert s.call("noop", {}).ok
                        ep = replay(s, task, task.reference.calls, "")
                        dt = time.perf_counter() - t
                        with lock:
                            stats["episodes"] += 1
                            stats["latency"].append(dt)
                            stats["failures"] += ep.verdict.reward != 1.0
                        i += 1
            except Exception as e:  # recorded, and the soak goes on: a failure is a finding, not a crash
                with lock:
                    stats["errors"].append(f"{type(e).__name__}: {e}")

    with WarmPool(size=4) as pool:
        pool.prewarm(pack, wait=True)
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(workers)]
        for t in threads:
            t.start()
        marks = [seconds * f for f in (0.25, 0.5, 0.75)]
        t0 = time.monotonic()
        for m in marks:
            time.sleep(max(0.0, t0 + m - time.monotonic()))
            samples.append(snapshot())
        for t in threads:
            t.join()
    time.sleep(1.0)
    after = snapshot()
    return {"before": before, "during": samples, "after": after, **stats}


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--baseline-calls", type=int, default=30)
    ap.add_argument("--resets", type=int, default=30)
    ap.add_argument("--cold", type=int, default=8)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--soak-seconds", type=float, default=60.0, help="300 for the record")
    ap.add_argument("--reopen-every", type=int, default=10, help="episodes per sandbox before it goes back to the pool")
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    a = ap.parse_args()
    load = os.getloadavg()[0]

    with tempfile.TemporaryDirectory() as d:
        pack = build_pack_image(make_tiny_pack(Path(d) / "tiny", limits={"memory_mb": 256}), log=stderr_log)
        image = pack.manifest.image.tag
        print("call latency ...", file=sys.stderr)
        fifo = bench_sandbox(pack, a.calls, "docker", warmup=300)
        exec_sock = bench_exec_socket(image, a.calls)
        attach = bench_attach_socket(image, a.calls)
        per_call = bench_exec_per_call(image, a.baseline_calls, runtime=True)
        per_call_true = bench_exec_per_call(image, a.baseline_calls, runtime=False)
        print("reset ...", file=sys.stderr)
        cold = bench_cold_open(pack, a.cold)
        warm, hits = bench_pool_open(pack, a.resets)
        now, paused = bench_reset_in_place(pack, a.resets)
        print(f"soak: {a.workers} concurrent episodes for {a.soak_seconds:g} s ...", file=sys.stderr)
        sk = soak(pack, a.workers, a.soak_seconds, a.reopen_every)

    p50 = lambda xs: statistics.median(xs)  # noqa: E731
    ratio = p50(per_call) / p50(fifo)
    calls = "\n".join([
        "| path | calls | p50 ms | p99 ms |", "|---|---|---|---|",
        row("DockerSandbox no-op call (FIFOs, runtime held open)", fifo),
        row("`docker exec -i` socket, runtime held open", exec_sock),
        row("attach socket, runtime held open", attach),
        row("`docker exec` per call (new runtime each call)", per_call),
        row("`docker exec ... true` per call (floor of exec)", per_call_true),
    ])
    resets = "\n".join([
        "| path | n | p50 ms | p99 ms |", "|---|---|---|---|",
        row("cold: new container + runtime + reset", cold),
        row(f"warm pool: sandbox open + reset ({hits}/{len(warm)} pool hits)", warm),
        row("in place, right after a verified episode", now),
        row("in place, 50 ms after a verified episode", paused),
    ])
    b, after, during = sk["before"], sk["after"], sk["during"]
    first, last = during[0], during[-1]
    lat = sk["latency"] or [0.0]
    soak_rows = "\n".join([
        "| | before | 25% | 75% | after |", "|---|---|---|---|---|",
        *[f"| {k} | {b[k]:.0f} | {first[k]:.0f} | {last[k]:.0f} | {after[k]:.0f} |"
          for k in ("containers", "shims", "io_dirs", "sandboxes_mb", "dockerd_mb", "containerd_mb", "host_used_mb",
                    "bench_mb", "bench_fds")],
    ])
    leaked = after["containers"] - b["containers"]
    keys = ("sandboxes_mb", "dockerd_mb", "containerd_mb", "host_used_mb", "bench_mb")
    growth = {k: last[k] - first[k] for k in keys}
    text = (
        f"### No-op tool call\n\n{calls}\n\n"
        f"`docker exec` per call / DockerSandbox (p50): **{ratio:.0f}x** (target >= 100x: "
        f"{'met' if ratio >= 100 else 'NOT met'}); DockerSandbox p50 {pct(fifo, .5):.3f} ms (target <= 0.5 ms: "
        f"{'met' if pct(fifo, .5) <= 0.5 else 'NOT met'}). The held-open sockets through dockerd are "
        f"{p50(exec_sock) / p50(fifo):.1f}x (exec -i) and {p50(attach) / p50(fifo):.1f}x (attach) slower "
        "than the FIFOs.\n\n"
        f"### Reset\n\n{resets}\n\n"
        f"Warm pool / cold start (p50): **{p50(cold) / p50(warm):.0f}x faster**; warm p50 {pct(warm, .5):.1f} ms "
        f"(target <= 50 ms: {'met' if pct(warm, .5) <= 50 else 'NOT met'}).\n\n"
        f"### Soak: {a.workers} concurrent episodes, {a.soak_seconds:g} s\n\n"
        f"{sk['episodes']} episodes ({sk['episodes'] / a.soak_seconds:.1f}/s), {sk['failures']} scored below 1, "
        f"{len(sk['errors'])} errors{(': ' + '; '.join(sorted(set(sk['errors']))[:3])) if sk['errors'] else ''}; "
        f"episode (reset + 3 no-ops + 2 tool calls + verify) p50 {pct(lat, .5):.1f} ms, p99 {pct(lat, .99):.1f} ms; "
        f"a sandbox reopened through the pool every {a.reopen_every} episodes.\n\n{soak_rows}\n\n"
        f"Leaked containers: **{leaked}** (and {after['io_dirs'] - b['io_dirs']} io dirs). Growth from 25% to 75% of "
        f"the run ({first['containers']} and {last['containers']} containers up): sandboxes (their cgroups) "
        f"{growth['sandboxes_mb']:+.1f} MB, dockerd {growth['dockerd_mb']:+.1f} MB, containerd "
        f"{growth['containerd_mb']:+.1f} MB, bench process {growth['bench_mb']:+.1f} MB; host used "
        f"{growth['host_used_mb']:+.0f} MB (machine-wide, other jobs included).\n"
    )
    print(text)
    if a.write:
        from _results import ran_on, write_section

        shared = ["the host shared with other jobs"] if load > (os.cpu_count() or 1) else []
        head = ran_on(f"python bench/bench_docker.py --soak-seconds {a.soak_seconds:g} --write",
                      f"{os.cpu_count()} cores", f"Docker {engine().version()['Version']}",
                      f"load average {load:.1f} at the start", *shared)
        write_section("Docker sandbox", head + "\n\n" + text)
    if leaked or sk["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
