"""C and C++: CMake + CTest and Automake's ``make check``, with GoogleTest and Catch2 from Debian.

- Language: ``c`` when the repository has more C sources (``.c``) than C++ ones (``.cpp .cc .cxx .c++``),
  else ``cpp``; both need a build system at the root: ``CMakeLists.txt`` (CMake + CTest) or
  ``configure.ac``/``configure.in`` with ``Makefile.am`` (Automake's ``make check``).
- Toolchain: the ``gcc`` layer of the base image (GCC 12, CMake 3.25, Make, Autotools, GoogleTest 1.12
  and its sources in /usr/src/googletest, Catch2 2.13, pkg-config; Debian bookworm). A project that asks
  for a newer CMake (``cmake_minimum_required``), Catch2 v3, or a dependency it fetches at configure
  time (``FetchContent``/``ExternalProject`` of anything but GoogleTest) is rejected with the reason.
- Dependencies: Debian packages for the ``find_package`` / ``pkg_check_modules`` calls a default configure
  reaches (``CMakeScan``: option defaults and ``if()`` guards evaluated), CMake's own Find modules by
  ``PACKAGES``, any other name by Debian's Contents index (the package shipping ``<name>.pc`` or
  ``<Name>Config.cmake``), installed as an environment layer from the image's own apt sources
  (``ENVGEN_DEBIAN_MIRROR``); vendored sources (``add_subdirectory``) need nothing. A ``REQUIRED`` package no
  Debian package ships is a rejection naming it (the set-up agent may still install it).
- Tests: the runner builds everything and runs every CTest test (``envgen_verifiers.runners.cxx``); the
  files it is given are the test patch's test sources (they say where the tests are, for the canary and the
  protected test directories).
"""

from __future__ import annotations

import functools
import os
import re

from ...errors import InputError
from ...sandbox.images import DEFAULT_SUITE
from .debian import cached_index, contents_urls
from .lang import Language, Recipe, RepoView, Step

C_SOURCES = (".c",)
CXX_SOURCES = (".cpp", ".cc", ".cxx", ".c++", ".cp")
HEADERS = (".h", ".hpp", ".hh", ".hxx", ".h++", ".ipp", ".tpp", ".inl", ".tcc")
TEST_DIRS = {"test", "tests", "testing", "unittest", "unittests", "unit_tests", "gtest", "t"}
_TEST_STEM = re.compile(r"(^test_|^tests?$|_tests?$|_unittests?$|_spec$|^check_)", re.I)
GCC = "12.2"
"""GCC of the ``gcc`` toolchain layer (Debian bookworm)."""
CMAKE_VERSION = (3, 25, 1)
"""CMake of the ``gcc`` toolchain layer (Debian bookworm)."""
GOOGLETEST_SRC = "/usr/src/googletest"
"""GoogleTest's sources in the image (Debian's googletest package): what a FetchContent of it gets."""
PROVIDED = {"gtest", "googletest", "gmock", "catch2", "threads", "pkgconfig", "gnuinstalldirs", "ctest",
            "fetchcontent", "python", "python3", "pythoninterp", "git", "doxygen", "perl"}
"""find_package names the toolchain layer satisfies (or that only optional tooling uses)."""
PACKAGES = {
    "zlib": ("zlib1g-dev",), "openssl": ("libssl-dev",), "curl": ("libcurl4-openssl-dev",),
    "boost": ("libboost-all-dev",), "fmt": ("libfmt-dev",), "spdlog": ("libspdlog-dev",),
    "nlohmann_json": ("nlohmann-json3-dev",), "benchmark": ("libbenchmark-dev",), "bzip2": ("libbz2-dev",),
    "liblzma": ("liblzma-dev",), "png": ("libpng-dev",), "jpeg": ("libjpeg-dev",), "expat": ("libexpat1-dev",),
    "libxml2": ("libxml2-dev",), "sqlite3": ("libsqlite3-dev",), "yaml-cpp": ("libyaml-cpp-dev",),
    "eigen3": ("libeigen3-dev",), "protobuf": ("libprotobuf-dev", "protobuf-compiler"),
    "absl": ("libabsl-dev",), "doctest": ("doctest-dev",), "icu": ("libicu-dev",), "libuv": ("libuv1-dev",),
    "pcre2": ("libpcre2-dev",), "zstd": ("libzstd-dev",), "lz4": ("liblz4-dev",), "gsl": ("libgsl-dev",),
    "microsoft.gsl": ("libmsgsl-dev",), "tbb": ("libtbb-dev",), "openmp": (), "cmocka": ("libcmocka-dev",),
    "check": ("check",), "cunit": ("libcunit1-dev",), "glib-2.0": ("libglib2.0-dev",),
    "libcrypto": ("libssl-dev",), "libssl": ("libssl-dev",), "libcurl": ("libcurl4-openssl-dev",),
}
"""find_package names of CMake's own Find modules (they name no file of a package) and common pkg-config names
(lower case) -> Debian packages that provide them; any other pkg-config name or CMake package config is looked
up in Debian's Contents index (``debian_providers``)."""
TEST_OPTION = re.compile(r"(?i)^(?:\w+_)?(?:BUILD_|ENABLE_|WITH_)?(?:UNIT_?)?TEST(?:S|ING)?$")
"""An option() that switches a project's tests on (YAML_CPP_BUILD_TESTS, URIPARSER_BUILD_TESTS, HTTPLIB_TEST)."""
TEST_REGISTRATION = re.compile(r"(?i)\b(add_test|gtest_discover_tests|gtest_add_tests|catch_discover_tests|"
                               r"doctest_discover_tests)\s*\(")


