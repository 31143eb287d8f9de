"""Commits split by each project's own test settings, statements from local history, language detection.

Fixture repositories put their tests where only the project's configuration says (pytest ``check_*.py``
under ``checks/``, jest ``testMatch``/``testRegex``, vitest ``include``, mocha ``spec``, Maven
``testSourceDirectory``, Gradle ``sourceSets.test``, PHPUnit ``<directory suffix>``); the split reads
that configuration at the base commit. A local history with short subjects gets its statements from
bodies, linked issues and the merging PR. Detection reproduces cJSON (C with Python helper scripts) and
cxxopts (a count tie). One Docker build shows the pytest case validating end to end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from code_repo import _commit, _git, _write

from envgen.families.code import build_code
from envgen.families.code.candidates import (
    Candidate,
    Rejection,
    make_candidate,
    split_patch,
)
from envgen.families.code.lang import RepoView
from envgen.families.code.languages import get_language, language_choice
from envgen.families.code.sources import LocalGitSource, git_out, open_source


def _repo(root: Path, base: dict[str, str], change: dict[str, str], message: str = "Fix the bug the tests show "
          "and add the checks that prove it") -> tuple[Path, str, str, str]:
    """A two-commit repository: (path, base sha, head sha, the head commit's diff)."""
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, base)
    b = _commit(root, "initial import of the project", 1)
    _write(root, change)
    h = _commit(root, message, 2)
    return root, b, h, git_out(root, "diff", "--full-index", b, h)


PYTEST_BASE = {
    "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1.0"\n\n[tool.setuptools]\npackages = ["calc"]\n\n'
                      '[tool.pytest.ini_options]\n'
                      'python_files = ["check_*.py"]\ntestpaths = ["checks"]\n',
    "calc/__init__.py": "", "calc/core.py": "def subtract(a, b):\n    return b - a\n",
    "checks/check_add.py": "from calc.core import subtract\n\n\ndef test_zero():\n    assert subtract(1, 1) == 0\n",
}
PYTEST_CHANGE = {
    "calc/core.py": "def subtract(a, b):\n    return a - b\n",
    "checks/check_calc.py": "from calc.core import subtract\n\n\ndef test_subtract():\n    assert subtract(5, 3) == 2\n",
}


def _split(tmp_path: Path, language: str, base: dict, change: dict) -> tuple[list[str], list[str], list[str]]:
    """(test files without the project's settings, with them, code files with them) of the head commit."""
    root, b, _, diff = _repo(tmp_path / language, base, change)
    lang = get_language(language)
    plain = split_patch(diff, lang)[3]
    _, _, code, tests = split_patch(diff, lang, RepoView(root, b))
    return plain, tests, code


def test_pytest_python_files_and_testpaths_split_a_commit(tmp_path):
    plain, tests, code = _split(tmp_path, "python", PYTEST_BASE, PYTEST_CHANGE)
    assert plain == []  # by the conventions alone the new check file is gold: the bug this fixes
    assert tests == ["checks/check_calc.py"] and code == ["calc/core.py"]


def test_a_commit_the_settings_make_a_test_change_becomes_a_candidate(tmp_path):
    root, b, h, _ = _repo(tmp_path / "calc", PYTEST_BASE, PYTEST_CHANGE)
    raw = next(r for r in LocalGitSource(root, get_language("python")).instances() if r.meta["commit"] == h)
    assert raw.patch  # the source does not drop it as "no test change" either
    cand = make_candidate(raw, get_language("python"))
    assert isinstance(cand, Candidate), cand
    assert cand.test_files == ["checks/check_calc.py"] and cand.code_files == ["calc/core.py"]
    assert get_language("python").runnable_tests(cand.test_files, {"checks/check_calc.py"},
                                                 RepoView(root, b)) == ["checks/check_calc.py"]


NODE_SRC = {"src/slug.js": "module.exports = (s) => s.toLowerCase();\n"}
NODE_FIX = {"src/slug.js": "module.exports = (s) => s.trim().toLowerCase();\n"}


@pytest.mark.parametrize("config,test_file", [
    ({"package.json": json.dumps({"name": "slug", "jest": {"testMatch": ["<rootDir>/checks/**/*.check.js"]}})},
     "checks/unit/slug.check.js"),
    ({"package.json": json.dumps({"name": "slug"}),
      "jest.config.js": "module.exports = {\n  roots: ['<rootDir>/src'],\n  testRegex: '/src/.*\\\\.t\\\\.js$',\n};\n"},
     "src/slug.t.js"),
    ({"package.json": json.dumps({"name": "slug"}),
      "vitest.config.ts": "import { defineConfig } from 'vitest/config'\nexport default defineConfig({\n"
                          "  test: { include: ['verify/**/*.{check,case}.ts'] },\n})\n"},
     "verify/slug.case.ts"),
    ({"package.json": json.dumps({"name": "slug"}), ".mocharc.yml": "spec: 'checks'\nrecursive: true\n"},
     "checks/slug.js"),
], ids=["jest-testMatch", "jest-config-testRegex-roots", "vitest-include", "mocha-spec-dir"])
def test_node_runners_settings_split_a_commit(tmp_path, config, test_file):
    change = {**NODE_FIX, test_file: "const slug = require('../src/slug');\n// a check\n"}
    plain, tests, code = _split(tmp_path, "javascript", {**config, **NODE_SRC}, change)
    assert test_file not in plain and tests == [test_file] and code == ["src/slug.js"]
    lang = get_language("javascript")
    root = tmp_path / "javascript"
    base = git_out(root, "rev-list", "--max-parents=0", "HEAD").strip()
    assert lang.runnable_tests([test_file], {test_file}, RepoView(root, base)) == [test_file]


