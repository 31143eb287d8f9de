"""The `tests` verifier kit: report parsers (JUnit first, per-framework fallbacks) and the strict patch check."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers.tests import (  # noqa: E402
    SUBMISSION,
    Infrastructure,
    PatchError,
    check,
    check_patch,
    parse_junit,
    parse_pytest_summary,
    parse_report,
    parse_unittest_verbose,
    patch_files,
    prepare_repo,
    probe_environment,
    run_tests,
    stage,
)

try:
    from .code_repo import diff, make_calc_repo, make_tally_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import diff, make_calc_repo, make_tally_repo

XUNIT1 = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="1"
skipped="2" tests="7"><testcase classname="tests.test_core" name="test_add" file="tests/test_core.py" line="3"/>
<testcase classname="tests.test_core" name="test_sub" file="tests/test_core.py" line="7"><failure message="assert -2 == 2">
</failure></testcase><testcase classname="tests.test_core.TestDiv" name="test_zero[1-0]" file="tests/test_core.py"/>
<testcase classname="tests.test_core" name="test_io" file="tests/test_core.py"><error message="fixture"/></testcase>
<testcase classname="tests.test_core" name="test_skip" file="tests/test_core.py"><skipped type="pytest.skip"/></testcase>
<testcase classname="tests.test_core" name="test_xf" file="tests/test_core.py"><skipped type="pytest.xfail"/></testcase>
<testcase classname="" name="tests.test_broken" time="0.0"><error message="collection failure"/></testcase>
</testsuite></testsuites>"""


def test_junit_gives_pytest_node_ids_and_outcomes():
    got = parse_junit(XUNIT1, ["tests/test_core.py"])
    assert got == {"tests/test_core.py::test_add": "passed", "tests/test_core.py::test_sub": "failed",
                   "tests/test_core.py::TestDiv::test_zero[1-0]": "passed", "tests/test_core.py::test_io": "error",
                   "tests/test_core.py::test_skip": "skipped", "tests/test_core.py::test_xf": "xfail"}


def test_junit_without_file_attributes_maps_classnames_to_the_run_files():
    xunit2 = ('<testsuite><testcase classname="tests.test_core.TestDiv" name="test_a"/>'
              '<testcase classname="tests.test_core" name="test_b"/></testsuite>')
    assert parse_junit(xunit2, ["tests/test_core.py"]) == {"tests/test_core.py::TestDiv::test_a": "passed",
                                                          "tests/test_core.py::test_b": "passed"}


def test_teardown_error_after_a_pass_counts_as_error():
    xml = ('<testsuite><testcase classname="t.test_x" name="test_a" file="t/test_x.py"/>'
           '<testcase classname="t.test_x" name="test_a" file="t/test_x.py"><error message="teardown"/></testcase>'
           '</testsuite>')
    assert parse_junit(xml, []) == {"t/test_x.py::test_a": "error"}


def test_pytest_summary_fallback():
    out = """
=========================== short test summary info ============================
PASSED tests/test_core.py::test_add
PASSED tests/test_core.py::TestDiv::test_zero[1-0]
FAILED tests/test_core.py::test_sub - assert -2 == 2
ERROR tests/test_core.py::test_io - RuntimeError: boom
XFAIL tests/test_core.py::test_xf - not yet
XPASS tests/test_core.py::test_xp
SKIPPED [1] tests/test_core.py:12: no network
"""
    assert parse_pytest_summary(out) == {
        "tests/test_core.py::test_add": "passed", "tests/test_core.py::TestDiv::test_zero[1-0]": "passed",
        "tests/test_core.py::test_sub": "failed", "tests/test_core.py::test_io": "error",
        "tests/test_core.py::test_xf": "xfail", "tests/test_core.py::test_xp": "passed"}


