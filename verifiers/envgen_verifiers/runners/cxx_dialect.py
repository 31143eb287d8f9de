"""How C and C++ tests are declared, for the twin checks (``twins``) of FAIL_TO_PASS tests (stdlib only).

GoogleTest (``GTestDialect``): a test is a ``TEST(Suite, Name) { ... }`` (``TEST_F``, ``TEST_P``,
``TYPED_TEST``, ``TYPED_TEST_P``) in a C++ source; its twins are copies beside it in the same file, the
``Name`` argument renamed with a random suffix (``Split.Basic`` runs as ``Split.Basic_k3x9q``; a
parameterised ``Inst/Suite.Name/0`` as ``Inst/Suite.Name_k3x9q/0``). Catch2 (``Catch2Dialect``): a
``TEST_CASE("name", "[tags]") { ... }`` (``SCENARIO``, ``TEST_CASE_METHOD``), whose CTest name is the case's
name; the suffix goes inside the name (``name k3x9q``).

Whole programs (a plain CTest test, ``add_test(NAME t COMMAND prog args)``; an Automake test,
``check_PROGRAMS``/``TESTS``): the test is the program, so its twins are programs too. The program's
source is copied once per program (``tests/test_x.c`` -> ``tests/test_x_k3x9q.c``, the real one, and one
copy per twin with one literal changed, those on the lines the test patch added first), the original
source is removed, and the build files register the copies the way the original was registered: CMake
(``CTestDialect``) renames the executable target and its source, adds a target per twin with copies of
the target's commands and a test per twin with the original test's command line; Automake
(``AutomakeDialect``) puts the copies in the program lists where the program was and gives each its
copy of the program's variables (``_SOURCES``, ``_LDADD``, ...). The test ids get the program's suffix
(``vec_pop_empty_k3x9q``, ``tests/test_clamp_k3x9q``), so real and twin differ only by a random token.
A file the test patch changes that is a whole program (it has ``main``) counts as changed as a whole.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass, field

from ..twins import Decl, Dialect, Literal, Twins, in_file_copies, line_end, line_start, literals, match_close, \
    scan, variants

C_SOURCES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".cp", ".C")
SKIP_DIRS = frozenset({".git", "build", "_build", "node_modules", "third_party", "3rdparty", "vendor", "external",
                       "extern", ".envgen"})
"""Directories whose build files are not searched for a test's registration."""
GTEST_MACROS = ("TEST", "TEST_F", "TEST_P", "TYPED_TEST", "TYPED_TEST_P", "GTEST_TEST")
_GTEST_DECL = re.compile(r"^[ \t]*(" + "|".join(GTEST_MACROS) + r")[ \t]*\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*\{", re.M)
_MAIN = re.compile(r"\bint\s+(?:[A-Z_][A-Z0-9_]*\s+)*main\s*\(")
"""A program's ``main``, a calling-convention macro allowed before the name (cJSON's ``int CJSON_CDECL main``)."""
_PREPROCESSOR = re.compile(r"^[ \t]*#", re.M)
_RETURN_BEFORE = re.compile(r"\breturn\s*-?\s*$")
_COMPARED = re.compile(r"(?:==|!=|<=|>=|<|>)\s*-?\s*$")
_ARGS_LINE = re.compile(r"\bargc\b|\bargv\b")
_SCOPE_OPEN = re.compile(r"(?:\bnamespace(?:\s+[\w:]+)?|\bextern\s+\"C(?:\+\+)?\")\s*$")
_C_DEFINES = re.compile(r"^\s*#\s*define\s+(\w+)|\b(?:struct|class|enum|union|using|typedef|namespace)\s+(\w+)")
_C_FUNCTION = re.compile(r"^[\w:<>,*&\s]*?\b(\w+)\s*\(")
_C_NAMED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)?(?:=(?!=)|\{|;)")
_C_KEYWORDS = frozenset({"return", "if", "for", "while", "switch", "else", "do", "case", "break", "continue",
                         "sizeof", "int", "char", "void", "const", "static", "auto", "namespace", "struct", "class"})


def _git_added_lines(tree: str, path: str) -> set:
    """Line numbers of ``path`` (in the tree) that the tree adds over HEAD: the test patch's lines, in a
    staged tree (empty when git cannot say)."""
    cmd = ["git", "-c", "safe.directory=*", "-C", tree, "diff", "--no-color", "--no-ext-diff", "-U0", "HEAD", "--",
           path]
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
                                  "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired):
        return set()
    lines = set()
    for m in re.finditer(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", out.stdout, re.M):
        start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        lines.update(range(start, start + count))
    return lines


class CDialect(Dialect):
    """Lexing shared by C and C++ tests: preprocessor lines, strings ending in an escape and returned
    numbers give no literal a twin changes (``#include "x.h"`` or ``return 0`` would not test the code)."""

    quotes = ('"', "'")
    true_false = ("true", "false")
    assert_words = re.compile(r"\b(?:EXPECT_|ASSERT_|CHECK|REQUIRE|assert|ck_assert|TEST_ASSERT|CU_ASSERT|g_assert)"
                              r"|==|!=", re.I)

    def tokens(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
        out = []
        for kind, s, e in scan(text, start, len(text) if end is None else end, self):
            ls = line_start(text, s)
            if kind in ("number", "string", "word") and _PREPROCESSOR.match(text, ls):
                continue
            if kind == "string" and e - s >= 3 and text[e - 3] == "\\":
                continue
            if kind == "number" and (_RETURN_BEFORE.search(text, ls, s) or _ARGS_LINE.search(
                    text[ls:line_end(text, s)])):
                continue
            out.append((kind, s, e))
        return out

    def depths(self, text: str) -> list[int]:
        """Per line, how many brackets are open where it starts; a namespace's or ``extern "C"``'s braces
        do not count (a helper in an anonymous namespace is at the tests' level)."""
        starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        out = [0] * len(starts)
        depth, line, stack = 0, 0, []
        for kind, s, _e in scan(text, 0, len(text), self):
            while line + 1 < len(starts) and starts[line + 1] <= s:
                line += 1
                out[line] = depth
            if kind != "other":
                continue
            ch = text[s]
            if ch in "{([":
                scope = ch == "{" and bool(_SCOPE_OPEN.search(text, max(0, s - 200), s))
                stack.append(scope)
                depth += 0 if scope else 1
            elif ch in "})]":
                if stack and stack.pop():
                    continue
                depth = max(0, depth - 1)
        for i in range(line + 1, len(starts)):
            out[i] = depth
        return out

    def defined(self, line: str) -> list[str]:
        """Names a C/C++ line outside the tests defines: a macro, a type, a function at file scope, a
        variable or constant (``constexpr int kLimit = 10;``)."""
        out = [m.group(1) or m.group(2) for m in _C_DEFINES.finditer(line)]
        if not line[:1].isspace():
            m = _C_FUNCTION.match(line)
            if m:
                out.append(m.group(1))
        out += _C_NAMED.findall(line)
        return [n for n in out if n and n not in _C_KEYWORDS]

    def program_literals(self, tree: str, path: str, text: str) -> list[Literal]:
        """The literals of a whole test program a twin may change: those on lines the test patch added and
        compared with something first, then the other added ones, then the rest as ``twins.literals``
        orders them."""
        lits = literals(text, Decl("main", 0, len(text), 0), self)
        added = _git_added_lines(tree, path) if tree else set()

        def rank(lit: Literal) -> int:
            no = text.count("\n", 0, lit.start) + 1
            compared = bool(_COMPARED.search(text, line_start(text, lit.start), lit.start))
            return (0 if no in added else 3) + (0 if compared else 1 if lit.on_assert else 2)

        return sorted(lits, key=rank)

    def is_program(self, text: str) -> bool:
        return bool(_MAIN.search(text))

    def changed(self, text: str, added: list, removed: list):
        """GoogleTest declarations as ``Dialect.changed``; a whole test program (no GoogleTest test, a
        ``main``) changed anywhere is changed as a whole ("all")."""
        if self.declarations(text) or not self.is_program(text):
            return super().changed(text, added, removed)
        return "all" if _code_changed(added, removed) else []


def _code_changed(added: list, removed: list) -> bool:
    def code(t: str) -> bool:
        t = t.strip()
        return bool(t) and not t.startswith(("//", "/*", "*"))

    return any(code(t) for _no, t in added) or any(code(t) for _no, ts in removed for t in ts)


def gtest_name(test_id: str) -> str | None:
    """``Suite.Name`` of a GoogleTest id: ``Suite.Name``, ``Inst/Suite.Name/0``, ``Suite/0.Name``,
    ``Inst/Suite/0.Name``; None when the id is not of that shape."""
    if "." not in test_id:
        return None
    suite, name = test_id.split(".", 1)
    parts = [p for p in suite.split("/") if p and not p.isdigit()]
    name = name.split("/", 1)[0]
    if not parts or not re.fullmatch(r"\w+", parts[-1]) or not re.fullmatch(r"\w+", name):
        return None
    return f"{parts[-1]}.{name}"


class GTestDialect(CDialect):
    """GoogleTest's ``TEST(Suite, Name) { ... }`` declarations, named ``Suite.Name``."""

    def declarations(self, text: str) -> list[Decl]:
        return list(self._declarations(text))

    @functools.lru_cache(maxsize=64)
    def _declarations(self, text: str) -> tuple:
        """(ids map to files one at a time: the same file's text is read again and again)"""
        out = []
        matches = list(_GTEST_DECL.finditer(text))
        hidden = [(s, e) for k, s, e in scan(text, 0, len(text), self) if k in ("comment", "string")] if matches else []
        for m in matches:
            if any(s <= m.start(1) < e for s, e in hidden):
                continue  # in a comment or a string
            brace = m.end() - 1
            end = match_close(text, brace, self)
            if end is None:
                continue
            start = line_start(text, m.start(1))
            prev = start
            while prev > 0:  # comments right above belong to the test
                above = line_start(text, prev - 1)
                s = text[above:prev].strip()
                if s.endswith("*/") and "/*" not in s:
                    opened = text.rfind("/*", 0, above)
                    if opened < 0:
                        break
                    prev = line_start(text, opened)
                elif s.startswith(("//", "/*", "*")):
                    prev = above
                else:
                    break
            out.append(Decl(f"{m.group(2)}.{m.group(3)}", prev, end, m.end(3)))
        return tuple(out)

    def target(self, test_id: str, files: list[str], tree: str = "") -> tuple[str, str] | None:
        name = gtest_name(test_id)
        if name is None:
            return None
        for f in files:
            if not f.endswith(C_SOURCES):
                continue
            try:
                with open(os.path.join(tree, f), encoding="utf-8") as fh:
                    text = fh.read()
            except (OSError, UnicodeDecodeError):
                continue
            if any(d.name == name for d in self.declarations(text)):
                return f, name
        return None


_CATCH_DECL = re.compile(r'^[ \t]*(TEST_CASE|SCENARIO|TEST_CASE_METHOD[ \t]*\([ \t]*[\w:<>]+[ \t]*,)[ \t]*\(?[ \t]*'
                         r'"((?:[^"\\\n]|\\.)*)"', re.M)


class Catch2Dialect(CDialect):
    """Catch2's ``TEST_CASE("name", "[tags]") { ... }`` (``SCENARIO``: ``Scenario: name``;
    ``TEST_CASE_METHOD``); ids are the CTest names ``catch_discover_tests`` gives them, the test case's
    name. A twin's suffix goes inside the name, after a space."""

    sep = " "

    def declarations(self, text: str) -> list[Decl]:
        out = []
        matches = list(_CATCH_DECL.finditer(text))
        hidden = [(s, e) for k, s, e in scan(text, 0, len(text), self) if k == "comment"] if matches else []
        for m in matches:
            if any(s <= m.start(1) < e for s, e in hidden):
                continue
            brace = text.find("{", m.end())
            close = match_close(text, text.index("(", m.start(1)), self) if "(" in text[m.start(1):m.end()] else None
            if brace < 0 or close is None or close > brace + 1 or text[close:brace].strip():
                continue
            end = match_close(text, brace, self)
            if end is None:
                continue
            name = m.group(2).replace('\\"', '"')
            out.append(Decl(("Scenario: " if m.group(1) == "SCENARIO" else "") + name, line_start(text, m.start(1)),
                            end, m.end(2)))
        return out

    def target(self, test_id: str, files: list[str], tree: str = "") -> tuple[str, str] | None:
        for f in files:
            if not f.endswith(C_SOURCES):
                continue
            text = _read(tree, f)
            if text and any(d.name == test_id for d in self.declarations(text)):
                return f, test_id
        return None


CATCH2 = Catch2Dialect()


# ---------------------------------------------------------------- CMake


class _CMakeLex(Dialect):
    line_comments = ("#",)
    block_comments = ()
    quotes = ('"',)


CMAKE = _CMakeLex()
_CMD = re.compile(r"^[ \t]*([A-Za-z_]\w*)[ \t]*\(", re.M)


@dataclass
class Command:
    name: str
    """Lower-cased."""
    start: int
    end: int
    """Just past its closing parenthesis."""
    args: list
    """[(word, start, end)]: unquoted words as written, quoted ones without their quotes."""


def cmake_commands(text: str) -> list[Command]:
    """Every command invocation of a CMake file, in order (those inside comments or strings skipped)."""
    out = []
    spans = [(s, e) for k, s, e in scan(text, 0, len(text), CMAKE) if k in ("comment", "string")]
    pos = 0
    for m in _CMD.finditer(text):
        if m.start() < pos or any(s <= m.start(1) < e for s, e in spans):
            continue
        open_at = m.end() - 1
        close = match_close(text, open_at, CMAKE)
        if close is None:
            continue
        args = []
        for k, s, e in scan(text, open_at + 1, close - 1, CMAKE):
            if k == "comment":
                continue
            if k == "string":
                args.append((text[s + 1:e - 1], s, e))
            elif text[s].isspace() or text[s] in "()":
                continue
            elif args and args[-1][2] == s and not text[s - 1].isspace() and text[args[-1][1]] != '"':
                args[-1] = (text[args[-1][1]:e], args[-1][1], e)
            else:
                args.append((text[s:e], s, e))
        out.append(Command(m.group(1).lower(), line_start(text, m.start(1)), close, args))
        pos = close
    return out


def _walk(tree: str, names: tuple) -> list[str]:
    found = []
    for root, dirs, files in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        found += [os.path.relpath(os.path.join(root, n), tree).replace(os.sep, "/") for n in sorted(files)
                  if n in names]
    return found


_CMAKE_FILES: dict = {}


def _cmake_files(tree: str) -> list[str]:
    """The tree's CMakeLists.txt files (walked once per tree)."""
    if tree not in _CMAKE_FILES:
        _CMAKE_FILES.clear()
        _CMAKE_FILES[tree] = _walk(tree, ("CMakeLists.txt",))
    return _CMAKE_FILES[tree]


_REGISTRATIONS: dict = {}


def _cached_registrations(tree: str, files: list[str]) -> dict:
    """``ctest_registrations`` of an unchanged tree, remembered (ids are mapped one at a time)."""
    sig = []
    for p in _cmake_files(tree):
        try:
            st = os.stat(os.path.join(tree, p))
        except OSError:
            continue
        sig.append((p, st.st_mtime_ns, st.st_size))
    key = (tree, tuple(files), tuple(sig))
    if key not in _REGISTRATIONS:
        _REGISTRATIONS.clear()
        _REGISTRATIONS[key] = ctest_registrations(tree, files)
    return _REGISTRATIONS[key]


def _read(tree: str, path: str, state: Twins | None = None) -> str | None:
    if state is not None and path in state.out["files"]:
        return state.out["files"][path]
    try:
        with open(os.path.join(tree, path), encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _join(d: str, rel: str) -> str:
    return os.path.normpath(os.path.join(d, rel)).replace(os.sep, "/") if d else os.path.normpath(rel)


_TARGET_WORD = r"(?<![\w.+-]){}(?![\w.+-])"


def _prog_of(word: str) -> str:
    """The target a test command runs: ``prog``, ``$<TARGET_FILE:prog>``, ``${CMAKE_CURRENT_BINARY_DIR}/prog``."""
    m = re.fullmatch(r"\$<TARGET_FILE:([\w.+-]+)>", word)
    if m:
        return m.group(1)
    return word.rsplit("/", 1)[-1]


@dataclass
class Registration:
    """Where a CTest test is registered and the program it runs."""

    test: str
    cml: str
    """The CMakeLists.txt with its add_test."""
    add_test: Command
    foreach: Command | None
    endforeach: Command | None
    item: str
    var: str
    prog: str
    exe_cml: str
    exe: Command
    source: str
    """The program's test source (tree-relative)."""
    source_word: str = ""
    extra: list = field(default_factory=list)
    list_set: Command | None = None
    """The ``set(VAR a b c)`` whose list the loop walks (``foreach(v ${VAR})``): the item is dropped there."""
    exe_in_loop: bool = False
    """The program's add_executable is the loop's own (``add_executable(${v} ${v}.c)``)."""


def _substitute(text: str, var: str, item: str) -> str:
    return text.replace("${" + var + "}", item) if var else text


def _loops(cmds: list[Command]):
    """(command, innermost enclosing loop or None) for each command outside foreach/endforeach; a loop is
    [foreach, var, items or None (computed), the set() that gave its items or None]. A ``foreach(v ${L})`` or
    ``foreach(v IN LISTS L)`` walks the items of a plain ``set(L a b c)`` earlier in the file (literal words,
    nothing else setting L in between); any other list is computed and left alone."""
    sets: dict = {}
    loops: list = []
    for c in cmds:
        words = [w for w, _s, _e in c.args]
        if c.name in ("set", "unset", "list") and words:
            var = words[1] if c.name == "list" and len(words) > 1 else words[0]
            sets.pop(var, None)
            vals = words[1:]
            if c.name == "set" and vals and not any("${" in w or ";" in w for w in vals) and not {
                    "CACHE", "PARENT_SCOPE"} & set(vals) and not loops:
                sets[var] = c
        if c.name == "foreach":
            items, set_cmd = words[1:], None
            listed = items[2:] if items[:2] == ["IN", "LISTS"] else [
                m.group(1) for m in [re.fullmatch(r"\$\{(\w+)\}", items[0])] if m] if len(items) == 1 else []
            if len(listed) == 1 and listed[0] in sets:
                set_cmd = sets[listed[0]]
                items = [w for w, _s, _e in set_cmd.args[1:]]
            elif items[:2] == ["IN", "ITEMS"]:
                items = items[2:]
            elif items[:1] in (["IN"], ["RANGE"]) or any("${" in w for w in items):
                items = None  # a computed list: its tests are not written out here
            loops.append([c, words[0] if words else "", items, set_cmd])
            continue
        if c.name == "endforeach":
            if loops:
                loops.pop()
            continue
        yield c, (loops[-1] if loops else None)


def ctest_registrations(tree: str, files: list[str] = (), state: Twins | None = None) -> dict[str, Registration]:
    """{CTest test name: Registration} of the plain tests that run one program built from a C/C++ source
    of the tree: ``add_test(NAME n COMMAND prog ...)``, ``add_test(n prog ...)``, also inside
    ``foreach(v a b c)`` with ``${v}`` in the name, and inside a loop over a ``set()`` list that builds each
    item's program itself (cJSON: ``foreach(t ${unity_tests}) add_executable(${t} ${t}.c) add_test(...)``)."""
    cmls = {p: _read(tree, p, state) or "" for p in _cmake_files(tree)}
    parsed = {p: cmake_commands(t) for p, t in cmls.items()}
    exes: dict[str, tuple] = {}
    for p, cmds in parsed.items():
        for c, loop in _loops(cmds):
            if c.name != "add_executable" or not c.args:
                continue
            if loop is not None and "${" + loop[1] + "}" in c.args[0][0]:
                for it in loop[2] or []:
                    exes.setdefault(_substitute(c.args[0][0], loop[1], it), (p, c, loop[1], it, loop[0]))
            elif c.args[0][0] not in exes:
                exes[c.args[0][0]] = (p, c, "", "", None)
    out: dict[str, Registration] = {}
    for p, cmds in parsed.items():
        for c, loop in _loops(cmds):
            if c.name != "add_test" or len(c.args) < 2:
                continue
            words = [w for w, _s, _e in c.args]
            if words[0] == "NAME" and "COMMAND" in words:
                name, i = words[1], words.index("COMMAND")
                prog_word = words[i + 1] if i + 1 < len(words) else ""
            else:
                name, prog_word = words[0], words[1]
            cands = [(name, "", "", None, None)]
            if loop is not None and "${" in name:
                if loop[2] is None:
                    continue
                cands = [(_substitute(name, loop[1], it), it, loop[1], loop[0], loop[3]) for it in loop[2]]
            for test, item, var, fe, set_cmd in cands:
                if "${" in test:
                    continue
                prog = _prog_of(_substitute(prog_word, var, item))
                if prog not in exes:
                    continue
                exe_cml, exe, exe_var, exe_item, exe_loop = exes[prog]
                in_loop = exe_loop is not None and fe is not None and exe_cml == p and exe_loop.start == fe.start
                if (exe_loop is not None or set_cmd is not None) and not in_loop:
                    continue  # built elsewhere than the loop over a set() list registering it: no one place to rewrite
                d = os.path.dirname(exe_cml)
                srcs = [(w, _join(d, re.sub(r"^\$\{CMAKE_CURRENT_SOURCE_DIR\}/", "", _substitute(w, exe_var, exe_item))))
                        for w, _s, _e in exe.args[1:] if w.endswith(C_SOURCES)]
                if not srcs:
                    continue
                source = next((s for s in srcs if s[1] in files), None) or next(
                    (s for s in srcs if _MAIN.search(_read(tree, s[1]) or "")), None) or srcs[0]
                out.setdefault(test, Registration(test, p, c, fe, None, item, var, prog, exe_cml, exe, source[1],
                                                  source[0], list_set=set_cmd if in_loop else None,
                                                  exe_in_loop=in_loop))
    for reg in out.values():
        if reg.foreach is not None:
            depth = 0
            for c in parsed[reg.cml]:
                if c.start < reg.foreach.start:
                    continue
                if c.name == "foreach":
                    depth += 1
                elif c.name == "endforeach":
                    depth -= 1
                    if depth == 0:
                        reg.endforeach = c
                        break
    return out


class CTestDialect(GTestDialect):
    """GoogleTest cases in-file; plain CTest tests as whole programs (see the module's docstring)."""

    def declarations(self, text: str) -> list[Decl]:
        return super().declarations(text) or CATCH2.declarations(text)

    def target(self, test_id: str, files: list[str], tree: str = "") -> tuple[str, str] | None:
        found = super().target(test_id, files, tree) or CATCH2.target(test_id, files, tree)
        if found is not None:
            return found
        reg = _cached_registrations(tree, list(files)).get(test_id) if tree else None
        if reg is None:
            return None
        return reg.source, test_id

    def copies(self, tree: str, path: str, text: str, names: list[str], state: Twins) -> None:
        if CATCH2.declarations(text) and not super().declarations(text):
            in_file_copies(CATCH2, path, text, names, state)
            return
        if self.declarations(text) or not self.is_program(text):
            in_file_copies(self, path, text, names, state)
            return
        found = ctest_registrations(tree, [path], state)
        regs = [found[n] for n in names if n in found and found[n].source == path]
        regs = [r for r in regs if r.prog == regs[0].prog and r.exe_cml == regs[0].exe_cml] if regs else []
        lit = state.pick(path, regs[0].test if regs else "", self.program_literals(tree, path, text))
        values = variants(lit, self, state.per_test, state.rng) if lit else []
        if not regs or not values or state.budget <= 0:
            return
        regs = regs[:state.budget]
        prog, exe_cml = regs[0].prog, regs[0].exe_cml
        prog_re = re.compile(_TARGET_WORD.format(re.escape(prog)))
        src_re = re.compile(_TARGET_WORD.format(re.escape(os.path.basename(path))))
        exe_text = _read(tree, exe_cml, state) or ""
        in_loop = regs[0].exe_in_loop
        if in_loop:
            own = []
            if any(not r.exe_in_loop or r.endforeach is None or r.foreach.start != regs[0].foreach.start
                   for r in regs):
                return
        else:
            own = [c for c in cmake_commands(exe_text) if c.args and c.args[0][0] == prog and c.name != "add_test"
                   and not c.name.startswith("gtest_")]
            if not own or own[0].name != "add_executable":
                return
            if any(r.foreach is not None and r.endforeach is None for r in regs):
                return
        real = state.suffix(self)
        twins = [state.suffix(self) for _ in values]
        stem, ext = os.path.splitext(path)
        progs = [prog + s for s in [real, *twins]]
        sources = [stem + s + ext for s in [real, *twins]]
        bases = [os.path.basename(s) for s in sources]
        files: dict = {path: None}
        for src, t in zip(sources, [text] + [_with_value(text, lit, v) for v in values]):
            files[src] = t
        texts = {cml: _read(tree, cml, state) or "" for cml in {exe_cml, *(r.cml for r in regs), *_cmake_files(tree)}}
        texts = {cml: t for cml, t in texts.items() if cml == exe_cml or prog_re.search(t)}
        edits: dict = {cml: {} for cml in texts}
        # every command that names the target (add_test's COMMAND, dependencies) runs the real program
        reg0 = regs[0]
        for cml, t in texts.items():
            for c in cmake_commands(t):
                if cml == exe_cml and any(c.start == o.start for o in own):
                    continue
                if in_loop and cml == reg0.cml and (reg0.foreach.start <= c.start < reg0.endforeach.end or (
                        reg0.list_set is not None and c.start == reg0.list_set.start)):
                    continue  # the loop and its list are rewritten below
                if c.args and prog_re.search(t, c.args[0][1], c.end):
                    edits[cml][(c.start, c.end)] = _rename(t[c.start:c.end], prog_re, progs[0], None, "")
        # the target's commands, once per program (the real one among the twins, in a random order)
        order = list(range(len(progs)))
        state.rng.shuffle(order)
        sfx = [real, *twins]
        if in_loop:
            _unroll(texts[reg0.cml], edits[reg0.cml], regs, order, sfx, progs, prog_re, src_re, bases)
        else:
            last = max(c.end for c in own)
            for c in own:
                cut = c.end + 1 if exe_text[c.end:c.end + 1] == "\n" and c.end != last else c.end
                edits[exe_cml][(c.start, cut)] = ""
            edits[exe_cml][(last, last)] = "\n".join(
                _rename(exe_text[c.start:c.end], prog_re, progs[i], src_re, bases[i]) for i in order for c in own)
        # each test renamed, and one test per twin running the twin's program
        loops: dict = {}
        for reg in regs:
            t = texts[reg.cml]
            name_re = re.compile(_TARGET_WORD.format(re.escape(reg.test)))
            everyone = " ".join(reg.test + sfx[i] for i in order)
            for c in cmake_commands(t):
                if c.name in ("set_tests_properties", "set_property") and any(w == reg.test for w, _s, _e in c.args):
                    key = (c.start, c.end)
                    edits[reg.cml][key] = name_re.sub(everyone, edits[reg.cml].get(key, t[c.start:c.end]))
            if in_loop:
                continue
            body = _substitute(t[reg.add_test.start:reg.add_test.end], reg.var, reg.item)
            tests = [_rename(name_re.sub(reg.test + sfx[i], body, count=1), prog_re, progs[i], None, "") for i in order]
            if reg.foreach is None:
                edits[reg.cml][(reg.add_test.start, reg.add_test.end)] = "\n".join(tests)
            else:
                loop = loops.setdefault((reg.cml, reg.foreach.start), {"reg": reg, "drop": set(), "tests": []})
                loop["drop"].add(reg.item)
                loop["tests"] += [x.lstrip() for x in tests]
        for (cml, _start), loop in loops.items():
            fe, end, t = loop["reg"].foreach, loop["reg"].endforeach, texts[cml]
            keep = [w for w, _s, _e in fe.args[1:] if w not in loop["drop"]]
            head = t[fe.start:fe.end]
            edits[cml][(fe.start, fe.end)] = head[:head.index("(") + 1] + " ".join([fe.args[0][0], *keep]) + ")"
            edits[cml][(end.end, end.end)] = "\n" + "\n".join(loop["tests"])
        for cml, es in edits.items():
            t = texts[cml]
            for (s, e), new in sorted(es.items(), reverse=True):
                t = t[:s] + new + t[e:]
            files[cml] = t
        state.out["files"].update(files)
        for reg in regs:
            state.record(path, reg.test, real, twins)


def _unroll(text: str, edits: dict, regs: list[Registration], order: list[int], sfx: list[str], progs: list[str],
            prog_re: re.Pattern, src_re: re.Pattern, bases: list[str]) -> None:
    """A loop that builds and registers each item's program (``foreach(t ${unity_tests})
    add_executable(${t} ${t}.c) ... add_test(NAME ${t} ...)``): the item leaves the loop's list (the
    ``set()`` it walks, or the foreach's own words) and the loop's body, ``if()`` blocks and all, is
    written out after ``endforeach()`` once per program with the item in place of the loop variable, the
    target and source renamed; the twins register only the tests being twinned (one name, one test)."""
    reg = regs[0]
    tests = {r.test for r in regs}
    holder = reg.list_set or reg.foreach
    for w, s, e in holder.args[1:]:
        if w == reg.item:
            edits[(len(text[:s].rstrip(" \t")), e)] = ""
    body = _substitute(text[reg.foreach.end:reg.endforeach.start], reg.var, reg.item)
    copies = []
    for i in order:
        out, pos = [], 0
        for c in cmake_commands(body):
            out.append(body[pos:c.start])
            pos = c.end
            cmd = body[c.start:c.end]
            if c.name != "add_test":
                out.append(_rename(cmd, prog_re, progs[i], src_re, bases[i]))
                continue
            words = [w for w, _s, _e in c.args]
            n = 1 if words[0] == "NAME" and len(words) > 1 else 0
            name, s, e = c.args[n]
            if name in tests:
                at, cut = s - c.start, e - c.start
                out.append(cmd[:at] + cmd[at:cut].replace(name, name + sfx[i], 1) + prog_re.sub(progs[i], cmd[cut:]))
            elif i == 0:
                out.append(_rename(cmd, prog_re, progs[0], None, ""))  # another test of the program: the real one
        out.append(body[pos:])
        copies.append("".join(out))
    edits[(reg.endforeach.end, reg.endforeach.end)] = "".join(copies).rstrip(" \t")


def _rename(body: str, prog_re: re.Pattern, prog: str, src_re: re.Pattern | None, src: str) -> str:
    """A CMake command with its target (in its arguments, not its name) and its source renamed."""
    i = body.index("(") + 1
    args = prog_re.sub(prog, body[i:])
    if src_re is not None:
        args = src_re.sub(src, args)
    return body[:i] + args


def _with_value(text: str, lit: Literal, value: str) -> str:
    """The program's source with one literal given another value (``twins.variants``)."""
    return text[:lit.start] + value + text[lit.end:]


# ---------------------------------------------------------------- Automake


_AM_ASSIGN = re.compile(r"^([A-Za-z_@][\w@]*)\s*(\+?=|:=)(.*)$", re.S)


def am_lines(text: str) -> list[tuple[int, int, str]]:
    """(start, end, logical line) of a Makefile.am: backslash-continued lines joined (end: past the last
    physical line's newline, or the text's end)."""
    out = []
    i = 0
    while i < len(text):
        j = i
        while True:
            k = text.find("\n", j)
            if k < 0:
                k = len(text)
                break
            if text[j:k].endswith("\\"):
                j = k + 1
                continue
            break
        raw = text[i:k]
        out.append((i, min(k + 1, len(text)), re.sub(r"\\\n", " ", raw)))
        i = k + 1
    return out


def am_vars(text: str) -> list[tuple[str, str, int, int]]:
    """(variable, value, start, end) of every assignment line of a Makefile.am (comments and rules left out)."""
    out = []
    for s, e, line in am_lines(text):
        if line.startswith(("\t", "#")):
            continue
        m = _AM_ASSIGN.match(line.strip())
        if m:
            out.append((m.group(1), m.group(3).split("#", 1)[0], s, e))
    return out


def canonical(name: str) -> str:
    """Automake's canonical form of a program name (``tests/test-x`` -> ``tests_test_x``)."""
    return re.sub(r"[^A-Za-z0-9_@]", "_", name)


def _program_word(prog: str) -> re.Pattern:
    return re.compile(r"(?<![\w./-])" + re.escape(prog) + r"(\$\(EXEEXT\))?(?![\w./-])")


@dataclass
class AmProgram:
    makefile: str
    prog: str
    """As the Makefile.am names it (relative to its directory)."""
    source: str
    """Tree-relative path of its test source."""
    source_word: str
    """As its ``_SOURCES`` names it ("" when it has none: the default ``prog.c``)."""


def am_program(tree: str, test_id: str, files: list[str] = ()) -> AmProgram | None:
    """The program an Automake test id (``tests/test_x``) runs, as a ``*_PROGRAMS`` entry of a Makefile.am."""
    for mk in _walk(tree, ("Makefile.am",)):
        d = os.path.dirname(mk)
        if d and not test_id.startswith(d + "/"):
            continue
        prog = test_id[len(d) + 1:] if d else test_id
        text = _read(tree, mk) or ""
        vs = am_vars(text)
        word = _program_word(prog)
        if not any(v.endswith("_PROGRAMS") and word.search(val) for v, val, _s, _e in vs):
            continue
        canon = canonical(prog)
        srcs = [w for v, val, _s, _e in vs if v in (canon + "_SOURCES", "nodist_" + canon + "_SOURCES")
                for w in val.split() if w.endswith(C_SOURCES)]
        if not srcs:
            default = prog + ".c"
            if os.path.isfile(os.path.join(tree, _join(d, default))):
                return AmProgram(mk, prog, _join(d, default), "")
            continue
        paths = [(w, _join(d, w.replace("$(srcdir)/", "").replace("$(top_srcdir)/", ""))) for w in srcs]
        pick = next((p for p in paths if p[1] in files), None) or next(
            (p for p in paths if _MAIN.search(_read(tree, p[1]) or "")), None)
        if pick is None:
            continue
        return AmProgram(mk, prog, pick[1], pick[0])
    return None


class AutomakeDialect(CDialect):
    """Automake's test programs (``check_PROGRAMS``, ``TESTS``): each test is a whole program."""

    def declarations(self, text: str) -> list[Decl]:
        m = _MAIN.search(text)
        return [Decl("main", 0, len(text), m.start())] if m else []

    def changed(self, text: str, added: list, removed: list):
        """A test program the test patch changes is changed as a whole ("all")."""
        if not self.is_program(text):
            return []
        return "all" if _code_changed(added, removed) else []

    def target(self, test_id: str, files: list[str], tree: str = "") -> tuple[str, str] | None:
        if not tree or " " in test_id:  # a TAP result is one of a script's many
            return None
        found = am_program(tree, test_id, files)
        return (found.source, test_id) if found else None

    def copies(self, tree: str, path: str, text: str, names: list[str], state: Twins) -> None:
        for test_id in names:
            if state.budget <= 0:
                return
            found = am_program(tree, test_id, [path])
            if found is None or found.source != path:
                continue
            lit = state.pick(path, test_id, self.program_literals(tree, path, text))
            mk_text = _read(tree, found.makefile, state)
            values = variants(lit, self, state.per_test, state.rng) if lit else []
            if not values or mk_text is None:
                continue
            real = state.suffix(self)
            twins = [state.suffix(self) for _ in values]
            sfx = [real, *twins]
            stem, ext = os.path.splitext(path)
            d = os.path.dirname(found.makefile)
            files = {path: None}
            new_srcs = []
            for s, t in zip(sfx, [text] + [_with_value(text, lit, v) for v in values]):
                files[stem + s + ext] = t
                new_srcs.append(stem + s + ext)
            pairs = list(zip(sfx, [os.path.relpath(p, d or ".") for p in new_srcs]))
            state.rng.shuffle(pairs)  # the real program anywhere among its twins
            files[found.makefile] = _am_rewrite(mk_text, found, [a for a, _ in pairs], [b for _, b in pairs])
            state.out["files"].update(files)
            state.record(path, test_id, real, twins)


def _am_rewrite(text: str, prog: AmProgram, suffixes: list[str], sources: list[str]) -> str:
    """The Makefile.am with ``prog`` replaced by one program per suffix, each with its own copy of the
    program's variables and its own source."""
    word = _program_word(prog.prog)
    canon = canonical(prog.prog)
    per_prog = re.compile(r"^((?:nodist_|dist_|EXTRA_)?)" + re.escape(canon) + r"_([A-Z]+)$")
    src_word = re.compile(r"(?<![\w./-])" + re.escape(prog.source_word) + r"(?![\w./-])") if prog.source_word else None
    edits = []
    had_sources = False
    for var, _val, s, e in am_vars(text):
        line = text[s:e]
        m = per_prog.match(var)
        if m:
            copies = []
            for sfx, src in zip(suffixes, sources):
                new = line.replace(var, m.group(1) + canonical(prog.prog + sfx) + "_" + m.group(2), 1)
                if m.group(2) == "SOURCES" and src_word is not None:
                    new = src_word.sub(src, new)
                    had_sources = had_sources or bool(src_word.search(line))
                copies.append(new if new.endswith("\n") else new + "\n")
            edits.append((s, e, "".join(copies)))
        elif var.endswith(("_PROGRAMS", "TESTS")) and word.search(line):
            eq = line.index("=") + 1
            edits.append((s, e, line[:eq] + word.sub(
                lambda mm: " ".join(prog.prog + sfx + (mm.group(1) or "") for sfx in suffixes), line[eq:])))
    if not had_sources:
        add = "".join(f"{canonical(prog.prog + sfx)}_SOURCES = {src}\n" for sfx, src in zip(suffixes, sources))
        edits.append((len(text), len(text), ("" if text.endswith("\n") or not text else "\n") + add))
    for s, e, new in sorted(edits, reverse=True):
        text = text[:s] + new + text[e:]
    return text


GTEST = GTestDialect()
CTEST = CTestDialect()
AUTOMAKE = AutomakeDialect()
