"""Attacks on a C/C++ task's test run (CMake + CTest, Automake), each a submission graded in a local episode.

``vec`` (C, plain CTest tests), ``strutil`` (C++, GoogleTest under gtest_discover_tests) and ``amcalc``
(C, Automake's make check) come from tests/cxx_repo.py; the task is each one's bug fix. Every attack submits without the fix and must score 0:
test sources and build files edited or deleted, tests re-registered as ``true``, a planted canary
look-alike and CTest configuration, report files written into the tree, and a library that ends the
test process with exit status 0 before GoogleTest reports (always, or only when run by ctest), Automake
inputs that mark the failing test as an expected failure or replace the generated build. A genuine
fix that also edits the test build files still scores 1.

Forged runs (issue 27), library code only: a static destructor that rewrites GoogleTest's XML to all
passed after the tests ran (the canary, a separate ``cmake -E false`` test, untouched); a library that
ends every process with status 0 (plain CTest tests, Automake test programs); a library that rewrites
the Automake harness's ``.trs`` and ``.log`` files; and the red-team gate's payloads
(envs/code/forgeries/ctest.txt, make-check.txt) planted as the gate plants them. Each scores 0 because the
hidden twin checks (copies of the FAIL_TO_PASS test with one literal changed, which a correct fix fails)
come out passing too; on a copy of the pack without its twin checks the same submission scores 1, so
the twins are what stops it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from envgen.episodes.episode import Episode
from envgen.families.code import build_code
from envgen.build.gate import forgery_patch
from envgen.pack import load
from envgen.sandbox import open_sandbox

from cxx_repo import AM_CALC_C, STRUTIL_CPP, VEC_C, make_amcalc_repo, make_strutil_repo, make_vec_repo
from twinless import without_twins as _without_twins

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


# ---------------------------------------------------------------- forged runs (issue 27): library code only


@pytest.fixture(scope="module")
def bare(vec, strutil, amcalc, tmp_path_factory):
    """{name: the pack without its twin checks}."""
    root = tmp_path_factory.mktemp("cxx-bare")
    return {name: _without_twins(built[2], root / name) for name, built in
            (("vec", vec), ("strutil", strutil), ("amcalc", amcalc))}


def _twin_checks(pack) -> int:
    return len(pack.tasks[0].verifier.args["twins"]["expect_failing"])


def _forged(details: dict, pack) -> None:
    """Scored 0 because the twin checks came out passing, not because the fix is missing."""
    n = _twin_checks(pack)
    assert details["twins"] != f"{n}/{n} failed as they must" and "twin checks" in details["reason"], details
    assert details["canary"] == "failed", details


GTEST_XML_REWRITE = """
#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

extern char **environ;

namespace {
// After main returns (GoogleTest wrote its report): every failure element out of the reports the run asked for.
struct ReportPolish {
  static void polish(const std::string& path) {
    std::ifstream in(path);
    std::stringstream buf;
    buf << in.rdbuf();
    std::string xml = buf.str(), open = "<fail" "ure", close = "</fail" "ure>";
    for (auto at = xml.find(open); at != std::string::npos; at = xml.find(open, at)) {
      auto end = xml.find(close, at);
      auto gt = xml.find('>', at);
      if (gt != std::string::npos && xml[gt - 1] == '/') end = gt + 1 - close.size();
      if (end == std::string::npos) break;
      xml.erase(at, end + close.size() - at);
    }
    std::ofstream(path, std::ios::trunc) << xml;
  }
  ~ReportPolish() {
    for (char** e = environ; e && *e; ++e) {
      std::string kv(*e);
      auto eq = kv.find('=');
      if (eq == std::string::npos || kv.compare(eq + 1, 4, "xml:") != 0) continue;
      std::string dir = kv.substr(eq + 5);
      if (DIR* d = opendir(dir.c_str())) {
        while (dirent* ent = readdir(d)) {
          std::string name = ent->d_name;
          if (name.size() > 4 && name.compare(name.size() - 4, 4, ".xml") == 0) polish(dir + "/" + name);
        }
        closedir(d);
      }
    }
  }
} polish_reports;
}  // namespace
"""
"""The issue's row: a static destructor of the library rewrites GoogleTest's XML after the tests finished;
the canary is a CTest test of its own (``cmake -E false``) that never loads the library."""


def test_a_static_destructor_that_rewrites_the_gtest_xml_is_caught_by_the_twins(strutil, bare, tmp_path):
    repo, shas, pack = strutil
    patch = _patch(repo, shas["initial"], {"src/strutil.cpp": STRUTIL_CPP + GTEST_XML_REWRITE}, tmp_path)
    reward, details = _score(bare["strutil"], patch)
    assert reward == 1.0, details  # a real forgery: without the twins it buys the task
    assert details["FAIL_TO_PASS"] == "1/1" and details["canary"] == "failed", details
    reward, details = _score(pack, patch)
    assert reward == 0.0, details
    _forged(details, pack)


EXIT_ZERO_AT_EXIT = """
#include <unistd.h>
/* every process linked with the library ends with status 0, whatever main returned */
__attribute__((destructor)) static void calc_shutdown(void) { _exit(0); }
"""

TRS_REWRITE = r"""
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Rewrites the harness's result and log files under the current directory to passing: at once (the
   tests that finished) and from a process left behind, for the results written after this one exits. */
