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

from .. import twins as _twins
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


# ---------------------------------------------------------------- twins (declarations of Go tests)


_TOP_KEYWORDS = ("func", "type", "var", "const", "import")
_TEST_PREFIXES = ("Test", "Example", "Fuzz")
_MESSAGE_CALLS = frozenset({"Error", "Errorf", "Fatal", "Fatalf", "Log", "Logf", "Skip", "Skipf"})
"""``t.Errorf(...)`` and the like: what they are given only words a failure; a literal there changes a
message, never an outcome."""
_SPEC_NAMES = re.compile(r"[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*")
_EXPECTED_FIELD = re.compile(r"(?:want|expect|exp\b|out\b|output|result)", re.I)
"""A table field that holds what a case expects (``want: 3``): its literal is the first a twin changes."""
_EXPECTED_ASSIGN = re.compile(r"[ \t]*(?:(?:if|switch)[ \t]+)?(?:[\w.]+[ \t]*,[ \t]*)*"
                              r"(?:want|expect|exp\b|wanted)\w*[ \t]*"
                              r"(?:,[ \t]*[\w.]+[ \t]*)*:?=(?!=)", re.I)
"""The start of a line that assigns what a test expects (``want := ``, ``got, want := ``)."""
_PATH_LIKE = re.compile(r"/|\btestdata\b|\.[A-Za-z]\w{0,4}.$")
"""A string that names a file: a twin that changes it fails to open it, often with a panic."""
_OVERFLOWS = frozenset(str(2 ** k - 1) for k in (7, 8, 15, 16, 31, 32, 63, 64))
"""Numbers whose successor overflows a sized integer type (a twin must compile)."""


def is_test_name(name: str) -> bool:
    """Whether ``go test`` runs a top-level function of this name (given the right signature): ``Test``,
    ``Example`` or ``Fuzz``, alone or followed by anything but a lower-case letter; ``TestMain`` is the
    package's harness, not a test."""
    for prefix in _TEST_PREFIXES:
        if name.startswith(prefix):
            rest = name[len(prefix):]
            return name != "TestMain" and (not rest or not rest[0].islower())
    return False


class _Top:
    """A top-level declaration of a Go file: a function (method, test, benchmark), or a type, var,
    const or import declaration (``specs``: [(first line, last line, names)] of its specs)."""

    def __init__(self, kind: str, name: str, start: int, end: int, name_end: int, receiver: bool = False,
                 params: str = "", specs: list | None = None):
        self.kind, self.name, self.start, self.end, self.name_end = kind, name, start, end, name_end
        self.receiver, self.params, self.specs = receiver, params, specs or []


