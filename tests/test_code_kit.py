"""The `tests` verifier kit: report parsers (JUnit first, per-framework fallbacks) and the strict patch check."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers.tests import (  # noqa: E402
    PatchError,
    check_patch,
    parse_junit,
    parse_pytest_summary,
    parse_report,
    parse_unittest_verbose,
    patch_files,
    protected_touches,
)

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


def test_submissions_may_not_touch_test_infrastructure():
    patch = ("diff --git a/tests/conftest.py b/tests/conftest.py\n--- /dev/null\n+++ b/tests/conftest.py\n"
             "diff --git a/src/m.py b/src/m.py\n")
    assert protected_touches(patch) == ["tests/conftest.py"]
    assert protected_touches("diff --git a/src/m.py b/src/m.py\n", ["tests/test_m.py"]) == []
    assert protected_touches("diff --git a/tests/test_m.py b/tests/test_m.py\n", ["tests/test_m.py"]) == \
        ["tests/test_m.py"]
