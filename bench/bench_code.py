"""Code family: validation overhead over the raw test time, and image bytes per task sharing one environment.

Builds a repository of ``--tasks`` feature commits (each adds a function, its tests, and touches a
CPU-bound test module so test time is real) with ``envgen build code --from git:...`` in Docker, then:

- overhead: the validation's host wall time (container start to parsed result, 2 sides x ``--runs``
  runs) against the test commands' own durations in the same runs (target ratio <= 1.2);
- image bytes: each task image's bytes beyond the repository environment it shares with the other
  tasks (target <= 100 MB per task), next to what the environment itself weighs.

`--write` records the figures in bench/RESULTS.md under "## Code family".
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _results import write_section  # noqa: E402
from code_repo import PYPROJECT, SLOW_TESTS, _commit, _git, _write  # noqa: E402

from envgen.families.code import build_code  # noqa: E402
from envgen.families.code.repo_image import layer_sharing, make_snapshot  # noqa: E402

FEATURE = '''

def scale_{i}(x):
    return x * {k}
'''
FEATURE_TEST = '''from calc.core import scale_{i}


def test_scale_{i}():
    assert scale_{i}(3) == {v}
'''


def make_repo(root: Path, tasks: int, slow_tests: int, loops: int) -> None:
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    core = '"""Arithmetic for calc."""\n\n\ndef add(a, b):\n    return a + b\n'
    work = SLOW_TESTS.format(n=slow_tests, loops=loops)
    _write(root, {"pyproject.toml": PYPROJECT, "src/calc/__init__.py": "", "src/calc/core.py": core,
                  "tests/test_work.py": work})
    _commit(root, "Initial calc package", 1)
    for i in range(tasks):
        core += FEATURE.format(i=i, k=i + 2)
        work += f"\n# scale_{i} covered\n"
        _write(root, {"src/calc/core.py": core, f"tests/test_scale_{i}.py": FEATURE_TEST.format(i=i, v=3 * (i + 2)),
                      "tests/test_work.py": work})
        _commit(root, f"Add scale_{i}(), which multiplies its argument by {i + 2}, with tests", i + 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--slow-tests", type=int, default=60)
    ap.add_argument("--loops", type=int, default=400000)
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    a = ap.parse_args()
    import docker

    client = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="bench-code-") as d:
        root = Path(d)
        make_repo(root / "calc", a.tasks, a.slow_tests, a.loops)
        t0 = time.perf_counter()
        report = build_code(f"git:{root / 'calc'}", root / "out", backend="docker", runs=a.runs, gate=False,
                            store=root / "state.sqlite", log=lambda m: None)
        build_s = time.perf_counter() - t0
        if report.kept != a.tasks:
            raise SystemExit(f"expected {a.tasks} kept tasks, got {report.kept}: {report.rejections}")
        (key, env), = report.details["environments"].items()
        rows, walls, tests, uniques = [], 0.0, 0.0, []
        for name in sorted(report.packs):
            from envgen.pack import load

            task = load(root / "out" / name).tasks[0]
            val = task.meta["validation"]
            share = layer_sharing(client, load(root / "out" / name).manifest.image.tag, env["tag"])
            walls += val["wall_seconds"]
            tests += val["test_seconds"]
            uniques.append(share["unique_bytes"])
            rows.append(f"| {task.id} | {len(val['runs'])} | {val['test_seconds']:.2f} | {val['wall_seconds']:.2f} | "
                        f"{val['wall_seconds'] / val['test_seconds']:.3f} | {share['unique_bytes'] / 1024:.1f} KiB | "
                        f"{share['shares_environment']} |")
        env_bytes = share["env_bytes"]
    ratio = walls / tests
    checkout = Path(__file__).resolve().parents[1]
    real = ""
    if (checkout / ".git").exists():  # a real repository for scale: this checkout's HEAD as a task snapshot
        with tempfile.TemporaryDirectory(prefix="bench-snap-") as d:
            make_snapshot(checkout, "HEAD", Path(d) / "repo.git")
            snap = sum(f.stat().st_size for f in (Path(d) / "repo.git").rglob("*") if f.is_file())
        files = len(_git(checkout, "ls-files").splitlines())
        real = (f" For scale, a snapshot of this envgen checkout ({files} files) is {snap / 2 ** 20:.1f} MiB: "
                f"the layer a task of a repository that size adds.")
    per_task = sum(uniques) / len(uniques)
    load = os.getloadavg()[1]
    head = ("| task | runs | raw test s | validation wall s | wall / test | unique image bytes | shares env layers |\n"
            "|---|---|---|---|---|---|---|")
    text = (f"`python bench/bench_code.py{' --write' if a.write else ''}` on {platform.node()} "
            f"({platform.python_version()}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, 5-min load average "
            f"{load:.1f}). {a.tasks} tasks of one repository (`git:` source), {a.runs} runs per side, "
            f"{a.slow_tests + 1} tests per run; build {build_s:.0f} s.\n\n" + head + "\n" + "\n".join(rows) + "\n\n"
            f"Validation overhead (all tasks): **{ratio:.3f}x** the raw test time of the same runs (target <= 1.2: "
            f"{'met' if ratio <= 1.2 else 'NOT met'}). The overhead is one container start, the snapshot copy and a "
            f"git reset + two `git apply` per run.\n\n"
            f"Image bytes per task beyond the shared repository environment `{env['tag']}` "
            f"({env_bytes / 2 ** 20:.0f} MiB, built once): **{per_task / 1024:.1f} KiB** on average, "
            f"max {max(uniques) / 1024:.1f} KiB (target <= 100 MB: {'met' if per_task <= 100e6 else 'NOT met'}); "
            f"unshared, each task would weigh {(env_bytes + per_task) / 2 ** 20:.0f} MiB.{real}\n")
    print(text)
    if a.write:
        write_section("Code family", text)


if __name__ == "__main__":
    main()
