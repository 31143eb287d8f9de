"""Honest validation: why tests did not run, which tests the test patch changes, fail-in-both and
network-needing tests by name, per-file reruns past a broken conftest, and the build's resume key.

Unit tests for the kit's parts and the host's judge, then the ``meter`` fixture repository
(tests/code_repo.py) end to end with the local backend; test_code_validation_docker.py runs it in Docker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from envgen.families.code import build_code
from envgen.families.code.candidates import reason_group
from envgen.families.code.execution import classify, judge
from envgen.families.code.family import FAMILY, LOCAL_WARNING
from envgen.pack import load
from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers.tests import (
    changed_by_test_patch,
    first_error,
    is_changed,
    parse_junit,
    parse_pytest_summary,
    run_tests,
)

try:
    from .code_repo import _commit, _git, _write, diff, make_meter_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _commit, _git, _write, diff, make_meter_repo

# ---------------------------------------------------------------- which tests the test patch changes

MODULE = '''\
import pytest

LIMIT = 3


def helper():
    return 1


def test_plain():
    assert helper() == 1


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n


class TestBox:
    size = 2

    def test_size(self):
        assert self.size == 2

    def test_other(self):
        assert self
        assert True


def test_last():
    assert LIMIT
'''


@pytest.fixture
def module_repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"tests/test_mod.py": MODULE, "tests/data/cases.json": "[]\n", "tests/sub/test_s.py": "def test_s():\n    pass\n"})
    base = _commit(root, "base", 1)

    def changes(files: dict[str, str], run=("tests/test_mod.py",)) -> dict:
        _git(root, "reset", "-q", "--hard", base)
        _write(root, files)
        head = _commit(root, "change", 2)
        return changed_by_test_patch(str(root), diff(root, base, head), list(run))
    return changes


@pytest.mark.parametrize("edit, changed", [
    (("    assert helper() == 1\n", "    assert helper() == 1\n    assert helper()\n"), ["test_plain"]),
    (("[1, 2]", "[1, 2, 3]"), ["test_param"]),  # the parametrization is part of the function
    (("    size = 2\n", "    size = 2\n    colour = 'red'\n"), ["TestBox"]),  # class body: every test of the class
    (("        assert True\n", "        assert not False\n"), ["TestBox::test_other"]),
    (("LIMIT = 3", "LIMIT = 4"), "all"),  # module-level code: every test of the module
    (("import pytest\n", "import os\nimport pytest\n"), "all"),
    (("def test_last():\n    assert LIMIT\n", "def test_last():\n    assert LIMIT\n\n\n# a note\n"), []),  # comments
    (("def test_last():\n    assert LIMIT\n", "def test_last():\n    assert LIMIT\n\n\ndef test_new():\n    pass\n"),
     ["test_new"]),
    (("        assert self.size == 2\n", "        assert self.size == 2\n        assert self.size\n"),
     ["TestBox::test_size"]),
    (("        assert True\n", ""), ["TestBox::test_other"]),  # a removed line in a method
    (("def helper():\n    return 1\n", "def helper():\n    return 2\n"), ["helper"]),
])
def test_changed_lines_map_to_the_tests_that_hold_them(module_repo, edit, changed):
    got = module_repo({"tests/test_mod.py": MODULE.replace(*edit)})
    assert got["files"]["tests/test_mod.py"] == changed and got["dirs"] == []


def test_new_files_conftests_and_data_files_change_every_test_they_reach(module_repo):
    got = module_repo({"tests/sub/test_new.py": "def test_n():\n    pass\n", "tests/data/cases.json": "[1]\n",
                       "tests/sub/conftest.py": "import pytest\n"}, run=("tests/test_mod.py", "tests/sub/test_new.py"))
    assert got == {"files": {"tests/sub/test_new.py": "all"}, "dirs": ["tests/data", "tests/sub"]}
    assert is_changed("tests/sub/test_new.py::test_n", got) and is_changed("tests/sub/test_s.py::test_s", got)
    assert is_changed("tests/data/test_x.py::test_y", got) and not is_changed("tests/test_mod.py::test_plain", got)


def test_ids_match_functions_classes_and_parameters():
    changes = {"files": {"tests/test_mod.py": ["TestBox", "test_param"]}, "dirs": []}
    assert is_changed("tests/test_mod.py::test_param[1-2]", changes)
    assert is_changed("tests/test_mod.py::TestBox::test_size", changes)
    assert not is_changed("tests/test_mod.py::test_plain", changes)
    assert not is_changed("tests/test_mod.py::test_param_other", changes)
    assert is_changed("tests.test_mod.TestBox.test_size", changes, ["tests/test_mod.py"])  # unittest ids


# ---------------------------------------------------------------- reports: messages, files that did not collect, errors

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="" name="tests.test_bad" file="tests/test_bad.py"><error message="collection failure">Traceback:
tests/test_bad.py:1: in &lt;module&gt;
    import nonexistent_mod
E   ModuleNotFoundError: No module named 'nonexistent_mod'</error></testcase>
<testcase classname="tests.test_net" name="test_net" file="tests/test_net.py"><failure
message="socket.gaierror: [Errno -3] Temporary failure in name resolution">tests/test_net.py:3: in test_net
E   socket.gaierror: [Errno -3] Temporary failure in name resolution</failure></testcase>
<testcase classname="tests.test_net" name="test_ok" file="tests/test_net.py"/></testsuite></testsuites>"""


