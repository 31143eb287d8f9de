"""Whole-file SWE-bench builds and what they report (issue 28, classes 5, 6 and 8), without Docker.

One local build of ``sensors_repo``'s file: a repeated instance is built once, an instance of a repository
with no clone is rejected on its own, tests that fail for want of the network are reported apart (the one
whose download error the project swallows is seen by the kit's probe), and the exported lists are the ids
SWE-bench's own log parser gives a real pytest run of the task. The Docker side (the sandbox's missing
network, an engine that stops mid-build) is in test_code_faults.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from envgen.families.code import build_code, export_swebench
from envgen.families.code.execution import classify
from envgen.families.code.packs import harness_lists
from envgen.families.code.pipeline import reason_kind
from envgen.pack import load

try:
    from .code_repo import _git
    from .sensors_repo import (F2P, INSTANCE, MISSING_INSTANCE, MISSING_REPO, NETWORK, P2P, REPO,
                               make_sensors_repo, write_swebench)
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _git
    from sensors_repo import (F2P, INSTANCE, MISSING_INSTANCE, MISSING_REPO, NETWORK, P2P, REPO,
                              make_sensors_repo, write_swebench)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("sensors")
    shas = make_sensors_repo(root / "sensors")
    write_swebench(root / "instances.jsonl", root / "sensors", shas)
    logs: list[str] = []
    report = build_code(f"swebench:{root / 'instances.jsonl'}", root / "out", backend="local", gate=False,
                        repo_path={REPO: str(root / "sensors")}, store=root / "state.sqlite", log=logs.append)
    return root, shas, report, logs


def test_a_repeated_instance_is_built_once_and_a_repository_without_clone_rejects_only_its_own(built):
    root, _, report, logs = built
    assert report.proposed == 2 and report.kept == 1
    assert report.details["source_stats"]["duplicates"] == [{"instance_id": INSTANCE, "item": 3, "identical": True}]
    assert any("item 3 repeats" in m and "built once" in m for m in logs)
    (rej,) = report.rejections
    assert rej["task"] == MISSING_INSTANCE and rej["stage"] == "source"
    assert MISSING_REPO in rej["reason"] and f"--repo-path {MISSING_REPO}=CLONE" in rej["reason"]
    assert report.rejected_by_reason == {"source: no local clone of the repository": 1}
    written = json.loads((root / "out" / "build.json").read_text())
    assert written["details"]["source_stats"]["unavailable"] == {MISSING_REPO: rej["reason"]}


def test_a_rerun_given_the_missing_clone_builds_its_instance(built, tmp_path):
    root, _, first, _ = built
    again = build_code(f"swebench:{root / 'instances.jsonl'}", root / "out", backend="local", gate=False,
                       repo_path={REPO: str(root / "sensors"), MISSING_REPO: str(root / "sensors")},
                       store=root / "state.sqlite", log=lambda m: None)
    assert again.details["resumed"] == 1 and again.kept == 2 and not again.rejections


def test_tests_that_need_the_network_are_reported_apart_from_failing_ones(built):
    root, _, report, _ = built
    summary = report.details["tasks"][INSTANCE]
    assert summary["network"] == NETWORK and summary["fail_to_fail"] == []
    assert report.details["network"] == {"tests": 2, "tasks": {INSTANCE: NETWORK}}
    task = load(root / "out" / report.packs[0]).tasks[0]
    assert task.verifier.args["FAIL_TO_PASS"] == F2P and task.verifier.args["PASS_TO_PASS"] == P2P
    assert task.meta["validation"]["network"] == NETWORK


def test_a_swallowed_download_error_is_found_by_the_probe_not_by_the_failure_text():
    """pydicom's shape: the test fails on a missing file (TypeError); only the probe saw its module fetch."""
    message = {"tests/t.py::test_sample": "TypeError: expected str, bytes or os.PathLike object, not NoneType"}

    def runs(attempts):
        return [{"mode": m, "run": i, "outcomes": {"tests/t.py::test_sample": "failed", "tests/t.py::test_ok": "passed"},
                 "messages": message, "network_attempts": attempts} for m in ("base", "gold") for i in (1, 2)]

    assert classify(runs([]))["fail_to_fail"] == ["tests/t.py::test_sample"]
    seen = classify(runs(["tests/t.py"]))  # the module, while it was imported
    assert seen["network"] == ["tests/t.py::test_sample"] and seen["fail_to_fail"] == []
    assert seen["PASS_TO_PASS"] == ["tests/t.py::test_ok"]  # a passing test of that module stays graded
    other = classify(runs(["tests/other.py::test_x"]))
    assert other["fail_to_fail"] == ["tests/t.py::test_sample"]


def _pytest_log(repo, commit, tmp_path, test_patch: str | None = None) -> str:
    tree = tmp_path / f"tree-{commit[:8]}"
    _git(repo, "worktree", "add", "-q", "--detach", str(tree), commit)
    if test_patch:
        subprocess.run(["git", "-C", str(tree), "apply", "-"], input=test_patch, text=True, check=True)
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_text.py"],
                         cwd=tree, env=env, capture_output=True, text=True)
    return out.stdout


def test_exported_lists_are_what_swebench_parses_from_a_real_pytest_log(built, tmp_path):
    from swebench.harness.log_parsers.python import parse_log_pytest  # SWE-bench's own rule, not a copy

    root, shas, report, _ = built
    row = next(r for r in export_swebench(root / "out", tmp_path / "export.jsonl") if r["instance_id"] == INSTANCE)
    f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
    assert f2p == ["tests/test_text.py::test_words[assert"]
    assert p2p == ["tests/test_text.py::test_words[plain", "tests/test_text.py::test_words_of_one"]
    assert json.loads(row["envgen_FAIL_TO_PASS"]) == F2P and json.loads(row["envgen_PASS_TO_PASS"]) == P2P
    gold = parse_log_pytest(_pytest_log(root / "sensors", shas["fix"], tmp_path), None)
    assert all(gold.get(t) == "PASSED" for t in f2p + p2p)  # the harness grades the gold patch RESOLVED
    assert not any(t in gold for t in F2P)  # envgen's exact ids: the harness never finds them
    base = parse_log_pytest(_pytest_log(root / "sensors", shas["initial"], tmp_path, row["test_patch"]), None)
    assert base[f2p[0]] == "FAILED" and all(base.get(t) == "PASSED" for t in p2p)


def test_ids_cut_to_one_harness_key_are_graded_once():
    f2p, p2p = harness_lists(["t.py::f[a b]", "t.py::f[a c]"], ["t.py::f[a d]", "t.py::g[x y]", "t.py::h"])
    assert f2p == ["t.py::f[a"] and p2p == ["t.py::g[x", "t.py::h"]


def test_rejections_are_counted_by_kind_not_by_environment():
    assert reason_kind("repository environment 4f0c2a9be81d7731: step 'deps' exited with 1") == \
        reason_kind("repository environment aae66920b74e47b7: step 'deps' exited with 2") == \
        "repository environment: step 'deps' failed"
    assert reason_kind("task image: step 'install' exited with 1") == "task image: step 'install' failed"
    assert reason_kind("PASS_TO_FAIL: the gold patch breaks 1 passing test(s): t.py::x") == "PASS_TO_FAIL"