def _suffix(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name[name.rfind("."):].lower() if "." in name else ""


def _strip_comments(text: str) -> str:
    return re.sub(r"#[^\n]*", "", text)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


class _CFamily(Language):
    """C or C++ (``own``: the source suffixes whose majority names the language)."""

    own: tuple[str, ...] = ()
    other: tuple[str, ...] = ()

    def is_test_path(self, path: str) -> bool:
        parts = path.split("/")
        if any(p.lower() in TEST_DIRS for p in parts[:-1]):
            return True
        name = parts[-1]
        stem = name[:name.rfind(".")] if "." in name else name
        return _suffix(path) in (*C_SOURCES, *CXX_SOURCES, *HEADERS) and bool(_TEST_STEM.search(stem))

    def is_code_path(self, path: str) -> bool:
        return _suffix(path) in (*C_SOURCES, *CXX_SOURCES, *HEADERS) and not self.is_test_path(path)

    @staticmethod
    def build_system(view: RepoView) -> str | None:
        if view.exists("CMakeLists.txt"):
            return "cmake"
        if (view.exists("configure.ac") or view.exists("configure.in")) and view.exists("Makefile.am"):
            return "automake"
        return None

    def _counts(self, view: RepoView) -> tuple[int, int]:
        own = sum(1 for f in view.files if _suffix(f) in self.own)
        other = sum(1 for f in view.files if _suffix(f) in self.other)
        return own, other

    def detect(self, view: RepoView) -> bool:
        if self.build_system(view) is None:
            return False
        own, other = self._counts(view)
        return own > other if self.name == "c" else (own >= other and own > 0)

    def runnable_tests(self, paths: list[str], view_after: set[str], view: RepoView | None = None) -> list[str]:
        """The test patch's test sources (C/C++ files and headers) that exist after it, else its other test
        files: CTest builds and runs every test; these say where the tests live."""
        after = [p for p in paths if p in view_after and self.is_test_path(p)]
        sources = [p for p in after if _suffix(p) in (*C_SOURCES, *CXX_SOURCES, *HEADERS)]
        return sources or after

    def recipe(self, view: RepoView, *, python: str | None = None) -> Recipe:
        system = self.build_system(view)
        if system is None:
            raise InputError("no CMakeLists.txt, nor configure.ac with Makefile.am, at the repository root: "
                             "C/C++ projects are built with CMake (tests run by CTest) or Automake (make check)")
        notes = [f"{self.name}: {system} project"]
        if python:
            notes.append(f"--python {python} ignored: the tests are not Python")
        packages: list[str] = []
        options: dict = {}
        if system == "cmake":
            framework = "ctest"
            texts = {f: view.read(f) or "" for f in view.files
                     if f.rsplit("/", 1)[-1] == "CMakeLists.txt" or f.endswith(".cmake")}
            self._cmake_version(texts.get("CMakeLists.txt", ""), notes)
            code = {f: _strip_comments(t) for f, t in texts.items()}
            self._cxx_standard(code, notes)
            if not any(TEST_REGISTRATION.search(t) for t in code.values()):
                raise InputError("the CMake project registers no CTest test (add_test, gtest_discover_tests, "
                                 "catch_discover_tests): nothing for ctest to run")
            defines = self._test_options(code.get("CMakeLists.txt", ""), notes)
            args = self._fetches(code, notes) + [f"-D{name}=ON" for name in defines]
            if args:
                options["configure_args"] = args
            packages = self._cmake_packages(view, texts, notes, defines)
            notes.append("configured with -DBUILD_TESTING=ON, built with make -k, tests run by ctest "
                         "(GoogleTest's XML per test, CTest's JUnit for the others)")
        else:
            framework = "make-check"
            am = {f: view.read(f) or "" for f in view.files if f.rsplit("/", 1)[-1] == "Makefile.am"}
            if not any(re.search(r"^\s*TESTS\s*\+?=", t, re.M) for t in am.values()):
                raise InputError("no Makefile.am defines TESTS: make check has no test to run")
            ac = view.read("configure.ac") or view.read("configure.in") or ""
            for name in sorted(set(re.findall(r"PKG_CHECK_MODULES\(\s*\[?\w+\]?\s*,\s*\[?([\w.+-]+)", ac))):
                self._need(name, True, f"configure.ac PKG_CHECK_MODULES({name})", packages, notes)
            notes.append("autoreconf -fi (when configure is not committed), ./configure, make -k, make check "
                         "(outcomes from the harness's .trs files)")
        steps = []
        if packages:
            pkgs = " ".join(sorted(set(packages)))
            steps.append(Step("packages", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                              f"-qq --no-install-recommends {pkgs} >/dev/null && apt-get clean && "
                              "rm -rf /var/lib/apt/lists/*"))
            notes.append(f"Debian packages: {pkgs}")
        else:
            notes.append("no dependencies beyond the gcc toolchain layer")
        return Recipe(language=self.name, suite=DEFAULT_SUITE, toolchains=("gcc",), steps=steps,
                      framework=framework, options=options, notes=notes)

    @staticmethod
    def _cmake_version(top: str, notes: list[str]) -> None:
        m = re.search(r"(?i)cmake_minimum_required\s*\(\s*VERSION\s+([\d.]+)(?:\.\.\.([\d.]+))?", top)
        if not m:
            return
        need = _version(m.group(1))
        if need > CMAKE_VERSION:
            have = ".".join(map(str, CMAKE_VERSION))
            raise InputError(f"cmake_minimum_required(VERSION {m.group(1)}): the gcc toolchain layer has CMake "
                             f"{have} (Debian bookworm); a newer CMake is not available")
        notes.append(f"cmake_minimum_required {m.group(1)} (CMake {'.'.join(map(str, CMAKE_VERSION))} in the image)")

    @staticmethod
    def _cxx_standard(code: dict[str, str], notes: list[str]) -> None:
        """InputError for a C++ standard GCC 12 does not have (C++26 and later)."""
        for f, text in sorted(code.items()):
            for m in re.finditer(r"(?i)(?:CMAKE_CXX_STANDARD\s+|CXX_STANDARD\s+|cxx_std_)(\d+)", text):
                std = int(m.group(1))
                if std not in (98, 11, 14, 17, 20, 23):
                    raise InputError(f"{f}: C++{std} is asked for; the gcc toolchain layer has GCC {GCC} "
                                     "(C++23 at most)")

    @staticmethod
    def _fetches(code: dict[str, str], notes: list[str]) -> list[str]:
        """Configure arguments that point FetchContent of GoogleTest at Debian's sources; InputError for
        any other download at configure time (validation and episodes run offline)."""
        args = []
        for f, text in sorted(code.items()):
            for name in re.findall(r"(?i)FetchContent_Declare\s*\(\s*([\w.-]+)", text):
                if name.lower() in ("googletest", "gtest"):
                    args.append(f"-DFETCHCONTENT_SOURCE_DIR_{name.upper()}={GOOGLETEST_SRC}")
                    notes.append(f"{f}: FetchContent of {name} uses Debian's GoogleTest sources")
                else:
                    raise InputError(f"{f}: FetchContent_Declare({name}) downloads {name} at configure time; the "
                                     "tests run offline (vendor it, or install it from a Debian package)")
            for name in re.findall(r"(?i)ExternalProject_Add\s*\(\s*([\w.-]+)", text):
                raise InputError(f"{f}: ExternalProject_Add({name}) downloads or builds {name} at build time; "
                                 "the tests run offline")
        return sorted(set(args))

    @staticmethod
    def _test_options(top: str, notes: list[str]) -> dict[str, str]:
        """The top-level options that keep the tests out of a default build (yaml-cpp's
        ``cmake_dependent_option(YAML_CPP_BUILD_TESTS ... OFF "BUILD_TESTING;..." OFF)``): -DBUILD_TESTING=ON
        alone leaves CTest with the canary only. Only the top-level file: a vendored project's own test switch
        (GoogleTest's ``gtest_build_tests``) would build that project's tests, not this one's."""
        defines = {}
        for name, args in cmake_commands(top):
            if name not in ("option", "cmake_dependent_option") or len(args) < 2 or args[0] == "BUILD_TESTING":
                continue
            default = args[2].strip('"') if len(args) > 2 else "OFF"
            if TEST_OPTION.match(args[0]) and default.lower() in _FALSE:
                defines[args[0]] = "ON"
                notes.append(f"CMakeLists.txt: {name}({args[0]}) defaults to OFF: configured with -D{args[0]}=ON")
        return defines

    def _cmake_packages(self, view: RepoView, texts: dict[str, str], notes: list[str],
                        defines: dict[str, str] | None = None) -> list[str]:
        """Debian packages for the find_package / pkg_check_modules calls a default configure in the image
        reaches (``CMakeScan``: a call behind an option that defaults to OFF, another platform's branch or a
        function never called needs nothing)."""
        packages: list[str] = []
        scan = CMakeScan(texts, defines=defines)
        reached = set()
        for f, cmd, args, guard in scan.calls:
            words = [w.strip('"') for w in args]
            if cmd == "find_package":
                if not words or not words[0] or words[0].startswith("$"):
                    continue
                name = words[0]
                reached.add((f, name.lower()))
                if name.lower() == "catch2" and len(words) > 1 and words[1].split(".")[0] == "3":
                    raise InputError(f"{f}: find_package(Catch2 3): Catch2 v3 is not in the image (Debian "
                                     "bookworm has Catch2 2.13)")
                self._need(name, "REQUIRED" in (w.upper() for w in words), f"{f} find_package({name})",
                           packages, notes, "cmake")
                continue
            required = "REQUIRED" in words
            for w in [w for w in words[1:] if not w.isupper()]:
                name = re.split(r"[<>=]", w)[0]
                reached.add((f, name.lower()))
                self._need(name, required, f"{f} {cmd}({name})", packages, notes, "pkgconfig")
        code = {f: _strip_comments(t) for f, t in texts.items()}
        for f, text in sorted(code.items()):  # the calls no default configure reaches: named in the notes
            names = [m.group(1) for m in re.finditer(r"(?i)\bfind_package\s*\(\s*([\w.+-]+)", text)]
            for m in re.finditer(r"(?i)pkg_(?:check|search)_modules?\s*\(([^)]*)\)", text):
                names += [re.split(r"[<>=]", w)[0] for w in m.group(1).split()[1:] if not w.isupper()]
            for name in names:
                if (f, name.lower()) not in reached and name.lower() not in PROVIDED:
                    reached.add((f, name.lower()))
                    notes.append(f"{f}: {name} not needed: no default configure reaches it (behind an option "
                                 "that defaults to OFF, another platform's branch, or a function never called)")
        if any("catch2/catch_test_macros.hpp" in (view.read(p) or "") for p in view.files
               if self.is_test_path(p) and _suffix(p) in (*CXX_SOURCES, *HEADERS)):
            raise InputError("the tests include <catch2/catch_test_macros.hpp> (Catch2 v3); the image has "
                             "Catch2 2.13 (Debian bookworm)")
        return packages

    @staticmethod
    def _need(name: str, required: bool, where: str, packages: list[str], notes: list[str],
              kind: str = "pkgconfig") -> None:
        """Add the Debian packages of ``name`` (a CMake package when ``kind`` is "cmake", else a pkg-config
        module): PROVIDED needs none, PACKAGES names them, else Debian's Contents index says which package
        ships ``<name>.pc`` or ``<Name>Config.cmake``. A REQUIRED one nobody ships is an InputError."""
        key = name.lower()
        if key in PROVIDED or key.startswith(("gtest", "catch")):
            return
        if key in PACKAGES:
            packages.extend(PACKAGES[key])
            return
        if not required:
            notes.append(f"{where}: optional and not installed")
            return
        what = f"{name}.pc" if kind == "pkgconfig" else f"{name}Config.cmake / {key}-config.cmake"
        try:
            found = debian_providers(tuple(contents_urls()))[kind].get(name if kind == "pkgconfig" else key)
        except (OSError, InputError) as e:
            raise InputError(f"{where} is REQUIRED and not in envgen's table; looking {what} up in Debian's "
                             f"Contents index failed: {e}") from None
        if found is None:
            raise InputError(f"{where} is REQUIRED and no Debian {DEFAULT_SUITE} package ships {what} (Debian's "
                             "Contents index); vendor it or let the set-up agent install it")
        packages.append(found)
        notes.append(f"{where}: {found} (the Debian package that ships {what}, by Debian's Contents index)")


class C(_CFamily):
    name = "c"
    own = C_SOURCES
    other = CXX_SOURCES


class Cpp(_CFamily):
    name = "cpp"
    own = CXX_SOURCES
    other = C_SOURCES


# ---------------------------------------------------------------- CMake: commands, option defaults, if() guards
# Hand-written: no maintained Python library parses CMake's language and evaluates its conditions (cmakelang
# formats, it does not evaluate). What follows covers what the dependency scan needs, after cmake-language(7):
# line and bracket comments, quoted and bracket arguments, nested parentheses; option()/set() values;
# if/elseif/else with NOT/AND/OR, parentheses, constants, variables, DEFINED and STREQUAL/EQUAL; functions and
# macros (walked where they are called); include() and add_subdirectory() (walked in place). What it cannot
# decide is "unknown", and a dependency under an unknown guard counts as needed (as before the scan).

_BRACKET_OPEN = re.compile(r"\[(=*)\[")
_TRUE = {"1", "on", "yes", "true", "y"}
_FALSE = {"0", "off", "no", "false", "n", "ignore", "notfound", ""}
_SCOPE_OPEN = {"if": "endif", "function": "endfunction", "macro": "endmacro", "foreach": "endforeach",
               "while": "endwhile", "block": "endblock"}
CMAKE_PLATFORM = {"UNIX": "1", "LINUX": "1", "WIN32": "", "MSVC": "", "APPLE": "", "MINGW": "", "CYGWIN": "",
                  "ANDROID": "", "IOS": "", "EMSCRIPTEN": "", "MSYS": "", "BORLAND": "", "WATCOM": "",
                  "CMAKE_SYSTEM_NAME": "Linux", "CMAKE_HOST_SYSTEM_NAME": "Linux", "CMAKE_C_COMPILER_ID": "GNU",
                  "CMAKE_CXX_COMPILER_ID": "GNU", "CMAKE_CROSSCOMPILING": "", "BUILD_TESTING": "ON",
                  "CMAKE_BUILD_TYPE": "Debug", "CMAKE_SOURCE_DIR": "/src", "PROJECT_IS_TOP_LEVEL": "ON"}
"""What the variables a guard commonly tests are in the image's build (Linux, GCC, -DBUILD_TESTING=ON)."""


def cmake_commands(text: str) -> list[tuple[str, list[str]]]:
    """The commands of a CMake file in order: (lower-case name, arguments); a bracket or quoted argument is kept
    with its quotes so a condition can tell a string from a variable name; parentheses inside the arguments
    are arguments of their own (``(`` and ``)``), as if() needs them."""
    out: list[tuple[str, list[str]]] = []
    i, n = 0, len(text)

    def skip_bracket(j: int) -> int:
        m = _BRACKET_OPEN.match(text, j)
        end = text.find("]" + m.group(1) + "]", m.end())
        return n if end < 0 else end + len(m.group(1)) + 2

    def skip_comment(j: int) -> int:  # at '#'
        if _BRACKET_OPEN.match(text, j + 1):
            return skip_bracket(j + 1)
        end = text.find("\n", j)
        return n if end < 0 else end

    while i < n:
        c = text[i]
        if c == "#":
            i = skip_comment(i)
            continue
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(text, i)
        if not m:
            i += 1
            continue
        name, j = m.group(0), m.end()
        while j < n and text[j] in " \t":
            j += 1
        if j >= n or text[j] != "(":
            i = j
            continue
        args: list[str] = []
        depth, j = 0, j + 1
        while j < n:
            c = text[j]
            if c in " \t\r\n":
                j += 1
            elif c == "#":
                j = skip_comment(j)
            elif c == "(":
                depth += 1
                args.append("(")
                j += 1
            elif c == ")":
                if depth == 0:
                    j += 1
                    break
                depth -= 1
                args.append(")")
                j += 1
            elif c == '"':
                k = j + 1
                while k < n and text[k] != '"':
                    k += 2 if text[k] == "\\" else 1
                args.append(text[j:k + 1])
                j = k + 1
            elif c == "[" and _BRACKET_OPEN.match(text, j):
                k = skip_bracket(j)
                args.append('"' + text[j:k] + '"')
                j = k
            else:
                m2 = re.compile(r'(?:[^\s()#"\\]|\\.)+').match(text, j)
                args.append(m2.group(0))
                j = m2.end()
        out.append((name.lower(), args))
        i = j
    return out


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return True if a is True and b is True else None


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return False if a is False and b is False else None


def _not(a: bool | None) -> bool | None:
    return None if a is None else not a


class CMakeScan:
    """The find_package / pkg_check_modules calls a CMake project makes at a default configure in the image,
    each with its guard: False when it sits behind a condition that is false there (an ``option()`` that
    defaults to OFF, ``if(WIN32)``, a function never called), True when it is always reached, None when the
    scan cannot tell."""

    def __init__(self, files: dict[str, str], top: str = "CMakeLists.txt", defines: dict[str, str] | None = None):
        self.files = files
        self.cmds = {f: cmake_commands(t) for f, t in files.items()}
        self.vars: dict[str, str | None] = dict(CMAKE_PLATFORM) | dict(defines or {})
        self.defines = set(defines or ())
        """Names given on the command line (-D): an option or a dependent option whose condition holds keeps
        them."""
        self.functions: dict[str, tuple[str, list]] = {}
        for f, cmds in sorted(self.cmds.items()):  # every definition first: a call finds it wherever it is
            for i, (name, args) in enumerate(cmds):
                if name in ("function", "macro") and args:
                    end = self._block_end(cmds, i)
                    self.functions.setdefault(args[0].lower(), (f, cmds[i + 1:end]))
        self.calls: list[tuple[str, str, list[str], bool | None]] = []
        """(file, command, arguments, guard) of every find_package / pkg_check_modules / pkg_search_module."""
        self.visited: set[str] = set()
        self.referenced: set[str] = {top}
        """Files an include() or add_subdirectory() names, reached or not (behind a false guard)."""
        self.depth = 0
        if top in self.cmds:
            self._walk_file(top, True)
        for f in sorted(self.cmds):  # files nothing names (included through a variable...): guard unknown
            standalone = f.endswith("CMakeLists.txt") and any(n == "project" for n, _ in self.cmds[f])
            if f not in self.referenced and not standalone:  # (a project of its own is not configured here)
                self._walk_file(f, None)

    @staticmethod
    def _block_end(cmds: list, i: int) -> int:
        opener, depth = cmds[i][0], 0
        for j in range(i, len(cmds)):
            if cmds[j][0] == opener:
                depth += 1
            elif cmds[j][0] == _SCOPE_OPEN[opener]:
                depth -= 1
                if depth == 0:
                    return j
        return len(cmds)

    def _walk_file(self, f: str, guard: bool | None) -> None:
        self.referenced.add(f)
        if guard is False or f in self.visited or self.depth > 20:
            return
        self.visited.add(f)
        d = f.rsplit("/", 1)[0] if "/" in f else ""
        saved = self.vars.get("CMAKE_CURRENT_SOURCE_DIR")
        if f.endswith("CMakeLists.txt"):
            self.vars["CMAKE_CURRENT_SOURCE_DIR"] = "/src" + (f"/{d}" if d else "")
        self._walk(f, self.cmds[f], guard)
        self.vars["CMAKE_CURRENT_SOURCE_DIR"] = saved

    def _walk(self, f: str, cmds: list, guard: bool | None) -> None:
        self.depth += 1
        stack: list[list] = []  # per open if(): [this branch's value, any earlier branch taken]
        i = 0
        while i < len(cmds):
            name, args = cmds[i]
            here = guard
            for branch, _ in stack:
                here = _and(here, branch)
            if name in ("function", "macro"):
                i = self._block_end(cmds, i) + 1
                continue
            if name == "if":
                c = self.condition(args)
                stack.append([c, c])
            elif name == "elseif" and stack:
                c = _and(_not(stack[-1][1]), self.condition(args))
                stack[-1] = [c, _or(stack[-1][1], self.condition(args))]
            elif name == "else" and stack:
                stack[-1] = [_not(stack[-1][1]), True]
            elif name == "endif" and stack:
                stack.pop()
            elif here is not False:
                self._command(f, name, args, here)
            elif name in ("add_subdirectory", "include"):
                self._command(f, name, args, False)
            i += 1
        self.depth -= 1

    def _command(self, f: str, name: str, args: list[str], guard: bool | None) -> None:
        d = f.rsplit("/", 1)[0] if "/" in f else ""
        if name in ("find_package", "pkg_check_modules", "pkg_search_module"):
            self.calls.append((f, name, [self.expand(a) or a for a in args], guard))
        elif name == "option" and len(args) >= 2:
            if args[0] not in self.vars:  # an option never overrides a value already set (CMP0077)
                value = self.expand(args[2]) if len(args) > 2 else "OFF"
                self._set(args[0], None if value is None else ("ON" if _const(value) else "OFF"), guard)
        elif name == "cmake_dependent_option" and len(args) >= 5:
            on = self.condition(cmake_commands("x(" + args[3].strip('"').replace(";", " AND ") + ")")[0][1])
            value = {True: self.vars[args[0]] if args[0] in self.defines else self.expand(args[2]),
                     False: self.expand(args[4]), None: None}[on]
            self._set(args[0], value, guard)
        elif name == "set" and args and not args[0].startswith("ENV{"):
            values = [a for a in args[1:] if a not in ("CACHE", "PARENT_SCOPE", "FORCE", "INTERNAL")]
            value = self.expand(values[0]) if len(values) == 1 else None if values else ""
            if "CACHE" in args and args[0] in self.vars and "FORCE" not in args:
                return  # a cache entry does not override a value already set
            self._set(args[0], value, guard)
        elif name == "unset" and args:
            self._set(args[0], "", guard)
        elif name == "add_subdirectory" and args:
            sub = self.expand(args[0])
            if sub:
                path = os.path.normpath(os.path.join(d, sub.strip('"'), "CMakeLists.txt")).replace(os.sep, "/")
                if path in self.cmds:
                    self._walk_file(path, guard)
        elif name == "include" and args:
            target = (self.expand(args[0]) or "").strip('"')
            for cand in (os.path.normpath(os.path.join(d, target)).replace(os.sep, "/"),):
                if cand in self.cmds:
                    self._walk_file(cand, guard)
                    return
            hits = sorted(p for p in self.cmds if p.rsplit("/", 1)[-1] == f"{target}.cmake")
            if hits:
                self._walk_file(hits[0], guard)
        elif name in self.functions and self.depth < 20:
            src, body = self.functions[name]
            self._walk(src, body, guard)

    def _set(self, var: str, value: str | None, guard: bool | None) -> None:
        if guard is True:
            self.vars[var] = value
        elif self.vars.get(var) != value:  # maybe set, maybe not
            self.vars[var] = None

    def expand(self, arg: str) -> str | None:
        """``arg`` with its ``${VAR}`` references replaced; None when one of them is unknown."""
        unknown = False

        def sub(m: re.Match) -> str:
            nonlocal unknown
            v = self.vars.get(m.group(1))
            if v is None:
                unknown = True
                return ""
            return v

        for _ in range(5):
            if "${" not in arg:
                break
            arg = re.sub(r"\$\{([^${}]+)\}", sub, arg)
        return None if unknown else arg

    def _value(self, tok: str) -> bool | None:
        if tok.startswith('"'):
            text = self.expand(tok[1:-1])
            return None if text is None else _const(text) is True
        text = self.expand(tok)
        if text is None:
            return None
        c = _const(text)
        if c is not None:
            return c
        v = self.vars.get(text)  # a variable the scan does not know may be set by CMake or a module: unknown
        return None if v is None else _const(v) is True

    def _str(self, tok: str) -> str | None:
        if tok.startswith('"'):
            return self.expand(tok[1:-1])
        text = self.expand(tok)
        if text is not None and (text in self.vars or re.fullmatch(r"[A-Za-z_]\w*", text)):
            return self.vars.get(text)  # a variable's value; one the scan does not know: unknown
        return text

    def condition(self, args: list[str]) -> bool | None:
        """An if() condition's value in the image's build, None when it cannot be told."""
        toks = list(args)
        pos = 0

        def primary() -> bool | None:
            nonlocal pos
            if pos >= len(toks):
                return None
            t = toks[pos]
            if t == "(":
                pos += 1
                v = or_expr()
                if pos < len(toks) and toks[pos] == ")":
                    pos += 1
                return v
            if t in ("DEFINED",) and pos + 1 < len(toks):
                name = toks[pos + 1]
                pos += 2
                if name.startswith("ENV{"):
                    return None
                return True if self.vars.get(name) is not None else None
            if t in ("EXISTS", "COMMAND", "TARGET", "POLICY", "TEST", "IS_DIRECTORY", "IS_ABSOLUTE", "IS_SYMLINK"):
                pos += 2
                return None
            if pos + 2 < len(toks) and toks[pos + 1] in _BINARY:
                a, op, b = toks[pos], toks[pos + 1], toks[pos + 2]
                pos += 3
                return _binary(self._str(a), op, self._str(b))
            pos += 1
            return self._value(t)

        def not_expr() -> bool | None:
            nonlocal pos
            if pos < len(toks) and toks[pos] == "NOT":
                pos += 1
                return _not(not_expr())
            return primary()

        def and_expr() -> bool | None:
            nonlocal pos
            v = not_expr()
            while pos < len(toks) and toks[pos] == "AND":
                pos += 1
                v = _and(v, not_expr())
            return v

        def or_expr() -> bool | None:
            nonlocal pos
            v = and_expr()
            while pos < len(toks) and toks[pos] == "OR":
                pos += 1
                v = _or(v, and_expr())
            return v

        v = or_expr()
        return v if pos >= len(toks) else None


_BINARY = {"STREQUAL", "EQUAL", "LESS", "GREATER", "LESS_EQUAL", "GREATER_EQUAL", "MATCHES", "STRLESS",
           "STRGREATER", "VERSION_LESS", "VERSION_GREATER", "VERSION_EQUAL", "VERSION_LESS_EQUAL",
           "VERSION_GREATER_EQUAL", "IN_LIST", "PATH_EQUAL", "IS_NEWER_THAN", "STRLESS_EQUAL", "STRGREATER_EQUAL"}


def _const(text: str) -> bool | None:
    """CMake's constants: True/False for a named constant, None for anything else (a variable name)."""
    low = text.strip().lower()
    if low in _TRUE or re.fullmatch(r"-?\d+(\.\d+)?", low) and float(low) != 0:
        return True
    if low in _FALSE or low.endswith("-notfound") or re.fullmatch(r"-?0+(\.0+)?", low):
        return False
    return None


def _binary(a: str | None, op: str, b: str | None) -> bool | None:
    if a is None or b is None:
        return None
    if op == "STREQUAL":
        return a == b
    if op == "MATCHES":
        try:
            return re.search(b, a) is not None
        except re.error:
            return None
    if op in ("EQUAL", "LESS", "GREATER", "LESS_EQUAL", "GREATER_EQUAL"):
        try:
            x, y = float(a), float(b)
        except ValueError:
            return False
        return {"EQUAL": x == y, "LESS": x < y, "GREATER": x > y, "LESS_EQUAL": x <= y, "GREATER_EQUAL": x >= y}[op]
    if op.startswith("VERSION_"):
        x, y = _version(a), _version(b)
        return {"VERSION_LESS": x < y, "VERSION_GREATER": x > y, "VERSION_EQUAL": x == y,
                "VERSION_LESS_EQUAL": x <= y, "VERSION_GREATER_EQUAL": x >= y}[op]
    return None


# ---------------------------------------------------------------- Debian's Contents index: who ships a .pc file
# A pkg-config name or a CMake package config (icu-uc, FooConfig.cmake) names a file; the package that installs
# it comes from Debian's Contents index (``debian``). CMake's own Find modules (FindZLIB, FindICU...) name no
# file of their own: those stay in PACKAGES.

_PC_FILE = re.compile(r"^usr/(?:lib/(?:[^/\s]+/)?|share/)pkgconfig/([^/\s]+)\.pc\s+(\S+)$")
_CMAKE_CONFIG = re.compile(r"^usr/(?:lib/(?:[^/\s]+/)?|share/)(?:cmake/)?[^/\s]+/(?:cmake/)?([^/\s]+?)"
                           r"(?:Config|-config)\.cmake\s+(\S+)$")


def _package(field: str) -> str:
    """The package of a Contents line's location list (``libdevel/libicu-dev,...``): a -dev one first."""
    pkgs = [p.rsplit("/", 1)[-1] for p in field.split(",")]
    return next((p for p in pkgs if p.endswith("-dev")), pkgs[0])


@functools.lru_cache(maxsize=4)
def debian_providers(urls: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """{"pkgconfig": {name: package}, "cmake": {lower-case name: package}} from the Contents indexes at
    ``urls`` (``debian.cached_index``); OSError when an index cannot be read."""

    def reduce(lines) -> dict:
        pc: dict[str, str] = {}
        cm: dict[str, str] = {}
        for line in lines:
            if "pkgconfig/" in line:
                m = _PC_FILE.match(line)
                if m:
                    pc.setdefault(m.group(1), _package(m.group(2)))
            elif "onfig.cmake" in line:
                m = _CMAKE_CONFIG.match(line)
                if m:
                    cm.setdefault(m.group(1).lower(), _package(m.group(2)))
        return {"pkgconfig": pc, "cmake": cm}

    return cached_index("", urls, reduce)
