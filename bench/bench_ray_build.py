"""Builds on Ray: code-task build throughput on 1 vs 2 Ray worker nodes (tasks per minute, and their ratio).

A local Ray cluster (``ray.cluster_utils.Cluster``: a head and, for the second figure, one more node, each
with 1 CPU, so each node builds one candidate at a time) builds ``--tasks`` code tasks from one repository
(``git:`` source, each commit a feature with its tests and a CPU-bound test module, as bench_code.py makes
them) in Docker with ``--executor ray``. A warm-up build first makes the repository environment image and
every task image, so the measured builds validate and gate (the work that scales) from the same image cache; each measured build has its own output folder and
store (nothing resumes). The order alternates (1, 2, 2, 1, ...) over ``--rounds`` so load drift hits both sides.

Both nodes share this machine's CPUs and its one Docker engine, so the ratio is a floor for nodes that are
separate machines. `--write` records the figures in bench/RESULTS.md under "## Builds on Ray".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import ran_on, write_section  # noqa: E402
from bench_code import make_repo  # noqa: E402

from envgen.families.code import build_code  # noqa: E402


def one_build(root: Path, name: str, runs: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    report = build_code(f"git:{root / 'calc'}", root / name, backend="docker", runs=runs, gate=True,
                        store=root / f"{name}.sqlite", log=lambda m: None, executor="ray")
    return time.perf_counter() - t0, report.kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--slow-tests", type=int, default=20)
    ap.add_argument("--loops", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    a = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    ray.init(address=cluster.address, log_to_driver=False)
    second = None
    times: dict[int, list[float]] = {1: [], 2: []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as d:
            root = Path(d)
            make_repo(root / "calc", a.tasks, a.slow_tests, a.loops)
            # the environment and every task image (content-hash tags: the measured builds reuse them all)
            build_code(f"git:{root / 'calc'}", root / "warm", backend="docker", runs=1, gate=False,
                       store=root / "warm.sqlite", log=lambda m: None)
            order = [n for r in range(a.rounds) for n in ((1, 2) if r % 2 == 0 else (2, 1))]
            for i, nodes in enumerate(order):
                if nodes == 2 and second is None:
                    second = cluster.add_node(num_cpus=1)
                    cluster.wait_for_nodes()
                elif nodes == 1 and second is not None:
                    cluster.remove_node(second)
                    second = None
                    time.sleep(2)  # the node's resources leave the scheduler's view
                seconds, kept = one_build(root, f"b{i}-{nodes}", a.runs)
                if kept != a.tasks:
                    raise SystemExit(f"expected {a.tasks} kept tasks, got {kept}")
                times[nodes].append(seconds)
                print(f"{nodes} worker(s): {seconds:.1f} s, {60 * kept / seconds:.2f} tasks/min", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    med = {n: statistics.median(v) for n, v in times.items()}
    rate = {n: 60 * a.tasks / med[n] for n in med}
    load = os.getloadavg()[1]
    text = (ran_on(f"python bench/bench_ray_build.py{' --write' if a.write else ''}", f"{os.cpu_count()} CPUs",
                   f"5-min load average {load:.1f}") +
            f" {a.tasks} code tasks of one repository (`git:` source, {a.slow_tests + 1} tests per run, {a.runs} runs "
            f"per side, red-team gate on), Docker, `--executor ray` on a local Ray cluster whose nodes have 1 CPU "
            f"each; median of {a.rounds} builds per side, alternated.\n\n"
            "| Ray worker nodes | build s (median) | tasks/min |\n|---|---|---|\n" +
            "".join(f"| {n} | {med[n]:.1f} | {rate[n]:.2f} |\n" for n in (1, 2)) +
            f"\nThroughput ratio, 2 vs 1 workers: **{rate[2] / rate[1]:.2f}x**. Both nodes share this machine's "
            f"{os.cpu_count()} CPUs and one Docker engine with the other work on this machine, which bounds the "
            f"ratio; on separate machines each node brings its own.\n")
    print(text)
    if a.write:
        write_section("Builds on Ray", text)


if __name__ == "__main__":
    main()
