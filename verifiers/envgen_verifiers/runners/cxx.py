"""C and C++ test runners: CMake + CTest (``ctest``) and Automake's ``make check`` (``make-check``).

ctest: configure (``cmake -S tree -B REPORT/build``, the Makefile generator), build with ``-k`` (a test
program that does not compile leaves its tests missing, the others still run), then ``ctest`` one test
at a time with ``GTEST_OUTPUT=xml:REPORT/gtest/`` (each GoogleTest process writes its own XML there) and
``--output-junit``. Outcomes: every GoogleTest case from GoogleTest's own XML (id ``Suite.Name``,
parameterised ``Inst/Suite.Name/0``, typed ``Suite/0.Name``); every other CTest test from CTest's JUnit
(id: the CTest test name, which ``catch_discover_tests`` makes the Catch2 test case name). A CTest test
whose output shows GoogleTest ran is represented by its GoogleTest cases only, so a GoogleTest process
that exits 0 before writing its XML leaves its tests missing (failed), never passed. Without CTest's
JUnit (a run cut short), CTest's console lines. The build directory is the run's fresh report
directory: nothing of an earlier build is reused. The canary is a CTest test added by a CMake file the
kit writes and passes as ``CMAKE_PROJECT_INCLUDE`` (run after the top-level ``project()``).

make-check: ``autoreconf -fi`` when the tree has ``configure.ac`` but no ``configure``, ``./configure``,
``make -k``, ``make -k check``; outcomes from the Automake harness's ``.trs`` files (id: the test's
path as the harness names its log, without ``.trs``; TAP results ``tests/x.t 2 - description``), else
its console lines (``PASS: tests/x``). The canary is a program that always fails (``envgen_canary_<token>.c``)
registered in the Makefile.am that lists the tests, the way they are (``check_PROGRAMS``, ``TESTS``); a
Makefile.am edited after checkout (the canary, twin checks) makes the run regenerate the build
(``autoreconf -fi``) even when ``configure`` is committed.

options: ``configure_args`` (list of extra arguments to ``cmake`` or ``./configure``), ``build_type``
(CMake, default Debug), ``jobs`` (build parallelism, default the CPUs available, at most 8).
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

from .base import ERROR, FAILED, FAILING, PASSED, SKIPPED, XFAIL, Runner, merge, read_reports, \
    read_text, short, under
from .cxx_dialect import AUTOMAKE, CTEST, am_vars

TEST_DIRS = ("test", "tests", "testing", "unittest", "unittests", "unit_tests", "gtest", "t")
"""Directory names whose files belong to the tests (sources, data, their build files)."""
CMAKE_NAMES = frozenset({"CMakeLists.txt", "CMakePresets.json", "CMakeUserPresets.json", "CTestTestfile.cmake",
                         "CTestConfig.cmake", "CTestCustom.cmake", "CTestCustom.ctest"})
"""Build files that define how tests are built, registered and run; any ``*.cmake`` too."""
MAKE_NAMES = frozenset({"Makefile.am", "Makefile.in", "Makefile", "GNUmakefile", "makefile", "configure.ac",
                        "configure.in", "configure", "aclocal.m4", "test-driver", "tap-driver.sh", "tap-driver.pl",
                        "check.mk", "local.mk"})
"""Automake's inputs and outputs, its test drivers and the makefiles ``make check`` reads."""
CANARY_PREFIX = "envgen_canary_"
LISTING = "ctest-tests.json"
"""``ctest --show-only=json-v1`` before the run: each test's command."""
GTEST_RAN = re.compile(r"^\[==========\] Running \d+ tests? from", re.M)


def jobs(options: dict) -> int:
    if options.get("jobs"):
        return max(1, int(options["jobs"]))
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(8, n))


