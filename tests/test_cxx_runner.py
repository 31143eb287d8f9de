"""C/C++ runners and languages: report parsing on real samples, infrastructure, detection and recipes.

The samples under tests/fixtures/reports/cxx/ were written by the real tools on Debian bookworm (CMake
3.25, GoogleTest 1.12, Catch2 2.13, Automake 1.16) running the runners' own commands: ``gtest`` (a
GoogleTest binary under gtest_discover_tests plus one registered whole, a crash, a missing program, the
canary), ``catch2`` (catch_discover_tests), ``automake`` (simple and TAP tests, skip, xfail).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from envgen.errors import InputError
from envgen.families.code.cxx import C, Cpp
from envgen.families.code.lang import RepoView
from envgen.families.code.languages import detect_language
from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers.runners import get  # noqa: E402
from envgen_verifiers.runners.cxx import ctest_console, gtest_cases, parse_am_console  # noqa: E402

try:
    from .code_repo import _commit, _git, _write
    from .cxx_repo import make_strutil_repo, make_vec_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _commit, _git, _write
    from cxx_repo import make_strutil_repo, make_vec_repo

REPORTS = Path(__file__).parent / "fixtures" / "reports" / "cxx"
CANARY = "envgen_canary_0123abcd4567"


def _parse(framework: str, name: str):
    folder = REPORTS / name
    return get(framework).parse(str(folder), (folder / "console.txt").read_text(encoding="utf-8"), [], {})


def test_gtest_cases_come_from_googletest_xml_and_the_rest_from_ctest_junit():
    outcomes, messages, source = _parse("ctest", "gtest")
    assert source == "gtest+ctest-junit"
    assert outcomes == {
        "Calc.Adds": "passed", "Calc.FailsWithUnicode": "failed", "Calc.Skips": "skipped", "Calc.Throws": "failed",
        "Calc.PrintsUnicode": "passed", "Typed/0.Zero": "passed", "Typed/1.Zero": "passed",
        "Values/Param.Positive/0": "passed", "Values/Param.Positive/1": "passed",
        "Values/Param.Positive/2": "failed",  # GoogleTest's own index, not CTest's pretty value (-3)
        "Whole.One": "passed", "Whole.Two": "failed",  # a binary registered whole still reports per test
        CANARY: "failed", "crashes": "failed", "plain_ok": "passed", "missing_exe": "error"}
    assert "whole_binary" not in outcomes and "Values/Param.Positive/-3" not in outcomes
    assert "Calc.Off" not in outcomes  # DISABLED_: GoogleTest never ran it
    assert messages["Calc.FailsWithUnicode"] == "/tmp/cxx/gt/tests/test_calc.cpp:5 | 5 | größe ≠ 5 — ünïcödé"
    assert messages["Calc.Throws"] == "unknown file | Unknown C++ exception thrown in the test body."
    assert messages["missing_exe"] == "Unable to find executable: /nonexistent/prog"


def test_gtest_xml_keeps_non_ascii_failure_text():
    text = (REPORTS / "gtest" / "gtest" / "unit_1.xml").read_text(encoding="utf-8")
    ((tid, outcome, message),) = gtest_cases(text)
    assert (tid, outcome) == ("Calc.FailsWithUnicode", "failed") and message.endswith("| größe ≠ 5 — ünïcödé")


def test_a_gtest_listing_is_no_result_and_a_googletest_process_without_xml_leaves_its_tests_missing(tmp_path):
    shutil.copytree(REPORTS / "gtest", tmp_path / "r")
    # gtest_discover_tests(... DISCOVERY_MODE PRE_TEST) lists tests with GTEST_OUTPUT set: no status, no result
    (tmp_path / "r" / "gtest" / "listing.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="1" name="AllTests"><testsuite name="Calc" '
        'tests="1"><testcase name="Unlisted" file="t.cpp" line="1" /></testsuite></testsuites>\n')
    for p in (tmp_path / "r" / "gtest").glob("whole*.xml"):
        p.unlink()  # the whole binary exited before writing its XML
    outcomes, _, _ = get("ctest").parse(str(tmp_path / "r"), "", [], {})
    assert "Calc.Unlisted" not in outcomes
    assert "Whole.One" not in outcomes and "whole_binary" not in outcomes  # missing: failed by the verifier


def test_catch2_tests_are_ctest_names_with_non_ascii():
    outcomes, messages, source = _parse("ctest", "catch2")
    assert source == "ctest-junit"
    assert outcomes == {"adds numbers": "passed", "größe wird geprüft": "passed", "fails, with comma": "failed",
                        "sections": "failed", "throws": "failed", CANARY: "failed"}
    assert messages["sections"] == "REQUIRE( false ) | test cases: 1 | 1 failed | assertions: 2 | 1 passed | 1 failed"


def test_without_ctest_junit_the_console_lines_are_read(tmp_path):
    console = (REPORTS / "gtest" / "console.txt").read_text(encoding="utf-8")
    found = ctest_console(console)
    assert found["Calc.Off"] == "skipped" and found["crashes"] == "failed" and found["missing_exe"] == "error"
    assert found["Values/Param.Positive/-3"] == "failed" and found["Calc.Adds"] == "passed"
    outcomes, _, source = get("ctest").parse(str(tmp_path), console, [], {})
    assert source == "ctest-console" and outcomes == found
    catch = ctest_console((REPORTS / "catch2" / "console.txt").read_text(encoding="utf-8"))
    assert catch["größe wird geprüft"] == "passed" and catch["fails, with comma"] == "failed"


def test_automake_trs_files_give_simple_and_tap_results():
    outcomes, messages, source = _parse("make-check", "automake")
    assert source == "automake-trs"
    assert outcomes == {"tests/test_add": "passed", "tests/test_sub": "failed", "tests/skip.sh": "skipped",
                        "tests/xfail.sh": "xfail", "tests/tap.t 1 - first thing": "passed",
                        "tests/tap.t 2 - second ünï thing": "failed", "tests/tap.t 3": "skipped"}
    assert messages["tests/test_sub"].startswith("sub(5,3) wrong: ünïcödé")


def test_automake_console_is_the_fallback(tmp_path):
    console = (REPORTS / "automake" / "console.txt").read_text(encoding="utf-8")
    outcomes, _, source = get("make-check").parse(str(tmp_path), console, [], {})
    assert source == "automake-console" and outcomes == parse_am_console(console)
    assert outcomes["tests/test_sub"] == "failed" and outcomes["tests/tap.t 2 - second ünï thing"] == "failed"


def test_infrastructure_covers_build_files_tests_and_the_canary():
    ctest, make = get("ctest"), get("make-check")
    for p in ("CMakeLists.txt", "src/CMakeLists.txt", "cmake/Warnings.cmake", "CMakePresets.json",
              "tests/test_x.cpp", "test/data/in.txt", "envgen_canary_feed.cmake", "CTestCustom.cmake"):
        assert ctest.infrastructure(p, {}), p
    for p in ("src/strutil.cpp", "include/strutil/strutil.hpp", "README.md", "src/contest.c"):
        assert not ctest.infrastructure(p, {}), p
    for p in ("Makefile.am", "configure.ac", "m4/ax.m4", "build-aux/test-driver", "tests/a.sh", "tests/a.trs",
              "envgen_canary_feed.c"):
        assert make.infrastructure(p, {}), p
    assert not make.infrastructure("src/calc.c", {})


def test_automake_regenerates_a_committed_configure_only_after_a_makefile_am_changed(tmp_path):
    make = get("make-check")
    (tmp_path / "configure.ac").write_text("AC_INIT([x],[1])\n")
    assert make.commands(str(tmp_path), [], "/r", {})[0] == ["autoreconf", "-fi"]
    (tmp_path / "configure").write_text("#!/bin/sh\n")
    first = make.commands(str(tmp_path), [], "/r", {})[0]
    assert first[:2] == ["sh", "-c"] and "-newer configure" in first[2] and "autoreconf -fi" in first[2]
    (tmp_path / "configure.ac").unlink()
    assert make.commands(str(tmp_path), [], "/r", {})[0] == ["sh", "./configure"]


def test_canary_needs_a_project_call(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.16)\n# project(x)\n")
    assert get("ctest").canary(str(tmp_path), ["tests/t.cpp"], "abc123", {}) is None
    (tmp_path / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.16)\nPROJECT (x C)\n")
    path, text = get("ctest").canary(str(tmp_path), ["tests/t.cpp"], "abc123", {})
    assert path == "envgen_canary_abc123.cmake" and "add_test(NAME envgen_canary_abc123" in text
    cmds = get("ctest").commands(str(tmp_path), ["tests/t.cpp", path], "/r", {"configure_args": ["-DX=1"]})
    assert f"-DCMAKE_PROJECT_INCLUDE={tmp_path}/{path}" in cmds[0] and "-DX=1" in cmds[0]
    with pytest.raises(ValueError):
        get("ctest").commands(str(tmp_path), [], "/r", {"configure_args": "-DX=1"})


# ---------------------------------------------------------------- languages


def test_detection_splits_c_from_cpp_and_classifies_paths(tmp_path):
    shas = make_strutil_repo(tmp_path / "strutil")
    assert detect_language(RepoView(tmp_path / "strutil", shas["fix"])).name == "cpp"
    shas = make_vec_repo(tmp_path / "vec")
    view = RepoView(tmp_path / "vec", shas["fix"])
    assert detect_language(view).name == "c"
    assert C().detect(view) and not Cpp().detect(view)
    c = C()
    assert c.is_test_path("tests/test_vec.c") and c.is_test_path("tests/CMakeLists.txt")
    assert c.is_test_path("src/vec_test.cc") and c.is_test_path("lib/test_io.c")
    assert not c.is_test_path("src/vec.c") and not c.is_test_path("src/contest.c")
    assert c.is_code_path("src/vec.c") and c.is_code_path("include/vec.h") and not c.is_code_path("tests/test_vec.c")
    assert c.runnable_tests(["tests/test_vec.c", "tests/CMakeLists.txt"], {"tests/test_vec.c"}) == ["tests/test_vec.c"]


def test_recipes_use_the_gcc_layer_and_say_what_they_cannot_do(tmp_path):
    shas = make_strutil_repo(tmp_path / "s")
    rec = Cpp().recipe(RepoView(tmp_path / "s", shas["initial"]))
    assert (rec.language, rec.toolchains, rec.framework, rec.steps, rec.options) == ("cpp", ("gcc",), "ctest", [], {})

    def repo(name: str, files: dict[str, str]) -> RepoView:
        root = tmp_path / name
        root.mkdir()
        _git(root, "init", "-q", "-b", "main")
        _write(root, {"src/a.cpp": "int a() { return 1; }\n", **files})
        return RepoView(root, _commit(root, "init", 1))

    test = "enable_testing()\nadd_test(NAME t COMMAND t)\n"
    view = repo("new-cmake", {"CMakeLists.txt": "cmake_minimum_required(VERSION 3.28)\nproject(x)\n" + test})
    with pytest.raises(InputError, match=r"VERSION 3.28\): the gcc toolchain layer has CMake 3.25.1"):
        Cpp().recipe(view)
    view = repo("cxx26", {"CMakeLists.txt": "project(x)\nset(CMAKE_CXX_STANDARD 26)\n" + test})
    with pytest.raises(InputError, match=r"C\+\+26 is asked for; the gcc toolchain layer has GCC 12.2"):
        Cpp().recipe(view)
    view = repo("cxx20", {"CMakeLists.txt": "project(x)\nadd_library(a src/a.cpp)\n"
                          "target_compile_features(a PUBLIC cxx_std_20)\n" + test})
    assert Cpp().recipe(view).framework == "ctest"
    view = repo("fetch", {"CMakeLists.txt": "project(x)\ninclude(FetchContent)\nFetchContent_Declare(googletest URL "
                          "u)\nFetchContent_Declare(fmt GIT_REPOSITORY r)\n" + test})
    with pytest.raises(InputError, match=r"FetchContent_Declare\(fmt\) downloads fmt"):
        Cpp().recipe(view)
    view = repo("gtest-fetch", {"CMakeLists.txt": "project(x)\nFetchContent_Declare(googletest URL u)\n"
                                "find_package(ZLIB REQUIRED)\nfind_package(Foo)\n" + test})
    rec = Cpp().recipe(view)
    assert rec.options == {"configure_args": ["-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest"]}
    assert [s.name for s in rec.steps] == ["packages"] and "zlib1g-dev" in rec.steps[0].run
    assert any("find_package(Foo): optional" in n for n in rec.notes)
    view = repo("unknown", {"CMakeLists.txt": "project(x)\nfind_package(Frobnicate 2 REQUIRED)\n" + test})
    with pytest.raises(InputError, match=r"find_package\(Frobnicate\) is REQUIRED"):
        Cpp().recipe(view)
    view = repo("catch3", {"CMakeLists.txt": "project(x)\nfind_package(Catch2 3 REQUIRED)\n" + test})
    with pytest.raises(InputError, match="Catch2 v3"):
        Cpp().recipe(view)
    view = repo("notests", {"CMakeLists.txt": "project(x)\nadd_library(a src/a.cpp)\n# add_test(NAME t)\n"})
    with pytest.raises(InputError, match="registers no CTest test"):
        Cpp().recipe(view)
    view = repo("am", {"configure.ac": "AC_INIT([x],[1])\nPKG_CHECK_MODULES([Z], [zlib])\n",
                       "Makefile.am": "check_PROGRAMS = t\nTESTS = t\n"})
    rec = Cpp().recipe(view)
    assert rec.framework == "make-check" and "zlib1g-dev" in rec.steps[0].run


def test_a_discovered_googletest_case_passes_only_through_googletest_xml(tmp_path):
    """A test program that exits 0 silently (before GoogleTest writes its XML or prints its banner) when
    run by ctest: CTest says passed, but the case ``ctest --show-only`` lists with ``--gtest_filter`` is
    missing, hence failed."""
    import re

    shutil.copytree(REPORTS / "gtest", tmp_path / "r")
    for p in (tmp_path / "r" / "gtest").glob("unit*.xml"):
        p.unlink()
    junit = tmp_path / "r" / "ctest.xml"
    junit.write_text(re.sub(r"<system-out>.*?</system-out>", "<system-out></system-out>",
                            junit.read_text(encoding="utf-8"), flags=re.S), encoding="utf-8")
    outcomes, _, _ = get("ctest").parse(str(tmp_path / "r"), "", [], {})
    assert not [t for t in outcomes if t.startswith(("Calc.", "Typed", "Values"))]
    assert "Calc.FailsWithUnicode" not in outcomes and "Calc.Off" not in outcomes  # missing: failed
    assert outcomes["plain_ok"] == "passed" and outcomes["Whole.One"] == "passed"
    assert outcomes["whole_binary"] == "failed"  # registered whole, no banner now: CTest's word
