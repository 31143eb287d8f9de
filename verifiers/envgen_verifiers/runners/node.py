"""JavaScript and TypeScript test runners: jest, vitest, mocha and Node's own (stdlib only; Python 3.9+).

Test ids are ``path/to/file.test.js > describe > test name`` (the file relative to the repository, then
the describe blocks and the test's title, as vitest prints them), the same on every run.

- jest: ``--json --outputFile`` (jest's own JSON report), ``--runTestsByPath`` on the task's files, a fresh
  ``--cacheDirectory`` per run (a transform cache left in the episode cannot stand in for a test file);
- vitest: ``run`` with its built-in ``json`` reporter to a file, and the ``verbose`` one on the console;
- mocha: each test file in a mocha process of its own (a file that does not load, an ESM import of a
  name that does not exist yet, stops only its own tests), with the kit's reporter
  (``node_mocha_reporter.cjs``, outside the repository) writing every test's title path; a preload
  (``node_mocha_spec.cjs``) makes each process load exactly its file and the canary, whatever ``spec``
  the project's configuration adds (mocha would add it to the command line's);
- node-test (``node --test``, Node's built-in runner): one ``node --test`` run of the task's files and the
  canary (Node runs each file in a process of its own), with the kit's reporter
  (``node_test_reporter.mjs``, outside the repository; it runs in the runner's process, not in the test
  files') writing every test's file and title path; the node flags of the project's test script
  (``options["node_args"]``: ``--import tsx``, ``--experimental-...``) come first.

The runners come from the project's dependencies, never from the tree: ``options["modules"]`` lists
where they were installed (the image's ``/opt/envgen/node/node_modules``, which the image also links at
``/node_modules``, so Node resolves it from any directory; a host folder for the local backend), and a
tree without its own ``node_modules`` gets a link to the first that exists. Anything named
``node_modules`` in the tree, lockfiles, ``package.json`` (its ``jest`` key and scripts configure the
run), the runners' and compilers' configuration files, setup files the configuration names
(``options["protect"]``), ``__tests__``/``__mocks__``/``__snapshots__`` folders and test files are
infrastructure. ``options["env"]``: variables the project's test script sets (``NODE_OPTIONS`` ...);
``options["node_path"]``: the folder of the Node the recipe installed (a newer major than the image's),
first on ``PATH``. The colour variables are left unset (tests may inspect them).
``options["build"]``: arguments of a ``tsc`` build run before the tests (its errors are
printed, not fatal: a type error in one test file must not hide every other test).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

from .base import ERROR, FAILED, FAILING, PASSED, SKIPPED, Runner, merge, read_text, short
from .node_dialect import JS

IMAGE_MODULES = "/opt/envgen/node/node_modules"
CANARY = "envgen_canary_"
KIT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MOCHA_REPORTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_mocha_reporter.cjs")
MOCHA_SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_mocha_spec.cjs")
NODE_TEST_REPORTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_test_reporter.mjs")
TREE_FILE = "envgen-tree.json"
"""Written in the report dir by ``commands``: the tree the reports' absolute paths are relative to."""

CONFIG_NAMES = frozenset({
    "package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "pnpm-workspace.yaml",
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", ".babelrc", ".swcrc", "jsconfig.json", ".nvmrc",
    ".node-version", "node_modules", "__tests__", "__mocks__", "__snapshots__", "__fixtures__"})
CONFIG_PATTERN = re.compile(
    r"^(?:(?:jest|vitest|vite|vitest\.workspace|vitest\.projects|babel|tsup|swc)\.config(?:\.[\w-]+)*"
    r"\.(?:js|cjs|mjs|ts|cts|mts|json)|\.mocharc(?:\.(?:js|cjs|mjs|json|jsonc|yml|yaml))?|\.babelrc\.\w+"
    r"|tsconfig(?:\.[\w-]+)*\.json|jest-preset\.\w+|(?:jest|vitest|test|tests|mocha)[.-]setup(?:[.-]\w+)*\.\w+"
    r"|setup-?tests?(?:\.\w+)+|global-?(?:setup|teardown)(?:\.\w+)+)$", re.I)
TEST_FILE = re.compile(r"\.(?:test|spec)\.[cm]?[jt]sx?$")
SUFFIX = re.compile(r"((?:\.(?:test|spec))?\.[cm]?[jt]sx?)$")


