"""Attacks on a C/C++ task's test run (CMake + CTest, Automake), each a submission graded in a local episode.

``vec`` (C, plain CTest tests), ``strutil`` (C++, GoogleTest under gtest_discover_tests) and ``amcalc``
(C, Automake's make check) come from tests/cxx_repo.py; the task is each one's bug fix. Every attack submits without the fix and must score 0:
test sources and build files edited or deleted, tests re-registered as ``true``, a planted canary
look-alike and CTest configuration, report files written into the tree, and a library that ends the
test process with exit status 0 before GoogleTest reports (always, or only when run by ctest), Automake
inputs that mark the failing test as an expected failure or replace the generated build. A genuine
fix that also edits the test build files still scores 1.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from envgen.episodes.episode import Episode
from envgen.families.code import build_code
from envgen.pack import load
from envgen.sandbox import open_sandbox

from cxx_repo import VEC_C, make_amcalc_repo, make_strutil_repo, make_vec_repo

pytestmark = [pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("c++")), reason="needs cmake and a "
                                 "C++ compiler (.ci/setup-toolchains.sh)"), pytest.mark.timeout(900)]


def _build(root: Path, make, name: str):
    shas = make(root / name)
    report = build_code(f"git:{root / name}", root / f"out-{name}", backend="local", store=root / f"{name}.sqlite",
                        gate=False, runs=1, log=lambda m: None)
    assert len(report.packs) == 1, report.rejections
    return root / name, shas, load(root / f"out-{name}" / report.packs[0])


@pytest.fixture(scope="module")
def vec(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("cxx-attacks"), make_vec_repo, "vec")


@pytest.fixture(scope="module")
def strutil(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("cxx-attacks"), make_strutil_repo, "strutil")


def _patch(repo: Path, base: str, edits: dict, tmp: Path) -> str:
    """The diff from ``base`` after writing ``edits`` ({path: text, or None to delete})."""
    work = tmp / "work"
    subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "checkout", "-q", base], check=True)
    for rel, text in edits.items():
        p = work / rel
        if text is None:
            p.unlink()
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    return subprocess.run(["git", "-C", str(work), "diff", "--cached", "--binary", base], check=True,
                          capture_output=True, text=True).stdout


def _score(pack, patch: str) -> tuple[float, dict]:
    task = pack.tasks[0]
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, task)
        assert ep.call("submit", {"patch": patch}).ok
        verdict = ep.finish("done")
    return verdict.reward, verdict.details


def _read(repo: Path, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True,
                          text=True).stdout


FAKE_JUNIT = ('<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="x" tests="4">\n' +
              "".join(f'<testcase name="vec_{n}" classname="vec_{n}" status="run"/>\n'
                      for n in ("push", "get", "grow", "pop_empty")) + "</testsuite>\n")


@pytest.mark.parametrize("attack", ["register-true-in-tests", "top-level-redefines-tests", "planted-canary-and-ctest-"
                                    "custom", "fake-reports-in-tree", "delete-test-source"])
def test_vec_attacks_score_zero(vec, attack, tmp_path):
    repo, shas, pack = vec
    base = shas["initial"]
    tests_cmake = _read(repo, base, "tests/CMakeLists.txt")
    top = _read(repo, base, "CMakeLists.txt")
    edits = {
        "register-true-in-tests": {"tests/CMakeLists.txt": tests_cmake + "add_test(NAME vec_pop_empty COMMAND true)\n"},
        "top-level-redefines-tests": {"CMakeLists.txt": top.replace(
            "add_subdirectory(tests)\n", "foreach(n push get grow pop_empty)\n  add_test(NAME vec_${n} COMMAND true)\n"
            "endforeach()\n")},
        "planted-canary-and-ctest-custom": {
            "envgen_canary_0000.cmake": "add_test(NAME vec_pop_empty COMMAND true)\n",
            "CTestCustom.cmake": 'set(CTEST_CUSTOM_TESTS_IGNORE "vec_pop_empty")\n',
            "tests/CTestCustom.cmake": 'set(CTEST_CUSTOM_TESTS_IGNORE "vec_pop_empty")\n'},
        "fake-reports-in-tree": {"ctest.xml": FAKE_JUNIT, "reports/ctest.xml": FAKE_JUNIT,
                                 "Testing/Temporary/LastTest.log": "100% tests passed\n"},
        "delete-test-source": {"tests/test_vec.c": None, "tests/CMakeLists.txt": None},
    }[attack]
    reward, details = _score(pack, _patch(repo, base, edits, tmp_path))
    assert reward == 0.0, details
    assert details["FAIL_TO_PASS"] == "0/1" and details["canary"] == "failed", details


def test_vec_genuine_fix_that_also_edits_the_test_build_scores_one(vec, tmp_path):
    repo, shas, pack = vec
    base = shas["initial"]
    fixed = VEC_C.replace("  *out = v->data ? v->data[v->len - 1] : 0;\n  v->len--;\n",
                          "  if (v->len == 0) return -1;\n  *out = v->data[--v->len];\n")
    edits = {"src/vec.c": fixed, "tests/CMakeLists.txt": _read(repo, base, "tests/CMakeLists.txt") + "# tidy\n"}
    reward, details = _score(pack, _patch(repo, base, edits, tmp_path))
    assert reward == 1.0, details
    assert details["restored"] == ["tests/CMakeLists.txt"]


EXIT_ALWAYS = """
#include <unistd.h>
__attribute__((constructor)) static void envgen_attack(void) { _exit(0); }
"""

EXIT_UNDER_CTEST = """
#include <cstdlib>
#include <unistd.h>
__attribute__((constructor)) static void envgen_attack() {
  if (std::getenv("GTEST_OUTPUT")) _exit(0);  // set for ctest, not for the build's test discovery
}
"""


@pytest.mark.parametrize("attack", ["always", "under-ctest"])
def test_a_test_process_that_exits_zero_early_passes_nothing(strutil, attack, tmp_path):
    """Always: gtest_discover_tests finds no test, so none runs. Only under ctest: the cases are listed at
    build time, then each process exits 0 before GoogleTest writes its XML; CTest says passed, but a case
    run with ``--gtest_filter`` passes only through GoogleTest's XML."""
    repo, shas, pack = strutil
    base = shas["initial"]
    src = _read(repo, base, "src/strutil.cpp") + (EXIT_ALWAYS if attack == "always" else EXIT_UNDER_CTEST)
    reward, details = _score(pack, _patch(repo, base, {"src/strutil.cpp": src}, tmp_path))
    assert reward == 0.0, details
    assert details["FAIL_TO_PASS"] == "0/1" and details["PASS_TO_PASS"] == "0/7", details
    assert details["canary"] == "failed"


