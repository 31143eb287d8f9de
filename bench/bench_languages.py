"""The code family in all eight languages, in Docker: what a build costs per language, and what validation adds.

For each language, the test suite's fixture repository (a small real project with a bug-fix commit and
its test; dependencies from Debian packages, vendored, or npm) goes through ``build_code("git:PATH")``
with the Docker backend (3 runs per side, gate off), then the first kept task is rolled out through
``PackEnv`` in Docker with the oracle (the gold patch: must score 1) and the null policy (must score 0).

Per language: the toolchain layer's build (``envgen.sandbox.images.build_base``, once per machine; reused
when present), the whole ``build_code`` wall time, tasks kept / proposed and the rejections by reason,
the validation overhead (the host wall time of each validation, container start to parsed result,
against the test commands' own durations in the same runs), and the task image bytes beyond the shared
repository environment.

`--write` records the figures in bench/RESULTS.md under "## Code family in eight languages".
`--only go,php` runs a subset.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _results import ran_on, write_section  # noqa: E402

from envgen.families.code import build_code  # noqa: E402
from envgen.families.code.repo_image import layer_sharing  # noqa: E402
from envgen.episodes.gym import PackEnv  # noqa: E402
from envgen.pack import load  # noqa: E402
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout  # noqa: E402
from envgen.sandbox import images  # noqa: E402


def _fixture(module: str, func: str, **kw):
    def make(path: Path) -> dict[str, str]:
        mod = __import__(module)
        return getattr(mod, func)(path, **kw)

    return make


# (language, fixture repository, how it is made, toolchains of its base image)
LANGUAGES = [
    ("python", "calc", _fixture("code_repo", "make_calc_repo"), ("python",)),
    ("go", "gostats", _fixture("go_repo", "make_gostats_repo"), ("go",)),
    ("java", "slugs", _fixture("java_repo", "make_slugs_repo"), ("jdk",)),
    ("javascript", "text (jest)", _fixture("node_repo", "make_node_repo", flavor="jest"), ("node",)),
    ("typescript", "text (tsc + mocha)", _fixture("node_repo", "make_node_repo", flavor="tsc"), ("node",)),
    ("c", "vec (CTest)", _fixture("cxx_repo", "make_vec_repo"), ("gcc",)),
    ("cpp", "strutil (GoogleTest)", _fixture("cxx_repo", "make_strutil_repo"), ("gcc",)),
    ("php", "money (PHPUnit, vendored)", _fixture("php_repo", "make_money_repo", vendored=True), ("php",)),
]


def one(language: str, make, toolchains: tuple[str, ...], root: Path, runs: int, client) -> dict:
    t0 = time.perf_counter()
    images.build_base(images.DEFAULT_SUITE, toolchains, client=client, log=lambda m: None)
    toolchain_s = time.perf_counter() - t0
    repo = root / "repo"
    make(repo)
    t0 = time.perf_counter()
    report = build_code(f"git:{repo}", root / "out", backend="docker", runs=runs, gate=False,
                        store=root / "state.sqlite", log=lambda m: None)
    build_s = time.perf_counter() - t0
    out = {"language": language, "toolchain_s": toolchain_s, "build_s": build_s, "proposed": report.proposed,
           "kept": report.kept, "rejected": Counter(r["stage"] + ": " + r["reason"].split(":")[0]
                                                  for r in report.rejections)}
    walls = tests = 0.0
    uniques = []
    envs = report.details.get("environments") or {}
    for name in sorted(report.packs):
        pack = load(root / "out" / name)
        task = pack.tasks[0]
        val = task.meta["validation"]
        walls += val["wall_seconds"]
        tests += val["test_seconds"]
        env = envs.get(task.meta["environment"]["key"]) or next(iter(envs.values()))
        uniques.append(layer_sharing(client, pack.manifest.image.tag, env["tag"])["unique_bytes"])
    out.update(wall_s=walls, test_s=tests, unique_bytes=(sum(uniques) / len(uniques)) if uniques else None)
    if report.packs:
        first = root / "out" / sorted(report.packs)[0]
        task = load(first).tasks[0]
        out["f2p"], out["p2p"] = len(task.verifier.args["FAIL_TO_PASS"]), len(task.verifier.args["PASS_TO_PASS"])
        env = PackEnv(first, sandbox="docker")
        try:
            out["oracle"] = rollout(env, OraclePolicy()).reward
            out["null"] = rollout(env, NullPolicy()).reward
        finally:
            env.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
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
        with tempfile.TemporaryDirectory(prefix=f"bench-lang-{language}-") as d:
            try:
                r = one(language, make, toolchains, Path(d), a.runs, client)
            except Exception as e:  # one language's failure is a row of the table, not the end of the run
                r = {"language": language, "error": f"{type(e).__name__}: {e}"[:300]}
        r["fixture"] = fixture
        rows.append(r)
        print(r, flush=True)
    head = ("| language | fixture | toolchain layer s | build s | kept / proposed | F2P / P2P | validation wall / "
            "raw test s | overhead | unique image KiB / task | oracle / null |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = []
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['language']} | {r['fixture']} | failed: {r['error']} | | | | | | | |")
            continue
        over = f"{r['wall_s'] / r['test_s']:.2f}x" if r["test_s"] else "-"
        uniq = f"{r['unique_bytes'] / 1024:.1f}" if r["unique_bytes"] is not None else "-"
        lines.append(f"| {r['language']} | {r['fixture']} | {r['toolchain_s']:.0f} | {r['build_s']:.0f} | "
                     f"{r['kept']} / {r['proposed']} | {r.get('f2p', '-')} / {r.get('p2p', '-')} | "
                     f"{r['wall_s']:.1f} / {r['test_s']:.1f} | {over} | {uniq} | "
                     f"{r.get('oracle', '-')} / {r.get('null', '-')} |")
    rejected = "; ".join(f"{r['language']}: " + ", ".join(f"{k} ({n})" for k, n in sorted(r["rejected"].items()))
                         for r in rows if r.get("rejected"))
    text = (ran_on(f"python bench/bench_languages.py{' --write' if a.write else ''}", f"{os.cpu_count()} CPUs",
                   f"5-min load average {os.getloadavg()[1]:.1f}") +
            f" Docker backend, {a.runs} runs per side, gate off. The toolchain layer column is about 0 where the "
            "machine had the layer already (it is built once per machine).\n\n" + head + "\n" + "\n".join(lines) +
            "\n\nRejected candidates (each fixture has commits that must not become tasks, e.g. a docs-only "
            f"change or a fix that breaks a passing test): {rejected or 'none'}.\n")
    print(text)
    if a.write:
        write_section("Code family in eight languages", text)


if __name__ == "__main__":
    main()
