"""C and C++: CMake + CTest and Automake's ``make check``, with GoogleTest and Catch2 from Debian.

- Language: ``c`` when the repository has more C sources (``.c``) than C++ ones (``.cpp .cc .cxx .c++``),
  else ``cpp``; both need a build system at the root: ``CMakeLists.txt`` (CMake + CTest) or
  ``configure.ac``/``configure.in`` with ``Makefile.am`` (Automake's ``make check``).
- Toolchain: the ``gcc`` layer of the base image (GCC 12, CMake 3.25, Make, Autotools, GoogleTest 1.12
  and its sources in /usr/src/googletest, Catch2 2.13, pkg-config; Debian bookworm). A project that asks
  for a newer CMake (``cmake_minimum_required``), Catch2 v3, or a dependency it fetches at configure
  time (``FetchContent``/``ExternalProject`` of anything but GoogleTest) is rejected with the reason.
- Dependencies: Debian packages, for the ``find_package`` / ``pkg_check_modules`` names of ``PACKAGES``,
  installed as an environment layer from the image's own apt sources (the Debian mirror the base image
  was built with, ``ENVGEN_DEBIAN_MIRROR``); vendored sources (``add_subdirectory``) need nothing. A
  ``REQUIRED`` package outside that table is a rejection naming it (the set-up agent may still install it).
- Tests: the runner builds everything and runs every CTest test (``envgen_verifiers.runners.cxx``); the
  files it is given are the test patch's test sources (they say where the tests are, for the canary and the
  protected test directories).
"""

from __future__ import annotations

import re

from ...errors import InputError
from ...sandbox.images import DEFAULT_SUITE
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
"""find_package / pkg-config names (lower case) -> Debian packages that provide them."""
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
            args = self._fetches(code, notes)
            if args:
                options["configure_args"] = args
            packages = self._cmake_packages(view, code, notes)
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

    def _cmake_packages(self, view: RepoView, code: dict[str, str], notes: list[str]) -> list[str]:
        packages: list[str] = []
        for f, text in sorted(code.items()):
            for m in re.finditer(r"(?i)\bfind_package\s*\(([^)]*)\)", text):
                words = m.group(1).split()
                if not words or words[0].startswith("$"):
                    continue
                name = words[0]
                if name.lower() == "catch2" and len(words) > 1 and words[1].split(".")[0] == "3":
                    raise InputError(f"{f}: find_package(Catch2 3): Catch2 v3 is not in the image (Debian "
                                     "bookworm has Catch2 2.13)")
                self._need(name, "REQUIRED" in (w.upper() for w in words), f"{f} find_package({name})",
                           packages, notes)
            for m in re.finditer(r"(?i)pkg_(?:check|search)_modules\s*\(([^)]*)\)", text):
                words = [w for w in m.group(1).split()[1:] if not w.isupper()]
                required = "REQUIRED" in m.group(1).upper().split()
                for w in words:
                    name = re.split(r"[<>=]", w)[0]
                    self._need(name, required, f"{f} pkg_check_modules({name})", packages, notes)
        if any("catch2/catch_test_macros.hpp" in (view.read(p) or "") for p in view.files
               if self.is_test_path(p) and _suffix(p) in (*CXX_SOURCES, *HEADERS)):
            raise InputError("the tests include <catch2/catch_test_macros.hpp> (Catch2 v3); the image has "
                             "Catch2 2.13 (Debian bookworm)")
        return packages

    @staticmethod
    def _need(name: str, required: bool, where: str, packages: list[str], notes: list[str]) -> None:
        key = name.lower()
        if key in PROVIDED or key.startswith(("gtest", "catch")):
            return
        if key in PACKAGES:
            packages.extend(PACKAGES[key])
            return
        if required:
            raise InputError(f"{where} is REQUIRED and no Debian package for it is known to envgen; vendor it or "
                             "let the set-up agent install it")
        notes.append(f"{where}: optional and not installed")


class C(_CFamily):
    name = "c"
    own = C_SOURCES
    other = CXX_SOURCES


class Cpp(_CFamily):
    name = "cpp"
    own = CXX_SOURCES
    other = C_SOURCES
