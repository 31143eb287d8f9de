"""Test-based verifier of code tasks (stdlib only; Python 3.9+).

After the episode the repository is rebuilt from the pack's pristine git data (nothing the agent left
in the work dir is kept but its submitted patch), the patch is applied, and every file that can
change how tests are collected or reported is made equal to base + hidden test patch (``stage``:
pytest/tox/setup.cfg/pyproject files, any ``conftest.py``, ``sitecustomize``/``usercustomize``,
``.pth`` files, ``.dist-info``/``.egg-info`` metadata (entry points), byte-code caches, symlinks,
the test patch's files, the test directories of the run files, and new top-level modules that would
shadow a module of the environment, such as ``pytest.py``), and the files the project's install
generated in the tree (``install``: laid over it at every reset). A submission that edits them is
graded with them restored. The task's test files then run once under a timeout with plugin autoload off and
only the pytest plugins recorded at validation loaded (``-p NAME``), no user site, a private HOME,
and a canary test that must fail: a run that reports it passing was taken over and scores 0. The
reward is 1 only if every FAIL_TO_PASS and every PASS_TO_PASS test passed; a test missing from the
report counts as failed.

The same functions run the host's validation (``python -m envgen_verifiers.tests matrix SPEC``: the
test runs at the base commit and with the gold patch, repeated, staged exactly as a submission), so
what decided a task's test lists at build time is exactly what judges an agent. Reports are read
from JUnit XML first; when there is none (a crash, a timeout, a runner without JUnit output) the
runner's own summary lines are parsed (pytest ``-rA``, unittest ``-v``).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from . import install as _generated
from . import netprobe as _netprobe
from . import runners as _runners
from . import screen as _screen
from . import twins as _twins
from .pyenv import probe_environment, resolve_python, test_env
from .runners.base import ERROR, FAILED, FAILING, PASSED, PASSING, SKIPPED, XFAIL

PYTHON_FRAMEWORKS = ("pytest", "unittest")
"""Frameworks this module drives itself; every other one is a ``runners`` Runner."""
SUBMISSION = ".envgen/submission.patch"
"""Where the submit tool writes the patch the agent hands in, relative to the work dir."""
CONFIG_NAMES = frozenset({
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
    "pyproject.toml", ".coveragerc", "sitecustomize.py", "usercustomize.py", "sitecustomize", "usercustomize",
    "__pycache__", ".pytest_cache", ".gitattributes"})
"""Path components that configure the test run or the interpreter (anywhere in the tree): pytest's
configuration files and conftests, coverage's (its plugins run inside pytest-cov), start-up hooks,
byte-code caches (an unchecked .pyc replaces its source), and git attributes (they would apply to the
files the kit restores)."""
INFRA_SUFFIXES = (".pth", ".pyc", ".pyo", ".egg-link")
INFRA_DIR_SUFFIXES = (".dist-info", ".egg-info")
"""Distribution metadata: its entry_points.txt can register pytest11 plugins."""
PY_SUFFIXES = (".py", ".pyc", ".pyo", ".pyw", ".so", ".pyd")
"""Files Python imports code from."""
TEST_DIRS = ("tests", "test", "testing")
"""Directory names whose subtree, when it holds a run test file, belongs to the tests (helpers, data)."""
TAIL_CHARS = 3000
MESSAGE_CHARS = 500
"""A failing test's message as reports keep it (enough to tell a network error from an assertion)."""


class PatchError(ValueError):
    """A patch that is malformed or does not apply."""


# ---------------------------------------------------------------- report parsing


def _module_of(path: str) -> str:
    return path[:-3].replace("/", ".") if path.endswith(".py") else path.replace("/", ".")


def _junit_id(case: ET.Element, files: list[str]) -> str | None:
    """A pytest node id (``path::Class::name``) from a testcase's classname/name/file attributes."""
    name = case.get("name") or ""
    classname = case.get("classname") or ""
    if not classname:
        return None  # a collection error entry: it names a module, not a test
    path = (case.get("file") or "").replace("\\", "/")
    parts = classname.split(".")
    if not path:  # xunit2 has no file attribute: find the run file whose module prefixes classname
        for f in sorted(files, key=len, reverse=True):
            mod = _module_of(f)
            if classname == mod or classname.startswith(mod + "."):
                path = f
                break
    if path:
        mod = _module_of(path).split(".")
        inner = parts[len(mod):] if parts[:len(mod)] == mod else parts[-1:] if parts[-1][:1].isupper() else []
        return "::".join([path, *inner, name])
    return "::".join([*parts, name])


def _short_message(elem: ET.Element) -> str:
    """A failure's message attribute and the last lines of its text, short (what the failure says)."""
    msg = (elem.get("message") or "").strip()
    lines = [ln for ln in (elem.text or "").strip().splitlines() if ln.strip()]
    errs = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    tail = " | ".join(errs[-3:] if errs else lines[-2:])
    text = msg if not tail or tail in msg else (f"{msg} | {tail}" if msg else tail)
    return text[:MESSAGE_CHARS]


def _run_file_of(case: ET.Element, files: list[str]) -> str:
    """The run file a collection-error entry names (its ``file`` attribute, or its dotted module name)."""
    path = (case.get("file") or "").replace("\\", "/")
    if path:
        return path
    name = case.get("name") or ""
    return next((f for f in files if _module_of(f) == name), name.replace(".", "/") + ".py")


def parse_junit(text: str, files: list[str] = (), messages: dict | None = None,
                not_run: dict | None = None) -> dict[str, str]:
    """{test id: outcome} from JUnit XML (pytest's, or any runner's); raises ValueError if it is not JUnit.

    messages: filled with {test id: short failure message} for failing tests; not_run: filled with
    {run file: error} for files that failed to collect (pytest's entries without a classname)."""
    root = ET.fromstring(text)
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"not a JUnit report (root element {root.tag!r})")
    out: dict[str, str] = {}
    for case in root.iter("testcase"):
        tid = _junit_id(case, list(files))
        if tid is None:
            bad = next((c for c in case if c.tag in ("error", "failure")), None)
            if bad is not None and not_run is not None:
                not_run[_run_file_of(case, list(files))] = first_error(bad.text or "") or _short_message(bad)
            continue
        status, bad = PASSED, None
        for child in case:
            if child.tag == "failure":
                status, bad = FAILED, child
            elif child.tag == "error":
                status, bad = ERROR, child
            elif child.tag == "skipped":
                status = XFAIL if (child.get("type") or "").endswith("xfail") else SKIPPED
        if out.get(tid) in FAILING and status not in FAILING:
            continue  # a test with a passing call and a failing teardown is reported twice: it failed
        out[tid] = status
        if messages is not None and bad is not None:
            messages[tid] = _short_message(bad)
    return out


_RA = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+::\S.*?)(?:\s+-\s+(.*))?$")
_RA_MODULE = re.compile(r"^ERROR\s+([^\s:]+)(?:\s+-\s+(.*))?$")


def parse_pytest_summary(text: str, messages: dict | None = None, not_run: dict | None = None) -> dict[str, str]:
    """{node id: outcome} from pytest's ``-rA`` short summary lines (``PASSED tests/x.py::test_a``);
    ``FAILED id - message`` fills ``messages``, ``ERROR tests/x.py`` (a collection error) ``not_run``."""
    mapping = {"PASSED": PASSED, "FAILED": FAILED, "ERROR": ERROR, "XFAIL": XFAIL, "XPASS": PASSED,
               "SKIPPED": SKIPPED}
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _RA.match(line.strip())
        if m:
            status = mapping[m.group(1)]
            if out.get(m.group(2)) not in FAILING:
                out[m.group(2)] = status
                if messages is not None and status in FAILING and m.group(3):
                    messages[m.group(2)] = m.group(3)[:MESSAGE_CHARS]
            continue
        m = _RA_MODULE.match(line.strip())
        if m and not_run is not None and m.group(1) not in not_run:
            not_run[m.group(1)] = (m.group(2) or "collection error")[:MESSAGE_CHARS]
    return out