def rel_path(path: str, roots: list[str]) -> str:
    path = (path or "").replace("\\", "/")
    for r in roots:
        if r and path.startswith(r.rstrip("/") + "/"):
            return path[len(r.rstrip("/")) + 1:]
    return path


def test_id(rel: str, titles) -> str:
    return " > ".join([rel, *(t for t in titles if t)])


def _roots(report_dir: str) -> list[str]:
    text = read_text(os.path.join(report_dir, TREE_FILE))
    try:
        return list(json.loads(text)) if text else []
    except ValueError:
        return []


def _canary_merge(out: dict, messages: dict, tid: str, outcome: str, message: str = "") -> None:
    """The canary, run once per mocha process: one copy reported passing is a run taken over."""
    if CANARY in tid and outcome not in FAILING:
        out[tid] = outcome
        return
    if CANARY in tid and tid in out and out[tid] not in FAILING:
        return
    merge(out, messages, tid, outcome, message)


def parse_jest_json(text: str, roots: list[str]) -> tuple[dict, dict]:
    """{id: outcome}, {id: message} from jest's ``--json`` report, or vitest's ``json`` reporter (the same
    shape). A file that failed to run (a syntax error, an import that does not resolve) is reported as
    one erroring entry whose id is the file. Raises ValueError when the text is not such a report."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("testResults"), list):
        raise ValueError("not a jest/vitest JSON report")
    out: dict = {}
    messages: dict = {}
    status_map = {"passed": PASSED, "failed": FAILED, "pending": SKIPPED, "skipped": SKIPPED, "todo": SKIPPED,
                  "disabled": SKIPPED, "focused": PASSED}
    for suite in data["testResults"]:
        rel = rel_path(suite.get("name") or suite.get("testFilePath") or "", roots)
        cases = suite.get("assertionResults") or suite.get("testResults") or []
        for case in cases:
            tid = test_id(rel, [*(case.get("ancestorTitles") or []), case.get("title") or ""])
            outcome = status_map.get(case.get("status"), FAILED)
            _canary_merge(out, messages, tid, outcome, short("\n".join(case.get("failureMessages") or [])))
        failed_cases = any(status_map.get(c.get("status")) == FAILED for c in cases)
        if suite.get("status") == "failed" and not failed_cases:
            why = suite.get("message") or (suite.get("testExecError") or {}).get("message") or "the file failed to run"
            _canary_merge(out, messages, rel, ERROR, short(why))
    return out, messages


def parse_mocha_json(texts: list[str], roots: list[str]) -> tuple[dict, dict]:
    """Outcomes from the kit's mocha reporter (one report per mocha process) or its ``node --test``
    reporter (one JSON line per test)."""
    out: dict = {}
    messages: dict = {}
    for text in texts:
        for line in text.splitlines():
            if not line.strip():
                continue
            data = json.loads(line)
            if data.get("reporter") == "envgen-mocha":
                for t in data.get("tests") or []:
                    tid = test_id(rel_path(t.get("file") or "", roots), t.get("titles") or [])
                    _canary_merge(out, messages, tid, t.get("state") or FAILED, short(t.get("message") or ""))
            elif data.get("reporter") == "envgen-node-test":
                tid = test_id(rel_path(data.get("file") or "", roots), data.get("titles") or [])
                _canary_merge(out, messages, tid, data.get("state") or FAILED, short(data.get("message") or ""))
            elif data.get("reporter") == "envgen-file-error":
                rel = rel_path(data.get("file") or "", roots)
                _canary_merge(out, messages, rel, ERROR, short(data.get("message") or "the file failed to load"))
    return out, messages


_JEST_FILE = re.compile(r"^\s*(PASS|FAIL)\s+(\S.*?)(?:\s+\(\d.*\))?\s*$")
_JEST_CASE = re.compile(r"^(\s+)(✓|✕|√|×|○|✎)\s+(?:(?:skipped|todo)\s+)?(.*?)(?:\s+\(\d+(?:\.\d+)?\s*m?s\))?\s*$")


def parse_jest_verbose(text: str) -> dict:
    """Jest's ``--verbose`` console output (the fallback when the run left no JSON report): ``PASS file``
    headers, describe blocks by indentation, a mark per test."""
    out: dict = {}
    rel = None
    stack: list = []
    marks = {"✓": PASSED, "√": PASSED, "✕": FAILED, "×": FAILED, "○": SKIPPED, "✎": SKIPPED}
    for line in text.splitlines():
        m = _JEST_FILE.match(line)
        if m:
            rel, stack = m.group(2), []
            continue
        if rel is None or not line.strip() or line.lstrip().startswith("●"):
            if line.lstrip().startswith("●"):
                rel = None  # the failure details follow: no more test lines for this file
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2 - 1
        m = _JEST_CASE.match(line)
        if m:
            merge(out, {}, test_id(rel, [*stack[:depth], m.group(3)]), marks[m.group(2)])
        elif depth >= 0 and line.startswith("  "):
            stack = [*stack[:depth], line.strip()]
    return out


_VITEST_CASE = re.compile(r"^\s*(✓|×|↓|✗|√)\s+(\S.*? > .*?)(?:\s+\d+(?:\.\d+)?\s*m?s)?(?:\s+\[.*\])?\s*$")


def parse_vitest_verbose(text: str) -> dict:
    """Vitest's ``verbose`` console lines (``✓ file > suite > test``), the fallback without a JSON report."""
    out: dict = {}
    marks = {"✓": PASSED, "√": PASSED, "×": FAILED, "✗": FAILED, "↓": SKIPPED}
    for line in text.splitlines():
        m = _VITEST_CASE.match(line)
        if m:
            merge(out, {}, m.group(2).strip(), marks[m.group(1)])
    return out


