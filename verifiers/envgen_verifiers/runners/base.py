"""The contract of a test runner for a language other than Python (stdlib only; Python 3.9+).

``tests.run_tests`` drives pytest and unittest itself; every other framework (``go``, ``maven``,
``jest``, ``ctest``, ``phpunit``, ...) is a ``Runner``: it says how to run a task's test files (one or
more commands, the last one's report is what counts), how to read the per-test outcomes from the
runner's own report (JUnit XML or JSON) and, when there is none, from its console output, which paths
of the tree configure the test run (restored to base + test patch before every run, whatever the
submission did to them), and how to write a canary test that must be reported as failing (a run that
reports it passing, or does not report it, was taken over and scores 0).

Test ids are each ecosystem's own spelling, stable across runs: ``pkg/path.TestName/sub`` (Go),
``com.acme.FooTest.method`` (JVM), ``src/x.test.ts > suite > name`` (JS), ``Suite.Name`` (GoogleTest),
``Class::method`` (PHPUnit). ``options`` is the recipe's runner options (a dict from the task's args).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass

PASSED, FAILED, ERROR, SKIPPED, XFAIL = "passed", "failed", "error", "skipped", "xfail"
PASSING = (PASSED, XFAIL)
"""Outcomes that count as a pass (an expected failure met its expectation, as SWE-bench counts it)."""
FAILING = (FAILED, ERROR)
MESSAGE_CHARS = 500


@dataclass
class Case:
    """One ``<testcase>`` of a JUnit XML report, as the runner wrote it."""

    suite: str
    """The enclosing ``<testsuite>``'s name."""
    classname: str
    name: str
    file: str
    outcome: str
    message: str


def short(text: str) -> str:
    """A failure's message, on one line and short (enough to tell an assertion from a crash)."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return " | ".join(lines[:3])[:MESSAGE_CHARS]


def junit_cases(text: str) -> list[Case]:
    """Every test case of a JUnit XML report (``<testsuites>`` or a bare ``<testsuite>``, suites nested
    or not: Surefire, Gradle, jest-junit, vitest, mocha-junit-reporter, CTest, GoogleTest, Catch2 and
    PHPUnit all write this shape); raises ValueError when the text is not JUnit XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"not XML: {e}") from None
    if root.tag not in ("testsuites", "testsuite", "testrun"):
        raise ValueError(f"not a JUnit report (root element {root.tag!r})")
    out: list[Case] = []

    def walk(elem: ET.Element, suite: str) -> None:
        for child in elem:
            if child.tag == "testsuite":
                walk(child, child.get("name") or suite)
            elif child.tag == "testcase":
                out.append(_case(child, suite))

    walk(root, root.get("name") or "")
    return out


def _case(elem: ET.Element, suite: str) -> Case:
    outcome, message = PASSED, ""
    for child in elem:
        tag = child.tag
        if tag in ("failure", "rerunFailure") and outcome != ERROR:
            outcome, message = FAILED, short(child.get("message") or child.text or "")
        elif tag in ("error", "rerunError"):
            outcome, message = ERROR, short(child.get("message") or child.text or "")
        elif tag == "skipped" and outcome == PASSED:
            outcome, message = SKIPPED, short(child.get("message") or "")
    # GoogleTest marks a disabled or GTEST_SKIP()ped test with status/result attributes, not <skipped>
    if outcome == PASSED and (elem.get("status") == "notrun" or elem.get("result") in ("skipped", "suppressed")):
        outcome = SKIPPED
    return Case(suite=suite, classname=elem.get("classname") or "", name=elem.get("name") or "",
                file=(elem.get("file") or "").replace("\\", "/"), outcome=outcome, message=message)


def merge(out: dict, messages: dict, tid: str, outcome: str, message: str = "") -> None:
    """Record one outcome; a test reported twice (a retry, a parameterised twin) failed if either failed."""
    if out.get(tid) in FAILING and outcome not in FAILING:
        return
    out[tid] = outcome
    if outcome in FAILING and message:
        messages[tid] = message


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_reports(report_dir: str, suffix: str = ".xml") -> list[str]:
    """The text of every report file under ``report_dir`` (sorted by path, so ids merge the same way
    every run)."""
    found = []
    for root, _dirs, names in os.walk(report_dir):
        for n in names:
            if n.endswith(suffix):
                found.append(os.path.join(root, n))
    return [t for t in (read_text(p) for p in sorted(found)) if t]


class Runner:
    """One test framework. Subclasses set ``framework`` and implement ``commands`` and ``parse``."""

    framework = ""
    language = ""
    config_names: frozenset = frozenset()
    """File names that configure the run anywhere in the tree (``jest.config.js``, ``phpunit.xml``, ...):
    restored to base + test patch before each run."""

    def commands(self, tree: str, files: list[str], report_dir: str, options: dict) -> list[list[str]]:
        """The commands that build and run the test files, in order, run in ``tree``; a command that
        fails stops the sequence (its output is the run's; its tests are missing, hence failed), except
        the last one, whose exit code only says whether some test failed."""
        raise NotImplementedError

    def parse(self, report_dir: str, output: str, files: list[str], options: dict) -> tuple[dict, dict, str]:
        """(outcomes {test id: outcome}, messages {test id: failure message}, source of the outcomes)."""
        raise NotImplementedError

    def env(self, env: dict, tree: str, options: dict) -> dict:
        """The run's environment (the kit's fixed one, built from nothing): add the runner's own variables."""
        return env

    def infrastructure(self, path: str, options: dict) -> bool:
        """Whether ``path`` configures the test run (its tests, harness, build of tests, reporters)."""
        return path.rsplit("/", 1)[-1] in self.config_names

    def canary(self, tree: str, files: list[str], tok: str, options: dict) -> tuple[str, str] | None:
        """(tree-relative path, content) of a test that always fails and whose id contains ``tok``,
        written before the run and removed after; None when this runner cannot add one."""
        return None

    def run_files(self, files: list[str], canary: str | None) -> list[str]:
        """The files (or packages) the commands get, the canary's included."""
        return [*files, canary] if canary else list(files)

    def test_path(self, test_id: str, files: list[str]) -> str:
        """The file (or directory) a test id lives in, for telling which tests a test patch changes:
        the longest run file or directory its id names, else ``""`` (then the test counts as changed
        when the test patch touches any run file)."""
        return ""


def under(path: str, parts) -> bool:
    """Whether any component of ``path`` is one of ``parts``."""
    return any(p in parts for p in path.split("/"))
