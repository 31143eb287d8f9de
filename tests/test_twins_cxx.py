"""Twin checks of C and C++ tests (``runners/cxx_dialect``), without Docker: GoogleTest declarations and
ids, plain CTest tests and Automake test programs made into twin programs, which test-patch changes count,
and the Automake canary's registration. Where the toolchain is here, the rewritten sources compile and the
rewritten CMake project configures with the twins registered."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import twins  # noqa: E402
from envgen_verifiers.runners import get  # noqa: E402
from envgen_verifiers.runners.cxx import am_canary_makefile  # noqa: E402
from envgen_verifiers.runners.cxx_dialect import AUTOMAKE, CTEST, am_program, cmake_commands, ctest_registrations, \
    gtest_name  # noqa: E402

GTEST_SRC = """\
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {
std::vector<int> parse(const std::string& s) { return s.empty() ? std::vector<int>{} : std::vector<int>{1}; }
constexpr int kLimit = 10;
}  // namespace

// A fixture with state. TEST(Fake, InAComment) { }
class Buffer : public ::testing::Test {
 protected:
  void SetUp() override { data_ = "x{"; }
  std::string data_;
};

/* Checks the
   parser. */
TEST(Parse, Empty) {
  EXPECT_TRUE(parse("").empty());
  EXPECT_EQ(parse("7").size(), 1u);
}

TEST_F(Buffer, KeepsBraces) {
  const char* s = "}{";
  EXPECT_EQ(data_, "x{") << s;
  ASSERT_EQ(data_.size(), 2);
}

TEST(Parse, Limit) { EXPECT_LT(kLimit, 11); }

class Sizes : public ::testing::TestWithParam<int> {};

TEST_P(Sizes, Positive) {
  EXPECT_GT(GetParam(), 0);
  EXPECT_NE(GetParam(), 42);
}

INSTANTIATE_TEST_SUITE_P(Small, Sizes, ::testing::Values(1, 2, 3));

template <typename T>
class Typed : public ::testing::Test {};
using Types = ::testing::Types<int, long>;
TYPED_TEST_SUITE(Typed, Types);

