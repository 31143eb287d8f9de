"""Code family parts without containers: splitting and filtering, the Python recipe, test-list logic, snapshots."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from envgen.families.code.candidates import Filters, Rejection, make_candidate, split_patch
from envgen.families.code.repo_image import make_snapshot, pack_dockerfile
from envgen.families.code.lang import Recipe, RepoView, Step
from envgen.families.code.python import Python, read_metadata, satisfies
from envgen.families.code.sources import LocalGitSource, RawInstance, closing_issues, read_swebench
from envgen.families.code.execution import classify, judge
from envgen.errors import EnvgenError

try:
    from .code_repo import diff, make_calc_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import diff, make_calc_repo

PY = Python()


@pytest.fixture(scope="module")
def calc(tmp_path_factory):
    root = tmp_path_factory.mktemp("calc") / "calc"
    return root, make_calc_repo(root)


# ---------------------------------------------------------------- split and filter


def test_python_test_path_rules():
    for p in ("tests/test_core.py", "tests/data/input.json", "pkg/test/helpers.py", "src/pkg/test_x.py",
              "x_test.py", "conftest.py", "testing/util.py"):
        assert PY.is_test_path(p), p
    for p in ("src/calc/core.py", "docs/testing.rst", "setup.py", "src/contest.py", "attest/x.py"):
        assert not PY.is_test_path(p), p
    assert PY.is_code_path("src/calc/core.py") and not PY.is_code_path("README.md")
    assert not PY.is_code_path("tests/test_core.py")


def test_split_separates_gold_and_test_patch(calc):
    root, shas = calc
    gold, test, code_files, test_files = split_patch(diff(root, shas["initial"], shas["fix"]), PY)
    assert code_files == ["src/calc/core.py"] and test_files == ["tests/test_core.py"]
    assert "return a - b" in gold and "tests/" not in gold
    assert "def test_subtract" in test and "src/calc" not in test


def _raw(calc, which="fix", **kw):
    root, shas = calc
    parent = {"fix": "initial", "float": "fix", "power": "docs"}[which]
    base = dict(instance_id=f"calc-{which}", repo="o/calc", base_commit=shas[parent],
                patch=diff(root, shas[parent], shas[which]), repo_path=root,
                problem_statement="subtract returns the wrong sign for positive operands, e.g. 5 - 3 = -2",
                source="github", issues=[7])
    base.update(kw)
    return RawInstance(**base)


@pytest.mark.parametrize("change, reason", [
    (dict(merged=False), "not merged"),
    (dict(issues=[]), "no linked issue"),
    (dict(issues=[7, 9]), "links 2 issues"),
    (dict(problem_statement="broken"), "problem statement too short (6 < 40 characters)"),
    (dict(base_commit="0" * 40), "base commit 000000000000 is not in the local clone"),
])
def test_filters_reject_with_their_reason(calc, change, reason):
    got = make_candidate(_raw(calc, **change), PY)
    assert isinstance(got, Rejection) and got.reason == reason and got.stage == "candidates"


def test_file_count_and_size_caps(calc):
    raw = _raw(calc)
    assert make_candidate(raw, PY, Filters(max_files=1)).reason == "changes 2 files (allowed 1-1)"
    assert make_candidate(raw, PY, Filters(max_gold_lines=1)).reason == \
        "gold patch too large (2 > 1 changed lines)"
    assert make_candidate(raw, PY, Filters(max_test_lines=1)).reason.startswith("test patch too large")
    rej = make_candidate(raw, PY, Filters(max_files=1))
    assert rej.key == "changes N files"


def test_local_history_yields_every_commit_and_filters_say_why(calc):
    root, shas = calc
    raws = list(LocalGitSource(root, PY).instances())
    assert [r.meta["commit"] for r in raws] == [shas[k] for k in ("fix", "float", "docs", "power", "readme")]
    outcomes = {r.meta["commit"]: make_candidate(r, PY) for r in raws}
    assert isinstance(outcomes[shas["fix"]], type(make_candidate(raws[0], PY)))
    assert outcomes[shas["docs"]].reason == "no test change"
    assert outcomes[shas["readme"]].reason == "no test change"
    fix = outcomes[shas["fix"]]
    assert fix.problem_statement.startswith("Fix subtract returning the wrong sign")
    assert fix.created_at == "2024-01-02T12:00:00+00:00" and fix.base_commit == shas["initial"]
    assert raws[0].issues == [7]  # "(fixes #7)" in the message


def test_closing_keywords():
    text = "Fixes #12. Also closes o/r#3, resolved https://github.com/o/r/issues/4; fix other/repo#5; see #6"
    assert closing_issues(text, "o/r") == [12, 3, 4]


def test_swebench_file_errors_name_line_and_field(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"instance_id": "a", "repo": "o/r", "base_commit": "abc", "patch": "", "test_patch": "t",'
                 ' "problem_statement": "p"}\n')
    with pytest.raises(EnvgenError, match=r"x.jsonl:1: patch: missing"):
        read_swebench(p)
    p.write_text('{"instance_id": "a", "repo": "o/r", "base_commit": "abc", "patch": "d", "test_patch": "t",'
                 ' "problem_statement": "p", "FAIL_TO_PASS": "[\\"t::a\\"]", "PASS_TO_PASS": ["t::b"]}\n')
    row = read_swebench(p)[0]
    assert row["FAIL_TO_PASS"] == ["t::a"] and row["PASS_TO_PASS"] == ["t::b"]


# ---------------------------------------------------------------- the Python recipe


class FakeView:
    """RepoView's interface over a dict of files."""

    def __init__(self, files: dict[str, str]):
        self._files = files
        self.repo, self.commit = Path("/fake"), "f" * 40

    @property
    def files(self):
        return list(self._files)

    def exists(self, path):
        return path in self._files

    def read(self, path):
        return self._files.get(path)


