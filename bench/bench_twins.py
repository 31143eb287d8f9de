"""Twin checks in all eight languages, in Docker: what they cost, and what they stop.

For each language the test suite's fixture repository is built with ``build_code("git:PATH")`` (Docker,
3 runs per side, gate off), then its first kept task is judged, alternating, with and without its twin
checks (the same pack copied with ``hidden/twins.json`` removed: the verdict as it was before them):

- validation overhead: the host wall time of each validation (container start to parsed result, twin
  runs included) against the test commands' own durations in the same runs (the issue's target:
  median <= 1.3x);
- verdict cost: the wall time of an oracle episode (reset, the gold patch, the verdict) with twins
  against the same episode without them, ``--rounds`` alternated rounds, medians (the ratio is measured
  side by side in one run);
- what they stop: the red-team gate's forgery probe (the runner's payload from ``envs/code/forgeries``
  planted in a file the gold patch changes, bug left in place) must score 1 without twins (it is a real
  forgery) and 0 with them; the gold patch must score 1.

`--write` records the figures in bench/RESULTS.md under "## Twin checks". `--only go,php` runs a subset.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _results import ran_on, write_section  # noqa: E402
from bench_languages import LANGUAGES  # noqa: E402
from twinless import without_twins  # noqa: E402

from envgen.build.gate import forgery_patch  # noqa: E402
from envgen.episodes.actions import render_action  # noqa: E402
from envgen.families.code import build_code  # noqa: E402
from envgen.pack import load  # noqa: E402
from envgen.sandbox import images  # noqa: E402


def episode(env, task_id: str, patch: str) -> tuple[float, float, dict]:
    """(reward, wall seconds, details) of one episode that submits ``patch``."""
    t0 = time.perf_counter()
    env.reset(options={"task_id": task_id})
    obs, *_ = env.step(render_action("", [("submit", {"patch": patch})]))
    _, reward, _, _, info = env.step("Done.")
    return reward, time.perf_counter() - t0, info.get("reward_details") or {}


def one(language: str, make, toolchains, root: Path, runs: int, rounds: int, client) -> dict:
    import gymnasium

    import envgen  # noqa: F401

    images.build_base(images.DEFAULT_SUITE, toolchains, client=client, log=lambda m: None)
    make(root / "repo")
    report = build_code(f"git:{root / 'repo'}", root / "out", backend="docker", runs=runs, gate=False,
                        store=root / "state.sqlite", log=lambda m: None)
    out = {"language": language, "kept": report.kept, "proposed": report.proposed,
           "forgeable": sum(1 for r in report.rejections if r["reason"].startswith("forgeable"))}
    if not report.packs:
        out["error"] = "; ".join(r["reason"][:120] for r in report.rejections)
        return out
    walls = tests = 0.0
    for name in report.packs:
        val = load(root / "out" / name).tasks[0].meta["validation"]
        walls, tests = walls + val["wall_seconds"], tests + val["test_seconds"]
    def read_in(pack):
        def read(path: str) -> str | None:
            r = subprocess.run(["git", "--git-dir", str(pack.env_dir / "repo.git"), "show",
                                f"{pack.tasks[0].verifier.args['base']}:{path}"], capture_output=True)
            return r.stdout.decode("utf-8", "surrogateescape") if r.returncode == 0 else None
        return read

    # the first task the gate's forgery probe applies to (a reference that only adds files gives it none)
    packs = [load(root / "out" / name) for name in sorted(report.packs)]
    forgeries = [forgery_patch(read_in(p), p.tasks[0].verifier.args["framework"], p.tasks[0].reference.patch,
                               hashlib.sha256(p.tasks[0].id.encode()).hexdigest()[:12]) for p in packs]
    pack, forged = next(((p, f) for p, f in zip(packs, forgeries) if f), (packs[0], None))
    task = pack.tasks[0]
    out.update(wall_s=walls, test_s=tests, twins=task.meta["validation"].get("twin_checks", 0))
    bare = without_twins(pack, root / "bare")
    gold = task.reference.patch
    envs = {k: gymnasium.make("envgen/Pack-v0", pack=str(p.root), sandbox="docker") for k, p in
            (("twins", pack), ("bare", bare))}
    try:
        times: dict = {"twins": [], "bare": []}
        for _ in range(rounds):
            for k in ("bare", "twins"):
                reward, secs, details = episode(envs[k], task.id, gold)
                times[k].append(secs)
                out.setdefault(f"gold_{k}", reward)
                out[f"gold_{k}"] = min(out[f"gold_{k}"], reward)
        out.update(verdict_twins_s=statistics.median(times["twins"]), verdict_bare_s=statistics.median(times["bare"]))
        if forged:
            out["forgery_bare"] = episode(envs["bare"], task.id, forged)[0]
            out["forgery_twins"], _, det = episode(envs["twins"], task.id, forged)
            out["forgery_reason"] = (det.get("reason") or "")[:90]
    finally:
        for env in envs.values():
            env.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated languages (default: all eight)")
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    a = ap.parse_args()
    import docker

    client = docker.from_env()
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    rows = []
    for language, fixture, make, toolchains in LANGUAGES:
        if only and language not in only:
            continue
        with tempfile.TemporaryDirectory(prefix=f"bench-twins-{language}-") as d:
            try:
                r = one(language, make, toolchains, Path(d), a.runs, a.rounds, client)
            except Exception as e:  # one language's failure is a row of the table, not the end of the run
                r = {"language": language, "error": f"{type(e).__name__}: {e}"[:300]}
        r["fixture"] = fixture
        rows.append(r)
        print(r, flush=True)
    head = ("| language | fixture | kept / proposed | twin checks | validation wall / raw test s | overhead | "
            "verdict s, twins / none | ratio | gold, twins / none | forgery, none / twins |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    lines, overheads, ratios = [], [], []
    for r in rows:
        if "wall_s" not in r:
            lines.append(f"| {r['language']} | {r['fixture']} | failed: {r.get('error', '?')} | | | | | | | |")
            continue
        over = r["wall_s"] / r["test_s"] if r["test_s"] else float("nan")
        ratio = r["verdict_twins_s"] / r["verdict_bare_s"]
        overheads.append(over)
        ratios.append(ratio)
        lines.append(f"| {r['language']} | {r['fixture']} | {r['kept']} / {r['proposed']} | {r['twins']} | "
                     f"{r['wall_s']:.1f} / {r['test_s']:.1f} | {over:.2f}x | {r['verdict_twins_s']:.2f} / "
                     f"{r['verdict_bare_s']:.2f} | {ratio:.2f}x | {r['gold_twins']} / {r['gold_bare']} | "
                     f"{r.get('forgery_bare', '-')} / {r.get('forgery_twins', '-')} |")
    summary = ""
    if overheads:
        summary = (f"\n\nMedian validation overhead: **{statistics.median(overheads):.2f}x** the raw test time "
                   f"(target <= 1.3x). Median verdict time with twins / without: "
                   f"**{statistics.median(ratios):.2f}x** (same episodes, alternated).")
    text = (ran_on(f"python bench/bench_twins.py{' --write' if a.write else ''}", f"{os.cpu_count()} CPUs",
                   f"5-min load average {os.getloadavg()[1]:.1f}") +
            f" Docker backend, {a.runs} runs per side, gate off, {a.rounds} rounds.\n\n" + head + "\n" +
            "\n".join(lines) + summary + "\n")
    print(text)
    if a.write:
        write_section("Twin checks", text)


if __name__ == "__main__":
    main()
