"""Small real C and C++ git repositories for the C/C++ language's tests (CMake + CTest, Debian's GoogleTest).

``strutil`` (C++17, a library and a GoogleTest binary registered with ``gtest_discover_tests``):

- initial: ``split`` drops a trailing empty field; tests for trim, split and a parameterised upper-casing test;
- fix-split: fixes ``split`` and adds ``Split.KeepsTrailingEmptyField`` (FAIL_TO_PASS);
- docs: README only (filtered: no test change).

``vec`` (C11, a growable int vector; one test program whose cases CTest runs by name, registered in
``tests/CMakeLists.txt``):

- initial: ``vec_pop`` on an empty vector reads before the buffer instead of failing;
- fix-pop: makes it fail cleanly and adds the ``vec_pop_empty`` case (FAIL_TO_PASS);
- docs: a comment in the header (a code change without a test change: filtered).

Dates and identities are fixed, so commit ids are the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

try:
    from .code_repo import _commit, _git, _write
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _commit, _git, _write

STRUTIL_CMAKE = """\
cmake_minimum_required(VERSION 3.16)
project(strutil VERSION 0.1 LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)

add_library(strutil src/strutil.cpp)
target_include_directories(strutil PUBLIC include)

include(CTest)
if(BUILD_TESTING)
  add_subdirectory(tests)
endif()
"""

STRUTIL_TESTS_CMAKE = """\
find_package(GTest REQUIRED)
include(GoogleTest)
add_executable(strutil_tests test_trim.cpp test_split.cpp)
target_link_libraries(strutil_tests PRIVATE strutil GTest::gtest_main)
gtest_discover_tests(strutil_tests)
"""

STRUTIL_HPP = """\
#pragma once
#include <string>
#include <vector>

namespace strutil {
std::string trim(const std::string& s);
std::string to_upper(std::string s);
std::vector<std::string> split(const std::string& s, char sep);
}  // namespace strutil
"""

STRUTIL_CPP = """\
#include "strutil/strutil.hpp"

#include <cctype>

