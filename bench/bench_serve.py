"""envgen serve: tool-call and episode-step latency through the server vs a local sandbox, and a soak of
concurrent remote sessions (server memory sampled, sandboxes leaked counted).

    python bench/bench_serve.py --calls 2000                       # latency only
    python bench/bench_serve.py --sessions 32 --minutes 10         # plus the soak (the issue's figure)

Both sides run on this machine in one run (the server is a real ``envgen serve`` subprocess on loopback), so
the ratio is the cost of the server hop: WebSocket framing, OpenEnv's session dispatch, a thread hop.
`--write` records the figures in bench/RESULTS.md under "## Serve".
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import make_tiny_pack  # noqa: E402
from serve_util import Server  # noqa: E402

import gymnasium  # noqa: E402
import psutil  # noqa: E402

import envgen  # noqa: E402,F401
from envgen.policies.builtin import OraclePolicy, rollout  # noqa: E402
from bench_local import bench_sandbox as calls, pct  # noqa: E402  (the same no-op call loop, and its percentiles)


NOOP = {"content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "noop", "arguments": {}}}]}
EPISODE = 10
"""Steps per episode: PackEnv's info carries the whole conversation (deep-copied each step), so the steps are
timed in short episodes, the reset between them untimed, as a trainer's episodes are."""


def steps(pack_dir: str, backend: str, n: int) -> list[float]:
    """PackEnv steps of one no-op tool call each (action parsing, argument check, the call, the record)."""
    env = gymnasium.make("envgen/Pack-v0", pack=pack_dir, sandbox=backend, max_turns=EPISODE + 1)
    out = []
    try:
        for k in range(n + 50):
            if k % EPISODE == 0:
                env.reset(options={"task_id": "tiny-0"})
            t = time.perf_counter()
            env.step(NOOP)
            if k >= 50:
                out.append(time.perf_counter() - t)
    finally:
        env.close()
    return out


def openenv_steps(server: Server, n: int) -> list[float]:
    """The same step from a stock OpenEnv EnvClient (the episode runs on the server)."""
    from openenv.core.generic_client import GenericEnvClient

    out = []
    with GenericEnvClient(base_url=server.auth_url).sync() as env:
        for k in range(n + 50):
            if k % EPISODE == 0:
                env.reset(task_id="tiny-0", max_turns=EPISODE + 1)
            t = time.perf_counter()
            env.step({"message": NOOP})
            if k >= 50:
                out.append(time.perf_counter() - t)
    return out


