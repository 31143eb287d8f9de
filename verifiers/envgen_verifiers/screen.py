"""A static screen of a submitted patch for code that reaches into the test framework (stdlib only).

Defence in depth behind the twin checks (``twins``) and the report rules (``tests.distrust``): a fix of
library code has no business wrapping pytest's reports, replacing jest's ``expect``, printing Go's
``--- PASS`` lines, registering a JUnit ``RunListener``, walking PHPUnit's call stack for its
``TestResult`` or rewriting GoogleTest's XML. The screen reads only the lines the patch adds, outside
the files the verifier restores anyway, and flags a pattern only when the project's own code at the base
commit does not already use it (the project under test may be pytest, jest or PHPUnit itself).
A flagged patch scores 0 and the verdict names the line.
"""

from __future__ import annotations

import re
import subprocess

PATTERNS: list[tuple[str, re.Pattern]] = [
    ("pytest internals", re.compile(r"\b_pytest\b|\bTestReport\b|\bpytest_runtest_\w+|\bpytest\.hookimpl\b|"
                                    r"\bpytest_(?:configure|collection_modifyitems|sessionfinish)\b")),
    ("unittest internals", re.compile(r"\bunittest\.(?:TestResult|TextTestResult|TextTestRunner)\b|"
                                      r"\b(?:addSuccess|addFailure|addError)\s*=")),
    ("an equality that always holds", re.compile(r"def\s+__(?:eq|ne)__\s*\([^)]*\)\s*(?:->\s*\w+\s*)?:\s*return\s+"
                                                 r"(?:True|False)\b")),
    ("the JS test globals", re.compile(r"\b(?:globalThis|global|window|self)\s*(?:\.\s*|\[\s*['\"`])"
                                       r"(?:expect|it|test|describe|assert)\b['\"`]?\s*\]?\s*=(?!=)|"
                                       r"defineProperty\s*\(\s*(?:globalThis|global)\s*,\s*['\"`](?:expect|it|test)")),
    ("a JS test runner's internals", re.compile(r"@jest/|jest-circus|\bvitest/(?:runner|node)\b|mocha/lib")),
    ("Go's test output or flags", re.compile(r"=== RUN|--- (?:PASS|FAIL)|\"Action\"\s*:|flag\.Set\(\s*\"test\.|"
                                             r"_test\.go\b|\btesting\.(?:Init|MainStart|M)\b")),
    ("the JUnit runner or its reports", re.compile(r"\bRunListener\b|org\.junit\.runner\.notification|"
                                                   r"surefire-reports|TEST-[\w.$*]*\.xml|\bTestExecutionListener\b|"
                                                   r"\bLauncherSession\w*\b|\bForkingRunListener\b|"
                                                   r"\bTestResultProcessor\b|reportNameSuffix")),
    ("PHPUnit's runner", re.compile(r"\bdebug_backtrace\b[\s\S]*(?:TestResult|PHPUnit)|"
                                    r"(?:TestResult|PHPUnit)[\s\S]*\bdebug_backtrace\b|"
                                    r"PHPUnit\\{1,2}(?:Framework\\{1,2}TestResult|Runner|TextUI)|\bTestListener\b")),
    ("GoogleTest's runner or reports", re.compile(r"::testing::|\btesting::(?:UnitTest|TestEventListener|"
                                                  r"EmptyTestEventListener)|GTEST_OUTPUT|gtest_output|"
                                                  r"test_detail\.xml|:test-result:|\.trs\b|<testcase\b")),
]
"""(what it reaches, pattern on an added line)."""


def added_lines(patch: str) -> list[tuple[str, str]]:
    """(path, text) of every line a unified diff adds."""
    out = []
    path = None
    for line in patch.splitlines():
        if line.startswith("+++ "):
            p = line[4:].split("\t")[0].strip()
            path = None if p == "/dev/null" else (p[2:] if p[:2] in ("a/", "b/") else p)
        elif line.startswith("+") and not line.startswith("+++") and path:
            out.append((path, line[1:]))
    return out


NOT_CODE = ("**/*lock*", "**/node_modules/**", "**/vendor/**", "**/*.min.js", "**/*.map")
"""What the base grep skips: lockfiles and vendored or bundled dependencies name the test framework in
every project that uses it (``package-lock.json`` holds ``@jest/...``); the project's own code counts."""


def _base_uses(tree: str, base: str | None, pattern: re.Pattern) -> bool:
    """Whether the project's code at ``base`` already matches ``pattern`` (``git grep``)."""
    if not base:
        return False
    cmd = ["git", "-c", "safe.directory=*", "-C", tree, "grep", "-q", "-I", "-P", pattern.pattern, base, "--", ".",
           *(f":(exclude,glob){g}" for g in NOT_CODE)]
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             timeout=60, env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent",
                                              "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C.UTF-8"})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def screen(patch: str, tree: str, base: str | None = None, skip=lambda path: False) -> list[str]:
    """Findings (``path: what it reaches: the line``) for the lines ``patch`` adds outside the paths
    ``skip`` names (the restored test infrastructure), minus patterns the project uses at ``base``.
    Each file's added lines are read together, so a construct split over lines is seen whole."""
    by_path: dict[str, list[str]] = {}
    for path, text in added_lines(patch):
        if not skip(path):
            by_path.setdefault(path, []).append(text)
    hits: dict[str, list[str]] = {}
    for path, lines in by_path.items():
        joined = "\n".join(lines)
        for what, pat in PATTERNS:
            for m in pat.finditer(joined):
                line = joined[joined.rfind("\n", 0, m.start()) + 1:].split("\n", 1)[0]
                hits.setdefault(what, []).append(f"{path}: {what}: {line.strip()[:120]}")
                break
    out = []
    for what, found in hits.items():
        if not _base_uses(tree, base, dict(PATTERNS)[what]):
            out += found
    return out
