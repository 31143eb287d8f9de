"""The code family end to end without Docker (local backend: subprocesses with this Python and pytest).

The Docker path is tested in test_code_docker.py; this one runs everywhere and covers the pipeline's
wiring, resumption, the agent's tools in a local sandbox, and the SWE-bench round trip.
"""

from __future__ import annotations

import json

import pytest

from envgen.families.code import build_code, export_swebench
from envgen.families.code.sources import read_swebench
from envgen.episodes.episode import Episode, replay
from envgen.pack import load
from envgen.build.gate import code_probes
from envgen.sandbox import open_sandbox

try:
    from .code_repo import make_calc_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import make_calc_repo


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("local")
    shas = make_calc_repo(root / "calc")
    report = build_code(f"git:{root / 'calc'}", root / "out", backend="local", store=root / "state.sqlite",
                        log=lambda m: None)
    return root, shas, report


def test_build_keeps_validated_tasks_and_says_why_others_went(built):
    root, shas, report = built
    assert report.proposed == 5 and report.kept == 2
    assert sorted(report.packs) == [f"calc-{shas['fix'][:12]}", f"calc-{shas['power'][:12]}"]
    by_task = {r["task"]: r for r in report.rejections}
    assert by_task[f"calc-{shas['docs'][:12]}"]["reason"] == "no test change"
    breaking = by_task[f"calc-{shas['float'][:12]}"]
    assert breaking["stage"] == "validate"
    assert breaking["reason"] == ("PASS_TO_FAIL: the gold patch breaks 1 passing test(s): "
                                  "tests/test_core.py::test_multiply_int")
    assert report.rejected_by_reason == {"candidates: no test change": 2, "validate: PASS_TO_FAIL": 1}
    assert json.loads((root / "out" / "build.json").read_text())["kept"] == 2


def test_pack_holds_the_lists_the_flaky_test_excluded_and_the_gate_scores(built):
    root, shas, report = built
    pack = load(root / "out" / f"calc-{shas['fix'][:12]}")
    task = pack.tasks[0]
    args = task.verifier.args
    assert task.verifier.kind == "tests"
    assert args["FAIL_TO_PASS"] == ["tests/test_core.py::test_subtract"]
    assert args["PASS_TO_PASS"] == ["tests/test_core.py::test_add", "tests/test_core.py::test_divide",
                                    "tests/test_core.py::test_multiply_int"]
    assert task.meta["validation"]["flaky"] == ["tests/test_core.py::test_flaky"]
    assert len(task.meta["validation"]["runs"]) == 6 and all(r["seconds"] > 0 for r in task.meta["validation"]["runs"])
    assert task.meta["created_at"] == "2024-01-02T12:00:00+00:00" and task.meta["base_commit"] == shas["initial"]
    assert task.reference.patch and task.reference.calls[0].tool == "submit"
    assert pack.manifest.submit_tool == "submit" and pack.manifest.family == "code"
    assert (pack.hidden_dir / "test.patch").read_text().count("def test_subtract") == 1
    assert "test_subtract" not in "".join(p.read_text(errors="ignore") for p in pack.env_dir.rglob("*") if p.is_file())
    gate = report.details["tasks"][task.id]["gate"]
    assert gate == {"reference": 1.0, "reference-again": 1.0, "empty": 0.0, "claim": 0.0, "mutated": 0.0, "noop": 0.0,
                    "plugin-addopts": 0.0, "plugin-conftest": 0.0, "config-only": 0.0, "forgery": 0.0}
    power = load(root / "out" / f"calc-{shas['power'][:12]}").tasks[0].verifier.args
    # the new test module does not import at the base commit: its tests are missing there, so failing
    assert power["FAIL_TO_PASS"] == ["tests/test_power.py::test_power", "tests/test_power.py::test_power_zero"]


def test_a_rerun_resumes_without_redoing_anything(built):
    root, shas, first = built
    stamps = {p: (root / "out" / p / "pack.json").stat().st_mtime_ns for p in first.packs}
    again = build_code(f"git:{root / 'calc'}", root / "out", backend="local", store=root / "state.sqlite",
                       log=lambda m: None)
    assert again.details["resumed"] == 5 and again.kept == 2 and sorted(again.packs) == sorted(first.packs)
    assert again.rejected_by_reason == first.rejected_by_reason
    assert {p: (root / "out" / p / "pack.json").stat().st_mtime_ns for p in again.packs} == stamps