namespace strutil {

std::string trim(const std::string& s) {
  auto begin = s.find_first_not_of(" \\t\\n");
  if (begin == std::string::npos) return "";
  auto end = s.find_last_not_of(" \\t\\n");
  return s.substr(begin, end - begin + 1);
}

std::string to_upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace strutil
"""

TEST_TRIM = """\
#include <gtest/gtest.h>

#include "strutil/strutil.hpp"

TEST(Trim, RemovesSpaces) { EXPECT_EQ(strutil::trim("  a b  "), "a b"); }

TEST(Trim, AllSpaces) { EXPECT_EQ(strutil::trim("   "), ""); }

class Upper : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(Upper, Converts) { EXPECT_EQ(strutil::to_upper(GetParam().first), GetParam().second); }

INSTANTIATE_TEST_SUITE_P(Words, Upper,
                         ::testing::Values(std::make_pair("abc", "ABC"), std::make_pair("a1-b", "A1-B"),
                                           std::make_pair("", "")));
"""

TEST_SPLIT = """\
#include <gtest/gtest.h>

#include "strutil/strutil.hpp"

using V = std::vector<std::string>;

TEST(Split, Basic) { EXPECT_EQ(strutil::split("a,b,c", ','), (V{"a", "b", "c"})); }

TEST(Split, EmptyMiddle) { EXPECT_EQ(strutil::split("a,,c", ','), (V{"a", "", "c"})); }
"""

TEST_SPLIT_FIX = TEST_SPLIT + """
TEST(Split, KeepsTrailingEmptyField) { EXPECT_EQ(strutil::split("a,b,", ','), (V{"a", "b", ""})); }
"""

FIX_SPLIT_MSG = "Keep a trailing empty field in split\n\nsplit(\"a,b,\", ',') returned two fields instead of three.\n"


STRUTIL_DEPS_CMAKE = """\
# Optional Unicode support, off by default (cxxopts' shape): ICU through pkg-config, inside a function
function(strutil_use_unicode)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(ICU REQUIRED icu-uc)
  target_link_libraries(strutil PUBLIC ${ICU_LDFLAGS})
endfunction()
"""

STRUTIL_DEPS_TOP = """\
list(APPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_SOURCE_DIR}/cmake/")
include(strutil)
option(STRUTIL_USE_UNICODE "Use ICU for Unicode-aware trimming (needs icu-uc)" OFF)
if(STRUTIL_USE_UNICODE)
  strutil_use_unicode()
endif()
if(WIN32)
  find_package(WindowsSDKThing REQUIRED)
endif()
# a required dependency named only by pkg-config: its Debian package comes from Debian's Contents index
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
target_link_libraries(strutil PUBLIC PkgConfig::ZSTD)
"""


def make_strutil_repo(root: Path, *, deps: bool = False) -> dict[str, str]:
    """Create the C++ repository at ``root``; return {"initial", "fix", "docs": sha}. With ``deps`` the build
    has an option-guarded optional dependency (ICU, behind an option that defaults to OFF, in a function of
    cmake/strutil.cmake) and a REQUIRED one that pkg-config names (``libzstd``, Debian's libzstd-dev)."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    top = STRUTIL_CMAKE.replace("include(CTest)\n", STRUTIL_DEPS_TOP + "\ninclude(CTest)\n") if deps else STRUTIL_CMAKE
    if deps:
        _write(root, {"cmake/strutil.cmake": STRUTIL_DEPS_CMAKE})
    _write(root, {"CMakeLists.txt": top, "include/strutil/strutil.hpp": STRUTIL_HPP,
                  "src/strutil.cpp": STRUTIL_CPP, "tests/CMakeLists.txt": STRUTIL_TESTS_CMAKE,
                  "tests/test_trim.cpp": TEST_TRIM, "tests/test_split.cpp": TEST_SPLIT, ".gitignore": "build/\n",
                  "README.md": "# strutil\n"})
    shas = {"initial": _commit(root, "strutil: trim, to_upper and split", 1)}
    _write(root, {"src/strutil.cpp": STRUTIL_CPP.replace("  if (!cur.empty()) out.push_back(cur);\n",
                                                         "  if (!cur.empty() || !s.empty()) out.push_back(cur);\n"),
                  "tests/test_split.cpp": TEST_SPLIT_FIX})
    shas["fix"] = _commit(root, FIX_SPLIT_MSG, 2)
    _write(root, {"README.md": "# strutil\n\nBuild with CMake; run the tests with `ctest`.\n"})
    shas["docs"] = _commit(root, "README: how to build the library and run its tests with ctest", 3)
    return shas


VEC_CMAKE = """\
cmake_minimum_required(VERSION 3.16)
project(vec LANGUAGES C)
set(CMAKE_C_STANDARD 11)

add_library(vec src/vec.c)
target_include_directories(vec PUBLIC include)

enable_testing()
add_subdirectory(tests)
"""

VEC_TESTS_CMAKE = """\
add_executable(test_vec test_vec.c)
target_link_libraries(test_vec PRIVATE vec)
foreach(name push get grow)
  add_test(NAME vec_${name} COMMAND test_vec ${name})
endforeach()
"""

VEC_H = """\
#ifndef VEC_H
#define VEC_H
#include <stddef.h>

typedef struct {
  int *data;
  size_t len, cap;
} vec;

void vec_init(vec *v);
void vec_free(vec *v);
int vec_push(vec *v, int x);
int vec_get(const vec *v, size_t i, int *out);
int vec_pop(vec *v, int *out);
#endif
"""

VEC_C = """\
#include "vec.h"

#include <stdlib.h>

void vec_init(vec *v) { v->data = NULL; v->len = v->cap = 0; }

void vec_free(vec *v) { free(v->data); vec_init(v); }

int vec_push(vec *v, int x) {
  if (v->len == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 4;
    int *data = realloc(v->data, cap * sizeof *data);
    if (!data) return -1;
    v->data = data;
    v->cap = cap;
  }
  v->data[v->len++] = x;
  return 0;
}

int vec_get(const vec *v, size_t i, int *out) {
  if (i >= v->len) return -1;
  *out = v->data[i];
  return 0;
}

int vec_pop(vec *v, int *out) {
  *out = v->data ? v->data[v->len - 1] : 0;
  v->len--;
  return 0;
}
"""

TEST_VEC = """\
#include <stdio.h>
#include <string.h>

#include "vec.h"

#define CHECK(cond) do { if (!(cond)) { printf("check failed: %s (line %d)\\n", #cond, __LINE__); return 1; } } while (0)

static int t_push(void) {
  vec v; vec_init(&v);
  CHECK(vec_push(&v, 1) == 0 && vec_push(&v, 2) == 0);
  CHECK(v.len == 2);
  vec_free(&v);
  return 0;
}

static int t_get(void) {
  vec v; vec_init(&v); int x = 0;
  vec_push(&v, 7);
  CHECK(vec_get(&v, 0, &x) == 0 && x == 7);
  CHECK(vec_get(&v, 1, &x) == -1);
  vec_free(&v);
  return 0;
}

static int t_grow(void) {
  vec v; vec_init(&v); int x = 0;
  for (int i = 0; i < 100; i++) CHECK(vec_push(&v, i) == 0);
  CHECK(vec_get(&v, 99, &x) == 0 && x == 99);
  vec_free(&v);
  return 0;
}
/* more cases */

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_vec CASE\\n"); return 2; }
  if (!strcmp(argv[1], "push")) return t_push();
  if (!strcmp(argv[1], "get")) return t_get();
  if (!strcmp(argv[1], "grow")) return t_grow();
  /* more dispatch */
  fprintf(stderr, "unknown case %s\\n", argv[1]);
  return 2;
}
"""

POP_TEST = """
static int t_pop_empty(void) {
  vec v; vec_init(&v); int x = 42;
  CHECK(vec_pop(&v, &x) == -1);
  CHECK(x == 42 && v.len == 0);
  vec_push(&v, 5);
  CHECK(vec_pop(&v, &x) == 0 && x == 5 && v.len == 0);
  vec_free(&v);
  return 0;
}
"""


def make_vec_repo(root: Path) -> dict[str, str]:
    """Create the C repository at ``root``; return {"initial", "fix", "docs": sha}."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"CMakeLists.txt": VEC_CMAKE, "include/vec.h": VEC_H, "src/vec.c": VEC_C,
                  "tests/CMakeLists.txt": VEC_TESTS_CMAKE, "tests/test_vec.c": TEST_VEC, ".gitignore": "build/\n"})
    shas = {"initial": _commit(root, "vec: a growable int vector", 1)}
    fixed = VEC_C.replace("  *out = v->data ? v->data[v->len - 1] : 0;\n  v->len--;\n",
                          "  if (v->len == 0) return -1;\n  *out = v->data[--v->len];\n")
    tests = TEST_VEC.replace("/* more cases */\n", POP_TEST).replace(
        "  /* more dispatch */\n", '  if (!strcmp(argv[1], "pop_empty")) return t_pop_empty();\n')
    _write(root, {"src/vec.c": fixed, "tests/test_vec.c": tests,
                  "tests/CMakeLists.txt": VEC_TESTS_CMAKE.replace("push get grow", "push get grow pop_empty")})
    shas["fix"] = _commit(root, "vec_pop fails on an empty vector instead of reading before the buffer", 2)
    _write(root, {"include/vec.h": VEC_H.replace("int vec_pop(", "/* -1 when empty */\nint vec_pop(")})
    shas["docs"] = _commit(root, "vec.h: document what vec_pop returns when the vector is empty", 3)
    return shas


# ---------------------------------------------------------------- amcalc: Automake's make check

AM_CONFIGURE = """\
AC_INIT([amcalc], [0.1])
AC_CONFIG_AUX_DIR([build-aux])
AM_INIT_AUTOMAKE([foreign subdir-objects])
AC_PROG_CC
AC_CONFIG_FILES([Makefile])
AC_OUTPUT
"""

AM_MAKEFILE = """\
check_PROGRAMS = tests/test_clamp tests/test_sum
tests_test_clamp_SOURCES = tests/test_clamp.c src/calc.c src/calc.h
tests_test_sum_SOURCES = tests/test_sum.c src/calc.c src/calc.h
TESTS = $(check_PROGRAMS)
"""

AM_CALC_H = "int clamp(int x, int lo, int hi);\nint sum(const int *xs, int n);\n"

AM_CALC_C = """\
#include "calc.h"

int clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? lo : x; }

int sum(const int *xs, int n) {
  int s = 0;
  for (int i = 0; i < n; i++) s += xs[i];
  return s;
}
"""

AM_TEST_SUM = """\
#include <stdio.h>
#include "../src/calc.h"

int main(void) {
  int xs[] = {1, 2, 3};
  if (sum(xs, 3) != 6) { printf("sum wrong\\n"); return 1; }
  return 0;
}
"""

AM_TEST_CLAMP = """\
#include <stdio.h>
#include "../src/calc.h"

int main(void) {
  if (clamp(5, 0, 10) != 5 || clamp(-1, 0, 10) != 0) { printf("clamp wrong\\n"); return 1; }
  return 0;
}
"""


def make_amcalc_repo(root: Path) -> dict[str, str]:
    """An Automake C project; return {"initial", "fix": sha}. The fix makes ``clamp`` return ``hi`` above
    the range and adds that check to tests/test_clamp.c (FAIL_TO_PASS ``tests/test_clamp``)."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"configure.ac": AM_CONFIGURE, "Makefile.am": AM_MAKEFILE, "src/calc.h": AM_CALC_H,
                  "src/calc.c": AM_CALC_C, "tests/test_sum.c": AM_TEST_SUM, "tests/test_clamp.c": AM_TEST_CLAMP,
                  ".gitignore": "*.o\n"})
    shas = {"initial": _commit(root, "amcalc: clamp and sum, tested with make check", 1)}
    _write(root, {"src/calc.c": AM_CALC_C.replace("x > hi ? lo : x", "x > hi ? hi : x"),
                  "tests/test_clamp.c": AM_TEST_CLAMP.replace("clamp(-1, 0, 10) != 0", "clamp(-1, 0, 10) != 0 || "
                                                              "clamp(11, 0, 10) != 10")})
    shas["fix"] = _commit(root, "clamp returned the low bound for values above the range", 2)
    return shas