def test_junit_keeps_failure_messages_and_the_files_that_did_not_collect():
    messages, not_run = {}, {}
    out = parse_junit(JUNIT, ["tests/test_bad.py", "tests/test_net.py"], messages, not_run)
    assert out == {"tests/test_net.py::test_net": "failed", "tests/test_net.py::test_ok": "passed"}
    assert messages == {"tests/test_net.py::test_net": "socket.gaierror: [Errno -3] Temporary failure in name resolution"}
    assert not_run == {"tests/test_bad.py": "ModuleNotFoundError: No module named 'nonexistent_mod'"}
    messages, not_run = {}, {}
    parse_pytest_summary("FAILED tests/t.py::test_a - ConnectionRefusedError: [Errno 111]\nERROR tests/t2.py\n",
                         messages, not_run)
    assert messages == {"tests/t.py::test_a": "ConnectionRefusedError: [Errno 111]"}
    assert not_run == {"tests/t2.py": "collection error"}


@pytest.mark.parametrize("output, line", [
    (("ImportError while loading conftest '/w/repo/tests/conftest.py'.\ntests/conftest.py:1: in <module>\n"
      "    import yaml\nE   ModuleNotFoundError: No module named 'yaml'\n"),
     "ImportError while loading conftest '/w/repo/tests/conftest.py': ModuleNotFoundError: No module named 'yaml'"),
    ("ERROR: usage: pytest [options] [file_or_dir]\npytest: error: unrecognized arguments: --bogus\n",
     "pytest: error: unrecognized arguments: --bogus"),
    ("ERROR: file or directory not found: tests/test_gone.py\n", "ERROR: file or directory not found: tests/test_gone.py"),
    ("_____ ERROR collecting tests/test_x.py _____\nE   SyntaxError: invalid syntax\nE   assert 1\n",
     "tests/test_x.py: SyntaxError: invalid syntax"),
    ("Traceback (most recent call last):\n  File \"x\", line 1\nImportError: cannot import name 'q'\n",
     "ImportError: cannot import name 'q'"),
])
def test_first_error_names_why_no_test_ran(output, line):
    assert first_error(output) == line


def test_a_broken_conftest_in_one_folder_does_not_hide_the_other_files(tmp_path):
    """pytest stops the whole session when a run file's conftest does not import (exit 4, no report): the
    kit reruns file by file, so the good file reports and the broken one is listed as not run."""
    _write(tmp_path, {"tests/test_good.py": "def test_a():\n    pass\n\n\ndef test_b():\n    assert 0\n",
                      "tests/extra/conftest.py": "from nowhere import thing\n",
                      "tests/extra/test_x.py": "def test_x():\n    pass\n"})
    res = run_tests(str(tmp_path), "pytest", ["tests/test_good.py", "tests/extra/test_x.py"], timeout_s=120)
    assert res["rc"] == 4 and res["reruns"] == 2 and res["canary"] == "failed"
    assert res["outcomes"] == {"tests/test_good.py::test_a": "passed", "tests/test_good.py::test_b": "failed"}
    (why,) = res["not_run"].values()
    assert list(res["not_run"]) == ["tests/extra/test_x.py"]
    assert why == "ImportError while loading conftest 'tests/extra/conftest.py': ModuleNotFoundError: No module named 'nowhere'"
    assert not list(tmp_path.rglob("test_*[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f].py"))  # canaries gone


# ---------------------------------------------------------------- the judge's reasons


def _run(mode, n, outcomes, **kw):
    return {"mode": mode, "run": n, "outcomes": outcomes, "seconds": 0.5, "canary": "failed", **kw}


def test_network_errors_are_listed_not_dropped_and_fail_in_both_by_name():
    msg = {"t::net": "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>",
           "t::f2f": "AssertionError: assert 1 == 2"}
    runs = [_run("base", 1, {"t::net": "failed", "t::f2f": "failed", "t::f2p": "failed"}, messages=msg),
            _run("gold", 1, {"t::net": "failed", "t::f2f": "failed", "t::f2p": "passed"}, messages=msg)]
    got = classify(runs)
    assert got["network"] == ["t::net"] and got["fail_to_fail"] == ["t::f2f"] and got["FAIL_TO_PASS"] == ["t::f2p"]
    v = judge("x", {"runs": runs}, 1)
    assert v.accepted and v.network == ["t::net"] and v.fail_to_fail == ["t::f2f"]