def _extra_args(options: dict) -> list[str]:
    args = options.get("configure_args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"options.configure_args must be a list of strings, not {args!r}")
    return list(args)


# ---------------------------------------------------------------- GoogleTest, CTest


def gtest_cases(text: str) -> list[tuple[str, str, str]]:
    """[(``Suite.Name``, outcome, message)] of one GoogleTest XML report. Only cases GoogleTest ran or
    disabled (they carry ``status``): the test listing ``--gtest_list_tests`` writes to the same place
    (``gtest_discover_tests`` in PRE_TEST mode) has no status and is no result. Raises ValueError when
    the text is not GoogleTest XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"not XML: {e}") from None
    if root.tag != "testsuites":
        raise ValueError(f"not a GoogleTest report (root element {root.tag!r})")
    out = []
    for suite in root.iter("testsuite"):
        for case in suite.findall("testcase"):
            status = case.get("status")
            if status is None:
                continue
            tid = f"{case.get('classname') or suite.get('name') or ''}.{case.get('name') or ''}"
            outcome, message = PASSED, ""
            for child in case:
                if child.tag == "failure" and outcome != ERROR:
                    outcome, message = FAILED, _gtest_message(child.get("message") or child.text or "")
                elif child.tag == "error":
                    outcome, message = ERROR, _gtest_message(child.get("message") or child.text or "")
            if outcome == PASSED and (status == "notrun" or case.get("result") in ("skipped", "suppressed")):
                outcome = SKIPPED
            out.append((tid, outcome, message))
    return out


def _gtest_message(text: str) -> str:
    """Where the assertion is and its last lines (the values compared, the user's message)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return short("\n".join(lines if len(lines) <= 3 else [lines[0], *lines[-2:]]))


def _ctest_case_outcome(elem: ET.Element) -> str:
    """CTest's JUnit status: run, fail, notrun (skipped, or its program missing), disabled."""
    status = elem.get("status") or ""
    if elem.find("failure") is not None or status == "fail":
        return FAILED
    if status == "disabled":
        return SKIPPED
    if status == "notrun":
        skipped = elem.find("skipped")
        msg = (skipped.get("message") if skipped is not None else "") or ""
        return SKIPPED if "SKIP" in msg.upper() else ERROR  # a skip return code vs. a program that is missing
    return PASSED


def ctest_junit(text: str) -> list[tuple[str, str, str, str]]:
    """[(CTest test name, outcome, message, output)] of CTest's ``--output-junit`` report; raises
    ValueError when the text is not JUnit XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"not XML: {e}") from None
    if root.tag not in ("testsuite", "testsuites"):
        raise ValueError(f"not a JUnit report (root element {root.tag!r})")
    out = []
    for case in root.iter("testcase"):
        outcome = _ctest_case_outcome(case)
        sysout = case.find("system-out")
        output = (sysout.text or "") if sysout is not None else ""
        message = ""
        if outcome in FAILING:
            fail = case.find("failure")
            message = short((fail.get("message") if fail is not None else "") or _tail(output))
        out.append((case.get("name") or "", outcome, message, output))
    return out


def _tail(text: str, lines: int = 3) -> str:
    keep = [ln for ln in text.strip().splitlines() if ln.strip().strip("=-~")]
    return "\n".join(keep[-lines:])


_CTEST_LINE = re.compile(r"^\s*\d+/\d+\s+Test\s+#\d+:\s+(.+?)\s+\.*\s*(?:\*\*\*)?"
                         r"(Passed|Failed|Not Run|Skipped|Timeout|Exception|Disabled|[A-Z][A-Za-z]+(?= ))")


def ctest_console(text: str) -> dict[str, str]:
    """{CTest test name: outcome} from CTest's progress lines (``1/5 Test #1: name ....   Passed``)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _CTEST_LINE.match(line)
        if not m:
            continue
        word = "Disabled" if "(Disabled)" in line else m.group(2)
        outcome = {"Passed": PASSED, "Skipped": SKIPPED, "Disabled": SKIPPED, "Not Run": ERROR}.get(word, FAILED)
        if out.get(m.group(1)) not in FAILING:
            out[m.group(1)] = outcome
    return out


def gtest_owned(listing: str) -> set:
    """The CTest tests that run one GoogleTest case (a ``--gtest_*`` argument: ``gtest_discover_tests``,
    ``gtest_add_tests``), from ``ctest --show-only=json-v1``: only GoogleTest's XML speaks for them (their
    CTest names may hold a parameter's printed value, even an address, so they are no stable id)."""
    import json

    try:
        doc = json.loads(listing)
    except ValueError:
        return set()
    tests = doc.get("tests") if isinstance(doc, dict) else None
    return {t.get("name") for t in tests or () if isinstance(t, dict)
            and any(isinstance(a, str) and a.startswith("--gtest_") for a in t.get("command") or ())}


def parse_ctest(report_dir: str, output: str) -> tuple[dict, dict, str]:
    """(outcomes, messages, source) of a ``CTest`` run whose reports are in ``report_dir``."""
    outcomes: dict = {}
    messages: dict = {}
    sources = []
    for text in read_reports(os.path.join(report_dir, "gtest")):
        try:
            cases = gtest_cases(text)
        except ValueError:
            continue
        for tid, outcome, message in cases:
            merge(outcomes, messages, tid, outcome, message)
        if cases and "gtest" not in sources:
            sources.append("gtest")
    junit = read_text(os.path.join(report_dir, "ctest.xml"))
    cases = None
    if junit:
        try:
            cases = ctest_junit(junit)
        except ValueError:
            cases = None
    owned = gtest_owned(read_text(os.path.join(report_dir, LISTING)) or "")
    if cases is not None:
        sources.append("ctest-junit")
        for name, outcome, message, out in cases:
            if GTEST_RAN.search(out) or name in owned:
                continue  # its GoogleTest cases speak for it (or are missing: failed)
            merge(outcomes, messages, name, outcome, message)
    else:
        found = ctest_console(output)
        if found:
            sources.append("ctest-console")
        gtest_ids = set(outcomes)
        for name, outcome in found.items():
            if name not in gtest_ids and name not in owned:
                merge(outcomes, messages, name, outcome)
    return outcomes, messages, "+".join(sources) or "none"


CANARY_CMAKE = """# written by envgen's verifier for one test run (CMAKE_PROJECT_INCLUDE): a test that always fails
if(CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR AND NOT ENVGEN_CANARY_{tok})
  set(ENVGEN_CANARY_{tok} 1)
  enable_testing()
  add_test(NAME {name} COMMAND "${{CMAKE_COMMAND}}" -E false)
endif()
"""


def has_project_call(tree: str) -> bool:
    """Whether the top-level CMakeLists.txt calls ``project()`` (``CMAKE_PROJECT_INCLUDE`` runs after it)."""
    text = read_text(os.path.join(tree, "CMakeLists.txt")) or ""
    text = re.sub(r"#[^\n]*", "", text)
    return re.search(r"(?i)^\s*project\s*\(", text, re.M) is not None


class CTest(Runner):
    framework = "ctest"
    language = "cpp"
    config_names = CMAKE_NAMES
    dialect = CTEST
    """GoogleTest declarations, plain CTest tests as whole programs (``cxx_dialect``): the twin checks."""

    def infrastructure(self, path: str, options: dict) -> bool:
        name = path.rsplit("/", 1)[-1]
        return name in CMAKE_NAMES or name.endswith((".cmake", ".cmake.in")) or under(path, TEST_DIRS) \
            or name.startswith(CANARY_PREFIX)

    def env(self, env: dict, tree: str, options: dict) -> dict:
        return {**env, "GTEST_COLOR": "no", "CLICOLOR": "0", "CTEST_OUTPUT_ON_FAILURE": "1"}

    def canary(self, tree: str, files: list[str], tok: str, options: dict):
        if not has_project_call(tree):
            return None
        return f"{CANARY_PREFIX}{tok}.cmake", CANARY_CMAKE.format(tok=tok, name=f"{CANARY_PREFIX}{tok}")

    def commands(self, tree: str, files: list[str], report_dir: str, options: dict) -> list[list[str]]:
        build = os.path.join(report_dir, "build")
        canary = next((f for f in files if f.rsplit("/", 1)[-1].startswith(CANARY_PREFIX)
                       and f.endswith(".cmake")), None)
        configure = ["cmake", "-S", tree, "-B", build, "-G", "Unix Makefiles",
                     f"-DCMAKE_BUILD_TYPE={options.get('build_type') or 'Debug'}", "-DBUILD_TESTING=ON",
                     "-DFETCHCONTENT_FULLY_DISCONNECTED=ON", *_extra_args(options)]
        if canary:
            configure.append(f"-DCMAKE_PROJECT_INCLUDE={os.path.join(tree, canary)}")
        make = ["sh", "-c", 'cmake --build "$1" -j "$2" -- -k; echo "envgen: the build exited with $?"', "sh",
                build, str(jobs(options))]
        listing = ["sh", "-c", 'ctest --test-dir "$1" --show-only=json-v1 > "$2" || true', "sh", build,
                   os.path.join(report_dir, LISTING)]
        test = ["env", f"GTEST_OUTPUT=xml:{os.path.join(report_dir, 'gtest')}/", "ctest", "--test-dir", build,
                "--output-junit", os.path.join(report_dir, "ctest.xml"), "--no-tests=error", "-j1"]
        return [configure, make, listing, test]

    def parse(self, report_dir: str, output: str, files: list[str], options: dict) -> tuple[dict, dict, str]:
        return parse_ctest(report_dir, output)


# ---------------------------------------------------------------- Automake


AM_RESULTS = {"PASS": PASSED, "FAIL": FAILED, "XFAIL": XFAIL, "XPASS": FAILED, "SKIP": SKIPPED, "ERROR": ERROR}
_AM_LINE = re.compile(r"^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR): (\S.*?)\s*$")
_TAP_NAME = re.compile(r"^(.*?) (\d+)(?: - (.*?))?(?: # (?:SKIP|TODO)\b.*)?$", re.I)


def _tap_id(name: str) -> str:
    """``tests/x.t 2 - desc # SKIP why`` -> ``tests/x.t 2 - desc`` (the directive is not the test's name)."""
    m = _TAP_NAME.match(name)
    if not m:
        return name
    return f"{m.group(1)} {m.group(2)}" + (f" - {m.group(3)}" if m.group(3) else "")


def parse_trs(report_dir: str) -> tuple[dict, dict]:
    """(outcomes, messages) from the Automake harness's ``.trs`` files under ``report_dir`` (kept with their
    tree-relative paths, next to their ``.log``)."""
    outcomes: dict = {}
    messages: dict = {}
    paths = []
    for root, _dirs, names in os.walk(report_dir):
        paths += [os.path.join(root, n) for n in names if n.endswith(".trs")]
    for path in sorted(paths):
        text = read_text(path) or ""
        results = [ln.split(":", 2)[2].strip().split()[0] for ln in text.splitlines()
                   if ln.startswith(":test-result:") and ln.split(":", 2)[2].strip()]
        results = [r for r in results if r in AM_RESULTS]
        stem = os.path.relpath(path, report_dir)[:-4].replace(os.sep, "/")
        log = read_text(path[:-4] + ".log") or ""
        if len(results) == 1 and not text.startswith(":global-test-result:"):
            outcome = AM_RESULTS[results[0]]
            merge(outcomes, messages, stem, outcome, short(_tail(log)) if outcome in FAILING else "")
            continue
        # a TAP (or other multi-result) driver: its log has the driver's line for each result, in order
        i = 0
        for line in log.splitlines():
            m = _AM_LINE.match(line)
            if not m or i >= len(results) or m.group(1) != results[i]:
                continue
            t = _TAP_NAME.match(m.group(2))
            if not t or int(t.group(2)) != i + 1:
                continue
            merge(outcomes, messages, _tap_id(m.group(2)), AM_RESULTS[results[i]])
            i += 1
        for j in range(i, len(results)):  # results whose line the log does not have: by number
            merge(outcomes, messages, f"{stem} {j + 1}", AM_RESULTS[results[j]])
    return outcomes, messages


def parse_am_console(text: str) -> dict[str, str]:
    """{test: outcome} from the harness's console lines (``PASS: tests/x``, ``FAIL: tests/x.t 2 - desc``)."""
    out: dict[str, str] = {}
    messages: dict = {}
    for line in text.splitlines():
        m = _AM_LINE.match(line.strip())
        if m:
            merge(out, messages, _tap_id(m.group(2)) if _TAP_NAME.match(m.group(2)) and
                  re.search(r" \d+( - |$| #)", m.group(2)) else m.group(2), AM_RESULTS[m.group(1)])
    return out


REGENERATE = "if find . -name Makefile.am -newer configure | grep -q .; then autoreconf -fi; fi"
"""A committed ``configure``: the build is made again when a Makefile.am changed after checkout."""
COPY_REPORTS = r"""make -k -j"$2" check; rc=$?
find . -name '*.trs' -type f | while IFS= read -r f; do
  mkdir -p "$1/$(dirname "$f")" && cp "$f" "$1/$f"
  [ -f "${f%.trs}.log" ] && cp "${f%.trs}.log" "$1/${f%.trs}.log"
done
exit $rc"""


CANARY_SOURCE = "/* written by envgen's verifier for one test run: a test program that always fails */\n" \
    "int main(void) {{ return {rc}; }}\n"


def am_canary_makefile(text: str, name: str, source: str) -> str:
    """A Makefile.am with the canary program registered as its tests are: in ``check_PROGRAMS`` and, unless
    ``TESTS`` is made from ``check_PROGRAMS``, in ``TESTS``; linked with nothing of the project."""
    defined = {v: val for v, val, _s, _e in am_vars(text)}
    lines = [f"check_PROGRAMS {'+=' if 'check_PROGRAMS' in defined else '='} {name}",
             f"{canonical_name(name)}_SOURCES = {source}", f"{canonical_name(name)}_LDADD ="]
    tests = defined.get("TESTS") or ""
    if "$(check_PROGRAMS)" not in tests and "${check_PROGRAMS}" not in tests:
        lines.append(f"TESTS += {name}")
    return text + ("" if text.endswith("\n") or not text else "\n") + "\n".join(lines) + "\n"


def canonical_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_@]", "_", name)


def _tests_makefile(tree: str) -> str | None:
    """The Makefile.am whose ``TESTS`` the canary joins: the top-level one if it has TESTS, else the first."""
    found = []
    for root, dirs, names in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if "Makefile.am" in names:
            rel = os.path.relpath(os.path.join(root, "Makefile.am"), tree).replace(os.sep, "/")
            text = read_text(os.path.join(root, "Makefile.am")) or ""
            if any(v == "TESTS" for v, _val, _s, _e in am_vars(text)):
                found.append(rel)
    found.sort(key=lambda p: (p.count("/"), p))
    return found[0] if found else None


class MakeCheck(Runner):
    framework = "make-check"
    language = "c"
    config_names = MAKE_NAMES
    dialect = AUTOMAKE
    """Test programs as whole programs (``cxx_dialect``): the twin checks."""

    def canary(self, tree: str, files: list[str], tok: str, options: dict):
        """A program that always fails, beside the Makefile.am that lists the tests and registered there (that
        file is edited in place: every run starts from a tree staged anew)."""
        mk = _tests_makefile(tree)
        if mk is None:
            return None
        ac = (read_text(os.path.join(tree, "configure.ac")) or read_text(os.path.join(tree, "configure.in")) or "")
        c = re.search(r"\bAC_PROG_CC\b|\bAM_PROG_CC_C_O\b", ac) or not re.search(r"AC_PROG_CXX", ac)
        ext = ".c" if c else ".cpp"
        d = os.path.dirname(mk)
        name = f"{CANARY_PREFIX}{tok}"
        full = os.path.join(tree, mk)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        with open(full, "w", encoding="utf-8") as f:
            f.write(am_canary_makefile(text, name, name + ext))
        return "/".join(p for p in (d, name + ext) if p), CANARY_SOURCE.format(rc=1)

    def infrastructure(self, path: str, options: dict) -> bool:
        name = path.rsplit("/", 1)[-1]
        return name in MAKE_NAMES or name.endswith((".am", ".m4", ".mk")) or under(path, TEST_DIRS) \
            or name.endswith((".trs", ".log")) or name.startswith(CANARY_PREFIX)

    def commands(self, tree: str, files: list[str], report_dir: str, options: dict) -> list[list[str]]:
        n = str(jobs(options))
        cmds = []
        has = lambda p: os.path.isfile(os.path.join(tree, p))  # noqa: E731
        if (has("configure.ac") or has("configure.in")) and not has("configure"):
            cmds.append(["autoreconf", "-fi"])
        elif has("configure.ac") or has("configure.in"):  # a Makefile.am edited since checkout (the canary, twins)
            cmds.append(["sh", "-c", REGENERATE])
        if has("configure") or has("configure.ac") or has("configure.in"):
            cmds.append(["sh", "./configure", *_extra_args(options)])
        cmds.append(["sh", "-c", 'make -k -j"$1"; echo "envgen: the build exited with $?"', "sh", n])
        cmds.append(["sh", "-c", COPY_REPORTS, "sh", report_dir, n])
        return cmds

    def parse(self, report_dir: str, output: str, files: list[str], options: dict) -> tuple[dict, dict, str]:
        outcomes, messages = parse_trs(report_dir)
        if outcomes:
            return outcomes, messages, "automake-trs"
        found = parse_am_console(output)
        return found, {}, "automake-console" if found else "none"