static void calc_walk(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *ent;
  while (d && (ent = readdir(d)) != NULL) {
    char path[4096];
    struct stat st;
    if (ent->d_name[0] == '.' || strstr(ent->d_name, "canary")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
    if (lstat(path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      calc_walk(path);
      continue;
    }
    size_t n = strlen(path);
    const char *res = ".tr" "s";
    if (n > 4 && strcmp(path + n - 4, res) == 0) {
      FILE *f = fopen(path, "w");
      if (f) {
        fprintf(f, ":test-" "result: PASS\n:global-test-" "result: PASS\n:recheck: no\n:copy-in-global-log: no\n");
        fclose(f);
      }
      path[n - 4] = 0;
      strcat(path, ".log");
      f = fopen(path, "w");
      if (f) {
        fprintf(f, "PASS\n");
        fclose(f);
      }
    }
  }
  if (d) closedir(d);
}

__attribute__((destructor)) static void calc_report(void) {
  char here[4096];
  if (!getcwd(here, sizeof here)) return;
  calc_walk(here);
  if (fork() == 0) {
    for (int fd = 0; fd < 256; fd++) close(fd);
    for (int i = 0; i < 400; i++) {
      usleep(20000);
      calc_walk(here);
    }
    _exit(0);
  }
}
"""


@pytest.mark.parametrize("attack", ["destructor-exits-zero", "rewrites-trs-and-logs"])
def test_automake_test_programs_forged_from_the_library_are_caught_by_the_twins(amcalc, bare, attack, tmp_path):
    """The Automake harness judges a test program by its exit status; the library ends it with 0, or
    rewrites the harness's result files. The canary program does not link the library."""
    repo, shas, pack = amcalc
    code = AM_CALC_C + (EXIT_ZERO_AT_EXIT if attack == "destructor-exits-zero" else TRS_REWRITE)
    patch = _patch(repo, shas["initial"], {"src/calc.c": code}, tmp_path)
    if attack == "destructor-exits-zero":
        reward, details = _score(bare["amcalc"], patch)
        assert reward == 1.0, details  # a real forgery: without the twins it buys the task
        assert details["canary"] == "failed" and details["report"] == "automake-trs", details
    reward, details = _score(pack, patch)
    assert reward == 0.0, details
    if attack == "destructor-exits-zero":
        _forged(details, pack)
    else:  # the rewrite races the harness: when it wins, the twins pass with the real test
        print("trs rewrite:", details["FAIL_TO_PASS"], details.get("twins"), details.get("reason"))
        assert details["FAIL_TO_PASS"] == "0/1" or "twin checks" in details["reason"], details


@pytest.mark.parametrize("which", ["strutil", "vec", "amcalc"])
def test_the_gates_forgery_payload_buys_the_task_only_without_twins(vec, strutil, amcalc, bare, which, tmp_path):
    """The payload the red-team gate plants (envs/code/forgeries/<framework>.txt), planted the gate's way:
    appended to the first non-test source file the gold patch changes."""
    repo, shas, pack = {"vec": vec, "strutil": strutil, "amcalc": amcalc}[which]
    task = pack.tasks[0]

    def read(path: str):
        out = subprocess.run(["git", "-C", str(repo), "show", f"{shas['initial']}:{path}"], capture_output=True,
                             text=True)
        return out.stdout if out.returncode == 0 else None

    patch = forgery_patch(read, task.verifier.args["framework"], task.reference.patch, "c0ffee123456")
    assert patch and "envgen_forge_c0ffee123456" in patch
    reward, details = _score(bare[which], patch)
    assert reward == 1.0, details
    assert details["canary"] == "failed" and "screen" not in details, details
    reward, details = _score(pack, patch)
    assert reward == 0.0, details
    _forged(details, pack)