def _file_of(test_id: str, files: list[str]) -> str:
    head = test_id.split(" > ", 1)[0]
    for f in sorted(files, key=len, reverse=True):
        if head == f:
            return f
    return ""


class NodeRunner(Runner):
    """What jest, vitest and mocha share: where the dependencies are, the canary, the infrastructure."""

    language = "javascript"
    config_names = CONFIG_NAMES
    tool = ""
    """The runner's script, relative to ``node_modules``."""
    dialect = JS
    """How the test files declare their tests (``node_dialect``): the twin checks of FAIL_TO_PASS tests."""

    def modules(self, tree: str, options: dict) -> str | None:
        """The node_modules the run uses: the tree's own (vendored), else the first of ``options["modules"]``
        that exists."""
        own = os.path.join(tree, "node_modules")
        if os.path.isdir(own):
            return own
        for cand in [*(options.get("modules") or []), IMAGE_MODULES]:
            if cand and os.path.isdir(cand):
                return cand
        return None

    def prelude(self, tree: str, report_dir: str, options: dict) -> tuple[str, list[list[str]]]:
        """(node_modules, the commands before the tests: a link to the dependencies, the ``tsc`` build)."""
        mods = self.modules(tree, options)
        with open(os.path.join(report_dir, TREE_FILE), "w", encoding="utf-8") as f:
            json.dump(sorted({tree, os.path.realpath(tree)}, key=len, reverse=True), f)
        if mods is None:
            raise_missing = ("the project's dependencies were not found (looked in: "
                             + ", ".join([*(options.get("modules") or []), IMAGE_MODULES]) + ")")
            return "", [["sh", "-c", f"echo {shlex.quote(raise_missing)} >&2; exit 127"]]
        cmds: list[list[str]] = []
        own = os.path.join(tree, "node_modules")
        seen_by_node = any(os.path.realpath(os.path.join(p, "node_modules")) == os.path.realpath(mods)
                           for p in _ancestors(tree))
        if not os.path.lexists(own) and not seen_by_node:
            cmds.append(["ln", "-s", mods, own])
        build = options.get("build")
        if isinstance(build, list):
            cmds.append(_tolerant(["node", os.path.join(mods, "typescript", "bin", "tsc"), *map(str, build)]))
        return mods, cmds

    def canary_name(self, files: list[str], tok: str) -> str:
        last = files[-1]
        folder, _, name = last.rpartition("/")
        m = SUFFIX.search(name)
        stem = name[:m.start()] if m else name
        suffix = m.group(1) if m else ".test.js"
        return f"{folder + '/' if folder else ''}{CANARY}{tok}_{stem}{suffix}"

    def canary_text(self, tok: str, path: str) -> str:
        return (f'test("envgen canary {tok}", () => {{\n'
                '  throw new Error("this test always fails; a run that reports it passing was taken over");\n'
                "});\n")

    def canary(self, tree: str, files: list[str], tok: str, options: dict) -> tuple[str, str] | None:
        path = self.canary_name(files, tok)
        return path, self.canary_text(tok, path)

    def infrastructure(self, path: str, options: dict) -> bool:
        parts = path.split("/")
        name = parts[-1]
        if any(p in CONFIG_NAMES for p in parts) or CONFIG_PATTERN.match(name) or TEST_FILE.search(name):
            return True
        protect = options.get("protect") or []
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in protect)

    def test_path(self, test_id: str, files: list[str]) -> str:
        return _file_of(test_id, files) or test_id.split(" > ", 1)[0]

    def env(self, env: dict, tree: str, options: dict) -> dict:
        env = dict(env)
        # No FORCE_COLOR/NO_COLOR: a project's tests may inspect them (commander tests its colour handling);
        # the reports are files and the console is not a terminal, so nothing is coloured anyway.
        for name in ("FORCE_COLOR", "NO_COLOR"):
            env.pop(name, None)
        env.update({"CI": "true", "TZ": "UTC"})  # jest and vitest set NODE_ENV themselves
        if options.get("node_path"):  # the Node the recipe installed for the project comes first
            env["PATH"] = os.pathsep.join([str(options["node_path"]), env.get("PATH") or "/usr/bin:/bin"])
        extra = options.get("env") if isinstance(options.get("env"), dict) else {}
        env.update({str(k): str(v) for k, v in extra.items() if k not in ("PATH", "HOME", "TMPDIR")})
        return env


