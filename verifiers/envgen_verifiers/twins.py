"""Twin tests: hidden checks that look exactly like a task's FAIL_TO_PASS tests and must fail (stdlib only).

Code under test runs in the test process, so it can read every name, text and file there and rewrite
what the runner reports: a canary test it can recognise, it can spare. A twin is a copy of a
FAIL_TO_PASS test with one literal of its expectation given another value (``== 3`` -> ``== 2`` and
``== 4``; ``"abc"`` -> ``"abb"`` and ``"abd"``; ``true`` -> ``false``), written beside the test in the same
file; the real test and its twins are all renamed with a random suffix of the same shape and shuffled,
so names, files, ids and places give nothing away, and the copies differ in that one literal only, whose
values form a window that holds the real one at a random place: only knowing the right behaviour tells
the real test from its twins. With a correct fix the real test passes and its twins fail; a run forged to
report "everything passed", an assertion library that never throws, or a value whose ``==`` is always
true makes the twins pass too, and the verdict is 0.

A plan is made once, at validation (``plan``, with a secret seed), from the tree with the test patch
applied; the gold runs with the twins written keep the twin tests that fail in every run
(``expect_failing``) and the plan goes into the pack's ``hidden/``. The verifier writes the same files
after staging a submission and requires every expected-failing twin reported as failing (``judge``).

Per language a ``Dialect`` says how tests are declared (where a test's code starts and ends, where its
name ends) and how a test id names its file and declaration; everything else (finding literals, their
other values, the copies, the renames, mapping reported ids back) is shared here.
"""

from __future__ import annotations

import io
import os
import random
import re
import string
import tokenize
from dataclasses import dataclass

FAILING = ("failed", "error")
"""``runners.base.FAILING`` (not imported: the runners import this module for their dialects)."""
SUFFIX_CHARS = string.ascii_lowercase + string.digits
TOKEN_LEN = 5
MAX_TESTS = 6
"""FAIL_TO_PASS declarations that get twins (the first ones, in id order): each twin runs its test's
code once more, so the run's time stays close to the raw test time."""
TWINS_PER_TEST = 2


@dataclass
class Decl:
    """One test declaration in a source file."""

    name: str
    """The declaration's name as ``Dialect.target`` gives it (``Class::test_x``, ``TestX``, a title)."""
    start: int
    """Offset of the first character of its first line (decorators and annotations included)."""
    end: int
    """Offset just past its last character (its closing brace, parenthesis or last body line)."""
    name_end: int
    """Offset just past the name as written (where a suffix renames it)."""


@dataclass
class Literal:
    start: int
    end: int
    kind: str
    """number, string or bool."""
    text: str
    on_assert: bool