def test_reasons_say_why_and_group_by_kind():
    silent = [_run("base", 1, {}, canary="missing", error_line="ImportError while loading conftest 'c.py': x", tail="a\nb"),
              _run("gold", 1, {}, canary="missing", error_line="ImportError while loading conftest 'c.py': x", tail="a\nb")]
    v = judge("x", {"runs": silent}, 1)
    assert v.reason == "tests did not run: ImportError while loading conftest 'c.py': x" and v.log_tail == "a\nb"
    uncollected = [_run("base", 1, {"t::a": "passed"}, not_run={"tests/t2.py": "ModuleNotFoundError: No module named 'q'"}),
                   _run("gold", 1, {"t::a": "passed"}, not_run={"tests/t2.py": "ModuleNotFoundError: No module named 'q'"})]
    assert judge("x", {"runs": uncollected}, 1).reason == \
        "tests did not run: tests/t2.py: ModuleNotFoundError: No module named 'q'"
    flaky = [_run("base", 1, {"t::a": "failed"}), _run("base", 2, {"t::a": "passed"}),
             _run("gold", 1, {"t::a": "passed"}), _run("gold", 2, {"t::a": "passed"})]
    assert judge("x", {"runs": flaky}, 2).reason.startswith("flaky: no stable FAIL_TO_PASS test")
    good = [_run("base", 1, {"t::a": "failed", "t::b": "failed"}), _run("gold", 1, {"t::a": "passed", "t::b": "passed"})]
    assert judge("x", {"runs": good, "unchanged": []}, 1).accepted
    stale = judge("x", {"runs": good, "unchanged": ["t::b"]}, 1)
    assert stale.reason == "FAIL_TO_PASS test(s) the test patch does not add or change: t::b"
    reasons = [judge("x", {"runs": r}, 1).reason for r in (silent, uncollected)] + [stale.reason]
    assert [reason_group(r) for r in reasons] == ["tests did not run", "tests did not run",
                                                  "FAIL_TO_PASS test(s) the test patch does not add or change"]
    assert reason_group(judge("x", {"runs": flaky}, 2).reason) == "flaky"


# ---------------------------------------------------------------- meter end to end (local backend)


@pytest.fixture(scope="module")
def meter(tmp_path_factory):
    root = tmp_path_factory.mktemp("meter")
    shas = make_meter_repo(root / "meter")
    report = build_code(f"git:{root / 'meter'}", root / "out", backend="local", store=root / "state.sqlite",
                        gate=False, runs=1, log=lambda m: None)
    return root, shas, report


def test_a_broken_sibling_at_base_keeps_the_right_lists(meter):
    root, shas, report = meter
    assert report.packs == [f"meter-{shas['fix'][:12]}"], report.rejections
    task = load(root / "out" / report.packs[0]).tasks[0]
    args, val = task.verifier.args, task.meta["validation"]
    assert args["FAIL_TO_PASS"] == ["tests/extra/test_power.py::test_power", "tests/extra/test_power.py::test_square",
                                    "tests/test_core.py::test_subtract"]
    assert args["PASS_TO_PASS"] == ["tests/test_core.py::test_add", "tests/test_core.py::test_add_floats"]
    assert val["network"] == ["tests/test_core.py::test_lookup_remote_units"]
    assert val["fail_to_fail"] == ["tests/test_core.py::test_halve"]
    assert val["not_run"] == {"base": {"tests/extra/test_power.py": (
        "ImportError while loading conftest 'tests/extra/conftest.py': ImportError: cannot import name 'power' "
        "from 'meter.core' (src/meter/core.py)")}}
    assert val["runs"][0]["reruns"] == 2 and "log_tail" not in val
    summary = report.details["tasks"][task.id]
    assert summary["network"] == val["network"] and summary["fail_to_fail"] == val["fail_to_fail"]


def test_rejections_say_why_and_keep_the_log(meter):
    root, shas, report = meter
    by_task = {r["task"]: r for r in report.rejections}
    fmt = by_task[f"meter-{shas['fmt'][:12]}"]
    assert fmt["reason"] == "tests did not run: tests/test_fmt.py: ModuleNotFoundError: No module named 'nosuchdep'"
    assert "E   ModuleNotFoundError: No module named 'nosuchdep'" in fmt["details"]["tail"]
    halve = by_task[f"meter-{shas['halve'][:12]}"]
    assert halve["reason"] == ("FAIL_TO_PASS test(s) the test patch does not add or change: "
                               "tests/test_core.py::test_halve")
    assert halve["details"]["network"] == ["tests/test_core.py::test_lookup_remote_units"]
    assert report.rejected_by_reason == {"validate: tests did not run": 1,
                                         "validate: FAIL_TO_PASS test(s) the test patch does not add or change": 1}
    written = json.loads((root / "out" / "build.json").read_text())
    assert {r["task"]: r["details"]["tail"] for r in written["rejections"]}[fmt["task"]] == fmt["details"]["tail"]