def test_agent_tools_edit_run_and_submit(built):
    root, shas, _ = built
    pack = load(root / "out" / f"calc-{shas['fix'][:12]}")
    task = pack.tasks[0]
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, task)
        view = ep.call("view_file", {"path": "src/calc/core.py", "start": 8, "end": 9})
        assert view.ok and "return b - a" in view.content
        assert not ep.call("replace_in_file", {"path": "src/calc/core.py", "old": "return", "new": "x"}).ok
        assert ep.call("replace_in_file", {"path": "src/calc/core.py", "old": "return b - a",
                                           "new": "return a - b"}).ok
        run = ep.call("bash", {"command": "python -c 'from calc.core import subtract; print(subtract(5, 3))'"})
        assert run.ok and run.content.startswith("2\n") and "[exit code 0]" in run.content
        assert ep.call("write_file", {"path": "NOTES.md", "content": "fixed\n"}).ok
        sub = ep.call("submit", {})
        assert sub.ok and "src/calc/core.py" in sub.content and "NOTES.md" in sub.content
        verdict = ep.finish("done")
        assert verdict.reward == 1.0, verdict.details
        assert verdict.details["FAIL_TO_PASS"] == "1/1" and verdict.details["report"] == "junit"

        ep = Episode(sbx, task)  # a reset restores the original code
        assert "return b - a" in ep.call("view_file", {"path": "src/calc/core.py"}).content
        assert not ep.call("submit", {}).ok  # nothing changed
        cheat = ("diff --git a/tests/conftest.py b/tests/conftest.py\nnew file mode 100644\n--- /dev/null\n"
                 "+++ b/tests/conftest.py\n@@ -0,0 +1 @@\n+import pytest\n")
        assert ep.call("submit", {"patch": cheat}).ok
        verdict = ep.finish("done")  # graded with the conftest removed again: no fix, so 0
        assert verdict.reward == 0.0 and verdict.details["restored"] == ["tests/conftest.py"]
        assert verdict.details["FAIL_TO_PASS"] == "0/1" and verdict.details["canary"] == "failed"


def test_swebench_file_round_trips(built, tmp_path):
    root, shas, _ = built
    rows = export_swebench(root / "out", tmp_path / "exported.jsonl")
    assert {r["instance_id"] for r in rows} == {f"calc-{shas['fix'][:12]}", f"calc-{shas['power'][:12]}"}
    row = next(r for r in rows if r["instance_id"].endswith(shas["fix"][:12]))
    assert json.loads(row["FAIL_TO_PASS"]) == ["tests/test_core.py::test_subtract"]
    assert row["base_commit"] == shas["initial"] and row["patch"].startswith("diff --git a/src/calc/core.py")
    assert set(row) >= {"instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
                        "FAIL_TO_PASS", "PASS_TO_PASS", "version", "environment_setup_commit", "hints_text",
                        "created_at"}
    imported = read_swebench(tmp_path / "exported.jsonl")
    report = build_code(f"swebench:{tmp_path / 'exported.jsonl'}", tmp_path / "again", repo_path=root / "calc",
                        backend="local", gate=False, store=tmp_path / "s.sqlite", log=lambda m: None)
    assert report.kept == 2, report.rejections
    again = {r["instance_id"]: r for r in export_swebench(tmp_path / "again", lists_as_strings=False)}
    for r in imported:
        assert again[r["instance_id"]]["FAIL_TO_PASS"] == r["FAIL_TO_PASS"]
        assert again[r["instance_id"]]["PASS_TO_PASS"] == r["PASS_TO_PASS"]
        assert again[r["instance_id"]]["patch"] == r["patch"]


def test_multi_swe_bench_file_round_trips_and_names_the_language(built, tmp_path):
    """Multi-SWE-bench rows (org/repo/number, base.sha, fix_patch, resolved_issues, f2p/p2p test maps) export
    from the validated packs, import back through `swebench:FILE`, and validate to the same lists; a row in a
    language envgen does not support is rejected with the reason, the others still build."""
    root, shas, _ = built
    rows = export_swebench(root / "out", tmp_path / "msb.jsonl", format="multi-swe-bench")
    fix = next(r for r in rows if r["instance_id"].endswith(shas["fix"][:12]))
    assert (fix["org"], fix["lang"], fix["base"]["sha"]) == ("calc", "python", shas["initial"])
    assert fix["f2p_tests"] == {"tests/test_core.py::test_subtract": {"run": "FAIL", "test": "FAIL", "fix": "PASS"}}
    assert set(fix["p2p_tests"]) == {"tests/test_core.py::test_add", "tests/test_core.py::test_divide",
                                     "tests/test_core.py::test_multiply_int"}
    assert fix["fix_patch_result"]["passed_count"] == 4 and fix["fix_patch"].startswith("diff --git a/src/calc/")
    # the Arrow (columnar) shape of the test maps and issues, as `datasets` hands them out, reads the same
    columnar = dict(fix, instance_id="calc__calc-columnar",
                    p2p_tests={"name": list(fix["p2p_tests"]), "run": ["PASS"] * 3, "test": ["PASS"] * 3,
                               "fix": ["PASS"] * 3},
                    resolved_issues={"number": [7], "title": ["subtract is wrong"], "body": ["2 - 1 gives -1"]})
    rust = dict(fix, instance_id="calc__calc-rust", lang="rust")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [*rows, columnar, rust]))
    imported = {r["instance_id"]: r for r in read_swebench(src)}
    assert imported["calc__calc-columnar"]["PASS_TO_PASS"] == sorted(fix["p2p_tests"])
    assert imported["calc__calc-columnar"]["problem_statement"] == "subtract is wrong\n\n2 - 1 gives -1"
    assert imported["calc__calc-columnar"]["repo"] == "calc/calc" and imported["calc__calc-rust"]["language"] == "rust"
    report = build_code(f"swebench:{src}", tmp_path / "again", repo_path=root / "calc", backend="local", gate=False,
                        store=tmp_path / "s.sqlite", log=lambda m: None)
    assert report.kept == 3, report.rejections
    (rej,) = report.rejections
    assert rej["task"] == "calc__calc-rust" and rej["reason"].startswith("language 'rust' is not supported")
    again = {r["instance_id"]: r for r in export_swebench(tmp_path / "again", format="multi-swe-bench")}
    for r in rows:
        assert again[r["instance_id"]]["f2p_tests"] == r["f2p_tests"]
        assert again[r["instance_id"]]["p2p_tests"] == r["p2p_tests"]
        assert again[r["instance_id"]]["fix_patch"] == r["fix_patch"]
        assert again[r["instance_id"]]["number"] == r["number"]