class Dialect:
    """How one language declares tests (subclasses per runner family)."""

    line_comments: tuple = ("//",)
    block_comments: tuple = (("/*", "*/"),)
    quotes: tuple = ('"', "'")
    raw_quotes: tuple = ()
    """Quotes whose strings have no escapes (Go's backquote)."""
    true_false: tuple = ("true", "false")
    assert_words = re.compile(r"assert|expect|Errorf|Fatalf|Error\(|Fatal\(|EXPECT_|ASSERT_|should|check|verify|"
                              r"fail|want|equal|Equal", re.I)
    sep = "_"
    """Between a test's name and its suffix (" " for titles)."""
    expected_first = False
    """Whether assertions name the expected value first (JUnit's ``assertEquals(expected, actual)``)."""
    negated_words = None
    """A line that asserts two values differ (Python's ``assertNotEqual``, ``!=``): changing one of its
    literals almost never changes the outcome, so its literals are tried last. None: the language's
    assertions do not say (Go's ``if got != want { t.Errorf }`` states the failure, not the expectation)."""

    def declarations(self, text: str) -> list[Decl]:
        """Every test declaration of a file's text."""
        raise NotImplementedError

    def target(self, test_id: str, files: list[str], tree: str) -> tuple[str, str] | None:
        """(run file, declaration name) a test id runs (``tree``: where the files are, for languages
        whose ids do not name the file); None when the id does not say."""
        raise NotImplementedError

    def literals(self, text: str, decl: "Decl") -> list:
        """The literals of a declaration a twin may change, best first (``literals``)."""
        return literals(text, decl, self)

    def twinnable(self, text: str, decl: "Decl") -> bool:
        """Whether a declaration may get twins at all (e.g. not a test whose title is computed)."""
        return True

    def companions(self, tree: str, path: str, renamed: list) -> dict:
        """{path: text} of files that must follow the renames of a test file (``renamed``: [(name, real
        suffix, [twin suffixes])]), e.g. snapshots keyed by test name; default none."""
        return {}

    def copies(self, tree: str, path: str, text: str, names: list[str], state: "Twins") -> None:
        """Add the named tests of one file and their twins to ``state.out["files"]`` (``state.record``
        each). Default: in the same file (``in_file_copies``); a runner whose tests are whole programs
        writes new files instead (and registers them in ``finish``)."""
        in_file_copies(self, path, text, names, state)

    def finish(self, tree: str, state: "Twins") -> None:
        """After every file's copies: e.g. register new test programs with the build (default: nothing)."""

    def defined(self, line: str) -> list[str]:
        """The name a line at the tests' own nesting level declares (a helper, a table, a constant): a
        test whose code mentions it is changed when that line is. The first name written before ``=``,
        ``:=`` or ``(`` that is not a keyword or a type (``var cases = ...`` -> cases, ``func (u UUID)
        String() string {`` -> String, ``static final int LIMIT = 3;`` -> LIMIT)."""
        for m in DEFINES.finditer(line):
            if m.group(1) not in KEYWORDS:
                return [m.group(1)]
        return []

    def changed(self, text: str, added: list, removed: list) -> list[str]:
        """Names of the declarations of ``text`` (a file after the test patch) that the patch adds or
        changes: those whose lines hold an added line or the place of a removed one, and those whose
        code mentions a name that an added line outside every declaration defines at their nesting level
        (a helper, a table). An import, a benchmark or an example added beside the tests changes none of
        them. ``added``: [(line, text)], ``removed``: [(line where they were, [texts])]
        (``tests._diff_lines``); blank and comment lines change nothing. A dialect whose tests are whole
        programs (a file with ``main``) may return "all": every test of the file."""
        def code(t: str) -> bool:
            t = t.strip()
            return bool(t) and not t.startswith((*self.line_comments, "/*", "*", "*/"))

        added_at = [no for no, t in added if code(t)]
        removed_at = [no for no, ts in removed if any(code(t) for t in ts)]
        decls = self.declarations(text)
        spans = [(d, text.count("\n", 0, d.start) + 1, text.count("\n", 0, d.end) + 1) for d in decls]
        depth = self.depths(text)
        level = max((depth[a - 1] for _, a, _ in spans), default=0)
        names: set = set()
        names_defined: set = set()
        lines = text.splitlines()
        for no in [*added_at, *removed_at]:
            inside = [d for d, a, b in spans if a <= no <= b]
            if inside:
                names.update(d.name for d in inside)
            elif no in added_at and 0 < no <= len(lines) and depth[no - 1] <= level:
                names_defined.update(self.defined(lines[no - 1]))
        if names_defined:
            words = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names_defined))) + r")\b")
            for d in decls:
                if words.search(text, d.name_end, d.end):
                    names.add(d.name)
        return sorted(names)

    def tokens(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
        """(kind, start, end) of the comments, strings, numbers and words of ``text[start:end]``."""
        return scan(text, start, len(text) if end is None else end, self)

    def depths(self, text: str) -> list[int]:
        """Per line, how many brackets are open where it starts (strings and comments skipped)."""
        starts = _line_offsets(text)
        out = [0] * (len(starts))
        depth, line = 0, 0
        for kind, s, _e in scan(text, 0, len(text), self):
            while line + 1 < len(starts) and starts[line + 1] <= s:
                line += 1
                out[line] = depth
            if kind == "other" and text[s] in "{([":
                depth += 1
            elif kind == "other" and text[s] in "})]":
                depth = max(0, depth - 1)
        for i in range(line + 1, len(starts)):
            out[i] = depth
        return out


# ---------------------------------------------------------------- lexing (C-like languages)


DEFINES = re.compile(r"([A-Za-z_$][\w$]*)\s*(?::=|=(?![=>])|\()")
KEYWORDS = frozenset("""func var const let type class def function static final val public private protected
    return if for while switch case new import package use require from struct interface enum void int long
    short byte char float double bool boolean string String auto unsigned signed extern inline async await
    typeof sizeof self this super and or not in is lambda yield with assert elif else try catch except
    finally throw throws raise defer go map chan make len append describe it test beforeEach afterEach
    beforeAll afterAll setUp tearDown module exports define""".split())
"""A line's declared name: the first non-keyword name before ``=``, ``:=`` or ``(``."""
_NUM = re.compile(r"(?<![\w.])(?:\d+\.\d+|\d+)(?:[eE][+-]?\d+)?(?![\w.])")
_WORD = re.compile(r"[A-Za-z_$][\w$]*")


def scan(text: str, start: int, end: int, d: Dialect) -> list[tuple[str, int, int]]:
    """A small lexer good enough for C-like sources: comments, strings (escapes honoured), numbers, words."""
    out = []
    i = start
    while i < end:
        c = text[i]
        lc = next((m for m in d.line_comments if text.startswith(m, i)), None)
        if lc:
            j = text.find("\n", i)
            j = end if j < 0 else j
            out.append(("comment", i, j))
            i = j
            continue
        bc = next((pair for pair in d.block_comments if text.startswith(pair[0], i)), None)
        if bc:
            j = text.find(bc[1], i + len(bc[0]))
            j = end if j < 0 else j + len(bc[1])
            out.append(("comment", i, j))
            i = j
            continue
        if c in d.quotes or c in d.raw_quotes:
            j = i + 1
            raw = c in d.raw_quotes
            while j < end and text[j] != c:
                if not raw and text[j] == "\\":
                    j += 1
                elif not raw and text[j] == "\n" and c != "`":
                    break
                j += 1
            out.append(("string", i, min(j + 1, end)))
            i = j + 1
            continue
        m = _NUM.match(text, i) if (c.isdigit() and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_.$"))) \
            else None
        if m:
            out.append(("number", i, m.end()))
            i = m.end()
            continue
        m = _WORD.match(text, i)
        if m:
            out.append(("word", i, m.end()))
            i = m.end()
            continue
        out.append(("other", i, i + 1))
        i += 1
    return out


def match_close(text: str, open_at: int, d: Dialect) -> int | None:
    """Offset just past the bracket that closes the one at ``open_at`` (strings and comments skipped)."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    opener = text[open_at]
    closer = pairs[opener]
    depth = 0
    for kind, s, e in scan(text, open_at, len(text), d):
        if kind != "other":
            continue
        ch = text[s]
        if ch == opener:
            depth += 1
        elif ch == closer:
            depth -= 1
            if depth == 0:
                return e
    return None


def line_start(text: str, at: int) -> int:
    return text.rfind("\n", 0, at) + 1


def line_end(text: str, at: int) -> int:
    j = text.find("\n", at)
    return len(text) if j < 0 else j


def leading_block(text: str, start: int, prefixes: tuple) -> int:
    """Move ``start`` (a line start) up over the lines right above that begin with one of ``prefixes``
    (annotations, attributes, doc comments): they belong to the declaration."""
    while start > 0:
        prev = line_start(text, start - 1)
        s = text[prev:start].strip()
        if s and s.startswith(prefixes):
            start = prev
        else:
            break
    return start


# ---------------------------------------------------------------- literals and copies


COMPARES = re.compile(r"==|!=|\bis\b|toBe|toEqual|Equal|Same|\bwant\b|\bexpected\b", re.I)
"""A bool is changed only on a line that compares it with something computed (``assert True`` alone
would make a twin that fails whatever the code does, and says so)."""


def literals(text: str, decl: Decl, d: Dialect) -> list[Literal]:
    """The literals of a declaration that a twin may change, those on assertion lines first: numbers
    anywhere in it (parametrization tables in decorators and annotations included), strings and bools
    in its body."""
    out = []
    toks = d.tokens(text, decl.start, decl.end)
    for kind, s, e in toks:
        in_body = s >= decl.name_end
        line = text[line_start(text, s):line_end(text, s)]
        lit = None
        if kind == "number":
            lit = Literal(s, e, "number", text[s:e], False)
        elif kind == "string" and in_body and text[s] in d.quotes + d.raw_quotes \
                and changeable_char(text[s:e]) is not None:
            lit = Literal(s, e, "string", text[s:e], False)
        elif kind == "word" and in_body and text[s:e] in d.true_false and COMPARES.search(line):
            lit = Literal(s, e, "bool", text[s:e], False)
        if lit is None:
            continue
        lit.on_assert = bool(d.assert_words.search(line))
        out.append(lit)
    asserted = [x for x in out if x.on_assert]
    # the expected value of an assertion comes last (``assert f(3) == 4``, ``expect(f(3)).toBe(4)``) or
    # first (``assertEquals(4, f(3))``): a twin that changes it fails for any correct fix, one that
    # changes an input only where the fix's answer for the new input differs from the old expectation
    lines: dict = {}
    for x in asserted:
        lines.setdefault(line_start(text, x.start), []).append(x)
    ordered = [x for _, xs in sorted(lines.items()) for x in (xs if d.expected_first else xs[::-1])]
    comments = [(s, e) for kind, s, e in toks if kind == "comment"]

    def code_of_line(at: int) -> str:
        a, b = line_start(text, at), line_end(text, at)
        return "".join(" " if any(s <= i < e for s, e in comments) else text[i] for i in range(a, b))

    negated = [x for x in ordered if d.negated_words is not None and d.negated_words.search(code_of_line(x.start))]
    # ``assertNotEqual(r, 1)`` holds for 0 and 2 too: a literal of an input table decides more often
    return [x for x in ordered if x not in negated] + [x for x in out if not x.on_assert] + negated


ALPHABETS = (string.digits, string.ascii_lowercase, string.ascii_uppercase)


def variants(lit: Literal, d: Dialect, k: int, rng: random.Random) -> list[str]:
    """Up to ``k`` other values of one literal, its type and spelling kept: a window of ``k + 1``
    consecutive values (numbers, or a string's last character within its letters or digits) that holds
    the real one at a place drawn by ``rng``, so the copies of a test differ in this literal only and the
    real value is neither the majority nor always the smallest (a bool has one other value). Never below
    zero: a minus sign could stop the code compiling."""
    t = lit.text
    if lit.kind == "bool":
        a, b = d.true_false
        return [b if t == a else a]
    if lit.kind == "number":
        m = re.match(r"(\d+)(\.\d+)?(.*)$", t)
        v, width = int(m.group(1)), len(m.group(1)) if m.group(1).startswith("0") else 1
        start = rng.randint(max(0, v - k), v)
        return [str(n).zfill(width) + (m.group(2) or "") + m.group(3) for n in range(start, start + k + 1) if n != v]
    at = changeable_char(t)
    if at is None:
        return []
    ch = t[at]
    letters = next(a for a in ALPHABETS if ch in a)
    i = letters.index(ch)
    k = min(k, len(letters) - 1)
    start = rng.randint(max(0, i - k), min(i, len(letters) - 1 - k))
    return [t[:at] + c + t[at + 1:] for c in letters[start:start + k + 1] if c != ch]


def changeable_char(t: str) -> int | None:
    """Where a string literal's twins differ: its last ASCII letter or digit that is plain text (not an
    escape like ``\\n``, not in an interpolation such as ``{x}``, ``${x}`` or ``$x``), so
    ``"Unknown.Unknown()"`` becomes ``"Unknown.Unknowm()"``; None when there is none."""
    body = t[1:-1]
    for i in range(len(body) - 1, -1, -1):
        ch = body[i]
        if not (ch.isascii() and ch.isalnum()):
            continue
        if "}" in body[i + 1:] or (i and body[i - 1] == "\\"):
            return None
        w = i
        while w and (body[w - 1].isalnum() or body[w - 1] == "_"):
            w -= 1
        if w and body[w - 1] in "$@\\":
            return None
        return i + 1
    return None


def _token(rng: random.Random, taken: set) -> str:
    while True:
        tok = "".join(rng.choice(SUFFIX_CHARS) for _ in range(TOKEN_LEN))
        if tok not in taken and not tok.isdigit():
            taken.add(tok)
            return tok


class Twins:
    """A plan being made: a seeded random source for suffixes that never repeat, and what is written."""

    def __init__(self, seed: int, budget: int, per_test: int, tree: str = "", choices: dict | None = None):
        self.tree = tree
        self.rng = random.Random(seed)
        self.taken: set = set()
        self.budget = budget
        self.per_test = per_test
        self.choices = dict(choices or {})
        self.out: dict = {"files": {}, "real": [], "twins": [], "tests": []}

    def suffix(self, d: Dialect) -> str:
        return d.sep + _token(self.rng, self.taken)

    def pick(self, path: str, name: str, lits: list):
        """The literal a test's twins change: the first ``literals`` offers, or a later one where the
        twins of the earlier ones passed with the gold patch (``choices``, set by the validation run:
        ``assertRaises(E, f, 'ABC')``'s string often does not matter, its number does), round again
        when all were tried (the retry's seed draws new windows); None when it has no literal."""
        i = self.choices.get(choice_key(path, name), 0)
        return lits[i % len(lits)] if lits else None

    def record(self, path: str, name: str, real: str, twins: list[str]) -> None:
        self.budget -= 1
        self.out["real"].append(real)
        self.out["twins"] += twins
        self.out["tests"].append({"file": path, "name": name, "real": real, "twins": twins,
                                  "literal": self.choices.get(choice_key(path, name), 0)})


def choice_key(path: str, name: str) -> str:
    return f"{path}::{name}"


def plan(tree: str, dialect: Dialect, test_ids: list[str], files: list[str], *, seed: int = 0,
         max_tests: int = MAX_TESTS, per_test: int = TWINS_PER_TEST, choices: dict | None = None) -> dict:
    """The twin plan for ``test_ids``: {"files": {path: new text, or None for a file to remove}, "real":
    [suffix the real tests got], "twins": [suffix of each twin], "tests": [{"file", "name", "real",
    "twins": [...], "literal": which literal}]}. Declarations the dialect cannot find, or finds more than
    once, and tests with no literal to change get no twin. Each file's copies come from ``Dialect.copies``;
    ``choices`` ({choice_key: index}) moves a test's twins to a later literal (``Twins.pick``)."""
    wanted: dict[str, list[str]] = {}
    for tid in sorted(test_ids):
        t = dialect.target(tid, list(files), tree)
        if t and t[1] not in wanted.setdefault(t[0], []):
            wanted[t[0]].append(t[1])
    state = Twins(seed, max_tests, per_test, tree, choices)
    for path in sorted(wanted):
        if state.budget <= 0:
            break
        try:
            with open(os.path.join(tree, path), encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        try:
            dialect.copies(tree, path, text, wanted[path], state)
        except (SyntaxError, ValueError, tokenize.TokenError, IndentationError):
            continue
    dialect.finish(tree, state)
    return state.out


def in_file_copies(d: Dialect, path: str, text: str, names: list[str], state: Twins) -> None:
    """Each named declaration renamed, with its twins beside it in the same file (``Dialect.copies``):
    every twin changes the same literal (``Twins.pick`` of those ``Dialect.literals`` offers) to another value
    (``variants``), and the copies are shuffled. Files that go with the tests (``Dialect.companions``:
    e.g. snapshots keyed by a test's name) are rewritten for the new names."""
    decls = d.declarations(text)
    counts: dict = {}
    for dcl in decls:
        counts[dcl.name] = counts.get(dcl.name, 0) + 1
    edits, renamed = [], []
    for name in names:
        if state.budget <= 0:
            break
        dcl = next((x for x in decls if x.name == name), None)
        if dcl is None or counts[name] != 1 or not d.twinnable(text, dcl):
            continue
        lit = state.pick(path, name, d.literals(text, dcl))
        values = variants(lit, d, state.per_test, state.rng) if lit else []
        if not values:
            continue
        real = state.suffix(d)
        blocks = [_copy(text, dcl, real)]
        twins = []
        for value in values:
            twins.append(state.suffix(d))
            blocks.append(_copy(text, dcl, twins[-1], lit, value))
        state.rng.shuffle(blocks)
        edits.append((dcl.start, dcl.end, "\n\n".join(blocks)))
        state.record(path, name, real, twins)
        renamed.append((name, real, twins))
    if not edits:
        return
    for s, e, new in sorted(edits, reverse=True):
        text = text[:s] + new + text[e:]
    state.out["files"][path] = text
    state.out["files"].update(d.companions(state.tree, path, renamed))


def _copy(text: str, dcl: Decl, suffix: str, lit: Literal | None = None, new: str = "") -> str:
    body = text[dcl.start:dcl.end]
    cuts = [(dcl.name_end - dcl.start, dcl.name_end - dcl.start, suffix)]
    if lit is not None:
        cuts.append((lit.start - dcl.start, lit.end - dcl.start, new))
    for s, e, rep in sorted(cuts, reverse=True):
        body = body[:s] + rep + body[e:]
    return body


def write(tree: str, twin_plan: dict | None) -> list[str]:
    """Write a plan's files into a staged tree; the paths written."""
    written = []
    for path, text in sorted(((twin_plan or {}).get("files") or {}).items()):
        full = os.path.join(tree, path)
        if text is None:
            if os.path.lexists(full):
                os.unlink(full)
        else:
            os.makedirs(os.path.dirname(full) or ".", exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(text)
        written.append(path)
    return written


def split(outcomes: dict, twin_plan: dict | None, messages: dict | None = None) -> tuple[dict, dict]:
    """(outcomes of the real tests under their original ids, outcomes of the twins) of a run's report."""
    if not twin_plan or not twin_plan.get("files"):
        return dict(outcomes), {}
    twins = twin_plan.get("twins") or []
    reals = twin_plan.get("real") or []
    real_out, twin_out = {}, {}
    for tid, o in outcomes.items():
        if any(s in tid for s in twins):
            twin_out[tid] = o
            continue
        orig = tid
        for s in reals:
            orig = orig.replace(s, "")
        if orig != tid and messages is not None and tid in messages:
            messages[orig] = messages.pop(tid)
        if real_out.get(orig) in FAILING:
            continue
        real_out[orig] = o
    return real_out, twin_out


def judge(twin_outcomes: dict, expect_failing: list[str]) -> str | None:
    """Why the run is untrusted (a twin that must fail was reported passing or not at all), else None."""
    passed = [t for t in expect_failing if twin_outcomes.get(t) not in FAILING and t in twin_outcomes]
    missing = [t for t in expect_failing if t not in twin_outcomes]
    if passed:
        return (f"{len(passed)} of {len(expect_failing)} hidden twin checks, which a correct fix fails, were "
                "reported passing: the test run was forged or its assertions disabled")
    if missing:
        return (f"{len(missing)} of {len(expect_failing)} hidden twin checks were not reported: the test run "
                "was cut short or its report rewritten")
    return None


# ---------------------------------------------------------------- Python (pytest, unittest)


class PythonDialect(Dialect):
    """pytest ids ``path::Class::test[param]``; unittest ids ``pkg.module.Class.test``."""

    quotes = ('"', "'")
    true_false = ("True", "False")
    assert_words = re.compile(r"\bassert|\braises\b|approx|\bexpect", re.I)
    negated_words = re.compile(r"\bassertNot(?:Equal|In|AlmostEqual|Regex)|!=|\bis\s+not\b|\bnot\s+in\b")

    def declarations(self, text: str) -> list[Decl]:
        import ast

        tree = ast.parse(text)
        offsets = _line_offsets(text)
        out: list[Decl] = []

        def walk(body, prefix):
            for node in body:
                if isinstance(node, ast.ClassDef):
                    walk(node.body, (*prefix, node.name))
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):  # python_functions may be any
                    first = min([node.lineno] + [dec.lineno for dec in node.decorator_list])
                    line = text[offsets[node.lineno - 1]:offsets[node.lineno - 1] + 4000]
                    m = re.search(r"def\s+(" + re.escape(node.name) + r")\b", line)
                    if not m:
                        continue
                    end = offsets[node.end_lineno - 1] + len(text.splitlines(True)[node.end_lineno - 1].rstrip("\r\n"))
                    out.append(Decl("::".join((*prefix, node.name)), offsets[first - 1], end,
                                    offsets[node.lineno - 1] + m.end(1)))
        walk(tree.body, ())
        return out

    def target(self, test_id: str, files: list[str], tree: str = "") -> tuple[str, str] | None:
        if "::" in test_id:
            path, *names = test_id.split("::")
        else:
            path, names = "", []
            for f in sorted(files, key=len, reverse=True):
                mod = f[:-3].replace("/", ".") if f.endswith(".py") else f
                if test_id.startswith(mod + "."):
                    path, names = f, test_id[len(mod) + 1:].split(".")
                    break
        if not path or not names:
            return None
        names[-1] = names[-1].split("[", 1)[0]
        return path, "::".join(names)

    def tokens(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
        end = len(text) if end is None else end
        offsets = _line_offsets(text)
        out = []
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                s = offsets[tok.start[0] - 1] + tok.start[1]
                e = offsets[tok.end[0] - 1] + tok.end[1]
                if s < start or e > end:
                    continue
                if tok.type == tokenize.NUMBER and re.fullmatch(r"\d+(\.\d+)?", tok.string):
                    out.append(("number", s, e))
                elif tok.type == tokenize.STRING and re.fullmatch(r"(['\"])[^'\"\\\n]*\1", tok.string):
                    out.append(("string", s, e))
                elif tok.type == tokenize.NAME:
                    out.append(("word", s, e))
                elif tok.type == tokenize.COMMENT:
                    out.append(("comment", s, e))
        except (tokenize.TokenError, IndentationError, SyntaxError):
            return []
        return out


def _line_offsets(text: str) -> list[int]:
    offs = [0]
    for line in text.splitlines(True):
        offs.append(offs[-1] + len(line))
    return offs


PYTHON = PythonDialect()