def test_unittest_verbose_fallback_both_line_formats():
    out = """test_add (tests.test_core.TestCore.test_add) ... ok
test_sub (tests.test_core.TestCore.test_sub) ... FAIL
test_io (tests.test_core.TestCore) ... ERROR
test_skip (tests.test_core.TestCore) ... skipped 'later'
test_doc (tests.test_core.TestCore.test_doc)
The docstring line ... ok
test_xf (tests.test_core.TestCore) ... expected failure
"""
    assert parse_unittest_verbose(out) == {
        "tests.test_core.TestCore.test_add": "passed", "tests.test_core.TestCore.test_sub": "failed",
        "tests.test_core.TestCore.test_io": "error", "tests.test_core.TestCore.test_skip": "skipped",
        "tests.test_core.TestCore.test_doc": "passed", "tests.test_core.TestCore.test_xf": "xfail"}


def test_report_prefers_junit_and_falls_back_when_it_is_missing_or_broken():
    summary = "PASSED tests/test_core.py::test_add\n"
    assert parse_report("pytest", XUNIT1, summary, ["tests/test_core.py"])[1] == "junit"
    assert parse_report("pytest", None, summary) == ({"tests/test_core.py::test_add": "passed"}, "pytest-rA")
    assert parse_report("pytest", "<testsuite><testc", summary)[1] == "pytest-rA"
    assert parse_report("unittest", None, "test_a (m.T) ... ok\n") == ({"m.T.test_a": "passed"}, "unittest-verbose")


