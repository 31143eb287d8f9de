"""Go modules: ``go test -json`` over the packages of the run files (stdlib only; Python 3.9+).

Test ids are ``<import path>.<TestName>`` and, for subtests, ``<import path>.<TestName>/<sub>`` with the
subtest name as ``go test`` prints it (spaces turned into ``_``); examples and fuzz seeds are tests too.
Outcomes come from the JSON event stream ``go test -json`` writes (the ``pass``/``fail``/``skip``
events of each test); a test that started but has no result (the binary panicked, exited or was
killed) failed; a package that does not build reports no test (its tests are missing, hence failed).
When there is no event stream, the verbose console lines (``--- PASS: TestX``) are read instead.

The run is offline and private: ``GOPROXY=off``, no checksum database, ``GOENV=off`` (no user config),
``GOTOOLCHAIN=local``, a fresh build cache under the run's private HOME (nothing a submission ran before
can be replayed from a cache), and ``GOWORK`` set by the runner (``off``, or a workspace file outside
the tree that points the dependencies at Debian's sources under ``/usr/share/gocode/src``), so a
``go.work`` in the tree is never read. Dependencies come from ``vendor/`` (``-mod=vendor``), from those
Debian sources (``options["replace"]``), or from a module cache filled at image build through a mirror
(``options["modcache"]``).

Options (the recipe's): ``root`` (the module's directory in the repository, ``.`` by default),
``module`` (its path), ``go`` (its ``go`` directive), ``flags`` (``GOFLAGS``), ``replace`` ({module:
directory}), ``modcache`` (a read-only module cache in the image).
"""

from __future__ import annotations

import json
import os
import re

from .base import FAILED, PASSED, SKIPPED, Runner, merge, short

GO_INFRA_NAMES = frozenset({"go.mod", "go.sum", "go.work", "go.work.sum"})
"""Files that decide which code the tests compile against (modules, their versions and replacements)."""
INFRA_DIRS = frozenset({"testdata", "vendor"})
"""Test data, and vendored dependencies (the test helpers a submission could otherwise rewrite)."""
CANARY_NAME = "TestEnvgenCanary_"
_EVENT_OUTCOME = {"pass": PASSED, "fail": FAILED, "skip": SKIPPED}
_CONSOLE = re.compile(r"^(\s*)--- (PASS|FAIL|SKIP): (\S+)")
_CONSOLE_PKG = re.compile(r"^(?:ok|FAIL)\s+(\S+)\s")
_TEST_NAME = re.compile(r"^(.*?)\.((?:Test|Example|Fuzz|Benchmark)[^/]*(?:/.*)?)$")
_PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_][A-Za-z0-9_]*)")


def package_clause(text: str) -> str | None:
    """The package name a Go source file declares (comments and build constraints before it skipped)."""
    in_block = False
    for line in text.splitlines():
        s = line.strip()
        if in_block:
            if "*/" in s:
                in_block, s = False, s.split("*/", 1)[1].strip()
            else:
                continue
        if s.startswith("/*"):
            rest = s[2:]
            if "*/" not in rest:
                in_block = True
                continue
            s = rest.split("*/", 1)[1].strip()
        if not s or s.startswith("//"):
            continue
        m = _PACKAGE.match(s)
        return m.group(1) if m else None
    return None


def _dir(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _root(options: dict) -> str:
    root = str(options.get("root") or ".").strip("/")
    return "" if root in ("", ".") else root


def parse_events(text: str) -> tuple[dict, dict, bool]:
    """(outcomes, messages, whether any event was read) from ``go test -json`` output. Lines that are not
    whole JSON events (the go command's own stderr: build errors) are skipped."""
    outcomes: dict = {}
    messages: dict = {}
    started: dict = {}
    output: dict = {}
    pkg_output: dict = {}
    seen = False
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict) or not isinstance(ev.get("Action"), str) or not isinstance(ev.get("Package"), str):
            continue
        seen = True
        action, pkg, test = ev["Action"], ev["Package"], ev.get("Test")
        if not isinstance(test, str) or not test:
            if action == "output" and isinstance(ev.get("Output"), str):
                pkg_output.setdefault(pkg, []).append(ev["Output"])
            elif action in ("fail", "pass", "skip"):
                # tests of this package that started and never ended: the binary died under them
                for tid in [t for t, p in started.items() if p == pkg and t not in outcomes]:
                    tail = "".join(output.get(tid, [])[-5:] + pkg_output.get(pkg, [])[-5:]).splitlines()
                    why = short("\n".join(ln for ln in tail if not ln.startswith("=== ")))
                    merge(outcomes, messages, tid, FAILED, why or "the test started but never finished")
            continue
        tid = f"{pkg}.{test}"
        if action == "run":
            started[tid] = pkg
        elif action == "output" and isinstance(ev.get("Output"), str):
            buf = output.setdefault(tid, [])
            if len(buf) < 200:
                buf.append(ev["Output"])
        elif action in _EVENT_OUTCOME:
            outcome = _EVENT_OUTCOME[action]
            msg = ""
            if outcome == FAILED:
                lines = [ln for ln in "".join(output.get(tid, [])).splitlines()
                         if ln.strip() and not ln.lstrip().startswith(("=== ", "--- FAIL"))]
                msg = short("\n".join(lines[:3]))
            merge(outcomes, messages, tid, outcome, msg)
    for tid, pkg in started.items():  # a stream cut short (a timeout): what started did not pass
        if tid not in outcomes:
            merge(outcomes, messages, tid, FAILED, "the test started but never finished")
    return outcomes, messages, seen


