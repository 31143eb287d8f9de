"""The C/C++ recipe's dependency scan without Docker: CMake commands read as CMake reads them, the guards a
default configure in the image evaluates (an ``option()`` that defaults to OFF, ``if(WIN32)``, a function
never called), and pkg-config / CMake package names mapped to Debian packages through Debian's Contents
index (a small index the test writes, given through ENVGEN_DEBIAN_CONTENTS)."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest

from envgen.errors import InputError
from envgen.families.code.cxx import CMakeScan, Cpp, cmake_commands
from envgen.families.code.lang import RepoView

try:
    from .cxx_repo import make_strutil_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from cxx_repo import make_strutil_repo

CONTENTS = """\
usr/lib/x86_64-linux-gnu/pkgconfig/icu-uc.pc                libdevel/libicu-dev
usr/lib/x86_64-linux-gnu/pkgconfig/libzstd.pc               libdevel/libzstd-dev
usr/lib/x86_64-linux-gnu/cmake/tomlplusplus/tomlplusplusConfig.cmake libdevel/libtomlplusplus-dev
usr/share/cmake/magic_enum/magic_enum-config.cmake          libdevel/libmagicenum-dev,libdevel/other
"""


@pytest.fixture
def contents(tmp_path, monkeypatch):
    """A gzipped Contents index in Debian's format, named by ENVGEN_DEBIAN_CONTENTS; a cache folder of its own."""
    path = tmp_path / "Contents-amd64.gz"
    path.write_bytes(gzip.compress(CONTENTS.encode()))
    monkeypatch.setenv("ENVGEN_DEBIAN_CONTENTS", str(path))
    monkeypatch.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))
    return path


def _view(root: Path, files: dict[str, str]) -> RepoView:
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], cwd=root,
                   check=True)
    return RepoView(root, "HEAD")


def test_cmake_commands_keep_quoted_text_bracket_arguments_and_nested_parentheses():
    text = ('if(ver MATCHES "#define X_(MAJOR|MINOR) +([^ ]+)$") # a comment ( with a paren\n'
            '  set(A [=[bracket ) text]=] "q\\"uote")\n#[[ block comment\nfind_package(Nope REQUIRED) ]]\n'
            'endif()\nif((A OR B) AND NOT C)\nendif()\n')
    assert cmake_commands(text) == [
        ("if", ["ver", "MATCHES", '"#define X_(MAJOR|MINOR) +([^ ]+)$"']),
        ("set", ["A", '"[=[bracket ) text]=]"', '"q\\"uote"']),
        ("endif", []), ("if", ["(", "A", "OR", "B", ")", "AND", "NOT", "C"]), ("endif", [])]


def test_guards_a_default_configure_evaluates():
    top = """
option(WITH_ICU "icu" OFF)
option(WITH_ZLIB "zlib" ON)
set(STANDALONE OFF)
if(CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
  set(STANDALONE ON)
endif()
option(BUILD_EXTRAS "extras" ${STANDALONE})
include(cmake/deps.cmake)
if(WITH_ICU)
  use_icu()
elseif(WIN32)
  find_package(WinOnly REQUIRED)
else()
  find_package(Fallback REQUIRED)
endif()
if(WITH_ZLIB AND NOT APPLE)
  find_package(ZLIB REQUIRED)
endif()
if(BUILD_EXTRAS)
  add_subdirectory(extras)
endif()
if(NOT WITH_ZLIB)
  add_subdirectory(nozlib)
endif()
if(SOMETHING_THE_SCAN_CANNOT_KNOW)
  find_package(Maybe REQUIRED)
endif()
"""
    scan = CMakeScan({"CMakeLists.txt": top,
                      "cmake/deps.cmake": "function(use_icu)\n  pkg_check_modules(ICU REQUIRED icu-uc)\nendfunction()\n"
                                          "function(never_called)\n  find_package(Unused REQUIRED)\nendfunction()\n",
                      "extras/CMakeLists.txt": "find_package(Extra REQUIRED)\n",
                      "nozlib/CMakeLists.txt": "find_package(NoZlib REQUIRED)\n",
                      "standalone/CMakeLists.txt": "project(consumer)\nfind_package(Self REQUIRED)\n"})
    reached = {args[0]: guard for _, _, args, guard in scan.calls}
    assert reached == {"Fallback": True, "ZLIB": True, "Extra": True, "Maybe": None}
    assert scan.vars["WITH_ICU"] == "OFF" and scan.vars["BUILD_EXTRAS"] == "ON"


