"""How JavaScript and TypeScript test files declare their tests, for the twin checks (stdlib only; Python 3.9+).

jest, vitest and mocha declare a test as a call, ``it("title", fn)`` / ``test("title", fn)`` (also
``specify``, ``xit``/``fit``/``xtest``, modifiers ``.only``/``.skip``/``.concurrent``/``.failing``...,
tables ``test.each(table)("title %s", fn)`` and ``test.each`table`(...)``, conditions
``test.skipIf(c)(...)``), nested in ``describe("title", fn)`` blocks (``context``/``suite``,
``describe.each``...). A test's id is ``file > describe titles > title`` (``runners.node``), so a
declaration's name here is its describe titles and its own title joined by `` > ``; a title with
placeholders (a table's ``%s``/``$name``, a template literal's ``${...}``) matches the ids it makes by
pattern. A declaration spans from the start of its call's line (when only blanks come before it) to its
closing parenthesis, chained calls (``.timeout(5000)``) and a ``;`` included; it is renamed by a suffix
right before the title's closing quote (``sep = " "``). Tests whose title is not one string literal, or
is a template literal with ``${...}`` placeholders, get no twin.

The lexer knows what matters to find brackets in real test files: comments, strings, template literals
(with ``${...}`` inside), regular-expression literals, and a quote with no closing one on its line (an
apostrophe in JSX text) counts as an ordinary character.
"""

from __future__ import annotations

import os
import re

from .. import twins as _twins

TEST_WORDS = frozenset({"it", "test", "specify", "xit", "fit", "xtest", "xspecify"})
SUITE_WORDS = frozenset({"describe", "context", "suite", "xdescribe", "fdescribe", "xcontext", "xsuite"})
MODIFIERS = frozenset({"only", "skip", "todo", "concurrent", "sequential", "failing", "fails", "each", "for",
                       "skipIf", "runIf", "shuffle", "serial"})
"""Members between the word and the title call (``test.concurrent.each``, ``it.only``, ``test.skipIf(c)``)."""
PLACEHOLDER = re.compile(r"%%|%[sdifjoOpc#$]|\$[A-Za-z_][\w$]*(?:\.[\w$]+)*|\{\$[\w$.]+\}")
"""jest's and vitest's title placeholders of a table test (``%s``, ``%#``, ``$name``, ``$a.b``)."""
REGEX_BEFORE = frozenset("(,=:[!&|?{};+-*%<>~^")
REGEX_AFTER_WORDS = frozenset({"return", "typeof", "case", "in", "of", "new", "delete", "void", "throw", "else",
                               "do", "yield", "await", "instanceof"})
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}
SEP = " > "
DYNAMIC = "\x00"
"""Marks the part of a name that is not a string literal (an expression): such a name matches ids by pattern only."""


