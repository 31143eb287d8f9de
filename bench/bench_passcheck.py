"""Rollouts spent by the pass check with early stopping vs the naive k per task, same decisions.

200 tasks with pass probabilities 0 (10%), 0.005 (10%), 0.05 (20%), 0.3 (30%), 0.7 (30%). Each
rollout's outcome is fixed by its seed (as in a real check), and rollouts take a random duration, so
concurrency is simulated faithfully: at concurrency c, c rollouts are in flight and the scheduler
decides what starts next as each one finishes. The naive baseline runs all k rollouts of every task;
its decisions are the reference the early-stopped ones must equal.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from envgen.passcheck.rules import AtLeastOnce, Band, Outcome, Scheduler, rollout_seed, run_check  # noqa: E402

MIX = [(0.0, 0.10), (0.005, 0.10), (0.05, 0.20), (0.3, 0.30), (0.7, 0.30)]


def tasks(n: int = 200) -> dict[str, float]:
    out, i = {}, 0
    for p, share in MIX:
        for _ in range(round(n * share)):
            out[f"t{i:03d}"] = p
            i += 1
    return out


def passed(task_id: str, index: int, p: float) -> bool:
    return random.Random(rollout_seed(task_id, index)).random() < p


class SimExecutor:
    """c rollouts in flight; each takes an exponential time; `wait` returns the earliest to finish."""

    def __init__(self, probs: dict[str, float], seed: int = 0):
        self.probs, self.rng, self.now, self.heap, self.spent = probs, random.Random(seed), 0.0, [], 0

    def submit(self, task_id: str, index: int) -> None:
        self.spent += 1
        heapq.heappush(self.heap, (self.now + self.rng.expovariate(1.0), task_id, index))

    def wait(self) -> list[Outcome]:
        self.now, task_id, index = heapq.heappop(self.heap)
        ok = passed(task_id, index, self.probs[task_id])
        return [Outcome(task_id, index, float(ok), ok)]

    def close(self) -> None:
        pass


def naive_decisions(probs: dict[str, float], rule) -> dict[str, bool]:
    return {t: rule.decide(sum(passed(t, i, p) for i in range(rule.k)), rule.k) for t, p in probs.items()}


def early(probs: dict[str, float], rule, workers: int) -> tuple[dict[str, bool], int]:
    ex = SimExecutor(probs)
    sched = run_check(Scheduler(probs, rule, workers), ex)
    return {t: s.decision for t, s in sched.tasks.items()}, ex.spent


def throughput(latency: float, tasks: int, k: int, worker_counts: list[int]) -> list[str]:
    """Real rollouts: the OpenAI policy over HTTP (a stub model with `latency` s per request) on a real
    pack in local sandboxes, through `envgen.passcheck.check.check`, at several worker counts."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import make_tiny_pack
    from stub_policy import stub_server

    from envgen.passcheck.check import check

    rows = []
    with tempfile.TemporaryDirectory() as d:
        pack = make_tiny_pack(Path(d) / "pack", tasks=tasks)
        srv = stub_server(pack, [0.0], latency=latency)  # never solves: every task spends all k rollouts
        spec = f"openai:stub?base_url=http://127.0.0.1:{srv.server_port}/v1"
        base = None
        for w in worker_counts:
            r = check(str(pack.root), spec, k=k, workers=w, store_url=f"sqlite:///{d}/s{w}.sqlite")
            rate = r.rollouts_spent / r.seconds
            base = base or rate
            rows.append(f"| {w} | {latency * 1000:.0f} ms | {r.rollouts_spent} | {rate:.1f} | {rate / base:.2f}x |")
        srv.shutdown()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--latency", type=float, default=0.05, help="stub model seconds per request")
    a = ap.parse_args()
    probs = tasks()
    expected = sum(min(100.0, (1 - (1 - p) ** 100) / p) if p else 100.0 for p in probs.values()) / len(probs)
    lines = [f"Analytic expectation for stop-at-first-pass: {expected:.2f} rollouts/task.", "",
             "| rule | concurrency | rollouts/task | vs naive (100) | vs analytic | decisions equal naive |",
             "|---|---|---|---|---|---|"]
    for rule in (AtLeastOnce(100), Band(0.05, 0.6, 100)):
        ref = naive_decisions(probs, rule)
        for workers in (1, 8, 32):
            got, spent = early(probs, rule, workers)
            per = spent / len(probs)
            name = "at-least-once" if isinstance(rule, AtLeastOnce) else f"band:{rule.lo},{rule.hi}"
            vs_analytic = f"{per / expected:.3f}x" if isinstance(rule, AtLeastOnce) else "-"
            lines.append(f"| {name} | {workers} | {per:.2f} | {100 / per:.2f}x fewer | {vs_analytic} | {got == ref} |")
            assert got == ref, "early stopping changed a decision"
    lines += ["", "Throughput of real rollouts (OpenAI policy over HTTP to a stub model, local sandboxes, "
              "12 tasks x k=10, `envgen.passcheck.check.check`):", "",
              "| workers | model latency | rollouts | rollouts/s | vs 1 worker |", "|---|---|---|---|---|"]
    lines += throughput(a.latency, 12, 10, [1, 2, 4])
    text = "\n".join(lines) + "\n"
    print(text)
    if a.write:
        from _results import write_section

        write_section("Pass check: early stopping", "`python bench/bench_passcheck.py --write`. " + __doc__.split("\n\n")[1]
                      .replace("\n", " ") + "\n\n" + text)


if __name__ == "__main__":
    main()
