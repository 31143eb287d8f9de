"""No-op tool call through the local sandbox vs a process per call, and the raw pipe floor.

Prints p50/p99 of each and the ratios, measured side by side in one run; `--write` records them in
bench/RESULTS.md under "## Local sandbox".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import make_tiny_pack  # noqa: E402

from envgen.paths import bundled  # noqa: E402
from envgen.sandbox import open_sandbox  # noqa: E402

ECHO = "import sys\nfor line in sys.stdin.buffer:\n    sys.stdout.buffer.write(line); sys.stdout.buffer.flush()\n"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def bench_sandbox(pack, n: int, backend: str = "local", warmup: int = 200) -> list[float]:
    """Latencies (s) of `n` no-op tool calls through a started sandbox of `backend`."""
    with open_sandbox(pack, backend) as s:
        s.reset()
        for _ in range(warmup):
            s.call("noop", {})
        out = []
        for _ in range(n):
            t = time.perf_counter()
            r = s.call("noop", {})
            out.append(time.perf_counter() - t)
            assert r.ok
    return out


def bench_process_per_call(pack, n: int) -> list[float]:
    """The naive design: start the runtime, ask once, exit — per call."""
    server = str(bundled("envs") / "runtime" / "server.py")
    req = (json.dumps({"op": "reset"}) + "\n" + json.dumps({"op": "call", "tool": "noop", "args": {}}) + "\n").encode()
    out = []
    with tempfile.TemporaryDirectory() as work:
        for _ in range(n):
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-I", "-B", server, "--env", str(pack.env_dir), "--work", work],
                               input=req, capture_output=True, check=True)
            out.append(time.perf_counter() - t)
            assert b'"content": "ok"' in p.stdout
    return out


def bench_raw_pipe(n: int) -> list[float]:
    p = subprocess.Popen([sys.executable, "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out = []
    line = b'{"op": "call", "tool": "noop", "args": {}}\n'
    for i in range(n + 200):
        t = time.perf_counter()
        p.stdin.write(line)
        p.stdin.flush()
        p.stdout.readline()
        if i >= 200:
            out.append(time.perf_counter() - t)
    p.stdin.close()
    p.wait()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--baseline-calls", type=int, default=50)
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        pack = make_tiny_pack(Path(d) / "tiny")
        raw = bench_raw_pipe(a.calls)
        sbx = bench_sandbox(pack, a.calls)
        ppc = bench_process_per_call(pack, a.baseline_calls)
    rows = [("raw pipe echo (floor)", raw), ("local sandbox no-op call", sbx), ("process per call", ppc)]
    lines = [f"| {name} | {len(xs)} | {pct(xs, .5):.3f} | {pct(xs, .99):.3f} |" for name, xs in rows]
    ratio = statistics.median(ppc) / statistics.median(sbx)
    over = statistics.median(sbx) / statistics.median(raw)
    text = ("| path | calls | p50 ms | p99 ms |\n|---|---|---|---|\n" + "\n".join(lines) +
            f"\n\nprocess-per-call / sandbox (p50): **{ratio:.0f}x**; sandbox / raw pipe (p50): {over:.1f}x. "
            f"Target p50 <= 1 ms: {'met' if pct(sbx, .5) <= 1.0 else 'NOT met'}.\n")
    print(text)
    if a.write:
        from _results import ran_on, write_section

        write_section("Local sandbox", ran_on("python bench/bench_local.py --write") + "\n\n" + text)


if __name__ == "__main__":
    main()