def sandbox_procs(pid: int) -> int:
    try:
        return len(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return 0


def soak(server: Server, pack_dir: str, sessions: int, seconds: float) -> dict:
    """`sessions` threads, each a gymnasium env on the server running oracle episodes for `seconds`."""
    stop = time.monotonic() + seconds
    counts = {"episodes": 0, "reward_1": 0, "errors": 0}
    lock = threading.Lock()
    samples: list[tuple[float, float, int]] = []
    proc = psutil.Process(server.pid)

    def worker(k: int) -> None:
        env = gymnasium.make("envgen/Pack-v0", pack=pack_dir, sandbox="remote:" + server.auth_url)
        try:
            while time.monotonic() < stop:
                try:
                    r = rollout(env, OraclePolicy(), task_id=f"tiny-{k % 3}").reward
                    with lock:
                        counts["episodes"] += 1
                        counts["reward_1"] += r == 1.0
                except Exception:
                    with lock:
                        counts["errors"] += 1
        finally:
            env.close()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(sessions)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        samples.append((time.monotonic() - t0, proc.memory_info().rss / 2 ** 20, sandbox_procs(server.pid)))
        time.sleep(min(5.0, max(1.0, seconds / 60)))
    for t in threads:
        t.join()
    m = server.wait_metrics(lambda m: m["sessions"]["active"] == 0 and m["sandboxes"]["open"] == 0, timeout=30)
    time.sleep(1.0)
    rss = [s[1] for s in samples]
    first = rss[: max(1, len(rss) // 10)]
    last = rss[-max(1, len(rss) // 10):]
    return {**counts, "seconds": round(time.monotonic() - t0, 1), "rss_mb_first": round(sum(first) / len(first), 1),
            "rss_mb_last": round(sum(last) / len(last), 1), "rss_mb_max": round(max(rss), 1),
            "peak_sandbox_procs": max(s[2] for s in samples), "sandboxes_open_after": m["sandboxes"]["open"],
            "sandbox_procs_after": sandbox_procs(server.pid), "sessions_opened": m["sessions"]["opened"],
            "server_calls": m["calls"], "server_latency": m["latency"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="measured calls / steps per side")
    ap.add_argument("--sessions", type=int, default=0, help="soak: concurrent remote sessions (0: no soak)")
    ap.add_argument("--minutes", type=float, default=1.0, help="soak: how long")
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    a = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    pack = make_tiny_pack(root / "tiny")
    pack_dir = str(pack.root)
    server = Server([pack_dir], "--max-sessions", str(max(4, a.sessions + 2)), "--idle-timeout", "120")
    lines = []
    try:
        os.environ["ENVGEN_SERVE_TOKEN"] = server.token
        remote = "remote:" + server.url
        loc, rem = calls(pack, a.calls, "local"), calls(pack, a.calls, remote)
        sl, sr = steps(pack_dir, "local", a.calls), steps(pack_dir, remote, a.calls)
        so = openenv_steps(server, a.calls)
        rows = [("no-op tool call, local sandbox", loc), ("no-op tool call, remote sandbox (serve)", rem),
                ("PackEnv step, local sandbox", sl), ("PackEnv step, remote sandbox (serve)", sr),
                ("episode step, OpenEnv EnvClient -> serve", so)]
        lines.append("| path | p50 ms | p99 ms |\n|---|---|---|")
        lines += [f"| {name} | {pct(xs, .5):.3f} | {pct(xs, .99):.3f} |" for name, xs in rows]
        lines.append("")
        lines.append(f"Ratios (p50): remote/local tool call {pct(rem, .5) / pct(loc, .5):.2f}x, remote/local PackEnv "
                     f"step {pct(sr, .5) / pct(sl, .5):.2f}x, EnvClient step/local PackEnv step "
                     f"{pct(so, .5) / pct(sl, .5):.2f}x; (p99) remote/local tool call {pct(rem, .99) / pct(loc, .99):.2f}x.")
        print("\n".join(lines), flush=True)
        if a.sessions:
            r = soak(server, pack_dir, a.sessions, a.minutes * 60)
            soak_lines = [
                "", f"Soak: {a.sessions} concurrent remote sessions (gymnasium, sandbox=remote:, oracle episodes) "
                f"for {r['seconds']:g} s: {r['episodes']} episodes ({r['reward_1']} with reward 1), "
                f"{r['errors']} errors; server RSS {r['rss_mb_first']} MiB (first tenth) -> {r['rss_mb_last']} MiB "
                f"(last tenth), max {r['rss_mb_max']} MiB; sandbox processes at peak {r['peak_sandbox_procs']}, "
                f"after {r['sandbox_procs_after']}; sandboxes open after (server metrics) {r['sandboxes_open_after']}; "
                f"sessions opened {r['sessions_opened']}."]
            lat = r["server_latency"]
            soak_lines.append("Server-side latency under the soak (p50/p99 ms): " + ", ".join(
                f"{op} {v['p50_ms']:.2f}/{v['p99_ms']:.2f}" for op, v in sorted(lat.items())))
            print("\n".join(soak_lines), flush=True)
            lines += soak_lines
    finally:
        server.stop()
    if a.write:
        from _results import ran_on, write_section

        cmd = f"python bench/bench_serve.py --calls {a.calls}" + (
            f" --sessions {a.sessions} --minutes {a.minutes:g}" if a.sessions else "") + " --write"
        write_section("Serve", ran_on(cmd, f"{os.cpu_count()} CPUs") + "\n\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
