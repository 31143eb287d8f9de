"""Code family on real-shaped repositories: what gets validated, what is rejected and why, and what it costs.

Builds the fixture repositories of the test suite, each reproducing set-up and validation failures seen
on real SWE-bench projects, with ``envgen build code --from git:...`` in Docker (3 runs per side), then
reports per failure class the task that exercises it and its outcome, the build's rejections by reason,
and the validation overhead: the host wall time of every validation (container start to parsed result)
against the test commands' own durations in the same runs.

- ``scmdemo``: environment markers, setuptools_scm's generated ``_version.py``, an entry-point pytest
  plugin, ``install_requires`` computed in setup.py, ``python_files``, PEP 735 groups, the install check;
- ``meter``: a broken sibling conftest that aborts a joint pytest session, a test needing the network, a
  test failing on both sides, tests that never run, FAIL_TO_PASS tests the test patch does not change;
- ``calc``: PASS_TO_FAIL, a flaky test, filters; ``tally``: a plugin configured in setup.cfg;
- ``greet``: tests importing a module only the CI installs (the recipe cannot know it): rejected as
  "tests did not run" without a model, validated with the set-up agent (a scripted model at the HTTP
  boundary), then replayed with no model call.

`--write` records the figures in bench/RESULTS.md under "## Code family on real-shaped repositories".
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
from code_repo import make_calc_repo, make_meter_repo, make_scm_repo, make_tally_repo  # noqa: E402
from fake_llm import FakeLLM  # noqa: E402
from test_code_setup_agent import call, llm, make_greet_repo, scripted  # noqa: E402

from envgen.families.code import build_code  # noqa: E402
from envgen.pack import load  # noqa: E402

# (failure class, repository, commit key, what must happen)
CASES = [
    ("environment markers evaluated for the target Python", "scmdemo", "fix", "kept"),
    ("setuptools_scm version file + entry-point plugin (backend install)", "scmdemo", "fix", "kept"),
    ("install_requires computed in setup.py", "scmdemo", "fix", "kept"),
    ("pytest python_files (check_*.py) honoured", "scmdemo", "fix", "kept"),
    ("PEP 735 [dependency-groups] read", "scmdemo", "fix", "kept"),
    ("package that does not import: install check", "scmdemo", "later", "environment"),
    ("broken sibling conftest aborts the joint session", "meter", "fix", "kept"),
    ("test needing the network listed, not dropped", "meter", "fix", "kept"),
    ("tests that never run: own reason + log tail", "meter", "fmt", "validate"),
    ("FAIL_TO_PASS outside the test patch's changes", "meter", "halve", "validate"),
    ("gold patch breaks a passing test (PASS_TO_FAIL)", "calc", "float", "validate"),
    ("flaky test excluded", "calc", "fix", "kept"),
    ("project's own plugin configured in setup.cfg", "tally", "fix", "kept"),
    ("undeclared test dependency, no model", "greet", "fix", "validate"),
    ("undeclared test dependency, set-up agent", "greet+agent", "fix", "kept"),
    ("undeclared test dependency, recorded recipe replayed", "greet+replay", "fix", "kept"),
]
AGENT_TURNS = [
    call("run_tests"), call("bash", {"command": "cat .github/workflows/ci.yml"}),
    call("step", {"command": "python3 -m venv --system-site-packages /opt/envgen/venv"}),
    call("step", {"command": "/opt/envgen/venv/bin/python -m pip install --no-cache-dir --progress-bar off 'six>=1.16'"}),
    call("run_tests"), call("done", {"summary": "six, a test dependency only the CI installs"})]


def outcome(report, task_id: str) -> tuple[str, str]:
    """(kept | the rejection's stage, a one-line detail) of one task in a build report."""
    if task_id in report.details["tasks"]:
        s = report.details["tasks"][task_id]
        extra = [f"{len(s[k])} {k}" for k in ("flaky", "network", "fail_to_fail") if s.get(k)]
        return "kept", f"{s['FAIL_TO_PASS']} F2P / {s['PASS_TO_PASS']} P2P" + (f" ({', '.join(extra)})" if extra else "")
    rej = next((r for r in report.rejections if r["task"] == task_id), None)
    if rej is None:
        return "missing", ""
    return rej["stage"], rej["reason"][:110].replace("|", "/")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    a = ap.parse_args()
    reports, shas, seconds = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="bench-code-repos-") as d:
        root = Path(d)
        store = root / "state.sqlite"
        makers = {"scmdemo": make_scm_repo, "meter": make_meter_repo, "calc": make_calc_repo, "tally": make_tally_repo,
                  "greet": lambda p: make_greet_repo(p, "six", "pip install six pytest")}
        for name, make in makers.items():
            shas[name] = make(root / name)
            t0 = time.perf_counter()
            reports[name] = build_code(f"git:{root / name}", root / "out" / name, backend="docker", runs=a.runs,
                                       gate=False, store=store, log=lambda m: None)
            seconds[name] = time.perf_counter() - t0
        shas["greet+agent"] = shas["greet+replay"] = shas["greet"]
        with FakeLLM(scripted(*AGENT_TURNS)) as fake:
            t0 = time.perf_counter()
            reports["greet+agent"] = build_code(f"git:{root / 'greet'}", root / "out" / "greet-agent", backend="docker",
                                                runs=a.runs, gate=False, store=store, llm=llm(fake), log=lambda m: None)
            seconds["greet+agent"] = time.perf_counter() - t0
            calls_first = len(fake.log)
            t0 = time.perf_counter()
            reports["greet+replay"] = build_code(f"git:{root / 'greet'}", root / "out" / "greet-replay",
                                                 backend="docker", runs=a.runs, gate=False, store=store,
                                                 llm=llm(fake), log=lambda m: None)
            seconds["greet+replay"] = time.perf_counter() - t0
            calls_replay = len(fake.log) - calls_first
        walls = tests = 0.0
        for name, rep in reports.items():
            for pack in rep.packs:
                val = load(root / "out" / (name.replace("+", "-")) / pack).tasks[0].meta["validation"]
                walls += val["wall_seconds"]
                tests += val["test_seconds"]

    def task_id(repo: str, key: str) -> str:
        base = repo.split("+")[0]
        return f"{base}-{shas[repo][key][:12]}"

    rows, met = [], 0
    for what, repo, key, want in CASES:
        got, detail = outcome(reports[repo], task_id(repo, key))
        ok = got == want
        met += ok
        rows.append(f"| {what} | {repo} `{key}` | {want} | {got} | {'yes' if ok else '**NO**'} | {detail} |")
    kept = sum(r.kept for r in reports.values())
    proposed = sum(r.proposed for r in reports.values())
    reasons = Counter()
    for rep in reports.values():
        reasons.update(rep.rejected_by_reason)
    ratio = walls / tests if tests else float("nan")
    text = (ran_on(f"python bench/bench_code_repos.py{' --write' if a.write else ''}", f"{os.cpu_count()} CPUs",
                   f"5-min load average {os.getloadavg()[1]:.1f}")
            + f" Five fixture repositories (`git:` sources) in Docker, {a.runs} runs per side, gate off; builds "
            + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()) + ".\n\n"
            "| failure class | task | expected | outcome | as expected | detail |\n|---|---|---|---|---|---|\n"
            + "\n".join(rows) + "\n\n"
            f"**{met}/{len(CASES)}** failure classes end as they must. Validated **{kept}** of {proposed} proposed "
            f"instances; rejected by reason: "
            + "; ".join(f"`{k}` {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])) + ".\n\n"
            f"Validation overhead over the kept tasks: **{ratio:.3f}x** the raw test time of the same runs "
            f"({walls:.1f} s wall for {tests:.1f} s of test commands). The set-up agent's first build made "
            f"{calls_first} model calls; the replay of its recorded recipe made **{calls_replay}**.\n")
    print(text)
    if a.write:
        write_section("Code family on real-shaped repositories", text)
    if met != len(CASES):
        raise SystemExit(f"{len(CASES) - met} failure class(es) did not end as they must")


if __name__ == "__main__":
    main()