def test_jest_roots_limit_its_patterns(tmp_path):
    config = {"package.json": json.dumps({"name": "slug"}),
              "jest.config.js": "module.exports = { roots: ['<rootDir>/src'], testRegex: '\\\\.t\\\\.js$' };\n"}
    _plain, tests, _ = _split(tmp_path, "javascript", {**config, **NODE_SRC},
                             {**NODE_FIX, "src/slug.t.js": "x\n", "bench/run.t.js": "y\n"})
    assert tests == ["src/slug.t.js"]  # bench/ is outside the roots


JAVA_SRC = {"src/main/java/org/ex/Slug.java": "package org.ex;\npublic class Slug { }\n"}
JAVA_FIX = {"src/main/java/org/ex/Slug.java": "package org.ex;\npublic class Slug { int x; }\n"}
POM = ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>"
       "<groupId>org.ex</groupId><artifactId>slug</artifactId><version>1</version>"
       "<build><testSourceDirectory>src/verify/java</testSourceDirectory></build></project>\n")
GRADLE = ("apply plugin: 'java'\n\nsourceSets {\n    main { java { srcDirs = ['src/main/java'] } }\n"
          "    test {\n        java {\n            srcDirs = ['checks/java']\n        }\n    }\n}\n")


@pytest.mark.parametrize("config,test_file", [
    ({"pom.xml": POM}, "src/verify/java/org/ex/SlugSpec.java"),
    ({"build.gradle": GRADLE}, "checks/java/org/ex/SlugSpec.java"),
], ids=["maven-testSourceDirectory", "gradle-sourceSets-test"])
def test_java_builds_test_sources_split_a_commit(tmp_path, config, test_file):
    plain, tests, code = _split(tmp_path, "java", {**config, **JAVA_SRC},
                                {**JAVA_FIX, test_file: "package org.ex;\npublic class SlugSpec { }\n"})
    assert plain == [] and tests == [test_file] and code == ["src/main/java/org/ex/Slug.java"]


def test_phpunit_directory_suffix_splits_a_commit(tmp_path):
    config = {"composer.json": json.dumps({"name": "ex/money"}),
              "phpunit.xml.dist": '<phpunit><testsuites><testsuite name="all">'
                                  '<directory suffix="Check.php">checks</directory></testsuite></testsuites></phpunit>\n'}
    plain, tests, code = _split(tmp_path, "php", {**config, "src/Money.php": "<?php\nclass Money {}\n"},
                                {"src/Money.php": "<?php\nclass Money { public $a; }\n",
                                 "checks/MoneyCheck.php": "<?php\nclass MoneyCheck {}\n"})
    assert plain == [] and tests == ["checks/MoneyCheck.php"] and code == ["src/Money.php"]


# ---------------------------------------------------------------- statements from local history