@pytest.fixture
def gitdiff(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (repo / "a.py").write_text("x = 1\ny = 2\nz = 3\n")
    (repo / "blob.bin").write_bytes(bytes(range(256)))
    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    (repo / "a.py").write_text("x = 1\ny = 20\nz = 3\n")
    (repo / "new.py").write_text("print('new')\n")
    (repo / "blob.bin").write_bytes(bytes(range(255, -1, -1)))
    run("add", "-A")
    return subprocess.run(["git", "-C", str(repo), "diff", "--cached", "--binary"], check=True,
                          capture_output=True, text=True).stdout


def test_well_formed_patches_pass_the_check(gitdiff):
    assert check_patch(gitdiff) == 3
    assert patch_files(gitdiff) == ["a.py", "blob.bin", "new.py"]
    plain = "--- a/a.py\n+++ b/a.py\n@@ -1,3 +1,3 @@\n x = 1\n-y = 2\n+y = 20\n z = 3\n"
    assert check_patch(plain) == 1


@pytest.mark.parametrize("mutate, why", [
    (lambda p: p + "-x", "neither a diff header nor part of a hunk"),  # git apply would ignore this line
    (lambda p: p[::-1] + "z", "neither a diff header nor part of a hunk"),
    (lambda p: p.replace("+y = 20\n", ""), "fit its hunk"),
    (lambda p: p[: p.index("+y = 20")], "ends inside a hunk"),
    (lambda p: "   \n", "empty"),
])
def test_malformed_patches_are_refused(gitdiff, mutate, why):
    with pytest.raises(PatchError, match=why):
        check_patch(mutate(gitdiff))


def test_infrastructure_is_test_configuration_hooks_metadata_caches_tests_and_shadowing_modules():
    infra = Infrastructure(test_paths={"tests/test_core.py"}, files=["pkg/tests/unit/test_a.py", "test_top.py"],
                           roots=["", "src"], env_modules={"pytest", "py", "pluggy", "json", "tally", "unittest"},
                           base_paths=["src/tally/__init__.py", "setup.cfg"])
    for path in ("setup.cfg", "docs/pyproject.toml", "tox.ini", "pytest.ini", ".pytest.ini", "pytest.toml",
                 "sub/dir/conftest.py", ".coveragerc", "src/sitecustomize.py", "usercustomize.py",
                 "src/sitecustomize/__init__.py", "src/usercustomize.cpython-311-x86_64-linux-gnu.so", "src/x.pth",
                 "src/evil-1.0.dist-info/entry_points.txt", "evil.egg-info/entry_points.txt", "evil.egg-link",
                 "src/tally/__pycache__/core.cpython-311.pyc", "src/tally/core.pyc", ".pytest_cache/v/x",
                 "tests/.gitattributes",
                 "tests/test_core.py",  # the test patch's file
                 "pkg/tests/helpers.py", "pkg/tests/unit/data/x.json",  # the run files' test directory
                 "pytest.py", "py.py", "src/pluggy/__init__.py", "json.py", "unittest/__init__.py",  # shadowing
                 "src/json.cpython-311-x86_64-linux-gnu.so"):
        assert infra(path), path
    for path in ("src/tally/core.py", "src/tally/new_module.py", "README.md", "setup.py",
                 "src/tally/__init__.py",  # the project's own package (the environment names it too)
                 "tests/test_other.py",  # tests/ holds no run file here and the test patch leaves it alone
                 "pkg/test_helpers.py", "src/tally/json.py", "newpkg/__init__.py", "json/README.md"):
        assert not infra(path), path


@pytest.fixture
def tally(tmp_path):
    """The tally fixture project as a pack ships it: a one-commit snapshot, its tree, gold and test patch."""
    from envgen.families.code.candidates import split_patch
    from envgen.families.code.repo_image import make_snapshot
    from envgen.families.code.python import Python

    shas = make_tally_repo(tmp_path / "tally")
    gold, test, _, _ = split_patch(diff(tmp_path / "tally", shas["initial"], shas["fix"]), Python())
    (tmp_path / "work").mkdir()
    base = make_snapshot(tmp_path / "tally", shas["initial"], tmp_path / "work" / "repo.git")
    return prepare_repo(str(tmp_path / "work")), base, gold, test


def _git_diff(tree: str) -> str:
    run = lambda *a: subprocess.run(["git", "-C", tree, *a], check=True, capture_output=True)  # noqa: E731
    run("add", "-A")
    return run("diff", "--cached", "--binary").stdout.decode()


def test_stage_restores_every_infrastructure_edit_and_keeps_the_fix(tally):
    tree, base, gold, test = tally
    root = pathlib.Path(tree)
    (root / "src/tally/core.py").write_text((root / "src/tally/core.py").read_text().replace(
        "min(values) - max(values)", "max(values) - min(values)"))  # the genuine fix
    (root / "src/tally/stats.py").write_text("MEDIAN = 'soon'\n")  # new source module: kept
    (root / "setup.cfg").write_text((root / "setup.cfg").read_text().replace("addopts =", "addopts = -p force"))
    (root / "tests/conftest.py").write_text("def pytest_runtest_logreport(report):\n    report.outcome = 'passed'\n")
    (root / "tests/test_core.py").write_text("def test_spread():\n    pass\n")
    edits = {"conftest.py": "x = 1\n", "src/usercustomize.py": "import os\n", "src/force.pth": "import force\n",
             "src/force-1.0.dist-info/entry_points.txt": "[pytest11]\nforce = force\n",
             "pytest.py": "raise SystemExit\n",
             "tests/helpers.py": "OK = True\n", "src/tally/__pycache__/core.cpython-311.pyc": "junk\n"}
    for rel, text in edits.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "src/tally/plugin_link.py").symlink_to("../../tests/conftest.py")
    submission = _git_diff(tree)
    found = probe_environment(None, tree)
    restored = stage(tree, base, test, submission, files=["tests/test_core.py"], roots=["", "src"],
                     env_modules=found["modules"])
    assert sorted(restored) == sorted(["setup.cfg", "tests/conftest.py", "tests/test_core.py",
                                       "src/tally/plugin_link.py", *edits])
    for rel in edits:
        assert not (root / rel).exists(), rel
    assert not (root / "src/force-1.0.dist-info").exists() and not (root / "src/tally/__pycache__").exists()
    assert not (root / "src/tally/plugin_link.py").is_symlink()
    shown = lambda rel: subprocess.run(["git", "-C", tree, "show", f"{base}:{rel}"], capture_output=True,  # noqa: E731
                                       text=True, check=True).stdout
    assert (root / "setup.cfg").read_text() == shown("setup.cfg")
    assert (root / "tests/conftest.py").read_text() == shown("tests/conftest.py")
    assert "def test_spread(samples):" in (root / "tests/test_core.py").read_text()  # base + test patch
    assert "max(values) - min(values)" in (root / "src/tally/core.py").read_text()
    assert (root / "src/tally/stats.py").is_file()
    # the gold patch alone restores nothing: the staging validation uses changes no genuine fix
    assert stage(tree, base, test, gold, files=["tests/test_core.py"], roots=["", "src"],
                 env_modules=found["modules"]) == []