def test_specifiers():
    assert satisfies("3.11.2", ">=3.8, <3.12") and not satisfies("3.13.5", ">=3.8,<3.12")
    assert satisfies("3.9.2", "~=3.9") and not satisfies("3.11.2", "~=3.9.0")
    assert satisfies("3.11.2", "==3.11.*") and not satisfies("3.11.2", "!=3.11.*")
    assert satisfies("3.11.0", ">=3.6.*")  # an old tool's spelling, read as its release


def test_interpreter_follows_requires_python_and_classifiers():
    toml = '[project]\nname = "p"\nrequires-python = "{req}"\nclassifiers = [{cls}]\n'
    pick = lambda req, cls="": PY.recipe(FakeView({"pyproject.toml": toml.format(req=req, cls=cls)})).suite  # noqa
    assert pick(">=3.8") == "bookworm"  # no classifiers: the default suite
    assert pick(">=3.12") == "trixie"
    assert pick(">=3.6,<3.10") == "bullseye"
    assert pick(">=3.8", '"Programming Language :: Python :: 3.13"') == "trixie"
    assert pick(">=3.8", '"Programming Language :: Python :: 3.10"') == "bullseye"  # closest below 3.10
    with pytest.raises(EnvgenError, match="no base image has a matching Python"):
        pick(">=3.14")


def test_dependencies_and_test_extras_become_one_pip_step():
    view = FakeView({
        "setup.cfg": "[metadata]\nname = pkg\nversion = 1.2\n[options]\npython_requires = >=3.9\n"
                     "install_requires =\n    requests>=2\n    attrs\npackage_dir =\n    =src\n"
                     "[options.extras_require]\ntest =\n    pytest\n    hypothesis>=6\n[tool:pytest]\n",
        "src/pkg/__init__.py": ""})
    r = PY.recipe(view)
    assert [s.name for s in r.steps] == ["venv", "dependencies"]
    assert [s.name for s in r.task_steps] == ["install", "generated", "check"]
    assert "--system-site-packages /opt/envgen/venv" in r.steps[0].run
    plan = json.loads(shlex.split(r.steps[1].run)[-1])  # the kit's installer: test extras first, then runtime
    assert [a["requirements"] for a in plan["alternatives"]] == [["attrs", "hypothesis>=6", "requests>=2"],
                                                                 ["attrs", "requests>=2"]]
    assert "-e '/work/repo[test]'" in r.task_steps[0].run and "--pythonpath src" in r.task_steps[2].run
    assert r.pythonpath == ["src"] and r.framework == "pytest" and r.python == "/opt/envgen/venv/bin/python"


def test_setup_py_literals_and_poetry_and_unittest_runner():
    view = FakeView({"setup.py": "from setuptools import setup\nsetup(name='old', python_requires='>=2.7,<3.10',"
                                 " install_requires=['six'], tests_require=['nose2'])\n",
                     "tests/test_a.py": "import unittest\n"})
    r = PY.recipe(view)
    assert r.suite == "bullseye" and r.framework == "unittest" and "six" in r.steps[1].run
    poetry = FakeView({"pyproject.toml": '[tool.poetry]\nname = "po"\nversion = "0.1.0"\n'
                                         '[tool.poetry.dependencies]\npython = "^3.10"\nclick = "^8.1"\n'})
    meta = read_metadata(poetry)
    assert meta.requires_python == ">=3.10,<4" and [d.text for d in meta.deps] == ["click>=8.1,<9"]
    assert PY.recipe(poetry).suite == "bookworm"