def _ancestors(tree: str) -> list[str]:
    out = []
    p = os.path.dirname(os.path.abspath(tree))
    while True:
        out.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            return out
        p = parent


def _helper(*args: str) -> list[str]:
    """A command running this module's ``main`` (the kit's Python, isolated)."""
    boot = (f"import sys; sys.path.insert(0, {KIT_ROOT!r}); from envgen_verifiers.runners.node import main; "
            "sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-I", "-B", "-c", boot, *args]


def _tolerant(cmd: list[str]) -> list[str]:
    return _helper("tolerant", "--", *cmd)


class Jest(NodeRunner):
    framework = "jest"
    tool = "jest/bin/jest.js"

    def commands(self, tree, files, report_dir, options):
        mods, cmds = self.prelude(tree, report_dir, options)
        if not mods:
            return cmds
        return cmds + [["node", os.path.join(mods, self.tool), "--ci", "--verbose", "--json",
                        f"--outputFile={os.path.join(report_dir, 'jest.json')}", "--runTestsByPath",
                        "--watchman=false", "--forceExit", "--maxWorkers=2",
                        f"--cacheDirectory={os.path.join(report_dir, 'cache')}", *files]]

    def parse(self, report_dir, output, files, options):
        text = read_text(os.path.join(report_dir, "jest.json"))
        if text:
            try:
                outcomes, messages = parse_jest_json(text, _roots(report_dir))
                return outcomes, messages, "jest-json"
            except ValueError:
                pass
        return parse_jest_verbose(output), {}, "jest-verbose"


class Vitest(NodeRunner):
    framework = "vitest"
    tool = "vitest/vitest.mjs"

    def canary_text(self, tok, path):
        return 'import { test } from "vitest";\n' + super().canary_text(tok, path)

    def commands(self, tree, files, report_dir, options):
        mods, cmds = self.prelude(tree, report_dir, options)
        if not mods:
            return cmds
        return cmds + [["node", os.path.join(mods, self.tool), "run", "--reporter=json",
                        f"--outputFile={os.path.join(report_dir, 'vitest.json')}", "--reporter=verbose",
                        "--no-color", "--watch=false", *files]]

    def parse(self, report_dir, output, files, options):
        text = read_text(os.path.join(report_dir, "vitest.json"))
        if text:
            try:
                outcomes, messages = parse_jest_json(text, _roots(report_dir))
                return outcomes, messages, "vitest-json"
            except ValueError:
                pass
        return parse_vitest_verbose(output), {}, "vitest-verbose"


class Mocha(NodeRunner):
    framework = "mocha"
    tool = "mocha/bin/mocha.js"

    def canary_name(self, files, tok):
        folder = files[-1].rpartition("/")[0]
        return f"{folder + '/' if folder else ''}{CANARY}{tok}.test.cjs"

    def canary_text(self, tok, path):
        return (f'it("envgen canary {tok}", function () {{\n'
                '  throw new Error("this test always fails; a run that reports it passing was taken over");\n'
                "});\n")

    def run_files(self, files, canary):
        return list(files) + ([f"--canary={canary}"] if canary else [])

    def commands(self, tree, files, report_dir, options):
        mods, cmds = self.prelude(tree, report_dir, options)
        if not mods:
            return cmds
        return cmds + [_helper("mocha-each", report_dir, os.path.join(mods, self.tool), *files)]

    def parse(self, report_dir, output, files, options):
        texts = [read_text(os.path.join(report_dir, n)) or "" for n in sorted(os.listdir(report_dir))
                 if n.startswith("mocha-") and n.endswith(".json")]
        try:
            outcomes, messages = parse_mocha_json(texts, _roots(report_dir))
        except ValueError:
            outcomes, messages = {}, {}
        return outcomes, messages, "mocha-json"