def test_the_canary_exposes_a_run_that_reports_failures_as_passes(tally, monkeypatch):
    """A report forged inside the test process (here a conftest at base; for a submission, code the tests
    import) cannot hide from the kit: its always-failing canary comes back passed."""
    tree, base, gold, test = tally
    root = pathlib.Path(tree)
    stage(tree, base, test, None, files=["tests/test_core.py"], roots=["", "src"])
    (root / "tests/test_fail.py").write_text("def test_no():\n    assert False\n")
    honest = run_tests(tree, "pytest", ["tests/test_fail.py"], pythonpath=["src"])
    assert honest["outcomes"] == {"tests/test_fail.py::test_no": "failed"} and honest["canary"] == "failed"
    (root / "tests/conftest.py").write_text("import pytest\n\n\n@pytest.hookimpl(tryfirst=True)\n"
                                            "def pytest_runtest_logreport(report):\n    report.outcome = 'passed'\n")
    forged = run_tests(tree, "pytest", ["tests/test_fail.py"], pythonpath=["src"])
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:junitxml")  # the verifier's own environment never leaks in
    monkeypatch.setenv("PYTEST_PLUGINS", "tests.conftest")
    assert run_tests(tree, "pytest", ["tests/test_fail.py"], pythonpath=["src"])["source"] == "junit"
    assert forged["outcomes"] == {"tests/test_fail.py::test_no": "passed"} and forged["canary"] == "passed"
    assert sorted(p.name for p in root.glob("tests/*.py")) == ["conftest.py", "test_core.py", "test_fail.py"]
    unit = run_tests(tree, "unittest", ["tests/test_fail.py"], pythonpath=["src"])
    assert unit["canary"] == "failed"


def test_plugin_autoload_is_off_and_only_named_plugins_load(tally):
    """This interpreter provides the anyio and timeout plugins (entry points): a run loads exactly the ones
    it names, so a plugin the environment recorded keeps working and an unrecorded one never loads."""
    tree, base, gold, test = tally
    found = probe_environment(None, tree)
    assert {"name": "anyio", "value": "anyio.pytest_plugin"} in found["plugins"]
    assert {"json", "pytest", "pluggy"} <= set(found["modules"]) and "tally" not in found["modules"]
    (pathlib.Path(tree) / "tests/test_fixture.py").write_text("def test_backend(anyio_backend):\n"
                                                              "    assert anyio_backend == 'asyncio'\n")
    named = run_tests(tree, "pytest", ["tests/test_fixture.py"], plugins=["anyio"])
    bare = run_tests(tree, "pytest", ["tests/test_fixture.py"], plugins=[])
    assert named["outcomes"] == {"tests/test_fixture.py::test_backend[asyncio]": "passed"}  # anyio parametrizes it
    assert bare["outcomes"] == {"tests/test_fixture.py::test_backend": "error"}
    assert "fixture 'anyio_backend' not found" in bare["tail"]


def test_validation_rejects_a_run_whose_canary_passed_and_names_restored_gold_files():
    from envgen.families.code.execution import judge

    def run(mode, n, f2p, canary="failed", restored=()):
        return {"mode": mode, "run": n, "outcomes": {"t::f2p": f2p, "t::p2p": "passed"}, "canary": canary,
                "restored": list(restored)}

    good = [run("base", 1, "failed"), run("gold", 1, "passed")]
    assert judge("x", {"runs": good, "plugins": [{"name": "tally", "value": "tally.pytest_plugin"}]}, 1).accepted
    forged = judge("x", {"runs": [run("base", 1, "failed"), run("gold", 1, "passed", canary="passed")]}, 1)
    assert not forged.accepted and forged.reason.startswith("the gold run 1 reported its canary test")
    needs_config = judge("x", {"runs": [run("base", 1, "failed"), run("gold", 1, "failed", restored=["setup.cfg"])]}, 1)
    assert needs_config.reason == ("no FAIL_TO_PASS test (the gold patch's changes to test infrastructure were "
                                   "restored: setup.cfg)")