def test_environment_key_is_shared_by_commits_that_install_alike(calc):
    root, shas = calc
    keys = {k: PY.recipe(RepoView(root, shas[k])).key for k in ("initial", "fix", "float", "docs")}
    assert len(set(keys.values())) == 1  # code changes do not change how the repository installs
    other = Recipe("python", "bookworm", ("python",), [Step("venv", "true"), Step("x", "pip install y")], "pytest")
    assert other.key != keys["fix"]
    text = pack_dockerfile(PY.recipe(RepoView(root, shas["fix"])))
    assert "FROM ${ENVGEN_BASE}" in text and "|| true" not in text


# ---------------------------------------------------------------- test lists


def _run(mode, n, outcomes, **kw):
    return {"mode": mode, "run": n, "outcomes": outcomes, "seconds": 0.5, "total_seconds": 0.6, **kw}


def test_classify_lists_flaky_missing_and_pass_to_fail():
    base = {"t::p2p": "passed", "t::f2p": "failed", "t::p2f": "passed", "t::skip": "skipped", "t::f2f": "error"}
    gold = {"t::p2p": "passed", "t::f2p": "passed", "t::p2f": "failed", "t::skip": "skipped", "t::f2f": "failed",
            "t::new": "passed"}  # t::new is missing from every base report: it failed there
    runs = []
    for i, flaky in enumerate(("passed", "failed", "passed"), 1):
        runs.append(_run("base", i, {**base, "t::flaky": flaky}))
        runs.append(_run("gold", i, {**gold, "t::flaky": "passed"}))
    got = classify(runs)
    assert got["FAIL_TO_PASS"] == ["t::f2p", "t::new"] and got["PASS_TO_PASS"] == ["t::p2p"]
    assert got["PASS_TO_FAIL"] == ["t::p2f"] and got["flaky"] == ["t::flaky"] and got["skipped"] == ["t::skip"]
    assert got["fail_to_fail"] == ["t::f2f"] and got["network"] == []
    v = judge("x", {"runs": runs}, 3)
    assert not v.accepted and v.reason.startswith("PASS_TO_FAIL: the gold patch breaks 1 passing test(s): t::p2f")
    assert v.test_seconds == 3.0 and len(v.runs) == 6


def test_judge_needs_a_fail_to_pass_test_and_reports_patch_errors():
    runs = [_run("base", 1, {"t::a": "passed"}), _run("gold", 1, {"t::a": "passed"})]
    assert judge("x", {"runs": runs}, 1).reason == "no FAIL_TO_PASS test"
    runs[1] = _run("gold", 1, {}, error="gold.patch does not apply: error: patch failed")
    assert judge("x", {"runs": runs}, 1).reason == "gold.patch does not apply: error: patch failed"


# ---------------------------------------------------------------- snapshots


def test_snapshot_is_one_commit_with_the_base_tree_and_survives_a_files_only_copy(calc, tmp_path):
    root, shas = calc
    snap = make_snapshot(root, shas["fix"], tmp_path / "repo.git")
    again = make_snapshot(root, shas["fix"], tmp_path / "again.git")
    assert snap == again  # deterministic
    # an image context holds files only: copy them alone, then use the copy as the sandbox does
    copy = tmp_path / "work" / "repo.git"
    for f in (tmp_path / "repo.git").rglob("*"):
        if f.is_file():
            (copy / f.relative_to(tmp_path / "repo.git")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, copy / f.relative_to(tmp_path / "repo.git"))
    tree = tmp_path / "work" / "repo"
    tree.mkdir()
    (tree / ".git").write_text("gitdir: ../repo.git\n")
    git = lambda *a: subprocess.run(["git", "-C", str(tree), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    git("reset", "--hard", "-q")
    assert git("rev-list", "--count", "HEAD") == "1"  # no history: no later commit can leak the fix
    assert git("rev-parse", "HEAD^{tree}") == subprocess.run(
        ["git", "-C", str(root), "rev-parse", f"{shas['fix']}^{{tree}}"], capture_output=True, text=True).stdout.strip()
    assert "return a - b" in (tree / "src/calc/core.py").read_text()
    assert git("status", "--porcelain") == ""