_UT = re.compile(r"^(\w+) \(([\w.]+)\)")
_UT_RESULT = re.compile(r"\.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)\s*$")


def parse_unittest_verbose(text: str) -> dict[str, str]:
    """{module.Class.test: outcome} from ``python -m unittest -v`` (3.9-3.10 and 3.11+ line formats)."""
    mapping = {"ok": PASSED, "FAIL": FAILED, "ERROR": ERROR, "expected failure": XFAIL,
               "unexpected success": FAILED}
    out: dict[str, str] = {}
    pending = None
    for line in text.splitlines():
        m = _UT.match(line)
        if m:
            name, where = m.groups()
            pending = where if where.endswith("." + name) else f"{where}.{name}"
        r = _UT_RESULT.search(line)
        if r and pending:
            word = r.group(1)
            out[pending] = SKIPPED if word.startswith("skipped") else mapping[word]
            pending = None
    return out


def parse_report(framework: str, junit_text: str | None, output: str, files: list[str] = (),
                 messages: dict | None = None, not_run: dict | None = None) -> tuple[dict, str]:
    """(outcomes, source): JUnit XML when there is a usable report, else the framework's summary lines.
    ``messages`` and ``not_run`` are filled as ``parse_junit`` says."""
    if junit_text:
        try:
            msgs: dict = {}
            missing: dict = {}
            res = parse_junit(junit_text, files, msgs, missing)
            if res or missing:
                if messages is not None:
                    messages.update(msgs)
                if not_run is not None:
                    not_run.update(missing)
                return res, "junit"
        except (ET.ParseError, ValueError):
            pass
    if framework == "unittest":
        return parse_unittest_verbose(output), "unittest-verbose"
    return parse_pytest_summary(output, messages, not_run), "pytest-rA"


_E_LINE = re.compile(r"^E\s+(\S.*)$")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:?.*)$")


def first_error(text: str) -> str:
    """The first line of a test run's output that says why tests did not run: a conftest that does not
    import, a usage error, a module that fails to collect, else the first exception line; "" if none."""
    lines = [ln.rstrip() for ln in text.splitlines()]

    def e_after(i: int) -> str:
        for ln in lines[i + 1:i + 60]:
            m = _E_LINE.match(ln)
            if m:
                return m.group(1).strip()
        return ""

    for i, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith("ImportError while loading conftest"):
            return f"{s.rstrip('.')}: {e_after(i)}".rstrip(": ")[:MESSAGE_CHARS]
    for s in (ln.strip() for ln in lines):
        if s.startswith(("ERROR: file or directory not found", "ERROR: not found", "pytest: error:",
                         "__main__.py: error:", "ERROR: usage:")) and "usage:" not in s[6:13]:
            return s[:MESSAGE_CHARS]
        if re.match(r"^[\w.-]+: error: ", s):
            return s[:MESSAGE_CHARS]
    for i, ln in enumerate(lines):
        m = re.match(r"^_+ ERROR collecting (\S+) _+$", ln.strip())
        if m:
            return f"{m.group(1)}: {e_after(i) or 'collection error'}"[:MESSAGE_CHARS]
    for ln in lines:
        m = _E_LINE.match(ln)
        if m and _EXC_LINE.match(m.group(1).strip()):
            return m.group(1).strip()[:MESSAGE_CHARS]
    for ln in lines:
        if _EXC_LINE.match(ln.strip()) and ":" in ln:
            return ln.strip()[:MESSAGE_CHARS]
    rest = [ln.strip() for ln in lines if ln.strip()]
    return rest[-1][:MESSAGE_CHARS] if rest else ""


# ---------------------------------------------------------------- which tests the test patch changes


def _diff_lines(text: str) -> dict:
    """{path after the patch: {"new": bool, "added": [(line, text)], "removed": [(line, [texts])]}} of a
    git diff: the new-side numbers of added lines, and where (new-side line) each run of removed lines was."""
    out: dict = {}
    cur = None
    new_no = 0
    minus = ""
    pending: list = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            cur = {"new": False, "added": [], "removed": [], "path": None}
            m = re.match(r"^diff --git a/(.+?) b/(.+)$", line)
            if m:
                cur["path"] = m.group(2)
                out[m.group(2)] = cur
        elif cur is not None and line.startswith("new file mode"):
            cur["new"] = True
        elif line.startswith("--- "):
            minus = line[4:].split("\t")[0].strip()
            if cur is not None and not cur.get("plain") and minus == "/dev/null":
                cur["new"] = True
        elif line.startswith("+++ ") and (cur is None or cur.get("plain")):  # a plain unified diff
            p = line[4:].split("\t")[0].strip()
            p = p[2:] if p[:2] in ("a/", "b/") else p
            cur = out.setdefault(p, {"new": minus == "/dev/null", "added": [], "removed": [], "path": p,
                                     "plain": True})
        elif line.startswith("@@") and cur is not None:
            m = _HUNK.match(line)
            if not m:
                i += 1
                continue
            new_no = int(m.group(3))
            n_old = int(m.group(2)) if m.group(2) is not None else 1
            n_new = int(m.group(4)) if m.group(4) is not None else 1
            pending = []
            i += 1
            while i < len(lines) and (n_old > 0 or n_new > 0):
                body = lines[i]
                tag = body[:1]
                if tag == "-":
                    pending.append(body[1:])
                    n_old -= 1
                elif tag in ("+", " ", ""):
                    if pending:
                        cur["removed"].append((new_no, pending))
                        pending = []
                    if tag == "+":
                        cur["added"].append((new_no, body[1:]))
                    else:
                        n_old -= 1
                    n_new -= 1
                    new_no += 1
                i += 1
            if pending:
                cur["removed"].append((new_no, pending))
            continue
        i += 1
    return out