def test_recipe_installs_the_project_with_its_backend_and_checks_its_plugins_load(tmp_path):
    """The project is installed by pip with its build backend (entry points registered as the backend
    computes them, so a project's own pytest plugin is one the environment provides and validation records
    it), and the check loads that plugin as the tests will."""
    from envgen.families.code.lang import RepoView
    from envgen.families.code.python import Python

    shas = make_tally_repo(tmp_path / "tally")
    recipe = Python().recipe(RepoView(tmp_path / "tally", shas["initial"]))
    assert [s.name for s in recipe.task_steps] == ["install", "generated", "check"]
    assert "pip install" in recipe.task_steps[0].run and " -e /work/repo " in recipe.task_steps[0].run + " "
    assert "--framework pytest --pythonpath src" in recipe.task_steps[2].run


def test_check_grades_a_fresh_tree_from_the_pristine_snapshot_whatever_the_work_dir_holds(tmp_path):
    """Leftovers of the episode (an ancestor pytest.ini, a git filter in the work dir's repository, a forged
    conftest in the tree) are gone before the run; a genuine fix with a config edit scores 1."""
    from envgen.families.code.candidates import split_patch
    from envgen.families.code.repo_image import make_snapshot
    from envgen.families.code.python import Python

    shas = make_calc_repo(tmp_path / "calc")
    gold, test, _, _ = split_patch(diff(tmp_path / "calc", shas["initial"], shas["fix"]), Python())
    env_dir, work, hidden = tmp_path / "env", tmp_path / "work", tmp_path / "hidden"
    base = make_snapshot(tmp_path / "calc", shas["initial"], env_dir / "repo.git")
    hidden.mkdir()
    (hidden / "test.patch").write_text(test)
    shutil.copytree(env_dir, work)
    tree = pathlib.Path(prepare_repo(str(work)))
    git_dir = str(work / "repo.git")
    subprocess.run(["git", "--git-dir", git_dir, "config", "filter.x.smudge", f"touch {tmp_path}/pwned; cat"],
                   check=True)
    (work / "repo.git" / "info").mkdir(exist_ok=True)
    (work / "repo.git" / "info" / "attributes").write_text("* filter=x\n")
    (work / "pytest.ini").write_text("[pytest]\naddopts = -p no:junitxml\n")
    (tree / "tests" / "conftest.py").write_text("def pytest_runtest_logreport(report):\n"
                                                "    report.outcome = 'passed'\n")
    (work / SUBMISSION).parent.mkdir()
    config_edit = ("diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n"
                   "@@ -1,3 +1,3 @@\n [project]\n-name = \"calc\"\n+name = \"calc2\"\n version = \"0.1.0\"\n")
    (work / SUBMISSION).write_text(gold + config_edit)
    args = {"base": base, "framework": "pytest", "files": ["tests/test_core.py"], "pythonpath": ["src"],
            "FAIL_TO_PASS": ["tests/test_core.py::test_subtract"], "PASS_TO_PASS": ["tests/test_core.py::test_add"],
            "plugins": []}
    calls = [{"tool": "submit", "ok": True}]
    out = check(args, answer="done", calls=calls, work_dir=str(work), hidden_dir=str(hidden), env_dir=str(env_dir))
    assert out["reward"] == 1.0, out
    assert out["details"]["restored"] == ["pyproject.toml"] and out["details"]["report"] == "junit"
    assert sorted(p.name for p in work.iterdir()) == ["repo", "repo.git"]
    assert "filter" not in (work / "repo.git" / "config").read_text()
    assert not (tmp_path / "pwned").exists()  # the planted filter never ran
    assert not (tree / "tests" / "conftest.py").exists()