def parse_console(text: str) -> dict:
    """{id: outcome} from ``go test -v`` console output: ``--- PASS: TestX/sub (0.00s)`` lines, each
    package's closed by its ``ok``/``FAIL`` line naming the import path."""
    outcomes: dict = {}
    pending: list = []
    for line in text.splitlines():
        m = _CONSOLE.match(line)
        if m:
            pending.append((m.group(3), _EVENT_OUTCOME[m.group(2).lower()]))
            continue
        p = _CONSOLE_PKG.match(line)
        if p and pending:
            for name, outcome in pending:
                merge(outcomes, {}, f"{p.group(1)}.{name}", outcome)
            pending = []
    return outcomes


class GoTest(Runner):
    framework = "go"
    language = "go"

    def packages(self, files: list[str], options: dict) -> list[str]:
        """The ``./dir`` patterns of the run files' packages, relative to the module root."""
        root = _root(options)
        out = []
        for f in files:
            d = _dir(f)
            if root:
                d = d[len(root) + 1:] if d.startswith(root + "/") else "" if d == root else d
            pat = "./" + d if d else "."
            if pat not in out:
                out.append(pat)
        return sorted(out)

    def commands(self, tree: str, files: list[str], report_dir: str, options: dict) -> list[list[str]]:
        cmd = ["go", "test", "-json", "-count=1", "-vet=off", *self.packages(files, options)]
        root = _root(options)
        if root:
            return [["/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", root, *cmd]]
        return [cmd]

    def parse(self, report_dir: str, output: str, files: list[str], options: dict) -> tuple[dict, dict, str]:
        outcomes, messages, seen = parse_events(output)
        if seen:
            return outcomes, messages, "go-test-json"
        return parse_console(output), {}, "go-test-console"

    def env(self, env: dict, tree: str, options: dict) -> dict:
        home = env.get("HOME") or "/tmp"
        gopath = os.path.join(home, "gopath")
        out = dict(env)
        out.update({"GOPATH": gopath, "GOCACHE": os.path.join(home, "gocache"), "GOPROXY": "off",
                    "GOSUMDB": "off", "GONOSUMDB": "*", "GOENV": "off", "GOTOOLCHAIN": "local",
                    "GOTELEMETRY": "off", "GO111MODULE": "on", "GOFLAGS": " ".join(options.get("flags") or []),
                    "GOMODCACHE": str(options.get("modcache") or os.path.join(gopath, "pkg", "mod")),
                    "GOWORK": "off"})
        replace = {k: v for k, v in (options.get("replace") or {}).items() if os.path.isdir(v)}
        if replace:
            work = os.path.join(home, "envgen-go.work")
            module_dir = os.path.join(os.path.abspath(tree), _root(options)) if _root(options) else os.path.abspath(tree)
            lines = [f"go {workspace_go(options.get('go'))}", "", f"use {json.dumps(module_dir)}", ""]
            lines += [f"replace {mod} => {json.dumps(path)}" for mod, path in sorted(replace.items())]
            with open(work, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            out["GOWORK"] = work
        return out

    def infrastructure(self, path: str, options: dict) -> bool:
        parts = path.split("/")
        name = parts[-1]
        return name.endswith("_test.go") or name in GO_INFRA_NAMES or any(p in INFRA_DIRS for p in parts[:-1])

    def canary(self, tree: str, files: list[str], tok: str, options: dict) -> tuple[str, str] | None:
        """``<tok>_test.go`` next to the first run file, in that file's package (internal or external)."""
        first = files[0]
        try:
            with open(os.path.join(tree, first), encoding="utf-8", errors="replace") as f:
                name = package_clause(f.read())
        except OSError:
            return None
        if not name:
            return None
        d = _dir(first)
        path = f"{d}/{tok}_test.go" if d else f"{tok}_test.go"
        body = (f"package {name}\n\nimport \"testing\"\n\n"
                f"func {CANARY_NAME}{tok}(t *testing.T) {{\n"
                "\tt.Fatal(\"this test always fails; a run that reports it passing was taken over\")\n}\n")
        return path, body

    def test_path(self, test_id: str, files: list[str]) -> str:
        """The directory of the run file whose package the id names (its import path ends with the
        directory); "" for a package at the module root."""
        m = _TEST_NAME.match(test_id)
        if not m:
            return ""
        pkg = m.group(1)
        dirs = sorted({_dir(f) for f in files if _dir(f)}, key=len, reverse=True)
        return next((d for d in dirs if pkg == d or pkg.endswith("/" + d)), "")


def workspace_go(version) -> str:
    """The ``go`` line of the runner's workspace file: the module's own (workspaces exist from 1.18)."""
    m = re.match(r"^(\d+)\.(\d+)(\.\d+)?$", str(version or "").strip())
    if not m or (int(m.group(1)), int(m.group(2))) < (1, 18):
        return "1.18"
    return m.group(0)