def test_local_history_statements_come_from_bodies_issues_and_the_merging_pr(tmp_path):
    """Short subjects: a body makes the statement; "#N" links an --issues text; a commit a PR merge
    brought in gets the PR's title and body; a bare short subject stays too short (and says why)."""
    root = tmp_path / "calc"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"calc.py": "def f(x):\n    return x\n", "tests/test_calc.py": "def test_a():\n    pass\n"})
    _commit(root, "init", 1)
    shas = {}
    for i, (key, msg) in enumerate([
            ("body", ("Fix f\n\nf returned its argument unchanged for negative numbers; it must return the "
                     "absolute value, as the docs say.")),
            ("issue", "Fix f for zero, see #12"),
            ("bare", "tweak f")], start=2):
        _write(root, {"calc.py": f"def f(x):\n    return x + {i}\n", "tests/test_calc.py": f"def test_{key}():\n    pass\n"})
        shas[key] = _commit(root, msg, i)
    _git(root, "checkout", "-q", "-b", "feature")
    _write(root, {"calc.py": "def f(x):\n    return abs(x)\n", "tests/test_calc.py": "def test_abs():\n    pass\n"})
    shas["pr"] = _commit(root, "abs", 6)
    _git(root, "checkout", "-q", "main")
    _git(root, "merge", "-q", "--no-ff", "feature", "-m",
         "Merge pull request #15 from dev/feature\n\nf returns the absolute value of negative numbers\n\n"
         "The helper used to pass negative input through; callers expect a distance.", date="2024-01-07T12:00:00+0000")
    issues = {12: {"title": "f(0) raises", "body": "Calling f with zero raises ZeroDivisionError instead of "
                                                   "returning a number."}}
    raws = {r.meta["commit"]: r for r in LocalGitSource(root, get_language("python"), issues=issues).instances()}
    lang = get_language("python")
    got = {k: raws[s] for k, s in shas.items()}
    assert got["body"].meta["statement_from"] == "commit message" and "absolute value" in got["body"].problem_statement
    assert got["issue"].meta["statement_from"] == "issue" and got["issue"].meta["issue"] == 12
    assert got["issue"].problem_statement.startswith("f(0) raises")
    assert got["pr"].meta["statement_from"] == "pull request"
    assert got["pr"].problem_statement.startswith("f returns the absolute value of negative numbers")
    assert got["pr"].meta["merge_commit"] == git_out(root, "rev-parse", "HEAD").strip()
    assert got["bare"].meta["statement_from"] == "commit message"
    outcomes = {k: make_candidate(r, lang) for k, r in got.items()}
    assert all(isinstance(outcomes[k], Candidate) for k in ("body", "issue", "pr")), outcomes
    assert isinstance(outcomes["bare"], Rejection) and "too short" in outcomes["bare"].reason
    # without --issues the "#12" commit keeps its own (short) message
    plain = {r.meta["commit"]: r for r in LocalGitSource(root, lang).instances()}
    assert plain[shas["issue"]].meta["statement_from"] == "commit message"


# ---------------------------------------------------------------- language detection


def _tree(root: Path, files: dict[str, str]) -> RepoView:
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, files)
    return RepoView(root, _commit(root, "import", 1))


def test_a_c_library_with_python_helper_scripts_is_c(tmp_path):
    """cJSON's shape: C sources and headers, CMakeLists.txt at the root, a few Python test helpers and a
    fuzzing script; no Python packaging."""
    c = "int cjson_parse(const char *s) { return s != 0; }\n" * 40
    view = _tree(tmp_path / "cjson", {
        "CMakeLists.txt": "project(cJSON C)\nadd_library(cjson cJSON.c)\n", "cJSON.c": c, "cJSON.h": c[:400],
        "cJSON_Utils.c": c, "cJSON_Utils.h": c[:300], "tests/parse_examples.c": c,
        "tests/json-patch-tests/tests.py": "import json\n" * 30, "tests/unity/auto/run.py": "print(1)\n" * 30,
        "fuzzing/fuzz_main.py": "import sys\n" * 30, "library_config/gen.py": "x = 1\n" * 30})
    lang, why = language_choice(view)
    assert lang.name == "c", why
    assert "python" in why  # the other candidate is named in the note


def test_a_tie_is_broken_by_root_build_files_then_by_a_fixed_order_with_a_note(tmp_path):
    """cxxopts' shape (2 C++ files, 2 Python files) goes to C++ by its CMakeLists.txt; a real tie (same
    bytes, both with root build files) goes to the first supported language and says so."""
    view = _tree(tmp_path / "cxxopts", {
        "CMakeLists.txt": "project(cxxopts CXX)\n", "include/cxxopts.hpp": "int a;\n" * 10,
        "src/example.cpp": "int main() {}\n", "tools/gen.py": "x = 1\n", "test/check.py": "y = 2\n"})
    assert language_choice(view)[0].name == "cpp"
    tie = _tree(tmp_path / "tie", {"go.mod": "module ex\n\ngo 1.21\n", "main.go": "package m\n",
                                   "package.json": "{}", "main.js": "var a=1;\n\n"})
    first, why = language_choice(tie)
    again, _ = language_choice(tie)
    assert first.name == again.name == "go" and "tie with javascript" in why


def test_open_source_detects_a_c_repository_for_local_history(tmp_path):
    c = "int f(void) { return 0; }\n" * 20
    _tree(tmp_path / "lib", {"CMakeLists.txt": "project(lib C)\n", "lib.c": c, "lib.h": c[:100], "tools/x.py": "1\n"})
    assert open_source(f"git:{tmp_path / 'lib'}").language.name == "c"


# ---------------------------------------------------------------- end to end in Docker


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_pytest_checks_layout_validates_in_docker(tmp_path):
    """The pytest case end to end: the commit's check file is the test patch and its test goes from
    failing to passing (it was "no test change" before the split read the settings)."""
    root, _, h, _ = _repo(tmp_path / "calc", PYTEST_BASE, PYTEST_CHANGE)
    report = build_code(f"git:{root}", tmp_path / "out", backend="docker", runs=1, gate=False,
                        store=tmp_path / "state.sqlite", log=lambda m: None)
    task = f"calc-{h[:12]}"
    assert task in report.details["tasks"], report.rejections
    assert report.details["tasks"][task]["FAIL_TO_PASS"] == 1