TYPED_TEST(Typed, Zero) { EXPECT_EQ(TypeParam(0) + 3, 3); }
"""


def _compiles(path: Path, lang: str = "c++", flags: tuple = ("-std=c++17",)) -> None:
    compiler = "c++" if lang == "c++" else "cc"
    if not shutil.which(compiler):
        return
    if lang == "c++" and not Path("/usr/include/gtest/gtest.h").exists():
        return
    out = subprocess.run([compiler, *flags, "-fsyntax-only", "-x", lang, str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_googletest_declarations_span_their_comments_and_bodies_and_skip_commented_ones():
    decls = {d.name: d for d in CTEST.declarations(GTEST_SRC)}
    assert list(decls) == ["Parse.Empty", "Buffer.KeepsBraces", "Parse.Limit", "Sizes.Positive", "Typed.Zero"]
    empty = decls["Parse.Empty"]
    assert GTEST_SRC[empty.start:].startswith("/* Checks the")
    assert GTEST_SRC[:empty.end].endswith("1u);\n}")
    braces = decls["Buffer.KeepsBraces"]
    assert GTEST_SRC[:braces.end].endswith("ASSERT_EQ(data_.size(), 2);\n}")  # "}{" in a string does not close it
    assert GTEST_SRC[:braces.name_end].endswith("TEST_F(Buffer, KeepsBraces")


@pytest.mark.parametrize("test_id, name", [
    ("Parse.Empty", "Parse.Empty"), ("Small/Sizes.Positive/2", "Sizes.Positive"), ("Typed/1.Zero", "Typed.Zero"),
    ("Inst/Typed/0.Zero", "Typed.Zero"), ("vec_pop_empty", None), ("tests/test_x", None)])
def test_googletest_ids_name_their_declaration(test_id, name):
    assert gtest_name(test_id) == name


def test_target_finds_the_run_file_declaring_the_test(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "a_test.cpp").write_text("TEST(Other, Thing) { EXPECT_EQ(1, 1); }\n")
    (tmp_path / "tests" / "parse_test.cpp").write_text(GTEST_SRC)
    files = ["tests/a_test.cpp", "tests/parse_test.cpp"]
    assert CTEST.target("Small/Sizes.Positive/0", files, str(tmp_path)) == ("tests/parse_test.cpp", "Sizes.Positive")
    assert CTEST.target("Typed/1.Zero", files, str(tmp_path)) == ("tests/parse_test.cpp", "Typed.Zero")
    assert CTEST.target("Parse.Missing", files, str(tmp_path)) is None


def test_a_googletest_plan_renames_the_test_and_writes_twins_that_compile(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "parse_test.cpp").write_text(GTEST_SRC)
    ids = ["Parse.Empty", "Buffer.KeepsBraces", "Small/Sizes.Positive/0", "Small/Sizes.Positive/1", "Typed/0.Zero"]
    plan = twins.plan(str(tmp_path), CTEST, ids, ["tests/parse_test.cpp"], seed=3)
    text = plan["files"]["tests/parse_test.cpp"]
    assert [t["name"] for t in plan["tests"]] == ["Buffer.KeepsBraces", "Parse.Empty", "Sizes.Positive", "Typed.Zero"]
    for t in plan["tests"]:
        suite, name = t["name"].split(".")
        for sfx in [t["real"], *t["twins"]]:
            assert f", {name}{sfx})" in text
        assert f", {name})" not in text
    assert "Parse.Limit" not in {t["name"] for t in plan["tests"]} and "TEST(Parse, Limit) {" in text
    # a test's twins all change the same literal of an assertion, each to another value (in "x{" its letter:
    # the brace is kept)
    gt = re.findall(r"EXPECT_GT\(GetParam\(\), (\d+)\);", text)
    assert len(gt) == 3 and len(set(gt)) == 3 and "0" in gt and text.count("EXPECT_NE(GetParam(), 42);") == 3
    braces = re.findall(r'EXPECT_EQ\(data_, "(\w)\{"\)', text)
    assert len(braces) == 3 and len(set(braces)) == 3 and "x" in braces
    # reported ids map back to the real test; twin ids are told apart
    sizes = next(t for t in plan["tests"] if t["name"] == "Sizes.Positive")
    real, twin = twins.split({f"Small/Sizes.Positive{sizes['real']}/0": "passed",
                              f"Small/Sizes.Positive{sizes['twins'][0]}/0": "failed"}, plan)
    assert real == {"Small/Sizes.Positive/0": "passed"} and list(twin.values()) == ["failed"]
    (tmp_path / "out.cpp").write_text(text)
    _compiles(tmp_path / "out.cpp")


def test_changed_picks_added_and_changed_tests_not_includes_or_comments():
    text = GTEST_SRC
    lines = text.splitlines()
    no = lines.index("TEST(Parse, Limit) { EXPECT_LT(kLimit, 11); }") + 1
    assert CTEST.changed(text, [(no, lines[no - 1])], []) == ["Parse.Limit"]
    assert CTEST.changed(text, [(5, "#include <vector>")], []) == []
    assert CTEST.changed(text, [(11, "// A fixture with state. TEST(Fake, InAComment) { }")], []) == []
    helper = lines.index("constexpr int kLimit = 10;") + 1
    assert CTEST.changed(text, [(helper, lines[helper - 1])], []) == ["Parse.Limit"]  # the helper it uses


VEC_TEST = """\
#include <stdio.h>
#include <string.h>
#include "vec.h"

static int t_push(void) { return vec_push(1) == 0 ? 0 : 1; }