def js_tokens(text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
    """(kind, start, end) of ``text[start:end]``: comment, string (quotes and template literals), regex,
    number, word, other (one character)."""
    end = len(text) if end is None else end
    out: list[tuple[str, int, int]] = []
    i = start
    prev = None  # the last significant token: (kind, text)
    while i < end:
        c = text[i]
        if c in " \t\r\n":
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = end if j < 0 or j > end else j
            out.append(("comment", i, j))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = end if j < 0 else min(j + 2, end)
            out.append(("comment", i, j))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < end and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if j < end and text[j] == c:
                out.append(("string", i, j + 1))
                prev = ("string", "")
                i = j + 1
            else:  # no closing quote on its line (JSX text): an ordinary character
                out.append(("other", i, i + 1))
                prev = ("other", c)
                i += 1
            continue
        if c == "`":
            j = _template_end(text, i, end)
            out.append(("string", i, j))
            prev = ("string", "")
            i = j
            continue
        if c == "/" and (prev is None or (prev[0] == "other" and prev[1] in REGEX_BEFORE)
                         or (prev[0] == "word" and prev[1] in REGEX_AFTER_WORDS)):
            j = _regex_end(text, i, end)
            if j is not None:
                out.append(("regex", i, j))
                prev = ("regex", "")
                i = j
                continue
        m = _twins._NUM.match(text, i) if c.isdigit() and (i == 0 or not (text[i - 1].isalnum()
                                                                          or text[i - 1] in "_.$")) else None
        if m:
            out.append(("number", i, m.end()))
            prev = ("number", "")
            i = m.end()
            continue
        m = _twins._WORD.match(text, i)
        if m:
            out.append(("word", i, m.end()))
            prev = ("word", m.group())
            i = m.end()
            continue
        out.append(("other", i, i + 1))
        prev = ("other", c)
        i += 1
    return out


def _template_end(text: str, i: int, end: int) -> int:
    """Offset just past the template literal opening at ``i`` (``${...}`` with nested strings inside)."""
    j = i + 1
    while j < end:
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "`":
            return j + 1
        if text.startswith("${", j):
            depth = 1
            k = j + 2
            while k < end and depth:
                cc = text[k]
                if cc in "\"'":
                    q = k + 1
                    while q < end and text[q] != cc and text[q] != "\n":
                        q += 2 if text[q] == "\\" else 1
                    k = q + 1
                    continue
                if cc == "`":
                    k = _template_end(text, k, end)
                    continue
                if cc == "{":
                    depth += 1
                elif cc == "}":
                    depth -= 1
                k += 1
            j = k
            continue
        j += 1
    return end


def _regex_end(text: str, i: int, end: int) -> int | None:
    j = i + 1
    in_class = False
    while j < end:
        ch = text[j]
        if ch == "\n":
            return None
        if ch == "\\":
            j += 2
            continue
        if ch == "[":
            in_class = True
        elif ch == "]":
            in_class = False
        elif ch == "/" and not in_class:
            if j == i + 1:
                return None
            j += 1
            while j < end and (text[j].isalnum() or text[j] == "_"):
                j += 1
            return j
        j += 1
    return None


def unquote(lit: str) -> str:
    """The value of a JS string literal (quotes or a template literal without placeholders)."""
    body = lit[1:-1]
    out = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 >= len(body):
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "u" and body[i + 2:i + 3] == "{":
            close = body.find("}", i + 3)
            if close > 0:
                out.append(_chr(body[i + 3:close]))
                i = close + 1
                continue
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2:i + 6] or ""):
            out.append(_chr(body[i + 2:i + 6]))
            i += 6
            continue
        if nxt == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", body[i + 2:i + 4] or ""):
            out.append(_chr(body[i + 2:i + 4]))
            i += 4
            continue
        if nxt == "\r" and body[i + 2:i + 3] == "\n":
            i += 3
            continue
        if nxt in "\n\r\u2028\u2029":
            i += 2
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    text = "".join(out)
    # a UTF-16 surrogate pair written as two escapes
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace") if any(
        "\ud800" <= ch <= "\udfff" for ch in text) else text


def _chr(hexdigits: str) -> str:
    try:
        return chr(int(hexdigits, 16))
    except (ValueError, OverflowError):
        return ""


class _Call:
    """One ``it``/``describe`` call found in a file."""

    def __init__(self, kind, start, end, title, title_tok, open_at, close_at, table):
        self.kind = kind  # "test" or "suite"
        self.start = start  # the word's offset
        self.end = end  # just past the call (chained calls and ``;`` included)
        self.title = title  # the name part: decoded title, a pattern, or DYNAMIC + expression
        self.title_tok = title_tok  # (start, end) of the title's string token, or None
        self.open_at = open_at  # the title call's "(" and just past its ")"
        self.close_at = close_at
        self.table = table  # a table or placeholder title: matches ids by pattern