def test_a_gold_patch_that_does_not_apply_is_rejected_with_gits_reason(built, tmp_path):
    root, shas, _ = built
    row = next(r for r in export_swebench(root / "out") if r["instance_id"].endswith(shas["fix"][:12]))
    row["instance_id"] = "calc__calc-broken"
    row["patch"] = row["patch"].replace("-    return b - a", "-    return b - a + 0")
    src = tmp_path / "broken.jsonl"
    src.write_text(json.dumps(row) + "\n")
    report = build_code(f"swebench:{src}", tmp_path / "out", repo_path=root / "calc", backend="local", runs=1,
                        gate=False, store=tmp_path / "s.sqlite", log=lambda m: None)
    (rej,) = report.rejections
    assert rej["stage"] == "validate" and rej["reason"].startswith("gold.patch does not apply: error: patch failed")


def test_code_probes_take_plain_pytest_over_yet_score_zero(built, tmp_path):
    """The red-team probes are working attacks: on a checkout with the probe and the test patch applied,
    plain ``python -m pytest`` (what trusting the repository's configuration amounts to) reports the
    FAIL_TO_PASS test passed (plugin probes, the library-only forgery) or never runs it (config-only); the
    verifier scores each 0: configuration is restored, and the forgery makes the hidden twins pass too."""
    import shutil
    import subprocess
    import sys

    root, shas, _ = built
    pack = load(root / "out" / f"calc-{shas['fix'][:12]}")
    task = pack.tasks[0]
    probes = code_probes(pack, task)
    assert set(probes) == {"plugin-addopts", "plugin-conftest", "config-only", "forgery"}
    test_patch = (pack.hidden_dir / "test.patch").read_text()
    for name, probe in probes.items():
        calls = probe.calls
        work = tmp_path / name
        work.mkdir()
        shutil.copytree(pack.env_dir / "repo.git", work / "repo.git")
        tree = work / "repo"
        tree.mkdir()
        (tree / ".git").write_text("gitdir: ../repo.git\n")
        git = lambda *a, **kw: subprocess.run(["git", "-C", str(tree), *a], check=True, capture_output=True, **kw)  # noqa: E731
        git("reset", "--hard", "-q")
        git("apply", "-", input=calls[0].args["patch"].encode())
        git("apply", "-", input=test_patch.encode())
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "src", "HOME": str(work)}
        out = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_core.py"],
                             cwd=tree, capture_output=True, text=True, env=env).stdout
        if name == "config-only":
            assert "test_subtract" not in out and "deselected" in out, out[-800:]
        else:
            assert "PASSED tests/test_core.py::test_subtract" in out, out[-800:]
    with open_sandbox(pack, "local") as sbx:
        for name, probe in probes.items():
            verdict = replay(sbx, task, probe.calls, probe.answer).verdict
            assert verdict.reward == 0.0 and verdict.details["canary"] == "failed", (name, verdict.details)
            if name == "forgery":  # nothing to restore: the forged report is believed only by no one
                assert verdict.details["FAIL_TO_PASS"] == "1/1" and "twin checks" in verdict.details["reason"]
                assert "restored" not in verdict.details, verdict.details
            else:
                assert verdict.details["FAIL_TO_PASS"] == "0/1" and verdict.details["restored"], (name, verdict.details)