class NodeTest(NodeRunner):
    framework = "node-test"

    def canary_name(self, files, tok):
        folder = files[-1].rpartition("/")[0]
        return f"{folder + '/' if folder else ''}{CANARY}{tok}.test.cjs"

    def canary_text(self, tok, path):
        return ('const { test } = require("node:test");\n\n'
                f'test("envgen canary {tok}", () => {{\n'
                '  throw new Error("this test always fails; a run that reports it passing was taken over");\n'
                "});\n")

    def commands(self, tree, files, report_dir, options):
        mods, cmds = self.prelude(tree, report_dir, options)
        if not mods:
            if options.get("manager") != "none":
                return cmds
            cmds = []  # a project without dependencies: Node's runner is all it needs
        args = [str(a) for a in options.get("node_args") or []]
        return cmds + [["node", *args, "--test", f"--test-reporter={NODE_TEST_REPORTER}",
                        f"--test-reporter-destination={os.path.join(report_dir, 'node-test.jsonl')}",
                        "--test-reporter=spec", "--test-reporter-destination=stdout", *files]]

    def parse(self, report_dir, output, files, options):
        try:
            outcomes, messages = parse_mocha_json([read_text(os.path.join(report_dir, "node-test.jsonl")) or ""],
                                                  _roots(report_dir))
        except ValueError:
            outcomes, messages = {}, {}
        return outcomes, messages, "node-test-json"


# ---------------------------------------------------------------- helpers run as commands


def _mocha_each(report_dir: str, mocha: str, args: list[str]) -> int:
    """Each test file in its own mocha process (with the canary), each writing its own report; a file that
    does not load is reported as one erroring entry. Exit 1 if any process failed."""
    canary = [a.split("=", 1)[1] for a in args if a.startswith("--canary=")]
    files = [a for a in args if not a.startswith("--canary=")]
    worst = 0
    for i, f in enumerate(files or canary):
        out = os.path.join(report_dir, f"mocha-{i:04d}.json")
        run = [f] + (canary if files else [])
        node_options = " ".join([os.environ.get("NODE_OPTIONS", ""), f'--require "{MOCHA_SPEC}"']).strip()
        env = dict(os.environ, NODE_OPTIONS=node_options, ENVGEN_MOCHA_SPEC=json.dumps(run))
        proc = subprocess.run(["node", mocha, "--reporter", MOCHA_REPORTER, "--reporter-option", f"output={out}",
                               "--no-color", "--exit", *run], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env=env)
        text = proc.stdout.decode("utf-8", "replace")
        sys.stdout.write(f"envgen: mocha {' '.join(run)} (exit {proc.returncode})\n{text}")
        sys.stdout.flush()
        if not os.path.exists(out):
            for g in run:
                err = {"reporter": "envgen-file-error", "file": os.path.abspath(g),
                       "message": _first_error(text) or f"mocha exited with {proc.returncode} before reporting"}
                with open(os.path.join(report_dir, f"mocha-{i:04d}-load.json"), "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(err) + "\n")
        worst = worst or (1 if proc.returncode else 0)
    return worst


def _first_error(text: str) -> str:
    for line in text.splitlines():
        s = line.strip()
        m = re.search(r"(?:^|: )((?:[A-Z]\w*)?(?:Error|Exception)\b.*)$", s)
        if m:
            return m.group(1)[:500]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def main(argv: list[str]) -> int:
    if argv[:1] == ["tolerant"] and argv[1:2] == ["--"]:
        proc = subprocess.run(argv[2:], stdin=subprocess.DEVNULL)
        if proc.returncode:
            print(f"envgen: {' '.join(os.path.basename(a) for a in argv[2:4])} exited with {proc.returncode}; "
                  "the tests run with what it built", flush=True)
        return 0
    if argv[:1] == ["mocha-each"] and len(argv) >= 3:
        return _mocha_each(argv[1], argv[2], argv[3:])
    print("usage: node.py tolerant -- CMD... | mocha-each REPORT_DIR MOCHA FILE...", file=sys.stderr)
    return 2