def _spans(tree: ast.AST) -> list:
    """[(qualified name parts, first line, last line)] of the module's classes and functions: a class's
    methods and nested classes, a function as a whole (decorators included)."""
    out = []

    def walk(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                name = (*prefix, node.name)
                out.append((name, start, getattr(node, "end_lineno", None) or start))
                if isinstance(node, ast.ClassDef):
                    walk(node.body, name)
    walk(tree.body, ())
    return out


def _enclosing(spans: list, line: int) -> tuple:
    best: tuple = ()
    for name, start, end in spans:
        if start <= line <= end and len(name) > len(best):
            best = name
    return best


def _code(text: str) -> bool:
    s = text.strip()
    return bool(s) and not s.startswith("#")


def _is_test_module(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def changed_by_test_patch(tree: str, test_patch: str, files: list[str], framework: str = "pytest") -> dict:
    """What the test patch adds or changes, as tests: {"files": {run file: "all" | ["Class::test", ...]},
    "dirs": [directory whose every test counts as changed]}; read from the tree after the test patch.

    A new file, a non-Python run file, a file that does not parse, and any code line changed at module
    level (imports, constants, module-level fixtures, a removed or renamed test) change every test of
    the file; a line inside a class but outside its methods changes every test of the class; a line
    inside a function (its decorators, hence its parametrization, included) changes that function.
    Blank and comment-only lines change nothing. A conftest.py, helper module or data file the patch
    touches (anything but a test module) changes every test under its directory.
    """
    diff = _diff_lines(test_patch)
    if framework not in PYTHON_FRAMEWORKS:
        return _changed_declarations(tree, diff, framework)
    changed: dict = {}
    dirs: list = []
    for path, d in diff.items():
        if path not in files:
            if not _is_test_module(path) or path.rsplit("/", 1)[-1] == "conftest.py":
                parent = path.rsplit("/", 1)[0] if "/" in path else ""
                if parent not in dirs:
                    dirs.append(parent)
            continue
        if d["new"] or not path.endswith(".py"):
            changed[path] = "all"
            continue
        try:
            with open(os.path.join(tree, path), encoding="utf-8", errors="surrogateescape") as f:
                source = f.read()
            spans = _spans(ast.parse(source))
        except (OSError, SyntaxError, ValueError):
            changed[path] = "all"
            continue
        src_lines = source.splitlines()
        names: set = set()
        whole = False
        for no, text in d["added"]:
            if _code(text):
                where = _enclosing(spans, no)
                whole = whole or not where
                names.add(where)
        replaced = {no for no, text in d["added"] if _code(text)}
        for no, texts in d["removed"]:
            code = [t for t in texts if _code(t)]
            if not code or no in replaced:
                continue  # a replacement is judged by the lines that replace it
            if not code[0][:1].isspace():
                whole = True  # a top-level statement or definition went
                continue
            above = no - 1  # indented code belongs to the block of the code line above it
            while above > 0 and above <= len(src_lines) and not _code(src_lines[above - 1]):
                above -= 1
            where = _enclosing(spans, above) if above > 0 else ()
            whole = whole or not where
            names.add(where)
        changed[path] = "all" if whole else sorted("::".join(n) for n in names if n)
    return {"files": changed, "dirs": sorted(dirs)}


def dialect(framework: str):
    """How a framework's tests are declared (``twins.Dialect``): Python's, or its runner's; None when
    the runner has none (its tests are whole programs)."""
    if framework in PYTHON_FRAMEWORKS:
        return _twins.PYTHON
    runner = _runners.get(framework)
    return getattr(runner, "dialect", None) if runner is not None else None


def _changed_declarations(tree: str, diff: dict, framework: str) -> dict:
    """``changed_by_test_patch`` for another language: per file the test patch touches, the names of
    the test declarations it adds or changes (``Dialect.changed``), "all" for a new file; without a
    dialect (whole-program tests), every file it touches."""
    d = dialect(framework)
    out: dict = {}
    for path, lines in diff.items():
        if d is None or lines["new"]:
            out[path] = "all"
            continue
        text = _read(os.path.join(tree, path))
        try:
            out[path] = d.changed(text, lines["added"], lines["removed"]) if text is not None else []
        except (ValueError, SyntaxError):
            out[path] = "all"
    return {"files": out, "dirs": [], "declarations": d is not None}


def split_test_id(test_id: str, files: list[str] = ()) -> tuple:
    """(run file, [names]) of a test id: ``path::Class::test[param]`` (the parameters dropped) or a
    unittest id ``pkg.module.Class.test`` matched to the run file whose module it names."""
    if "::" in test_id:
        path, *names = test_id.split("::")
    else:
        path, names = "", test_id.split(".")
        for f in sorted(files, key=len, reverse=True):
            mod = _module_of(f)
            if test_id.startswith(mod + "."):
                path, names = f, test_id[len(mod) + 1:].split(".")
                break
    if names:
        names[-1] = names[-1].split("[", 1)[0]
    return path, names


def is_changed(test_id: str, changes: dict, files: list[str] = (), framework: str = "pytest", tree: str = "") -> bool:
    """Whether the test patch adds or changes this test (see ``changed_by_test_patch``). For another
    language's runner with a dialect: whether the patch adds or changes the declaration the id runs
    (``tree``: the staged tree, where the dialect finds it); without one: whether the patch touches the
    file or directory the test lives in (``Runner.test_path``), or any run file when the id names neither."""
    runner = _runners.get(framework)
    if runner is not None:
        touched = changes.get("files", {})
        d = dialect(framework) if changes.get("declarations") else None
        if d is not None:
            t = d.target(test_id, list(files), tree)
            if t is not None:
                entry = touched.get(t[0])
                return entry == "all" or (entry is not None and t[1] in entry)
        where = runner.test_path(test_id, list(files))
        if not where:
            return any(e == "all" for e in touched.values()) if d is not None else any(p in touched for p in files)
        return any((p == where or p.startswith(where.rstrip("/") + "/")) and (d is None or e == "all")
                   for p, e in touched.items())
    path, names = split_test_id(test_id, files)
    if any(d == "" or path.startswith(d + "/") for d in changes.get("dirs", ())):
        return True
    entry = changes.get("files", {}).get(path)
    if entry is None:
        return False
    if entry == "all":
        return True
    return any(names[:len(q)] == q for q in (e.split("::") for e in entry))


# ---------------------------------------------------------------- patches


_HEADERS = ("index ", "--- ", "+++ ", "old mode ", "new mode ", "deleted file mode ", "new file mode ",
            "similarity index ", "dissimilarity index ", "rename from ", "rename to ", "copy from ", "copy to ",
            "Binary files ")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def check_patch(text: str) -> int:
    """Raise PatchError unless ``text`` is a well-formed unified (git) diff; return its file count.

    Stricter than ``git apply``, which skips lines it does not understand: a patch with a stray line
    after its last hunk (a truncated or corrupted submission) is refused instead of half-read.
    """
    if not text.strip():
        raise PatchError("the patch is empty")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i, files, state = 0, 0, "start"
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            files, state = files + 1, "header"
        elif state == "binary" and (line == "" or line.startswith(("literal ", "delta "))
                                    or re.fullmatch(r"[A-Za-z][0-9A-Za-z!#$%&()*+;<=>?@^_`{|}~-]*", line)):
            pass
        elif line.startswith("--- ") and state in ("start", "hunks", "binary"):
            files, state = files + 1, "header"  # a plain unified diff (no git header)
        elif line.startswith(_HEADERS) and state == "header":
            pass
        elif line == "GIT binary patch" and state == "header":
            state = "binary"
        elif line.startswith("@@") and state in ("header", "hunks"):
            m = _HUNK.match(line)
            if not m:
                raise PatchError(f"line {i + 1}: malformed hunk header {line[:80]!r}")
            old = int(m.group(2)) if m.group(2) is not None else 1
            new = int(m.group(4)) if m.group(4) is not None else 1
            i += 1
            while old > 0 or new > 0:
                if i >= len(lines):
                    raise PatchError(f"the patch ends inside a hunk ({old} old and {new} new lines missing)")
                body = lines[i]
                tag = body[:1]
                if tag in (" ", "") and old > 0 and new > 0:
                    old, new = old - 1, new - 1
                elif tag == "-" and old > 0:
                    old -= 1
                elif tag == "+" and new > 0:
                    new -= 1
                elif tag == "\\":
                    pass
                else:
                    raise PatchError(f"line {i + 1}: {body[:80]!r} does not fit its hunk's line counts")
                i += 1
            while i < len(lines) and lines[i].startswith("\\"):
                i += 1
            state = "hunks"
            continue
        else:
            raise PatchError(f"line {i + 1}: {line[:80]!r} is neither a diff header nor part of a hunk")
        i += 1
    if files == 0:
        raise PatchError("no file diffs in the patch")
    return files


def patch_files(text: str) -> list[str]:
    """Paths a patch touches (both sides of renames), in order."""
    out: list[str] = []
    for line in text.splitlines():
        m = re.match(r"^diff --git a/(.+?) b/(.+)$", line)
        names = list(m.groups()) if m else []
        if not m and line.startswith(("--- ", "+++ ")):
            p = line[4:].split("\t")[0].strip()
            if p != "/dev/null":
                names = [p[2:] if p[:2] in ("a/", "b/") else p]
        for n in names:
            if n not in out:
                out.append(n)
    return out


def protected_dirs(files: list[str]) -> list[str]:
    """The test directories the run files live in: for ``pkg/tests/unit/test_a.py``, ``pkg/tests``.

    A run file outside any test directory (``test_a.py`` at the root) protects only itself."""
    out: list[str] = []
    for f in files:
        parts = f.split("/")[:-1]
        for i, part in enumerate(parts):
            if part in TEST_DIRS:
                sub = "/".join(parts[:i + 1])
                if sub not in out:
                    out.append(sub)
                break
    return out


def top_module(rel: str) -> str | None:
    """The top-level module a path defines relative to an import root (``pytest.py`` -> ``pytest``,
    ``_pytest/x.py`` -> ``_pytest``, ``json.cpython-311-x86_64-linux-gnu.so`` -> ``json``), or None."""
    first, _, rest = rel.partition("/")
    if rest:
        stem = first
    elif first.endswith((".py", ".pyc", ".pyo", ".pyw")):
        stem = first.rsplit(".", 1)[0]
    elif first.endswith((".so", ".pyd")):
        stem = first.split(".", 1)[0]
    else:
        return None
    return stem if stem.isidentifier() else None


class Infrastructure:
    """Which paths of a tree belong to the test run rather than to the code under test.

    test_paths: what the test patch adds, changes or deletes; files: the run's test files; roots:
    import roots relative to the tree (``""`` is the tree itself, the current directory of the run);
    env_modules: top-level modules the environment provides (stdlib and installed); base_paths: the
    files at the base commit; extra: a predicate for the paths another language's runner says configure
    its run (``Runner.infrastructure``). The Python files of a new top-level module at an import root that an
    environment module has the name of (``pytest.py``, ``pluggy/__init__.py``, ``json.py``) would
    shadow it and are infrastructure; a top-level name that exists at base is the project's own (the
    project under test may be pytest itself).
    """

    def __init__(self, *, test_paths=(), files=(), roots=("",), env_modules=(), base_paths=(), extra=None):
        self.extra = extra
        self.test_paths = set(test_paths)
        self.subtrees = protected_dirs(list(files))
        self.roots = sorted({"" if r in ("", ".") else r.strip("/") for r in roots}, key=len, reverse=True)
        self.env_modules = set(env_modules)
        self.base_tops: dict[str, set] = {r: set() for r in self.roots}
        for p in base_paths:
            for r in self.roots:
                rel = self._rel(p, r)
                if rel is not None:
                    self.base_tops[r].add(top_module(rel))

    @staticmethod
    def _rel(path: str, root: str) -> str | None:
        if not root:
            return path
        return path[len(root) + 1:] if path.startswith(root + "/") else None

    def __call__(self, path: str) -> bool:
        parts = path.split("/")
        name = parts[-1]
        if any(c in CONFIG_NAMES or c.endswith(INFRA_DIR_SUFFIXES) for c in parts):
            return True
        if name.endswith(INFRA_SUFFIXES) or name.split(".", 1)[0] in ("sitecustomize", "usercustomize"):
            return True
        if path in self.test_paths or any(path == s or path.startswith(s + "/") for s in self.subtrees):
            return True
        if self.extra is not None and self.extra(path):
            return True
        if not name.endswith(PY_SUFFIXES):
            return False  # a package's other files cannot shadow anything once its Python files are gone
        for r in self.roots:
            rel = self._rel(path, r)
            top = top_module(rel) if rel is not None else None
            if top and top in self.env_modules and top not in self.base_tops[r]:
                return True
        return False


# ---------------------------------------------------------------- git


def _git_env() -> dict:
    """A fixed environment for git: no system, global or user configuration (the agent could have
    written a ~/.gitconfig whose filters run commands at checkout), no inherited GIT_* variables."""
    return {"PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent",
            "TMPDIR": tempfile.gettempdir(), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C.UTF-8"}


def git(repo: str, *args: str, input: bytes | None = None, env: dict | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["git", "-c", "safe.directory=*", "-c", "core.hooksPath=/dev/null", "-C", repo, *args]
    out = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or _git_env(),
                         timeout=300)
    if check and out.returncode != 0:
        raise PatchError(f"git {' '.join(args[:2])} failed ({out.returncode}): "
                         f"{out.stderr.decode(errors='replace').strip()[-500:]}")
    return out


def prepare_repo(work_dir: str, repo: str = "repo", git_dir: str = "repo.git") -> str | None:
    """Give the work dir's git data (``repo.git``) its working tree (``repo``, with a ``.git`` file).

    A pack ships only the git data (images never hold ``.git`` folders, and the objects are smaller
    than a checkout); the tree is materialised in the writable work dir. Returns the tree's path, or
    None when the work dir holds no repository.
    """
    gd = os.path.join(work_dir, git_dir)
    if not os.path.isdir(gd):
        return None
    tree = os.path.join(work_dir, repo)
    os.makedirs(tree, exist_ok=True)
    gitfile = os.path.join(tree, ".git")
    fresh = not os.path.exists(gitfile)
    if fresh:
        with open(gitfile, "w") as f:
            f.write(f"gitdir: {os.path.relpath(gd, tree)}\n")
        git(tree, "reset", "--hard", "-q")
        _generated.overlay(tree)  # files the install generated (install.GENERATED_DIR; none outside an image)
    return tree


def reset_repo(tree: str, base: str, generated: bool = True) -> None:
    """Back to ``base`` exactly: tracked files restored, untracked and ignored files removed, then the
    files the install generated laid back (``generated``; ``stage`` lays them after the submission)."""
    git(tree, "reset", "--hard", "-q", base)
    git(tree, "clean", "-ffdxq")
    if generated:
        _generated.overlay(tree)


def apply_patch(tree: str, text: str, what: str) -> None:
    if not text.endswith("\n"):
        text += "\n"
    out = git(tree, "apply", "--whitespace=nowarn", "-", input=text.encode(), check=False)
    if out.returncode != 0:
        raise PatchError(f"{what} does not apply: {out.stderr.decode(errors='replace').strip()[-500:]}")


def _entries(tree: str, *args: str, env: dict | None = None) -> dict[str, tuple[str, str]]:
    """{path: (kind, blob id)} from ``git ls-tree -r -z`` or ``git ls-files -s -z``; kind is file,
    link or gitlink."""
    out = git(tree, *args, env=env).stdout.decode("utf-8", errors="surrogateescape")
    entries = {}
    for rec in out.split("\0"):
        if not rec:
            continue
        meta, path = rec.split("\t", 1)
        fields = meta.split()
        sha = fields[2] if fields[1] in ("blob", "commit", "tree") else fields[1]
        entries[path] = ({"120000": "link", "160000": "gitlink"}.get(fields[0], "file"), sha)
    return entries


def _disk_state(tree: str, path: str) -> tuple[str, str | None] | None:
    """(kind, blob id) of a path on disk, as git would hash it; None when it does not exist."""
    full = os.path.join(tree, path)
    if not os.path.lexists(full):
        return None
    if os.path.islink(full):
        data = os.fsencode(os.readlink(full))
        kind = "link"
    elif os.path.isdir(full):
        return ("dir", None)
    else:
        with open(full, "rb") as f:
            data = f.read()
        kind = "file"
    return (kind, hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())


def _walk(tree: str) -> list[str]:
    """Every file and symlink under the tree (symlinked directories are not entered), except ``.git``."""
    out = []
    for root, dirs, names in os.walk(tree):
        rel = os.path.relpath(root, tree)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        if not prefix:
            dirs[:] = [d for d in dirs if d != ".git"]
            names = [n for n in names if n != ".git"]
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        dirs[:] = [d for d in dirs if d not in links]
        out += [prefix + n for n in names + links]
    return out


def stage(tree: str, base: str, test_patch: str, submission: str | None = None, *, files: list[str] = (),
          roots: list[str] = ("",), env_modules=(), what: str = "the submitted patch", extra=None) -> list[str]:
    """Prepare the tree a test run judges: ``base``, then ``submission``, then every test-infrastructure
    path (see ``Infrastructure``; symlinks too) made equal to base + ``test_patch``.

    Returns the paths the submission changed that were restored. Raises PatchError when a patch does
    not apply. The same function stages validation runs (gold patch as the submission).
    """
    reset_repo(tree, base, generated=False)
    tmp = tempfile.mkdtemp(prefix="envgen-index-")
    try:
        env = dict(_git_env(), GIT_INDEX_FILE=os.path.join(tmp, "index"))
        git(tree, "read-tree", base, env=env)
        text = test_patch if test_patch.endswith("\n") else test_patch + "\n"
        out = git(tree, "apply", "--cached", "--whitespace=nowarn", "-", input=text.encode("utf-8", "surrogateescape"),
                  env=env, check=False)
        if out.returncode != 0:
            raise PatchError(f"the test patch does not apply: {out.stderr.decode(errors='replace').strip()[-500:]}")
        ref = _entries(tree, "ls-files", "-s", "-z", env=env)
        at_base = _entries(tree, "ls-tree", "-r", "-z", base)
        if submission is not None:
            apply_patch(tree, submission, what)
        infra = Infrastructure(test_paths={p for p in set(ref) | set(at_base) if ref.get(p) != at_base.get(p)},
                               files=files, roots=roots, env_modules=env_modules, base_paths=at_base, extra=extra)
        fix, changed = [], []
        for p in sorted(set(_walk(tree)) | set(ref)):
            want = ref.get(p)
            if want and want[0] == "gitlink":
                continue
            if not (infra(p) or (want and want[0] == "link") or os.path.islink(os.path.join(tree, p))):
                continue
            have = _disk_state(tree, p)
            if have != want:
                fix.append(p)
                if have != at_base.get(p):  # the submission changed it (not only the test patch)
                    changed.append(p)
        for p in fix:
            full = os.path.join(tree, p)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            elif os.path.lexists(full):
                os.unlink(full)
            parent = os.path.dirname(p)
            while parent and os.path.isdir(os.path.join(tree, parent)) and not os.listdir(os.path.join(tree, parent)):
                os.rmdir(os.path.join(tree, parent))
                parent = os.path.dirname(parent)
        back = [p for p in fix if p in ref]
        if back:
            out = git(tree, "checkout-index", "-f", "-z", "--stdin", env=env, check=False,
                      input="\0".join(back).encode("utf-8", "surrogateescape"))
            if out.returncode != 0:
                why = out.stderr.decode(errors="replace").strip()[-500:]
                raise PatchError(f"restoring the test files failed: {why}")
        # the files the install generated are infrastructure too: exactly as the install left them,
        # with nothing in their place that Python would import instead
        touched = set(patch_files(submission)) if submission is not None else set()
        for p in _generated.shadows(tree, keep=at_base):
            full = os.path.join(tree, p)
            shutil.rmtree(full) if os.path.isdir(full) and not os.path.islink(full) else os.unlink(full)
            changed.append(p)
        changed += [p for p in _generated.overlay(tree) if p in touched and p not in changed]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return changed


# ---------------------------------------------------------------- running tests


CANARY = """import unittest


class Test{tok}(unittest.TestCase):
    def test_{tok}(self):
        self.fail("this test always fails; a run that reports it passing was taken over")
"""
"""A test written next to the run files just before the run (random name): it must be reported as
failing. A unittest TestCase, so pytest collects it whatever python_classes/python_functions say."""


def test_command(framework: str, python: str, files: list[str], junit: str, plugins: list[str] = ()) -> list[str]:
    if framework == "pytest":
        return [python, "-m", "pytest", "-rA", "--tb=short", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
                *(a for name in plugins for a in ("-p", name)), "--maxfail=0", "--continue-on-collection-errors",
                f"--junitxml={junit}", *files]
    if framework == "unittest":
        return [python, "-m", "unittest", "-v", *files]
    raise ValueError(f"unknown test framework {framework!r} (known: {', '.join([*PYTHON_FRAMEWORKS, *_runners.RUNNERS])})")


ABORTED = ("ImportError while loading conftest", "ERROR: file or directory not found", "ERROR: not found:",
           "ERROR: usage:", "pytest: error:")
"""Output of a pytest session that stopped before running any test (exit codes 2-4 say the same)."""


def _spawn(cmd: list[str], cwd: str, env: dict, timeout_s: float) -> dict:
    """Run one command in its own session under a timeout; kill what it leaves running. rc, output, time."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        timed_out = True
        _killpg(proc)
        out, _ = proc.communicate()
    finally:
        if proc.poll() is None:
            _killpg(proc)
            proc.wait()
    seconds = time.monotonic() - t0
    _killpg(proc)  # whatever the tests left running in their session
    return {"rc": proc.returncode, "timed_out": timed_out, "seconds": seconds,
            "text": out.decode("utf-8", errors="replace")}


def _run_once(tree: str, framework: str, py: str, run_files: list[str], env: dict, timeout_s: float,
              plugins: list[str]) -> dict:
    """One test command: outcomes, failure messages, files that did not collect, exit code, output."""
    jdir = tempfile.mkdtemp(prefix="envgen-junit-")
    junit = os.path.join(jdir, "report.xml")
    res = _spawn(test_command(framework, py, run_files, junit, plugins), tree, env, timeout_s)
    junit_text = _read(junit) if os.path.isfile(junit) else None
    shutil.rmtree(jdir, ignore_errors=True)
    messages: dict = {}
    not_run: dict = {}
    outcomes, source = parse_report(framework, junit_text, res["text"], run_files, messages, not_run)
    return {"outcomes": outcomes, "messages": messages, "not_run": not_run, "source": source, **res}


def _run_runner(runner, tree: str, files: list[str], *, timeout_s: float, options: dict, canary: bool) -> dict:
    """``run_tests`` for another language's runner: its commands in order under one timeout, with its
    canary test written next to the run files, then its report parsed (``runners.base``)."""

    home = tempfile.mkdtemp(prefix="envgen-home-")
    report_dir = tempfile.mkdtemp(prefix="envgen-report-")
    env = runner.env(test_env(tree, sys.executable, (), home), tree, options)
    tok = secrets.token_hex(6)
    made = runner.canary(tree, files, tok, options) if canary and files else None
    written = None
    t0 = time.monotonic()
    texts, rc, timed_out = [], None, False
    try:
        if made:
            written = os.path.join(tree, made[0])
            os.makedirs(os.path.dirname(written), exist_ok=True)
            with open(written, "w", encoding="utf-8") as f:
                f.write(made[1])
        cmds = runner.commands(tree, runner.run_files(files, made[0] if made else None), report_dir, options)
        for i, cmd in enumerate(cmds):
            left = timeout_s - (time.monotonic() - t0)
            if left <= 1:
                timed_out = True
                break
            part = _spawn(cmd, tree, env, left)
            texts.append(part["text"])
            rc, timed_out = part["rc"], part["timed_out"]
            if timed_out or (rc != 0 and i < len(cmds) - 1):
                break
        text = "".join(texts)
        outcomes, messages, source = runner.parse(report_dir, text, files, options)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(report_dir, ignore_errors=True)
        if written and os.path.lexists(written):
            os.unlink(written)
    res = {"outcomes": {k: v for k, v in outcomes.items() if tok not in k},
           "messages": {k: v for k, v in messages.items() if tok not in k}, "not_run": {}, "source": source,
           "rc": rc, "timed_out": timed_out, "seconds": round(time.monotonic() - t0, 4),
           "tail": text[-TAIL_CHARS:], "reruns": 0}
    if made:
        seen = sorted({v for k, v in outcomes.items() if tok in k})
        res["canary"] = "missing" if not seen else next((o for o in seen if o not in FAILING), min(seen))
    if not res["outcomes"]:
        res["error_line"] = first_error(text)
    return res


def _aborted(framework: str, res: dict, tok: str) -> bool:
    """A pytest session that ended before any test ran (a conftest that does not import, a usage error,
    a missing file): one broken file must not hide the tests of the others."""
    if framework != "pytest" or res["timed_out"] or any(tok not in k for k in res["outcomes"]):
        return False
    return res["rc"] in (2, 3, 4) or any(m in res["text"] for m in ABORTED)


def run_tests(tree: str, framework: str, files: list[str], *, python: str | None = None,
              pythonpath: list[str] = (), timeout_s: float = 300.0, plugins: list[str] = (),
              canary: bool = True, options: dict | None = None, netprobe: bool = False) -> dict:
    """Run the test files once; return outcomes, failure messages, the files that did not collect
    (``not_run``: {file: error}), the canary's outcome, report source, exit code, seconds, the output's
    tail and, when no test ran or a file did not collect, the first error line (``error_line``).

    When the joint pytest session stops before running any test (see ``_aborted``), each file runs
    on its own (with a canary next to it) within what is left of the timeout, so the files that collect
    still report; a file whose own run stops too is ``not_run``, and its tests are missing (failed).
    Frameworks of other languages run through their ``runners`` Runner (``options``: its settings); a
    runner that cannot add a canary leaves ``canary`` out of the result.
    """

    runner = _runners.get(framework)
    if runner is not None:
        return _run_runner(runner, tree, files, timeout_s=timeout_s, options=dict(options or {}), canary=canary)
    py = resolve_python(python)
    home = tempfile.mkdtemp(prefix="envgen-home-")
    env = test_env(tree, py, pythonpath, home)
    tok = secrets.token_hex(6)
    probe = None
    if netprobe and framework == "pytest":  # validation: which tests tried to reach the network (netprobe.py)
        probe = os.path.join(home, "netprobe.log")
        probe_dir = os.path.join(home, "netprobe")
        os.makedirs(probe_dir)
        shutil.copyfile(_netprobe.__file__, os.path.join(probe_dir, "envgen_netprobe.py"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), probe_dir) if p)
        env["ENVGEN_NETPROBE"] = probe
        plugins = [*plugins, "envgen_netprobe"]
    canaries: dict = {}

    def with_canary(fs: list[str]) -> list[str]:
        if not (canary and fs):
            return list(fs)
        folder = "/".join(fs[-1].split("/")[:-1])
        if not os.path.isdir(os.path.join(tree, folder)):
            return list(fs)
        rel = "/".join([*fs[-1].split("/")[:-1], f"test_{tok}.py"])
        if rel not in canaries:
            canaries[rel] = os.path.join(tree, rel)
            with open(canaries[rel], "w", encoding="utf-8") as f:
                f.write(CANARY.format(tok=tok))
        return [*fs, rel]

    t0 = time.monotonic()
    attempts: list = []
    try:
        joint = _run_once(tree, framework, py, with_canary(files), env, timeout_s, plugins)
        parts = [joint]
        not_run = dict(joint["not_run"])
        reruns = 0
        if len(files) > 1 and _aborted(framework, joint, tok):
            not_run = {}
            for f in files:
                left = timeout_s - (time.monotonic() - t0)
                if left <= 1:
                    not_run[f] = "not run: the run's time limit was spent"
                    continue
                part = _run_once(tree, framework, py, with_canary([f]), env, left, plugins)
                reruns += 1
                parts.append(part)
                not_run.update({k: v for k, v in part["not_run"].items() if tok not in k})
                if _aborted(framework, part, tok) or part["timed_out"] and not part["outcomes"]:
                    not_run[f] = first_error(part["text"]) or "the test run stopped before running a test"
    finally:
        if probe is not None:
            attempts = _netprobe.read(probe)
        shutil.rmtree(home, ignore_errors=True)
        for path in canaries.values():
            if os.path.lexists(path):
                os.unlink(path)
    outcomes: dict = {}
    messages: dict = {}
    seen: set = set()
    for part in parts:
        for k, v in part["outcomes"].items():
            if tok in k:
                seen.add(v)
            elif outcomes.get(k) not in FAILING:
                outcomes[k] = v
        messages.update({k: v for k, v in part["messages"].items() if tok not in k})
    roots = {tree.rstrip("/") + "/", os.path.realpath(tree) + "/"}

    def rel(line: str) -> str:  # errors name files as the repository does, not where this run put it
        for r in roots:
            line = line.replace(r, "")
        return line

    not_run = {k: rel(v) for k, v in not_run.items() if tok not in k}
    canary_outcome = None if not canaries else (
        "missing" if not seen else next((o for o in sorted(seen) if o not in FAILING), min(seen)))
    text = joint["text"]
    res = {"outcomes": outcomes, "messages": messages, "not_run": not_run, "canary": canary_outcome,
           "source": joint["source"], "rc": joint["rc"], "timed_out": any(p["timed_out"] for p in parts),
           "seconds": round(sum(p["seconds"] for p in parts), 4), "tail": text[-TAIL_CHARS:], "reruns": reruns}
    if probe is not None:
        res["network_attempts"] = attempts
    if not outcomes or not_run:
        res["error_line"] = rel(first_error(text)) or next(iter(not_run.values()), "")
    return res


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- the verifier


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError:
        return None


def fresh_repo(work_dir: str, git_src: str | None, repo: str = "repo", git_dir: str = "repo.git") -> str | None:
    """Empty the work dir and give it the pristine git data (``git_src``) and a working tree.

    Nothing the episode left there survives: not its tree, caches or stray config files above the
    tree (pytest looks for configuration in the parent directories), nor a tampered ``repo.git``.
    Without ``git_src`` (a caller that passes no pristine env) the work dir's own git data is kept.
    """
    for entry in os.listdir(work_dir):
        if git_src is None and entry == git_dir:
            continue
        p = os.path.join(work_dir, entry)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)
    if git_src is not None:
        shutil.copytree(git_src, os.path.join(work_dir, git_dir), symlinks=True)
    return prepare_repo(work_dir, repo, git_dir)


def _environment(framework: str, python: str | None, tree: str) -> dict:
    """What the test interpreter provides (``probe_environment``) for Python runs; nothing for others."""
    if framework in PYTHON_FRAMEWORKS:
        return probe_environment(python, tree)
    return {"modules": [], "plugins": []}


def _extra(framework: str, options: dict | None):
    """The runner's own test-infrastructure predicate (``Runner.infrastructure``), or None."""
    runner = _runners.get(framework)
    if runner is None:
        return None
    opts = dict(options or {})
    return lambda path: runner.infrastructure(path, opts)


FALLBACK_SOURCES = frozenset({"pytest-rA", "console", "go-test-console", "jest-verbose", "vitest-verbose", "teamcity",
                              "phpunit-console", "ctest-console", "automake-console", "none"})
"""Report sources read from console output, used when the runner's own report is missing: the code under
test can print anything there, so a verdict never rests on them (validation still reads them, to say
why a run failed)."""


def distrust(res: dict, expect_failing: list[str] = (), twin_outcomes: dict | None = None) -> str | None:
    """Why a run's report cannot be believed, else None: the canary reported anything but failing; a
    twin check that must fail reported passing or missing (``twins.judge``); no report of the runner's
    own (only console output); or an exit status of 0 from a run in which tests failed (the canary, the
    twins: the runner's exit status and its report disagree)."""
    if res.get("canary") is not None and res["canary"] not in FAILING:
        return (f"the run reported the canary test, which always fails, as {res['canary']}: "
                "the test run was taken over")
    why = _twins.judge(twin_outcomes or {}, list(expect_failing))
    if why:
        return why
    if res.get("timed_out"):
        return None  # a run cut short fails on its missing tests; it proves nothing either way
    if any(part in FALLBACK_SOURCES for part in str(res.get("source") or "none").split("+")):
        return (f"the runner wrote no report of its own (outcomes read from {res.get('source')}): the report was "
                "suppressed or the run did not finish, and console output is not evidence")
    if res.get("rc") == 0 and (res.get("canary") in FAILING or expect_failing):
        return "the test command exited 0 although tests failed: its exit status and its report disagree"
    return None


def _twin_plan(args: dict, hidden_dir: str | None) -> tuple[dict | None, list[str]]:
    """The task's twin plan and the twin ids that must fail. ``args["twins"]``: {"files": a file in
    hidden/ holding the planned test files, "real": the real tests' suffixes, "twins": the twins',
    "expect_failing": ids}. Which suffix is real lives in the verifier's arguments only, never in a file:
    code in the test process can read hidden/ (it runs as the verifier's user), not the verifier's memory."""
    spec = args.get("twins")
    if not spec:
        return None, []
    text = _read(os.path.join(hidden_dir or "", spec["files"]))
    if text is None:
        raise RuntimeError(f"the hidden twin checks {spec['files']} are missing: the pack is broken")
    plan = {"files": json.loads(text)["files"], "real": list(spec["real"]), "twins": list(spec["twins"])}
    return plan, list(spec["expect_failing"])


def check(args: dict, *, answer: str, calls: list, work_dir: str, hidden_dir: str | None,
          env_dir: str | None = None, **_) -> dict:
    """Judge a code episode: reward 1 iff the submitted patch makes every FAIL_TO_PASS and PASS_TO_PASS pass.

    args: base (commit), framework, files (test files to run), FAIL_TO_PASS, PASS_TO_PASS, test_patch
    (file in hidden/), plugins (pytest plugin names recorded at validation; when absent, the ones the
    environment provides), and optionally options (another language's runner settings), python,
    pythonpath, timeout_s, repo, git_dir, submit_tool, twins (the twin checks: see ``_twin_plan``),
    report_tests (details["tests"]: each FAIL_TO_PASS/PASS_TO_PASS test's outcome, "missing" if unreported).
    """
    submit_tool = args.get("submit_tool", "submit")
    f2p, p2p = list(args.get("FAIL_TO_PASS") or []), list(args.get("PASS_TO_PASS") or [])
    if not any(c.get("tool") == submit_tool and c.get("ok") for c in calls):
        return {"reward": 0.0, "details": {"reason": f"nothing was submitted (no successful {submit_tool} call)"}}
    patch = _read(os.path.join(work_dir, SUBMISSION))
    if not patch or not patch.strip():
        return {"reward": 0.0, "details": {"reason": "the submission is empty"}}
    test_patch = _read(os.path.join(hidden_dir or "", args.get("test_patch", "test.patch"))) if hidden_dir else None
    if test_patch is None:
        raise RuntimeError("the hidden test patch is missing: the pack is broken")
    try:
        check_patch(patch)
    except PatchError as e:
        return {"reward": 0.0, "details": {"reason": str(e)}}
    git_dir = args.get("git_dir", "repo.git")
    pristine = os.path.join(env_dir, git_dir) if env_dir else None
    if not (pristine and os.path.isdir(pristine)):
        pristine = None
        if not os.path.isdir(os.path.join(work_dir, git_dir)):
            return {"reward": 0.0, "details": {"reason": "the task's repository is missing from the work dir"}}
    tree = fresh_repo(work_dir, pristine, args.get("repo", "repo"), git_dir)
    files = list(args.get("files") or [])
    pythonpath = list(args.get("pythonpath") or [])
    framework = args.get("framework", "pytest")
    found = _environment(framework, args.get("python"), tree)
    plugins = list(args["plugins"]) if "plugins" in args else [p["name"] for p in found["plugins"]]
    twin_plan, expect_failing = _twin_plan(args, hidden_dir)
    try:
        restored = stage(tree, args["base"], test_patch, patch, files=files, roots=["", *pythonpath],
                         env_modules=found["modules"], extra=_extra(framework, args.get("options")))
    except PatchError as e:
        return {"reward": 0.0, "details": {"reason": str(e)}}
    _twins.write(tree, twin_plan)
    res = run_tests(tree, framework, files, python=args.get("python"), pythonpath=pythonpath,
                    timeout_s=float(args.get("timeout_s", 300)), plugins=plugins, options=args.get("options"))
    outcomes, twin_outcomes = _twins.split(res["outcomes"], twin_plan, res["messages"])
    bad_f2p = [t for t in f2p if outcomes.get(t) not in PASSING]
    bad_p2p = [t for t in p2p if outcomes.get(t) not in PASSING]
    why = distrust(res, expect_failing, twin_outcomes)
    screened = _screen.screen(patch, tree, args["base"], skip=set(restored).__contains__)
    reward = 1.0 if not why and not screened and not bad_f2p and not bad_p2p and (f2p or p2p) else 0.0
    details = {"FAIL_TO_PASS": f"{len(f2p) - len(bad_f2p)}/{len(f2p)}",
               "PASS_TO_PASS": f"{len(p2p) - len(bad_p2p)}/{len(p2p)}",
               "failed": (bad_f2p + bad_p2p)[:20], "report": res["source"], "seconds": res["seconds"],
               "timed_out": res["timed_out"], "plugins": plugins, "canary": res.get("canary"), "rc": res.get("rc")}
    if expect_failing:
        held = sum(1 for t in expect_failing if twin_outcomes.get(t) in FAILING)
        details["twins"] = f"{held}/{len(expect_failing)} failed as they must"
    if restored:
        details["restored"] = restored[:20]
    if screened:
        details["screen"] = screened[:10]
    if args.get("report_tests"):  # per-test outcomes for SWE-bench-style reports (envgen eval swebench)
        details["tests"] = {t: outcomes.get(t, "missing") for t in f2p + p2p}
    if why:
        details["reason"] = why
    elif screened and not bad_f2p and not bad_p2p:
        details["reason"] = f"the patch reaches into the test framework: {screened[0]}"
    if reward == 0.0:
        details["tail"] = res["tail"][-1500:]
    return {"reward": reward, "details": details}


# ---------------------------------------------------------------- validation runs (host-driven)


def matrix(spec: dict) -> dict:
    """Run the test files ``runs`` times per mode, each from a clean reset and staged as a submission
    would be (``stage``); the host judges. Also reports the pytest plugins the environment provides,
    what the test patch changes (``changes``, see ``changed_by_test_patch``), the reported tests it
    does not add or change (``unchanged``), why each run's report cannot be believed (``distrust``) and
    the twin checks (``twins``).

    Twins: after the first gold run, the tests the test patch adds or changes that failed in every base
    run and pass there get a twin plan (``twins.plan``); the later gold runs (at least one) run with it
    and report the real tests under their own ids. The twins that failed in every such run are the ones
    the verifier requires to fail (``twins``: {"plan", "expect_failing"}); a plan that changes how any
    real test of the first gold run came out is dropped (``twin_note`` says why) and that run is repeated
    without it.

    spec: git_dir (to copy into work), work, base, framework, options (another language's runner
    settings), files, python, pythonpath, timeout_s, runs, test_patch (path), modes: [{name, submission:
    path or null}], twins (default true).
    """
    t0 = time.monotonic()
    work = spec["work"]
    os.makedirs(work, exist_ok=True)
    local_gd = os.path.join(work, "repo.git")
    if not os.path.isdir(local_gd):
        shutil.copytree(spec["git_dir"], local_gd)
    tree = prepare_repo(work)
    pythonpath = list(spec.get("pythonpath") or [])
    framework, options = spec["framework"], spec.get("options") or {}
    found = _environment(framework, spec.get("python"), tree)
    plugins = [p["name"] for p in found["plugins"]] if framework == "pytest" else []
    test_patch = _read(spec["test_patch"])
    setup = time.monotonic() - t0
    runs: list = []
    changes = None
    lang = dialect(framework) if spec.get("twins", True) else None
    twin_plan, twin_note, candidates, narrowed = None, "", [], False
    choices: dict = {}  # test -> which of its literals the twins change (``twins.Twins.pick``)
    retries = 0

    def staged(sub, what) -> dict:
        rec: dict = {}
        rec["restored"] = stage(tree, spec["base"], test_patch, sub, files=spec["files"], roots=["", *pythonpath],
                                env_modules=found["modules"], what=what, extra=_extra(framework, options))
        return rec

    for mode in spec["modes"]:
        sub = _read(mode["submission"]) if mode.get("submission") else None
        what = f"{os.path.basename(mode['submission'])}" if sub is not None else ""
        gold = mode["name"] == "gold" and lang is not None
        n = int(spec.get("runs", 3))
        for r in range(max(n, 2) if gold else n):
            t1 = time.monotonic()
            rec = {"mode": mode["name"], "run": r + 1}
            try:
                rec.update(staged(sub, what))
            except PatchError as e:
                rec.update(outcomes={}, error=str(e), seconds=0.0, total_seconds=round(time.monotonic() - t1, 4))
                runs.append(rec)
                continue
            if changes is None:  # the test files are base + test patch in every staged tree
                changes = changed_by_test_patch(tree, test_patch or "", spec["files"], framework)
            if gold and r == 1:
                twin_plan, twin_note, candidates = _plan_twins(tree, lang, runs, mode["name"], changes, spec,
                                                               framework)
            res = None
            while gold and r >= 1 and twin_plan is not None:
                originals = {p: _read(os.path.join(tree, p)) for p in twin_plan["files"]}
                _twins.write(tree, twin_plan)
                res = run_tests(tree, framework, spec["files"], python=spec.get("python"), pythonpath=pythonpath,
                                timeout_s=float(spec.get("timeout_s", 300)), plugins=plugins, options=options,
                                netprobe=True)
                _twins.write(tree, {"files": originals})
                real, twin_out = _twins.split(res["outcomes"], twin_plan, res["messages"])
                first = next(x for x in runs if x["mode"] == mode["name"] and x["run"] == 1)
                moved = [t for t in candidates if real.get(t) not in PASSING]
                moved += [t for t in first.get("outcomes", {}) if t not in real]
                retry = _other_literals(twin_plan, twin_out, choices) if r == 1 and not moved \
                    and retries < LITERAL_RETRIES else None
                if retry is not None:
                    # a test none of whose twins failed with the gold patch: its twins change another of its
                    # literals, and this run is repeated with the new plan
                    retries += 1
                    new = _twins.plan(tree, lang, candidates, spec["files"], seed=twin_seed(spec, f"retry{retries}"),
                                      choices=retry)
                    if new["files"]:
                        choices, twin_plan = retry, new
                        rec.update(staged(sub, what))
                        continue
                if not moved:
                    res["outcomes"], rec["twin_outcomes"] = real, twin_out
                    break
                # the twins broke their own tests or hid others (a Go twin that panics ends the binary):
                # once, keep only the tests whose twins all ran and that still passed; else no twins
                res = None
                keep = [] if narrowed else _surviving(twin_plan, candidates, real, twin_out, lang, spec["files"], tree)
                narrowed = True
                twin_note = (f"twin checks dropped: with them, {len(moved)} test(s) changed outcome "
                             f"({_shown_ids(moved)})")
                twin_plan = _twins.plan(tree, lang, keep, spec["files"], seed=twin_seed(spec, "narrowed"),
                                        choices=choices) if keep else None
                twin_plan = twin_plan if twin_plan and twin_plan["files"] else None
                candidates = keep
                rec.update(staged(sub, what))
            if res is None:
                res = run_tests(tree, framework, spec["files"], python=spec.get("python"), pythonpath=pythonpath,
                                timeout_s=float(spec.get("timeout_s", 300)), plugins=plugins, options=options,
                                netprobe=True)
            rec.update(res)
            twin_out = rec.get("twin_outcomes") or {}
            rec["distrust"] = distrust(res, [t for t, o in twin_out.items() if o in FAILING], twin_out)
            rec["total_seconds"] = round(time.monotonic() - t1, 4)
            runs.append(rec)
    seen = sorted({t for r in runs for t in r.get("outcomes", {})})
    changes = changes or {"files": {}, "dirs": []}
    twins = None
    twin_runs = [r for r in runs if "twin_outcomes" in r]
    if twin_plan is not None and twin_runs:
        expect = sorted(t for t in twin_runs[0]["twin_outcomes"]
                        if all(r["twin_outcomes"].get(t) in FAILING for r in twin_runs))
        if expect:
            twins = {"plan": twin_plan, "expect_failing": expect}
        else:
            twin_note = "no twin check failed with the gold patch in every run"
    return {"runs": runs, "setup_seconds": round(setup, 4), "seconds": round(time.monotonic() - t0, 4),
            "python": sys.version.split()[0], "plugins": found["plugins"] if framework == "pytest" else [],
            "changes": changes, "twins": twins, "twin_note": twin_note, "twinnable": lang is not None,
            "unchanged": [t for t in seen if not is_changed(t, changes, spec["files"], framework, tree)]}


def _shown_ids(ids: list[str], n: int = 3) -> str:
    return ", ".join(ids[:n]) + (f" ... ({len(ids)} in all)" if len(ids) > n else "")


def twin_seed(spec: dict, salt: str = "") -> int:
    """The seed of a task's twin plan: a hash of its gold patch (with the test patch and base), so that a
    rebuild makes the same plan while nothing in the agent's reach computes it (the gold patch is never
    in the sandbox, nor in the tree a verdict runs)."""
    gold = next((_read(m["submission"]) or "" for m in spec["modes"] if m["name"] == "gold" and m.get("submission")), "")
    key = "\0".join([gold, _read(spec["test_patch"]) or "", spec["base"], salt])
    return int(hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16], 16)


LITERAL_RETRIES = 3  # extra gold runs at most, spent only on tests whose first twins told nothing


def _other_literals(plan: dict, twin_out: dict, choices: dict) -> dict | None:
    """The choices moving to their next literal every planned test none of whose twins failed (the
    literal did not decide the outcome: ``tail(-1, 'ABC')`` raises for any string); None when every
    test has a twin that failed."""
    dud = [t for t in plan["tests"]
           if not any(o in FAILING for tid, o in twin_out.items() if any(s in tid for s in t["twins"]))]
    if not dud:
        return None
    new = dict(choices)
    for t in dud:
        new[_twins.choice_key(t["file"], t["name"])] = t.get("literal", 0) + 1
    return new


def _surviving(plan: dict, candidates: list[str], real: dict, twin_out: dict, lang, files: list[str],
               tree: str) -> list[str]:
    """The candidates worth a second plan after one broke the run: tests whose twins were all reported
    and that still passed; when that tells nothing apart, the first candidate alone."""
    broken = {(t["file"], t["name"]) for t in plan["tests"]
              if not all(any(s in tid for tid in twin_out) for s in t["twins"])}
    keep = [c for c in candidates if real.get(c) in PASSING and lang.target(c, list(files), tree) not in broken]
    if not keep or len(keep) == len(candidates):
        keep = candidates[:1] if len(candidates) > 1 else []
    return keep


def _plan_twins(tree: str, lang, runs: list, gold: str, changes: dict, spec: dict, framework: str):
    """(twin plan or None, why none, the tests it twins): the tests that failed in every base run, pass
    in the first gold run and that the test patch adds or changes."""
    base_runs = [r for r in runs if r["mode"] != gold and not r.get("error")]
    first = next((r for r in runs if r["mode"] == gold and r["run"] == 1), None)
    if first is None or not base_runs:
        return None, "no twin checks: no base and gold runs to choose tests from", []
    candidates = [t for t, o in first.get("outcomes", {}).items()
                  if o in PASSING and all(b.get("outcomes", {}).get(t) not in PASSING for b in base_runs)
                  and is_changed(t, changes, spec["files"], framework, tree)]
    if not candidates:
        return None, "no twin checks: no test fails at the base and passes with the gold patch", []
    plan = _twins.plan(tree, lang, candidates, spec["files"], seed=twin_seed(spec))
    if not plan["files"]:
        return None, "no twin checks: no FAIL_TO_PASS test has a literal a twin could change", candidates
    return plan, "", candidates


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "matrix":
        print("usage: python -m envgen_verifiers.tests matrix SPEC.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    result = matrix(spec)
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
