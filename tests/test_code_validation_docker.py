"""Honest validation in Docker (the default backend): the ``meter`` fixture repository (tests/code_repo.py)
built once, in containers without network, and every trap it sets reported as what it is."""

from __future__ import annotations

import json

import pytest

from envgen.families.code import build_code
from envgen.pack import load
from envgen.sandbox.images import stderr_log

try:
    from .code_repo import make_meter_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import make_meter_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("meter-docker")
    shas = make_meter_repo(root / "meter")
    report = build_code(f"git:{root / 'meter'}", root / "out", store=root / "state.sqlite", runs=2, gate=False,
                        log=stderr_log)
    return root, shas, report


def test_a_broken_sibling_at_base_keeps_the_right_lists_and_network_tests_are_listed(built):
    root, shas, report = built
    assert report.sandbox == "docker" and report.packs == [f"meter-{shas['fix'][:12]}"], report.rejections
    task = load(root / "out" / report.packs[0]).tasks[0]
    args, val = task.verifier.args, task.meta["validation"]
    assert args["FAIL_TO_PASS"] == ["tests/extra/test_power.py::test_power", "tests/extra/test_power.py::test_square",
                                    "tests/test_core.py::test_subtract"]
    assert args["PASS_TO_PASS"] == ["tests/test_core.py::test_add", "tests/test_core.py::test_add_floats"]
    assert val["network"] == ["tests/test_core.py::test_lookup_remote_units"]
    assert val["fail_to_fail"] == ["tests/test_core.py::test_halve"]
    (why,) = val["not_run"]["base"].values()
    assert list(val["not_run"]["base"]) == ["tests/extra/test_power.py"] and "gold" not in val["not_run"]
    assert why.startswith("ImportError while loading conftest 'tests/extra/conftest.py': ImportError: cannot "
                          "import name 'power'")
    assert [r["reruns"] for r in val["runs"]] == [2, 2, 0, 0]
    assert report.details["tasks"][task.id]["network"] == val["network"]


def test_tests_that_never_run_and_stale_fail_to_pass_tests_are_rejected_with_their_reason(built):
    root, shas, _ = built
    written = json.loads((root / "out" / "build.json").read_text())
    by_task = {r["task"]: r for r in written["rejections"]}
    fmt = by_task[f"meter-{shas['fmt'][:12]}"]
    assert fmt["reason"] == "tests did not run: tests/test_fmt.py: ModuleNotFoundError: No module named 'nosuchdep'"
    assert "E   ModuleNotFoundError: No module named 'nosuchdep'" in fmt["details"]["tail"]
    halve = by_task[f"meter-{shas['halve'][:12]}"]
    assert halve["reason"] == ("FAIL_TO_PASS test(s) the test patch does not add or change: "
                               "tests/test_core.py::test_halve")
    assert written["rejected_by_reason"] == {"validate: tests did not run": 1,
                                             "validate: FAIL_TO_PASS test(s) the test patch does not add or change": 1}