class JsDialect(_twins.Dialect):
    """jest, vitest and mocha test files (``.js``, ``.cjs``, ``.mjs``, ``.jsx``, ``.ts``, ``.tsx``...)."""

    line_comments = ("//",)
    block_comments = (("/*", "*/"),)
    quotes = ('"', "'", "`")
    true_false = ("true", "false")
    assert_words = re.compile(r"assert|expect|should|\.to[A-Z]\w*|\.(?:eq|eql|equal|equals|deep|be|have|include|"
                              r"match|throw|throws|rejects|resolves)\b|\bfail|\bcheck|\bverify|\bEqual", re.I)
    sep = " "

    def tokens(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
        return [t for t in js_tokens(text, start, end) if t[0] != "regex"]

    def calls(self, text: str) -> list[_Call]:
        toks = js_tokens(text)
        sig = [t for t in toks if t[0] != "comment"]
        closes = _brackets(text, sig)
        at = {s: k for k, (_, s, _) in enumerate(sig)}
        out: list[_Call] = []
        for k, (kind, s, e) in enumerate(sig):
            if kind != "word":
                continue
            word = text[s:e]
            if word not in TEST_WORDS and word not in SUITE_WORDS:
                continue
            if k > 0 and text[sig[k - 1][1]:sig[k - 1][2]] in (".", "function", "def") or \
                    (k > 0 and sig[k - 1][0] == "word" and text[sig[k - 1][1]:sig[k - 1][2]] in ("function", "async")):
                continue  # a member, or a function of that name being defined
            call = self._call(text, sig, closes, at, k, "test" if word in TEST_WORDS else "suite")
            if call is not None:
                out.append(call)
        return out

    def _call(self, text, sig, closes, at, k, kind) -> _Call | None:
        j = k + 1
        table = False
        n = len(sig)
        while j < n:
            tk, s, e = sig[j]
            ch = text[s:e]
            if ch == "." and j + 1 < n and sig[j + 1][0] == "word" and text[sig[j + 1][1]:sig[j + 1][2]] in MODIFIERS:
                member = text[sig[j + 1][1]:sig[j + 1][2]]
                table = table or member in ("each", "for")
                j += 2
                continue
            if tk == "string" and text[s] == "`" and j > k + 1:  # test.each`table`
                j += 1
                continue
            if ch != "(":
                return None
            close = closes.get(s)
            if close is None:
                return None
            first = sig[j + 1] if j + 1 < n else None
            nxt = at.get(_next_sig_start(sig, at, close))
            if nxt is not None and text[sig[nxt][1]:sig[nxt][2]] in ("(", "`") and \
                    not (first and first[0] == "string" and _is_title_call(text, sig, at, j, close)):
                j = nxt  # a table or condition call: the title call follows
                continue
            if first is None or first[1] >= close - 1:
                return None  # no arguments
            title_tok = None
            after = at.get(_next_sig_start(sig, at, first[2]))
            lone = after is not None and text[sig[after][1]:sig[after][2]] in (",", ")")
            if first[0] == "string" and lone:
                raw = text[first[1]:first[2]]
                title_tok = (first[1], first[2])
                placeholders = raw[0] == "`" and "${" in raw
                title = raw[1:-1] if placeholders else unquote(raw)
                table = table or placeholders
            else:
                comma = _arg_end(text, sig, at, closes, j + 1, close)
                if comma >= close - 1:
                    return None  # one argument: a method or a helper of that name, not a test
                title = DYNAMIC + text[first[1]:comma].strip()
            end = close
            # chained calls (.timeout(5000)) and a trailing ;
            q = at.get(_next_sig_start(sig, at, end))
            while q is not None and text[sig[q][1]] == "." and q + 2 < n and sig[q + 1][0] == "word" and \
                    text[sig[q + 2][1]] == "(" and closes.get(sig[q + 2][1]):
                end = closes[sig[q + 2][1]]
                q = at.get(_next_sig_start(sig, at, end))
            if q is not None and text[sig[q][1]] == ";":
                end = sig[q][2]
            return _Call(kind, sig[k][1], end, title, title_tok, s, close, table)
        return None

    def declarations(self, text: str) -> list[_twins.Decl]:
        calls = self.calls(text)
        suites = [c for c in calls if c.kind == "suite"]
        out = []
        for c in calls:
            if c.kind != "test":
                continue
            path = [x.title for x in suites if x.open_at < c.start < x.close_at]
            name = SEP.join([*path, c.title])
            ls = _twins.line_start(text, c.start)
            start = ls if not text[ls:c.start].strip() else c.start
            name_end = c.title_tok[1] - 1 if c.title_tok else c.open_at + 1
            out.append(_twins.Decl(name, start, c.end, name_end))
        return out

    def twinnable(self, text, dcl):
        """Not a test whose name matches ids by pattern only (an expression, or a template literal with
        placeholders, as its title): its id cannot be mapped back to a single declaration."""
        return not dcl.name.split(SEP)[-1].startswith(DYNAMIC) and not _template_title(text, dcl)

    def companions(self, tree, path, renamed):
        """The file's snapshots (``__snapshots__/<file>.snap``, keyed by the test's name), renamed with the
        tests and copied for their twins: jest and vitest run with ``--ci``/``CI``, where a snapshot
        missing under the new name would fail the real test."""
        snap = _snapshot_path(path)
        snap_text = _read(os.path.join(tree, snap))
        if snap_text is None:
            return {}
        new_snap = renamed_snapshots(snap_text, renamed)
        return {snap: new_snap} if new_snap != snap_text else {}

    def literals(self, text: str, dcl: _twins.Decl) -> list:
        """``twins.literals``, then the strings of a table written before the title (``test.each``): a
        twin may change them like the table's numbers."""
        out = _twins.literals(text, dcl, self)
        title_at = text.rfind("(", dcl.start, dcl.name_end)
        for kind, s, e in self.tokens(text, dcl.start, title_at):
            if kind == "string" and text[s] in "\"'" and e - s >= 3 and text[e - 2].isalnum():
                out.append(_twins.Literal(s, e, "string", text[s:e], False))
        return out

    def target(self, test_id: str, files: list[str], tree: str = "") -> tuple[str, str] | None:
        path = ""
        for f in sorted(files, key=len, reverse=True):
            if test_id.startswith(f + SEP):
                path = f
                break
        if not path:
            return None
        rest = test_id[len(path) + len(SEP):]
        try:
            with open(os.path.join(tree or ".", path), encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            return path, rest
        names = [d.name for d in self.declarations(text)]
        if rest in names:
            return path, rest
        for dynamic in (False, True):
            for n in names:
                if (DYNAMIC in n) == dynamic and _pattern(n).fullmatch(rest):
                    return path, n
        return None

    def defined(self, line: str) -> list[str]:
        return [n for n in super().defined(line) if n not in TEST_WORDS and n not in SUITE_WORDS]

    def depths(self, text: str) -> list[int]:
        """Per line, how many brackets are open where it starts, not counting a describe block's own
        (its call's parenthesis and its callback's braces): a test, a helper or a table written in a
        describe body is at the level of a top-level one, and a hook's or a benchmark's body deeper
        (``Dialect.changed``: what their lines define changes no test)."""
        toks = js_tokens(text)
        sig = [t for t in toks if t[0] != "comment"]
        closes = _brackets(text, sig)
        opener_of = {e - 1: s for s, e in closes.items()}
        skip: set = set()
        for c in self.calls(text):
            if c.kind != "suite":
                continue
            skip.update((c.open_at, c.close_at - 1))
            k = c.close_at - 2
            while k > c.open_at and text[k] in " \t\r\n,":
                k -= 1
            if text[k] == "}" and k in opener_of:
                skip.update((k, opener_of[k]))
        starts = _twins._line_offsets(text)
        out = [0] * len(starts)
        depth, line = 0, 0
        for kind, s, _e in sig:
            while line + 1 < len(starts) and starts[line + 1] <= s:
                line += 1
                out[line] = depth
            if kind != "other" or s in skip:
                continue
            if text[s] in "{([":
                depth += 1
            elif text[s] in "})]":
                depth = max(0, depth - 1)
        for i in range(line + 1, len(starts)):
            out[i] = depth
        return out


_SNAP_ENTRY = re.compile(r"exports\[`((?:[^`\\]|\\.)*)`\] = `(?:[^`\\]|\\.)*`;\n?", re.S)


def _snapshot_path(path: str) -> str:
    folder, _, name = path.rpartition("/")
    return f"{folder + '/' if folder else ''}__snapshots__/{name}.snap"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _snap_unescape(key: str) -> str:
    return re.sub(r"\\(.)", r"\1", key, flags=re.S)


def _snap_escape(key: str) -> str:
    return re.sub(r"`|\\|\$\{", lambda m: "\\" + m.group(), key)


def renamed_snapshots(snap: str, renamed: list) -> str:
    """A snapshot file (jest's or vitest's) with each renamed test's entries under its new name, and a copy
    of each for every twin. ``renamed``: [(declaration name, real suffix, [twin suffixes])]. A snapshot's
    key is the test's describe titles and title (joined by " " in jest's files, " > " in vitest's), then
    `` 1`` (its count in the test), or the hint of a named snapshot and its count (``: hint 1`` in jest's,
    `` > hint 1`` in vitest's)."""
    vitest = "Vitest Snapshot" in snap[:200]
    joiner, hint = (" > ", " > ") if vitest else (" ", ": ")
    rules = []
    for name, real, twin_suffixes in renamed:
        rx = _pattern(name).pattern.replace(re.escape(SEP), re.escape(joiner))
        plain = re.compile(f"({rx})( \\d+)", re.S)
        hinted = re.compile(f"({rx})({re.escape(hint)}.* \\d+)", re.S)
        rules.append((plain, hinted, real, twin_suffixes))
    out = []
    last = 0
    for m in _SNAP_ENTRY.finditer(snap):
        key = _snap_unescape(m.group(1))
        hit = None
        for plain, hinted, real, twin_suffixes in rules:
            hit = plain.fullmatch(key) or hinted.fullmatch(key)
            if hit:
                break
        if hit is None:
            continue
        entry = m.group(0)
        copies = []
        for suffix in [real, *twin_suffixes]:
            new_key = hit.group(1) + suffix + hit.group(2)
            copies.append(entry.replace(m.group(1), _snap_escape(new_key), 1))
        out.append(snap[last:m.start()])
        out.append("\n".join(c if c.endswith("\n") else c + "\n" for c in copies))
        last = m.end()
    out.append(snap[last:])
    return "".join(out)


def _template_title(text: str, d: _twins.Decl) -> bool:
    return text[d.name_end] == "`" and "${" in d.name


def _pattern(name: str) -> re.Pattern:
    """A regex of the ids a declaration's name makes (placeholders and expressions match anything)."""
    parts = []
    for part in name.split(SEP):
        if part.startswith(DYNAMIC):
            parts.append("(?:(?! > ).)+")  # one title, whatever the expression makes
            continue
        pieces = []
        last = 0
        for m in re.finditer(r"\$\{(?:[^{}]|\{[^{}]*\})*\}|" + PLACEHOLDER.pattern, part):
            pieces.append(re.escape(part[last:m.start()]))
            pieces.append("%" if m.group() == "%%" else ".*?")
            last = m.end()
        pieces.append(re.escape(part[last:]))
        parts.append("".join(pieces))
    return re.compile(re.escape(SEP).join(parts), re.S)


def _brackets(text: str, sig: list) -> dict:
    """{offset of an opening bracket: offset just past its closing one}."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list = []
    out = {}
    for kind, s, e in sig:
        if kind != "other":
            continue
        ch = text[s]
        if ch in "([{":
            stack.append((ch, s))
        elif ch in pairs:
            while stack and stack[-1][0] != pairs[ch]:
                stack.pop()  # an unbalanced bracket (broken code): skip it
            if stack:
                out[stack.pop()[1]] = e
    return out


def _next_sig_start(sig: list, at: dict, offset: int) -> int | None:
    """Start offset of the first significant token at or after ``offset``."""
    lo, hi = 0, len(sig)
    while lo < hi:
        mid = (lo + hi) // 2
        if sig[mid][1] < offset:
            lo = mid + 1
        else:
            hi = mid
    return sig[lo][1] if lo < len(sig) else None


def _is_title_call(text, sig, at, j, close) -> bool:
    """Whether the call opening at sig[j] is ``("title", fn...)`` rather than a table or condition."""
    first = sig[j + 1]
    after = at.get(_next_sig_start(sig, at, first[2]))
    return after is not None and text[sig[after][1]] == "," and sig[after][1] < close


def _arg_end(text, sig, at, closes, k, close) -> int:
    """End offset of the argument starting at sig[k] (before its comma or the call's closing paren)."""
    i = k
    while i < len(sig) and sig[i][1] < close - 1:
        s = sig[i][1]
        ch = text[s]
        if ch == "," and sig[i][0] == "other":
            return s
        if ch in "([{" and sig[i][0] == "other" and s in closes:
            i = at.get(_next_sig_start(sig, at, closes[s]), len(sig))
            continue
        i += 1
    return close - 1


JS = JsDialect()
