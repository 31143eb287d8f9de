"""Offline pack builds: the default travel-planning build, and 200 travel tasks on 1 and on 2 sandboxes.

Prints wall time, tasks/s and the per-stage split of each build, measured side by side in one run,
and the parallel speed-up; `--write` records them in bench/RESULTS.md under "## Build".
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from envgen.build.offline import build  # noqa: E402

STAGES = ("generate_db", "generate_tasks", "describe", "stage", "gate", "save")


def run(label: str, out: Path, tasks: int | None, workers: int, seed: int) -> tuple[str, object]:
    r = build("general", "travel-planning", out, tasks=tasks, seed=seed, workers=workers)
    span = f"{min(map(int, r.difficulty))}..{max(map(int, r.difficulty))}"
    stages = " | ".join(f"{r.stages.get(s, 0.0):.2f}" for s in STAGES)
    row = (f"| {label} | {workers} | {r.proposed} | {r.kept} | {span} | {r.seconds:.1f} | "
           f"{r.proposed / r.seconds:.1f} | {stages} |")
    print(row, flush=True)
    return row, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    a = ap.parse_args()
    head = ("| build | workers | proposed | kept | difficulty | wall s | tasks/s | "
            + " | ".join(f"{s} s" for s in STAGES) + " |\n|" + "---|" * (7 + len(STAGES)))
    print(head)
    with tempfile.TemporaryDirectory() as d:
        rows = []
        row, default = run("default (`envgen build general --category travel-planning`)", Path(d) / "default",
                           None, 2, a.seed)
        rows.append(row)
        row, one = run(f"{a.tasks} tasks", Path(d) / "one", a.tasks, 1, a.seed)
        rows.append(row)
        row, two = run(f"{a.tasks} tasks", Path(d) / "two", a.tasks, 2, a.seed)
        rows.append(row)
    load = os.getloadavg()[1]  # 5-minute average: other jobs sharing the CPUs skew every figure above
    speedup = one.stages["gate"] / two.stages["gate"]
    gate_ms = 1000 * two.stages["gate"] * 2 / two.proposed
    text = (head + "\n" + "\n".join(rows) + "\n\n"
            f"Gate on 2 sandboxes vs 1: **{speedup:.2f}x** ({os.cpu_count()} CPUs, 5-min load average {load:.1f} "
            f"during the run); ~{gate_ms:.0f} ms of sandbox time "
            f"per task (6 episodes: reference twice, empty, no-op, claim, mutated). Default build: {default.kept} "
            f"validated tasks, difficulties {min(map(int, default.difficulty))}..{max(map(int, default.difficulty))}, "
            f"in {default.seconds:.1f} s (target: >= 100 tasks spanning 1..8 in under 2 minutes: "
            f"{'met' if default.kept >= 100 and default.seconds < 120 and {str(i) for i in range(1, 9)} <= set(default.difficulty) else 'NOT met'}).\n")
    print()
    print(text)
    if a.write:
        from _results import ran_on, write_section

        write_section("Build", ran_on("python bench/bench_build.py --write", "offline, local sandboxes") + "\n\n" + text)


if __name__ == "__main__":
    main()