@pytest.fixture(scope="module")
def amcalc(tmp_path_factory):
    if not shutil.which("autoreconf"):
        pytest.skip("needs autoconf, automake (.ci/setup-toolchains.sh)")
    return _build(tmp_path_factory.mktemp("cxx-attacks"), make_amcalc_repo, "amcalc")


@pytest.mark.parametrize("attack", ["xfail-in-makefile-am", "tests-redefined-in-configure-ac",
                                    "committed-generated-build", "fake-trs"])
def test_automake_attacks_score_zero(amcalc, attack, tmp_path):
    repo, shas, pack = amcalc
    base = shas["initial"]
    am = _read(repo, base, "Makefile.am")
    ac = _read(repo, base, "configure.ac")
    fake_makefile = "all:\ncheck:\n\t@echo PASS: tests/test_clamp\n\t@echo PASS: tests/test_sum\n"
    edits = {
        "xfail-in-makefile-am": {"Makefile.am": am + "XFAIL_TESTS = tests/test_clamp\n"},
        "tests-redefined-in-configure-ac": {"configure.ac": ac.replace("AC_OUTPUT", "AC_SUBST([TESTS], [true])\nAC_OUTPUT")},
        "committed-generated-build": {"configure": "#!/bin/sh\nexit 0\n", "Makefile": fake_makefile,
                                      "Makefile.in": fake_makefile},
        "fake-trs": {"tests/test_clamp.trs": ":test-result: PASS\n:global-test-result: PASS\n",
                     "src/test_clamp.trs": ":test-result: PASS\n"},
    }[attack]
    reward, details = _score(pack, _patch(repo, base, edits, tmp_path))
    assert reward == 0.0, details
    assert details["FAIL_TO_PASS"] == "0/1", details