static int t_pop(void) {
  if (vec_pop() != -1) { printf("pop on empty: not -1\\n"); return 1; }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  if (!strcmp(argv[1], "push")) return t_push();
  if (!strcmp(argv[1], "pop")) return t_pop();
  return 2;
}
"""

VEC_H = "int vec_push(int x);\nint vec_pop(void);\n"
VEC_C = '#include "vec.h"\nint vec_push(int x) { (void)x; return 0; }\nint vec_pop(void) { return -1; }\n'


def _git(tree: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@x", "PATH": "/usr/bin:/bin", "HOME": str(tree)})


def _ctest_project(tmp_path: Path, tests_cmake: str) -> Path:
    tree = tmp_path / "proj"
    (tree / "tests").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.16)\nproject(v C)\nadd_library(vec vec.c)\n"
                                         "target_include_directories(vec PUBLIC .)\nenable_testing()\n"
                                         "add_subdirectory(tests)\n")
    (tree / "vec.h").write_text(VEC_H)
    (tree / "vec.c").write_text(VEC_C)
    (tree / "tests" / "CMakeLists.txt").write_text(tests_cmake)
    (tree / "tests" / "test_vec.c").write_text(VEC_TEST.replace("  if (vec_pop() != -1)", "  /* pop */\n"))
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "base")
    (tree / "tests" / "test_vec.c").write_text(VEC_TEST)  # the test patch: the pop check
    return tree


FOREACH = """\
add_executable(test_vec test_vec.c)
target_link_libraries(test_vec PRIVATE vec)
foreach(name push pop)
  add_test(NAME vec_${name} COMMAND test_vec ${name})
endforeach()
set_tests_properties(vec_pop PROPERTIES TIMEOUT 10)
"""

LITERAL = """\
add_executable(test_vec test_vec.c)
add_test(NAME vec_push COMMAND $<TARGET_FILE:test_vec> push)
add_test(vec_pop test_vec pop)  # the old signature
target_link_libraries(test_vec PRIVATE vec)
"""


@pytest.mark.parametrize("cmake", [FOREACH, LITERAL], ids=["foreach", "literal"])
def test_a_plain_ctest_test_becomes_twin_programs_registered_like_it(tmp_path, cmake):
    tree = _ctest_project(tmp_path, cmake)
    regs = ctest_registrations(str(tree))
    assert {n: (r.prog, r.source) for n, r in regs.items()} == {"vec_push": ("test_vec", "tests/test_vec.c"),
                                                               "vec_pop": ("test_vec", "tests/test_vec.c")}
    assert CTEST.target("vec_pop", ["tests/test_vec.c"], str(tree)) == ("tests/test_vec.c", "vec_pop")
    plan = twins.plan(str(tree), CTEST, ["vec_pop"], ["tests/test_vec.c"], seed=7)
    (entry,) = plan["tests"]
    sfx = [entry["real"], *entry["twins"]]
    files = plan["files"]
    assert files["tests/test_vec.c"] is None  # the original program is gone: every test runs a copy
    assert files[f"tests/test_vec{entry['real']}.c"] == VEC_TEST
    twin_srcs = [files[f"tests/test_vec{s}.c"] for s in entry["twins"]]
    assert "if (vec_pop() != -2)" in twin_srcs[0]  # the test patch's compared literal first
    cml = files["tests/CMakeLists.txt"]
    for s in sfx:
        assert f"add_executable(test_vec{s} test_vec{s}.c)" in cml and f"target_link_libraries(test_vec{s} " in cml
        assert f"vec_pop{s} " in cml
    assert "add_executable(test_vec test_vec.c)" not in cml and not any(
        ln.split("(")[0].strip() == "add_test" and "vec_pop " in ln for ln in cml.splitlines())
    if cmake is FOREACH:
        assert "foreach(name push)" in cml and f"COMMAND test_vec{entry['real']} ${{name}}" in cml
        props = next(ln for ln in cml.splitlines() if ln.startswith("set_tests_properties("))
        assert sorted(props.split("(")[1].split(" PROPERTIES")[0].split()) == sorted("vec_pop" + s for s in sfx)
    if not shutil.which("cmake"):
        return
    twins.write(str(tree), plan)
    out = subprocess.run(["cmake", "-S", str(tree), "-B", str(tmp_path / "b")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    shown = subprocess.run(["ctest", "--test-dir", str(tmp_path / "b"), "-N"], capture_output=True, text=True).stdout
    names = sorted(ln.split(":", 1)[1].strip() for ln in shown.splitlines() if "Test #" in ln)
    assert names == sorted(["vec_push", *("vec_pop" + s for s in sfx)])


def test_the_renamed_target_is_renamed_in_every_build_file_that_names_it(tmp_path):
    tree = _ctest_project(tmp_path, LITERAL)
    top = (tree / "CMakeLists.txt").read_text() + "add_custom_target(check_all DEPENDS test_vec)\n"
    (tree / "CMakeLists.txt").write_text(top)
    plan = twins.plan(str(tree), CTEST, ["vec_pop"], ["tests/test_vec.c"], seed=7)
    real = plan["tests"][0]["real"]
    assert f"add_custom_target(check_all DEPENDS test_vec{real})" in plan["files"]["CMakeLists.txt"]
    if shutil.which("cmake"):
        twins.write(str(tree), plan)
        out = subprocess.run(["cmake", "-S", str(tree), "-B", str(tmp_path / "b")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


def test_a_whole_test_program_changed_anywhere_is_changed_as_a_whole():
    lines = VEC_TEST.splitlines()
    no = lines.index("  return 0;") + 1
    assert CTEST.changed(VEC_TEST, [(no, "  return 0;")], []) == "all"
    assert CTEST.changed(VEC_TEST, [(1, "// a comment")], []) == []
    assert AUTOMAKE.changed(VEC_TEST, [(no, "  return 0;")], []) == "all"
    assert AUTOMAKE.changed("int helper(void) { return 1; }\n", [(1, "int helper(void) { return 1; }")], []) == []


def test_program_literals_skip_includes_returns_escapes_and_the_argument_checks(tmp_path):
    lits = [VEC_TEST[x.start:x.end] for x in CTEST.program_literals("", "t.c", VEC_TEST)]
    assert '"vec.h"' not in lits and "2" not in lits and '"pop on empty: not -1\\n"' not in lits
    assert lits[:2] == ["0", "1"] and lits[-1] == '"pop"'  # compared first: ``vec_push(1) == 0``, ``!= -1``
    tree = _ctest_project(tmp_path, FOREACH)  # git: the test patch added the pop check
    first = CTEST.program_literals(str(tree), "tests/test_vec.c", VEC_TEST)[0]
    assert VEC_TEST[first.start - 4:first.end + 1] == "!= -1)"


AM = """\
AUTOMAKE_OPTIONS = subdir-objects
check_PROGRAMS = tests/test_clamp tests/test_sum \\
  tests/test_io$(EXEEXT)
