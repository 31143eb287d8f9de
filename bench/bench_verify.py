"""Verification in its own fresh process: the cost per episode, against in-process verification.

Before issue 12 the runtime that ran the episode's tools also ran the verifier (one process, reused
across episodes). Now every process of the episode is killed, `hidden/` staged, and a fresh verifier
process forked from the supervisor judges the episode; the next episode gets a fresh runtime.

Both implementations are measured in one run: the baseline is envgen at BASELINE (checked out from this
repository's history into a temporary worktree), the candidate is this checkout. Each runs the same
pack (a travel-planning build, made by the baseline so both can read it) in a worker process, for both
backends, in alternating rounds so machine noise hits both alike. An episode is what the pass check
and RL do: reset, the reference's tool calls, verify.

`--write` records the figures in bench/RESULTS.md under "## Verification in its own process".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import ran_on, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "a2f1874"
"""The last commit that verified inside the runtime process."""

WORKER = r"""
import json, sys, time
from envgen.episodes.episode import replay
from envgen.pack import load
from envgen.sandbox import open_sandbox

pack = load(sys.argv[1]); backend = sys.argv[2]; n = int(sys.argv[3])
times, rewards = [], []
with open_sandbox(pack, backend) as sbx:
    tasks = pack.tasks
    for t in tasks[:3]:  # warm-up: images, caches, first forks
        replay(sbx, t, t.reference.calls, t.reference.answer)
    for i in range(n):
        t = tasks[i % len(tasks)]
        t0 = time.perf_counter()
        ep = replay(sbx, t, t.reference.calls, t.reference.answer)
        times.append(time.perf_counter() - t0)
        rewards.append(ep.verdict.reward)
print(json.dumps({"times": times, "rewards": rewards}))
"""


def worker(src: Path, pack: Path, backend: str, n: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", WORKER, str(pack), backend, str(n)], cwd=src, env=env,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"worker for {src} ({backend}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=60, help="episodes per round and implementation")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default="local,docker")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="envgen-bench-verify-") as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base), BASELINE], check=True)
        try:
            pack = Path(tmp) / "travel"
            subprocess.run([sys.executable, "-m", "envgen", "build", "general", "--category", "travel-planning",
                            "--tasks", "30", "--out", str(pack)], cwd=base, env={**os.environ, "PYTHONPATH": str(base)},
                           check=True, capture_output=True)
            rows = []
            for backend in a.backends.split(","):
                got = {"in-process (baseline)": [], "own process": []}
                for _ in range(a.rounds):
                    for name, src in (("in-process (baseline)", base), ("own process", ROOT)):
                        res = worker(src, pack, backend, a.episodes)
                        assert all(r == 1.0 for r in res["rewards"]), f"{name} {backend}: oracle did not score 1"
                        got[name] += res["times"]
                p50 = {k: statistics.median(v) * 1000 for k, v in got.items()}
                mean = {k: statistics.fmean(v) * 1000 for k, v in got.items()}
                ratio = mean["own process"] / mean["in-process (baseline)"]
                for k in got:
                    rows.append(f"| {backend} | {k} | {len(got[k])} | {p50[k]:.1f} | {mean[k]:.1f} |")
                rows.append(f"| {backend} | **ratio own / in-process** | | "
                            f"{p50['own process'] / p50['in-process (baseline)']:.2f}x | **{ratio:.2f}x** |")
                print(rows[-3:], flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    body = "\n".join([
        ran_on("python bench/bench_verify.py --write", f"baseline {BASELINE}", f"{a.rounds} alternating rounds"),
        "",
        "An oracle episode of a 30-task travel-planning pack (reset, the reference's tool calls, verify), the "
        "same pack for both implementations. Baseline: the verifier ran inside the runtime that ran the tools. "
        "Now: every process of the episode is killed, hidden/ staged, and a fresh verifier process forked "
        "from the supervisor judges; the next episode gets a fresh runtime.",
        "",
        "| backend | verification | episodes | p50 ms | mean ms |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Target: <= 1.3x episode time.",
    ])
    print(body)
    if a.write:
        write_section("Verification in its own process", body)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s)")
