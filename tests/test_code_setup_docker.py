"""The Python set-up on a project only its build backend installs, end to end in Docker.

``scmdemo`` (tests/code_repo.py) reproduces, in one real-shaped project, the set-up failures seen on real
repositories: a requirement marker (``exceptiongroup; python_version<"3.11"``), a setuptools_scm version
file the package imports, the project's own pytest plugin declared next to a dynamic version, dependencies
computed in ``setup.py``, ``python_files`` that make ``check_*.py`` tests, a PEP 735 dependency group, and
a commit whose package no longer imports (the install check must reject it, not validation).
"""

from __future__ import annotations

import json
import shlex

import pytest

from envgen.episodes.actions import render_action
from envgen.episodes.gym import PackEnv
from envgen.families.code import build_code
from envgen.pack import load
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout
from envgen.sandbox.images import stderr_log

try:
    from .code_repo import make_scm_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import make_scm_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

TESTS = ["tests/test_core.py::test_dependency_computed_in_setup_py_is_installed", "tests/test_core.py::test_km_to_m",
         "tests/test_core.py::test_marker_conditional_requirements",
         "tests/test_core.py::test_version_from_the_scm_version_file"]

TAMPER = ("diff --git a/src/scmdemo/_version.py b/src/scmdemo/_version.py\nnew file mode 100644\n--- /dev/null\n"
          "+++ b/src/scmdemo/_version.py\n@@ -0,0 +1,4 @@\n+version = '1.4.0'\n+version_tuple = (1, 4, 0)\n"
          "+import scmdemo.core as _core\n+_core.m_to_km = lambda m: m / 1000\n")
"""A "fix" hidden in the generated version file (git-ignored, so only an explicit patch carries it)."""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("code-setup")
    shas = make_scm_repo(root / "scmdemo")
    report = build_code(f"git:{root / 'scmdemo'}", root / "out", backend="docker", store=root / "state.sqlite",
                        runs=2, gate=False, log=stderr_log)
    return root, shas, report


def test_the_backend_installed_project_validates_with_the_exact_lists(built):
    root, shas, report = built
    assert report.packs == [f"scmdemo-{shas['fix'][:12]}"], report.rejections
    task = load(root / "out" / report.packs[0]).tasks[0]
    args = task.verifier.args
    assert args["files"] == ["tests/check_core.py", "tests/test_core.py"]  # python_files: check_*.py are tests
    assert args["FAIL_TO_PASS"] == ["tests/check_core.py::check_m_to_km", "tests/check_core.py::check_m_to_km_small"]
    assert args["PASS_TO_PASS"] == TESTS
    assert args["plugins"] == ["scmdemo"]  # the plugin the backend registered, loaded as at validation
    notes = task.meta["environment"]["notes"]
    assert any("does not apply to Python 3.11" in n and "exceptiongroup" in n for n in notes), notes
    assert any("setuptools_scm version 1.4.0" in n for n in notes), notes
    # environments are keyed by the dependency date, so each commit day has its own; take the kept task's
    env, = [e for e in report.details["environments"].values() if report.packs[0] in e["tasks"]]
    assert [(s["name"], s["rc"]) for s in env["steps"]] == [("venv", 0), ("dependencies", 0)]
    plan = json.loads(shlex.split(env["steps"][1]["run"])[-1])  # the kit's installer, as of the base's date
    assert plan["before"] == "2024-01-02T00:00:00Z"
    reqs = [r for a in plan["alternatives"] for r in a["requirements"]]
    assert "iniconfig==2.0.0" in plan["alternatives"][0]["requirements"]
    assert not any(r.startswith(("exceptiongroup", "packaging")) for r in reqs), plan


def test_a_package_that_does_not_import_is_rejected_by_the_install_check(built):
    root, shas, report = built
    later = next(r for r in report.rejections if r["task"] == f"scmdemo-{shas['later'][:12]}")
    assert (later["stage"], later["reason"]) == ("environment", "task image: step 'check' exited with 1")
    assert [(s["name"], s["rc"]) for s in later["details"]["steps"]] == [("install", 0), ("generated", 0),
                                                                         ("check", 1)]
    tail = later["details"]["tail"]
    assert "envgen install check failed: importing the project failed" in tail and "'_accel'" in tail, tail
    broken = next(r for r in report.rejections if r["task"] == f"scmdemo-{shas['break'][:12]}")
    assert broken["reason"] == "no test change"


def test_episodes_see_the_generated_files_and_only_a_real_fix_scores(built):
    root, shas, report = built
    path = root / "out" / report.packs[0]
    env = PackEnv(path, sandbox="docker")
    try:
        oracle = rollout(env, OraclePolicy())
        null = rollout(env, NullPolicy())
        task_id = load(path).tasks[0].id
        env.reset(options={"task_id": task_id})
        shown, *_ = env.step(render_action("", [("bash", {"command": (
            "grep -c \"'1.4.0'\" src/scmdemo/_version.py; ls -R /opt/envgen/generated | grep _version; "
            "git status --porcelain --ignored; python -m pytest -q -p no:cacheprovider tests/test_core.py 2>&1 "
            "| tail -1")})]))
        env.step(render_action("", [("submit", {"patch": TAMPER})]))
        _, tampered, _, _, info = env.step("Fixed.")
    finally:
        env.close()
    assert oracle.reward == 1.0 and oracle.reward_details["FAIL_TO_PASS"] == "2/2", oracle.reward_details
    assert oracle.reward_details["PASS_TO_PASS"] == "4/4", oracle.reward_details
    assert null.reward == 0.0
    assert shown.split("\n")[1] == "1" and "_version.py" in shown and "4 passed" in shown, shown
    assert "!! src/scmdemo/_version.py" in shown, shown  # git-ignored, laid over the checkout at reset
    details = info["reward_details"]
    assert tampered == 0.0 and details["FAIL_TO_PASS"] == "0/2", details  # graded with the install's file
    assert details["restored"] == ["src/scmdemo/_version.py"], details