def test_an_option_guarded_pkg_config_dependency_is_not_needed_and_a_required_one_maps_through_contents(
        tmp_path, contents):
    make_strutil_repo(tmp_path / "s", deps=True)
    recipe = Cpp().recipe(RepoView(tmp_path / "s", "HEAD"))
    assert recipe.steps[0].name == "packages" and recipe.steps[0].run.count("libzstd-dev") == 1
    assert "libicu-dev" not in recipe.steps[0].run
    notes = "\n".join(recipe.notes)
    assert "CMakeLists.txt: WindowsSDKThing not needed: no default configure reaches it" in notes
    assert ("CMakeLists.txt pkg_check_modules(libzstd): libzstd-dev (the Debian package that ships libzstd.pc, by "
            "Debian's Contents index)") in notes
    assert "cmake/strutil.cmake: icu-uc not needed: no default configure reaches it" in notes


def test_cmake_package_configs_map_through_contents_and_an_unshipped_name_is_rejected(tmp_path, contents):
    base = "cmake_minimum_required(VERSION 3.16)\nproject(p CXX)\nenable_testing()\nadd_test(NAME t COMMAND t)\n"
    view = _view(tmp_path / "a", {"CMakeLists.txt": base + "find_package(tomlplusplus CONFIG REQUIRED)\n"
                                                          "find_package(magic_enum 0.9 REQUIRED)\n", "t.cpp": ""})
    run = Cpp().recipe(view).steps[0].run
    assert "libtomlplusplus-dev" in run and "libmagicenum-dev" in run and "other" not in run
    view = _view(tmp_path / "b", {"CMakeLists.txt": base + "pkg_check_modules(X REQUIRED nosuchlib>=1.0)\n",
                                  "t.cpp": ""})
    with pytest.raises(InputError, match=r"CMakeLists.txt pkg_check_modules\(nosuchlib\) is REQUIRED and no Debian "
                                         r"bookworm package ships nosuchlib.pc"):
        Cpp().recipe(view)


def test_an_unreadable_contents_index_is_a_rejection_that_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVGEN_DEBIAN_CONTENTS", str(tmp_path / "missing.gz"))
    monkeypatch.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))
    view = _view(tmp_path / "c", {"CMakeLists.txt": "project(p CXX)\nenable_testing()\nadd_test(NAME t COMMAND t)\n"
                                                    "pkg_check_modules(X REQUIRED libzstd)\n", "t.cpp": ""})
    with pytest.raises(InputError, match=r"looking libzstd.pc up in Debian's Contents index failed: Debian's "
                                         r"Contents index .*missing.gz could not be read \(FileNotFoundError"):
        Cpp().recipe(view)


def test_a_top_level_test_option_that_defaults_to_off_is_switched_on(tmp_path):
    """yaml-cpp's tests sit behind ``cmake_dependent_option(YAML_CPP_BUILD_TESTS ... OFF ...)``: with
    -DBUILD_TESTING=ON alone CTest ran the canary only. The option is passed ON, and what it guards is scanned
    as reached; a vendored project's own test switch and options that are not test switches stay as they are."""
    top = """cmake_minimum_required(VERSION 3.15)
project(y)
set(Y_MAIN ON)
include(CMakeDependentOption)
option(Y_USE_SYSTEM_GTEST "system gtest" OFF)
option(Y_WITH_TESTDATA_TOOLS "tools" OFF)
option(Y_FORMAT_TESTS "format" ON)
cmake_dependent_option(Y_BUILD_TESTS "tests" OFF "BUILD_TESTING;Y_MAIN" OFF)
if(Y_BUILD_TESTS)
  find_package(ZLIB REQUIRED)
  add_subdirectory(test)
endif()
"""
    sub = 'option(gtest_build_tests "gtest\'s own" OFF)\nenable_testing()\nadd_test(NAME t COMMAND t)\n'
    rec = Cpp().recipe(_view(tmp_path / "r", {"CMakeLists.txt": top, "test/CMakeLists.txt": sub}))
    assert rec.options == {"configure_args": ["-DY_BUILD_TESTS=ON"]}
    assert any("cmake_dependent_option(Y_BUILD_TESTS) defaults to OFF" in n for n in rec.notes)
    assert [s.name for s in rec.steps] == ["packages"] and "zlib1g-dev" in rec.steps[0].run
    off = top.replace("if(Y_BUILD_TESTS)", "if(Y_USE_SYSTEM_GTEST)")
    rec = Cpp().recipe(_view(tmp_path / "s", {"CMakeLists.txt": off, "test/CMakeLists.txt": sub}))
    assert rec.steps == [] and "-DY_USE_SYSTEM_GTEST=ON" not in rec.options.get("configure_args", [])