tests_test_clamp_SOURCES = tests/test_clamp.c src/calc.c
tests_test_clamp_CFLAGS = -DCLAMP=1 \\
  -O0
tests_test_clamp_LDADD = -lm
tests_test_sum_SOURCES = tests/test_sum.c src/calc.c
TESTS = tests/test_sum tests/test_clamp tests/test_io$(EXEEXT) tests/run.sh
XFAIL_TESTS = tests/test_io
"""

CLAMP = """\
#include <stdio.h>
#include "../src/calc.h"
int main(void) {
  if (clamp(11, 0, 10) != 10) { puts("clamp wrong"); return 1; }
  return 0;
}
"""


def test_an_automake_test_program_becomes_twin_programs_in_every_list(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "Makefile.am").write_text(AM)
    (tmp_path / "tests" / "test_clamp.c").write_text(CLAMP)
    (tmp_path / "tests" / "test_io.c").write_text("int main(void) { return 3 == 4; }\n")
    found = am_program(str(tmp_path), "tests/test_clamp", ["tests/test_clamp.c"])
    assert (found.makefile, found.prog, found.source, found.source_word) == \
        ("Makefile.am", "tests/test_clamp", "tests/test_clamp.c", "tests/test_clamp.c")
    assert am_program(str(tmp_path), "tests/test_io", []).source == "tests/test_io.c"  # the default source
    assert AUTOMAKE.target("tests/x.t 2 - adds", [], str(tmp_path)) is None  # a TAP result
    assert AUTOMAKE.target("tests/test_clamp", [], str(tmp_path)) == ("tests/test_clamp.c", "tests/test_clamp")
    plan = twins.plan(str(tmp_path), AUTOMAKE, ["tests/test_clamp", "tests/test_io"], ["tests/test_clamp.c"], seed=1)
    files = plan["files"]
    by = {t["name"]: t for t in plan["tests"]}
    am = files["Makefile.am"]
    for name, t in by.items():
        assert files[name + ".c"] is None
        progs = [name + s for s in [t["real"], *t["twins"]]]
        for p in progs:
            canon = p.replace("/", "_")
            assert f"{canon}_SOURCES = {p}.c" in am, am
            assert files[p + ".c"] is not None
        assert f" {name} " not in am + " " and f" {name}$" not in am
    clamp = by["tests/test_clamp"]
    progs = ["tests/test_clamp" + s for s in [clamp["real"], *clamp["twins"]]]
    tests_line = next(ln for ln in am.splitlines() if ln.startswith("TESTS ="))
    assert sorted(w for w in tests_line.split() if w.startswith("tests/test_clamp")) == sorted(progs)
    for p in progs:
        canon = p.replace("/", "_")
        assert f"{canon}_CFLAGS = -DCLAMP=1 \\\n  -O0\n" in am and f"{canon}_LDADD = -lm" in am
    expected = [re.search(r"clamp\(11, 0, 10\) != (\d+)", files[p + ".c"]).group(1) for p in progs]
    assert expected[0] == "10" and len(set(expected)) == 3  # the real program, then each twin's other value
    io = by["tests/test_io"]
    assert all(f"tests/test_io{s}$(EXEEXT)" in am for s in [io["real"], *io["twins"]])


def test_the_automake_canary_is_registered_as_the_tests_are(tmp_path):
    from_programs = am_canary_makefile("check_PROGRAMS = t\nTESTS = $(check_PROGRAMS)\n", "envgen_canary_x",
                                       "envgen_canary_x.c")
    assert "check_PROGRAMS += envgen_canary_x\n" in from_programs and "TESTS +=" not in from_programs
    listed = am_canary_makefile("TESTS = t.sh\n", "envgen_canary_x", "envgen_canary_x.c")
    assert "check_PROGRAMS = envgen_canary_x\n" in listed and "TESTS += envgen_canary_x\n" in listed
    assert "envgen_canary_x_LDADD =\n" in listed  # linked with nothing of the project
    (tmp_path / "tests").mkdir()
    (tmp_path / "configure.ac").write_text("AC_INIT([x],[1])\nAC_PROG_CC\n")
    (tmp_path / "Makefile.am").write_text("SUBDIRS = tests\n")
    (tmp_path / "tests" / "Makefile.am").write_text("check_PROGRAMS = a\nTESTS = a\n")
    path, text = get("make-check").canary(str(tmp_path), ["tests/a.c"], "0abc", {})
    assert path == "tests/envgen_canary_0abc.c" and "return 1;" in text
    assert "TESTS += envgen_canary_0abc" in (tmp_path / "tests" / "Makefile.am").read_text()
    assert get("make-check").canary(str(tmp_path / "tests" / "none"), [], "0abc", {}) is None


CATCH_SRC = """\
#include <catch2/catch.hpp>