class GoDialect(_twins.Dialect):
    """Go test functions: ``func TestX(t *testing.T) { ... }`` (examples and fuzz targets too) at the top
    level of a ``_test.go`` file, with the doc comment lines right above them; subtests live inside
    them. Ids (``<import path>.<TestX>/<subtest>``) do not name the file: ``target`` finds the
    ``_test.go`` file of the id's package directory that declares the function."""

    line_comments = ("//",)
    block_comments = (("/*", "*/"),)
    quotes = ('"', "'")
    raw_quotes = ("`",)
    true_false = ("true", "false")
    assert_words = re.compile(r"!=|==|\bwant|\bexpect|Equal|Diff\(|\bassert\.|\brequire\.|\bErrorf|\bFatalf|"
                              r"\.Error\(|\.Fatal\(|\bcheck|\bverify", re.I)
    sep = "_"

    # -- structure

    def _top(self, text: str) -> list[_Top]:
        """The file's top-level declarations, in order."""
        toks = _twins.scan(text, 0, len(text), self)
        code = _significant(text, toks)
        out: list[_Top] = []
        pairs = self._pairs(text, code)
        depth = 0
        i = 0
        while i < len(code):
            kind, s, e = code[i]
            word = text[s:e]
            if kind == "other" and word in "([{":
                depth += 1
            elif kind == "other" and word in ")]}":
                depth = max(0, depth - 1)
            elif kind == "word" and depth == 0 and word in _TOP_KEYWORDS and \
                    not text[_twins.line_start(text, s):s].strip():
                decl, i = self._one(text, code, pairs, i, word)
                if decl is not None:
                    out.append(decl)
                continue
            i += 1
        return out

    @staticmethod
    def _pairs(text: str, code: list) -> dict:
        """{index of an opening bracket token: index of the token that closes it}."""
        pairs: dict = {}
        stack: list = []
        for k, (kind, s, e) in enumerate(code):
            if kind != "other":
                continue
            ch = text[s]
            if ch in "([{":
                stack.append(k)
            elif ch in ")]}" and stack:
                pairs[stack.pop()] = k
        return pairs

    def _one(self, text: str, code: list, pairs: dict, i: int, keyword: str) -> tuple[_Top | None, int]:
        """The declaration starting at ``code[i]`` (its keyword) and the index just past it."""
        s = code[i][1]
        start = _twins.leading_block(text, _twins.line_start(text, s), ("//",))
        j = i + 1

        def close(k: int) -> tuple[int, int]:  # (offset past the bracket closing code[k], index after it)
            if k not in pairs:
                raise ValueError("unbalanced brackets")
            return code[pairs[k]][2], pairs[k] + 1

        def tok(k: int) -> str:
            return text[code[k][1]:code[k][2]] if k < len(code) else ""

        if keyword == "func":
            receiver = tok(j) == "("
            if receiver:
                _, j = close(j)
            if j >= len(code) or code[j][0] != "word":
                return None, j
            name, name_end = tok(j), code[j][2]
            j += 1
            if tok(j) == "[":  # type parameters
                _, j = close(j)
            if tok(j) != "(":
                return None, j
            p_start = code[j][1]
            p_end, j = close(j)
            params = text[p_start:p_end]
            # the body: the first "{" at this level after the results (which may be parenthesised)
            while j < len(code) and tok(j) != "{":
                if tok(j) in ("(", "["):
                    _, j = close(j)
                    continue
                if tok(j) in _TOP_KEYWORDS and not text[_twins.line_start(text, code[j][1]):code[j][1]].strip():
                    break  # a declaration without a body (assembly): the next declaration starts
                if tok(j) == "struct" or tok(j) == "interface":  # a result type's braces are not the body
                    j += 1
                    if tok(j) == "{":
                        _, j = close(j)
                    continue
                j += 1
            if tok(j) != "{":
                return _Top("func", name, start, _twins.line_end(text, name_end), name_end, receiver, params), j
            end, j = close(j)
            return _Top("func", name, start, end, name_end, receiver, params), j
        # type, var, const, import: one spec or a parenthesised group of them
        if tok(j) == "(":
            g_end, n = close(j)
            specs = []
            k = j + 1
            while k < n - 1:
                ks = code[k][1]
                ls = _twins.line_start(text, ks)
                if code[k][0] in ("word", "string") and not text[ls:ks].strip():
                    spec_end, k2 = self._spec_end(text, code, k, n - 1, close)
                    names = [] if keyword == "import" else self._names(text, ks, keyword)
                    specs.append((text.count("\n", 0, ks) + 1, text.count("\n", 0, spec_end) + 1, names))
                    k = k2
                    continue
                k += 1
            return _Top(keyword, "", start, g_end, code[j][1], specs=specs), n
        if j >= len(code):
            return None, j
        end, n = self._spec_end(text, code, j, len(code), close)
        names = [] if keyword == "import" else self._names(text, code[j][1], keyword)
        first, last = text.count("\n", 0, s) + 1, text.count("\n", 0, end) + 1
        return _Top(keyword, names[0] if names else "", start, end, code[j][2],
                    specs=[(first, last, names)]), n

    @staticmethod
    def _spec_end(text: str, code: list, k: int, limit: int, close) -> tuple[int, int]:
        """(end offset, next index) of the spec starting at ``code[k]``: up to the first line break
        outside its brackets."""
        end = code[k][2]
        k += 1
        while k < limit and "\n" not in text[end:code[k][1]]:
            if text[code[k][1]:code[k][2]] in ("(", "[", "{"):
                end, k = close(k)
                continue
            end = code[k][2]
            k += 1
        return end, k

    @staticmethod
    def _names(text: str, at: int, keyword: str) -> list[str]:
        m = _SPEC_NAMES.match(text, at)
        if not m:
            return []
        names = [n.strip() for n in m.group(0).split(",")]
        return names[:1] if keyword == "type" else names

    def declarations(self, text: str) -> list[_twins.Decl]:
        out = []
        for d in self._top(text):
            if d.kind == "func" and not d.receiver and is_test_name(d.name) and d.end > d.name_end:
                out.append(_twins.Decl(d.name, d.start, d.end, d.name_end))
        return out

    def copies(self, tree: str, path: str, text: str, names: list[str], state) -> None:
        """``twins.in_file_copies``, but not of a test that its name matters to: one whose name the
        package's code mentions outside comments (a table of test functions, a test calling another,
        a function name checked by reflection) or that reads its own name (``t.Name()``, golden files
        keyed by it). Renamed, it would not compile or not pass."""
        decls = {d.name: d for d in self.declarations(text)}
        folder = os.path.join(tree, _dir(path))
        sources = [text]
        try:
            for n in sorted(os.listdir(folder)):
                if n.endswith(".go") and n != path.rsplit("/", 1)[-1]:
                    try:
                        with open(os.path.join(folder, n), encoding="utf-8", errors="replace") as f:
                            sources.append(f.read())
                    except OSError:
                        continue
        except OSError:
            pass
        mentions: dict = {}
        for src in sources:
            wanted = [n for n in names if n in src]
            if not wanted:
                continue
            for kind, s, e in _twins.scan(src, 0, len(src), self):
                if kind in ("word", "string") and src[s:e] in wanted:
                    mentions[src[s:e]] = mentions.get(src[s:e], 0) + 1
                elif kind == "string":
                    for n in wanted:
                        if re.search(r"\b" + re.escape(n) + r"\b", src[s:e]):
                            mentions[n] = mentions.get(n, 0) + 1
        keep = []
        for name in names:
            d = decls.get(name)
            if d is None or mentions.get(name, 0) > 1:
                continue
            m = re.match(r"\s*\(\s*(\w+)", text[d.name_end:d.end])
            if m and re.search(r"\b" + re.escape(m.group(1)) + r"\.Name\(\)", text[d.name_end:d.end]):
                continue
            keep.append(name)
        _twins.in_file_copies(self, path, text, keep, state)

    # -- which file and declaration an id runs

    def target(self, test_id: str, files: list[str], tree: str) -> tuple[str, str] | None:
        m = _TEST_NAME.match(test_id)
        if not m:
            return None
        pkg, name = m.group(1), m.group(2).split("/", 1)[0]
        dirs = sorted({_dir(f) for f in files}, key=len, reverse=True)
        where = next((d for d in dirs if import_path(tree, d) == pkg), None)
        if where is None:  # no go.mod says: the longest directory the import path ends with
            where = next((d for d in dirs if d and import_path(tree, d) is None
                          and (pkg == d or pkg.endswith("/" + d))), None)
        if where is None:
            return None
        try:
            names = sorted(n for n in os.listdir(os.path.join(tree, where) if where else tree)
                           if n.endswith("_test.go"))
        except OSError:
            return None
        found = []
        for n in names:
            path = f"{where}/{n}" if where else n
            try:
                with open(os.path.join(tree, path), encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            if re.search(r"^func\s+" + re.escape(name) + r"\s*\(", text, re.M) and \
                    any(d.name == name for d in self.declarations(text)):
                found.append(path)
        return (found[0], name) if len(found) == 1 else None

    # -- which tests a test patch adds or changes

    def changed(self, text: str, added: list, removed: list) -> list[str]:
        """Go's version of ``Dialect.changed``: a line changes the top-level declaration it is in. A test
        function's change changes that test; a helper's (a function, method, type, var or const the
        tests use) changes every test whose code mentions its name, through other helpers too; an
        import, a benchmark or a helper nothing uses changes none.
        A changed ``TestMain``, ``init`` or package clause changes every test of the file."""
        def code(t: str) -> bool:
            t = t.strip()
            return bool(t) and not t.startswith(("//", "/*", "*", "*/"))

        tops = self._top(text)
        tests = {d.name for d in self.declarations(text)}
        lines = [(text.count("\n", 0, d.start) + 1, text.count("\n", 0, d.end) + 1, d) for d in tops]
        hit_tests: set = set()
        hit_names: set = set()
        everything = False

        def at(no: int, removed_texts: list | None = None) -> None:
            nonlocal everything
            inside = [d for a, b, d in lines if a <= no <= b]
            if not inside:
                for t in removed_texts or []:  # a whole declaration went: what it defined changed
                    m = re.match(r"^func\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)|^(?:type|var|const)\s+([A-Za-z_]\w*)", t)
                    if m:
                        hit_names.add(m.group(1) or m.group(2))
                    elif re.match(r"^package\s", t):
                        everything = True
                if 0 < no <= len(text.splitlines()) and re.match(r"^\s*package\s", text.splitlines()[no - 1]) \
                        and removed_texts is None:
                    everything = True
                return
            for d in inside:
                if d.kind == "func" and d.name in tests and not d.receiver:
                    hit_tests.add(d.name)
                elif d.kind == "func" and d.name in ("TestMain", "init") and not d.receiver:
                    everything = True
                elif d.kind == "func":
                    hit_names.add(d.name)
                elif d.kind != "import":
                    spec = [names for a, b, names in d.specs if a <= no <= b]
                    for names in spec or [n for *_, n in d.specs]:
                        hit_names.update(names)

        for no, t in added:
            if code(t):
                at(no)
        for no, ts in removed:
            if any(code(t) for t in ts):
                at(no, [t for t in ts if code(t)])
        if everything:
            return sorted(tests)
        # helpers that use a changed helper changed too, then the tests that use any of them
        bodies = {d.name: text[d.name_end:d.end] for d in tops if d.kind == "func" and d.name not in tests}
        while True:
            words = _words(hit_names)
            more = {n for n, body in bodies.items() if n not in hit_names and words and words.search(body)}
            if not more:
                break
            hit_names |= more
        words = _words(hit_names)
        if words:
            for d in tops:
                if d.kind == "func" and d.name in tests and not d.receiver and words.search(text, d.name_end, d.end):
                    hit_tests.add(d.name)
        return sorted(hit_tests)

    # -- literals a twin may change

    def tokens(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
        """The literals of ``text[start:end]`` a twin can change and still compile, in the order worth
        trying: next to a comparison or in a table's expected field (``want: 3``) first, then numbers
        and bools, then strings. Left out: what
        ``t.Errorf`` and its kind are given (a message), a subtest's name, indexes and array lengths
        (inside ``[...]``), map keys and case labels (a changed one may repeat another), numbers next
        to a shift or whose successor overflows a sized integer, strings ending in an escape and
        strings that name files. When the test compares with a literal, only those are offered (an
        input changed may make the code under test panic, and a panic ends the whole test binary)."""
        end = len(text) if end is None else end
        toks = _twins.scan(text, start, end, self)
        code = _significant(text, toks)
        skip: set = set()
        stack: list = []
        pairs = self._pairs(text, code)
        for k, (kind, s, e) in enumerate(code):
            ch = text[s:e]
            prev = text[code[k - 1][1]:code[k - 1][2]] if k else ""
            nxt = text[code[k + 1][1]:code[k + 1][2]] if k + 1 < len(code) else ""
            if kind == "word" and nxt == "(" and (prev == "." and (ch in _MESSAGE_CALLS or ch == "Run") or
                                                  ch == "panic" and prev != "."):
                close = code[pairs[k + 1]][2] if k + 1 in pairs else end
                if ch == "Run":  # the subtest's name only
                    if k + 2 < len(code) and code[k + 2][0] == "string":
                        skip.add(code[k + 2][1])
                else:
                    skip.update(t[1] for t in code[k + 1:] if t[1] < close)
            if kind == "other" and ch in "([{":
                stack.append(ch)
            elif kind == "other" and ch in ")]}":
                if stack:
                    stack.pop()
            elif kind in ("number", "string"):
                shift = text[code[k - 2][1]:code[k - 1][2]] if k >= 2 else ""
                shift2 = text[code[k + 1][1]:code[k + 2][2]] if k + 2 < len(code) else ""
                if (stack and stack[-1] == "[") or re.match(r"\s*:(?!=)", text[e:e + 4]):
                    skip.add(s)
                elif kind == "number" and (text[s:e] in _OVERFLOWS or {"<<", ">>"} & {shift, shift2}):
                    skip.add(s)
                elif kind == "string" and ("\\" in text[max(s + 1, e - 12):e - 1] or _PATH_LIKE.search(text[s:e])):
                    skip.add(s)
        opener = {v: k for k, v in pairs.items()}

        def word(k: int) -> str:
            return text[code[k][1]:code[k][2]] if 0 <= k < len(code) else ""

        def of_len(k: int) -> bool:  # code[k] closes or opens a len(...)/cap(...) call
            if word(k) == ")" and k in opener:
                return word(opener[k] - 1) in ("len", "cap")
            return word(k) in ("len", "cap")

        strong, weak, nums, strs = [], [], [], []
        for k, (kind, s, e) in enumerate(code):
            if s in skip or kind not in ("number", "string", "word"):
                continue
            if kind == "word" and text[s:e] not in self.true_false:
                continue
            before, after = word(k - 2) + word(k - 1), word(k + 1) + word(k + 2)
            field = word(k - 2) if word(k - 1) == ":" else ""
            if before in ("!=", "==") or after in ("!=", "=="):
                (weak if of_len(k - 3 if before in ("!=", "==") else k + 3) else strong).append((kind, s, e))
            elif _EXPECTED_FIELD.match(field) or self._assigned_to_expected(text, code, k):
                strong.append((kind, s, e))
            else:
                (strs if kind == "string" else nums).append((kind, s, e))
        # an expected value changed makes a twin fail by comparison; an input changed may make the code
        # under test panic, and a panic ends the whole test binary (the real tests after it go missing):
        # inputs only when the test compares with no literal but a length
        if any(k != "string" or (e - s >= 3 and text[e - 2].isalnum()) for k, s, e in strong):
            return strong + weak
        return weak + nums + strs

    @staticmethod
    def _assigned_to_expected(text: str, code: list, k: int) -> bool:
        """Whether ``code[k]`` is assigned, outside any call, to a variable named like an expectation:
        ``want := 3``, ``got, want := f(x), "abc"``."""
        ls = _twins.line_start(text, code[k][1])
        m = _EXPECTED_ASSIGN.match(text, ls)
        if not m or m.end() > code[k][1]:
            return False
        depth = 0
        for kind, s, e in code:
            if s < m.end() or s >= code[k][1]:
                continue
            if kind == "other" and text[s] in "([{":
                depth += 1
            elif kind == "other" and text[s] in ")]}":
                depth -= 1
        return depth == 0


def import_path(tree: str, d: str) -> str | None:
    """The import path of the package in directory ``d`` of ``tree``: the module path of the nearest
    ``go.mod`` at or above it, and the way down from there; None when no go.mod in the tree says."""
    parts = d.split("/") if d else []
    for k in range(len(parts), -1, -1):
        try:
            with open(os.path.join(tree, *parts[:k], "go.mod"), encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        m = re.search(r"^\s*module\s+\"?([^\s\"/][^\s\"]*)", text, re.M)
        if not m:
            return None
        return "/".join([m.group(1), *parts[k:]])
    return None


def _significant(text: str, toks: list) -> list:
    """The tokens that are not comments or white space."""
    return [t for t in toks if t[0] != "comment" and not (t[0] == "other" and text[t[1]].isspace())]


def _words(names: set):
    names = {n for n in names if n and n != "_"}
    return re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b") if names else None


GoTest.dialect = GoDialect()