def test_the_resume_key_redoes_what_changed_and_resumes_what_did_not(meter):
    from envgen.families.code.lang import RepoView, Step
    from envgen.families.code.pipeline import kit_version, task_key
    from envgen.families.code.python import Python

    root, shas, first = meter

    def again(**kw):
        return build_code(f"git:{root / 'meter'}", root / "out", backend="local", store=root / "state.sqlite",
                          gate=False, log=lambda m: None, **{"runs": 1, **kw})
    same = again()
    assert same.details["resumed"] == 3 and same.rejected_by_reason == first.rejected_by_reason
    assert again(runs=2).details["resumed"] == 0  # redone, then resumed under its own key
    assert again(runs=2).details["resumed"] == 3
    settings = {"backend": "local", "python": None, "runs": 1, "test_timeout_s": 300.0, "kit": kit_version()}
    recipe = Python().recipe(RepoView(root / "meter", shas["initial"]))
    key = task_key("t", settings, recipe)
    assert key == task_key("t", dict(settings), Python().recipe(RepoView(root / "meter", shas["initial"])))
    for change in ({"backend": "docker"}, {"python": "3.12"}, {"test_timeout_s": 120.0}, {"kit": "0" * 16}):
        assert task_key("t", {**settings, **change}, recipe) != key, change
    recipe.task_steps = [*recipe.task_steps, Step("extra", "true")]
    assert task_key("t", settings, recipe) != key  # the recipe's task steps


def test_build_code_validates_in_docker_unless_asked_and_warns_when_local(meter, tmp_path):
    root, _, _ = meter
    assert FAMILY.options(out=tmp_path / "o", source="git:x").sandbox == "docker"
    logged = []
    opts = FAMILY.options(out=tmp_path / "o", source=f"git:{root / 'meter'}", sandbox="local", runs=1, gate=False,
                          limit=1, store=str(tmp_path / "s.sqlite"))
    report = FAMILY.build(opts, log=logged.append)
    assert report.sandbox == "local" and logged[0] == LOCAL_WARNING


def test_a_subprocess_python_sees_the_same_kit(tmp_path):
    """The kit is stdlib only and runs on the task's interpreter: its change mapping imports there."""
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(bundled('verifiers'))!r})
        from envgen_verifiers.tests import changed_by_test_patch, is_changed
        print(is_changed("a.py::t", {{"files": {{"a.py": "all"}}, "dirs": []}}))
    """)
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_a_run_that_times_out_fetching_data_at_import_says_so(tmp_path):
    """pydicom-1458: its test module fetches data files at import and retries with growing waits, so in the
    sandbox (no network) every run times out with nothing reported; the reason names the network and the
    module, from the validation probe's record of the attempts."""
    import difflib

    from envgen.families.code.execution import run_matrix_local

    fetch = textwrap.dedent('''\
        import socket
        import time

        from lib import value


        def _fetch(name):
            for wait in (1, 2, 4, 8, 16, 32):
                try:
                    return socket.create_connection(("data.example.invalid", 443), timeout=1)
                except OSError:
                    time.sleep(wait)


        DATA = _fetch("sample.dcm")


        def test_value():
            assert value() == 2
        ''')
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "lib.py").write_text("def value():\n    return 1\n")
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=repo, check=True)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    test_patch = "".join(difflib.unified_diff([], fetch.splitlines(True), "/dev/null", "b/tests/test_data.py"))
    test_patch = "diff --git a/tests/test_data.py b/tests/test_data.py\nnew file mode 100644\n" + test_patch
    gold = "".join(difflib.unified_diff(["def value():\n", "    return 1\n"], ["def value():\n", "    return 2\n"],
                                        "a/lib.py", "b/lib.py"))
    gold = "diff --git a/lib.py b/lib.py\n" + gold
    res = run_matrix_local(repo / ".git", base=base, framework="pytest", files=["tests/test_data.py"], python=None,
                           pythonpath=[], gold=gold, test=test_patch, runs=1, timeout_s=4)
    v = judge("fetcher", res, 1)
    assert not v.accepted
    assert v.reason.startswith("the tests timed out with the gold patch")
    assert "trying to reach the network" in v.reason and "tests/test_data.py" in v.reason, v.reason