#include <string>

static std::string twice(const std::string& s) { return s + s; }

// TEST_CASE("commented out", "[x]") {}
TEST_CASE("twice repeats the word", "[twice]") {
  REQUIRE(twice("ab") == "abab");
  SECTION("empty") { CHECK(twice("").size() == 0); }
}

SCENARIO("twice of \\"x\\"") {
  GIVEN("a letter") { REQUIRE(twice("x").size() == 2); }
}
"""


def test_catch2_test_cases_are_twinned_inside_their_names(tmp_path):
    assert [d.name for d in CTEST.declarations(CATCH_SRC)] == ["twice repeats the word", 'Scenario: twice of "x"']
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "twice.cpp").write_text(CATCH_SRC)
    files = ["tests/twice.cpp"]
    assert CTEST.target('Scenario: twice of "x"', files, str(tmp_path)) == ("tests/twice.cpp", 'Scenario: twice of "x"')
    plan = twins.plan(str(tmp_path), CTEST, ["twice repeats the word", 'Scenario: twice of "x"'], files, seed=2)
    text = plan["files"]["tests/twice.cpp"]
    for t in plan["tests"]:
        assert t["real"].startswith(" ") and len(t["real"]) == 6
    words = next(t for t in plan["tests"] if t["name"] == "twice repeats the word")
    for sfx in [words["real"], *words["twins"]]:
        assert f'TEST_CASE("twice repeats the word{sfx}", "[twice]")' in text
    got = re.findall(r'REQUIRE\(twice\("ab"\) == "(aba.)"\);', text)
    assert len(got) == 3 and len(set(got)) == 3 and "abab" in got  # the expected value, three ways
    assert CTEST.changed(CATCH_SRC, [(10, '  REQUIRE(twice("ab") == "abab");')], []) == ["twice repeats the word"]
    if Path("/usr/include/catch2/catch.hpp").exists():
        (tmp_path / "out.cpp").write_text(text)
        _compiles(tmp_path / "out.cpp")


def test_a_unity_program_whose_main_carries_a_calling_convention_macro_is_a_whole_program():
    """cJSON's tests/misc_tests.c: ``int CJSON_CDECL main(void)`` running Unity's RUN_TEST list; a test patch
    adding a test function there changes the program (CTest's id) as a whole, not a declaration in it."""
    text = ("#include \"unity.h\"\n\nstatic void parses(void)\n{\n    TEST_ASSERT_EQUAL_INT(3, parse(\"3\"));\n}\n\n"
            "int CJSON_CDECL main(void)\n{\n    UNITY_BEGIN();\n    RUN_TEST(parses);\n    return UNITY_END();\n}\n")
    assert CTEST.is_program(text)
    assert CTEST.changed(text, [(5, '    TEST_ASSERT_EQUAL_INT(3, parse("3"));')], []) == "all"
    assert AUTOMAKE.declarations(text)[0].name == "main"


SET_LIST = """\
set(progs
    test_other
    test_vec
)
foreach(prog ${progs})
  add_executable("${prog}" "${prog}.c")
  target_link_libraries("${prog}" PRIVATE vec)
  if(USE_MEMCHECK)
    add_test(NAME "${prog}" COMMAND valgrind "${CMAKE_CURRENT_BINARY_DIR}/${prog}" pop)
  else()
    add_test(NAME "${prog}"
      COMMAND "./${prog}" pop)
  endif()
endforeach()
add_custom_target(check_progs DEPENDS ${progs})
"""

OTHER_TEST = '#include <string.h>\nint main(int argc, char **argv) { (void)argv; return argc == 2 && strlen("ab") == 2 ? 0 : 1; }\n'


def test_programs_built_in_a_foreach_over_a_set_list_become_twin_programs_written_out_after_the_loop(tmp_path):
    """cJSON's shape: ``set(unity_tests ...)`` then ``foreach(t ${unity_tests})`` building and registering
    each program, the add_test inside an if/else."""
    tree = _ctest_project(tmp_path, SET_LIST)
    (tree / "tests" / "test_other.c").write_text(OTHER_TEST)
    regs = ctest_registrations(str(tree))
    assert {n: (r.prog, r.source, r.exe_in_loop, r.list_set is not None) for n, r in regs.items()} == {
        "test_vec": ("test_vec", "tests/test_vec.c", True, True),
        "test_other": ("test_other", "tests/test_other.c", True, True)}
    assert CTEST.target("test_vec", ["tests/test_vec.c"], str(tree)) == ("tests/test_vec.c", "test_vec")
    plan = twins.plan(str(tree), CTEST, ["test_vec"], ["tests/test_vec.c"], seed=7)
    (entry,) = plan["tests"]
    sfx = [entry["real"], *entry["twins"]]
    files = plan["files"]
    assert files["tests/test_vec.c"] is None and files[f"tests/test_vec{entry['real']}.c"] == VEC_TEST
    assert "if (vec_pop() != -2)" in files[f"tests/test_vec{entry['twins'][0]}.c"]
    cml = files["tests/CMakeLists.txt"]
    (listed,) = [c for c in cmake_commands(cml) if c.name == "set"]
    assert [w for w, _s, _e in listed.args] == ["progs", "test_other"]  # the item leaves the list, only there
    assert "foreach(prog ${progs})" in cml and "DEPENDS ${progs})" in cml
    assert not re.search(r"\btest_vec\b", cml)
    after = cml.split("endforeach()", 1)[1]
    for s in sfx:  # the whole body, if/else and all, once per program
        assert f'add_executable("test_vec{s}" "test_vec{s}.c")' in after
        assert f'target_link_libraries("test_vec{s}" PRIVATE vec)' in after
        assert f'add_test(NAME "test_vec{s}" COMMAND valgrind "${{CMAKE_CURRENT_BINARY_DIR}}/test_vec{s}" pop)' in after
        assert f'add_test(NAME "test_vec{s}"\n      COMMAND "./test_vec{s}" pop)' in after
    assert after.count("if(USE_MEMCHECK)") == after.count("else()") == 3
    if not (shutil.which("cmake") and shutil.which("cc")):
        return
    # both programs of the loop twinned: the second plan reads the first one's rewritten list
    (tree / "tests" / "test_other.c").write_text(OTHER_TEST.replace('"ab") == 2', '"abc") == 3'))
    plan = twins.plan(str(tree), CTEST, ["test_vec", "test_other"], ["tests/test_vec.c", "tests/test_other.c"],
                      seed=7)
    assert len(plan["tests"]) == 2
    twins.write(str(tree), plan)
    b = tmp_path / "b"
    out = subprocess.run(["cmake", "-S", str(tree), "-B", str(b)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    out = subprocess.run(["cmake", "--build", str(b), "-j2"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    ran = subprocess.run(["ctest", "--test-dir", str(b)], capture_output=True, text=True, check=False).stdout
    results = dict(re.findall(r"Test +#\d+: (\S+) \.+\**\s*(Passed|Failed)", ran))
    want = {e["name"] + s: e for e in plan["tests"] for s in [e["real"], *e["twins"]]}
    assert set(results) == set(want), ran
    for e in plan["tests"]:
        assert results[e["name"] + e["real"]] == "Passed", ran  # the real program runs the test's own source
    vec = next(e for e in plan["tests"] if e["name"] == "test_vec")
    assert results["test_vec" + vec["twins"][0]] == "Failed", ran  # a twin runs its own changed copy


def test_a_literal_foreach_building_its_programs_is_written_out_and_a_set_list_loop_running_a_shared_one_is_not(
        tmp_path):
    literal = SET_LIST.replace("set(progs\n    test_other\n    test_vec\n)\nforeach(prog ${progs})",
                               "foreach(prog test_other test_vec)").replace("${progs}", "test_other test_vec")
    tree = _ctest_project(tmp_path, literal)
    (tree / "tests" / "test_other.c").write_text(OTHER_TEST)
    plan = twins.plan(str(tree), CTEST, ["test_vec"], ["tests/test_vec.c"], seed=7)
    (entry,) = plan["tests"]
    cml = plan["files"]["tests/CMakeLists.txt"]
    assert "foreach(prog test_other)" in cml and not re.search(r"\btest_vec\b", cml)
    for s in [entry["real"], *entry["twins"]]:
        assert f'add_test(NAME "test_vec{s}"\n      COMMAND "./test_vec{s}" pop)' in cml.split("endforeach()", 1)[1]
    if shutil.which("cmake"):
        twins.write(str(tree), plan)
        out = subprocess.run(["cmake", "-S", str(tree), "-B", str(tmp_path / "b")], capture_output=True, text=True,
                             check=False)
        assert out.returncode == 0, out.stderr
    # one program run with each item of a set() list: the list is not the test's own to edit
    shared = tmp_path / "shared"
    shared.mkdir()
    tree = _ctest_project(shared, "add_executable(test_vec test_vec.c)\nset(cases push pop)\n"
                                  "foreach(c ${cases})\n  add_test(NAME vec_${c} COMMAND test_vec ${c})\nendforeach()\n")
    assert ctest_registrations(str(tree)) == {}
