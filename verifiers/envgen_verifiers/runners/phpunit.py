"""PHPUnit (PHP; stdlib only, Python 3.9+).

The run: ``php PHPUNIT --configuration CONFIG --log-junit R/junit.xml --log-teamcity R/teamcity.log
--do-not-cache-result --no-coverage --colors=never R/EnvgenRunSuite.php``. PHPUnit 9 takes one test path
on its command line, so the kit writes a suite file outside the tree (``EnvgenRunSuite``, whose static
``suite()`` adds each run file, the canary's included, with PHPUnit's own ``TestSuite::addTestFile``);
the project's configuration (bootstrap, ``<php>`` settings, listeners) still applies, its
``<testsuites>`` do not (the run names its files). A file that does not load becomes an error entry and
the other files still run.

The process ends in the first shutdown function, which the kit registers before PHPUnit starts
(``auto_prepend_file``), so the tested code's shutdown functions and destructors never run after PHPUnit
wrote its reports (its exit code is lost with them: the reports say what failed).

Outcomes come from the JUnit log, checked against the TeamCity log PHPUnit writes as each test ends: a
test the JUnit log says passed but the TeamCity log says failed, or never finished, failed. The JUnit
log is written once, when the run ends (a process that exits early leaves none); then the TeamCity log
alone gives the tests that finished; with neither, the console's failure list (``1) Class::method``).
Those two are fallbacks (``teamcity``, ``phpunit-console``: ``tests.FALLBACK_SOURCES``) that say why a run
failed but never earn a verdict: an empty or missing JUnit log is what code that swaps PHPUnit's
listeners for its own leaves behind, and PHPUnit writes it in every run that ends.
Ids are PHPUnit's own: ``Fully\\Qualified\\ClassTest::testMethod``, data-provider cases
``...::testMethod with data set #0`` or ``... with data set "name"`` (the data values PHPUnit prints
after them on the console are dropped). Incomplete tests count as skipped; risky tests are errors, as
PHPUnit's JUnit log reports them. A configuration that stops the run at the first failure
(``stopOnFailure`` and its kin) runs from a copy without those settings, so every test reports.

Twin checks (``PhpDialect``): a test is a public method named ``test...`` or tagged ``@test`` / ``#[Test]``,
from its doc comment and attributes to its closing brace, named ``Namespace\\Class::method``; its twins
sit beside it in the same class. A test whose body has no literal takes its twins' changes from a copy of
its data provider.

Compatibility mode (``options["compat"]``: the PHPUnit major, 4-8, the project asks for; tests written for
it run on 9): an autoloader in the prepend file makes each ``PHPUnit_Framework_TestCase``-style name an
alias of its namespaced class (``PHPUnit\\Framework\\TestCase``) when something asks for it, and the test
files the run loads, with the PHP files of the test directories, get ``: void`` on the fixture methods that
PHPUnit 8 declared ``void`` (``setUp()``, ``tearDown()``, ``setUpBeforeClass()``...; PHP refuses to load an
override without it). Those files are infrastructure, restored before every run.

Options (the recipe's): ``phpunit`` (the PHPUnit script: ``vendor/bin/phpunit`` when the repository
vendors it, else Debian's ``/usr/bin/phpunit``), ``php`` (the interpreter), ``config`` (the
configuration file, tree-relative), ``bootstrap`` (the bootstrap file it names), ``test_dirs`` (the
directories its test suites and ``autoload-dev`` name).
"""

from __future__ import annotations

import os
import re

from .. import twins as _twins
from .base import ERROR, FAILED, FAILING, PASSED, SKIPPED, Runner, junit_cases, merge, read_text, short

CONFIG_FILES = ("phpunit.xml", "phpunit.xml.dist", "phpunit.dist.xml")
"""The names PHPUnit looks for in the working directory, in its order."""
INFRA_NAMES = frozenset({*CONFIG_FILES, ".phpunit.result.cache", ".phpunit.cache", "composer.json",
                         "composer.lock", "auth.json"})
"""Files that configure the run anywhere in the tree: PHPUnit's configuration and result cache,
Composer's manifest (its ``autoload-dev`` maps the tests; its scripts) and lock."""
TEST_DIRS = frozenset({"tests", "test", "Tests", "Test"})
"""Directory names whose subtree holds tests, their fixtures and bootstrap."""
SUITE_CLASS = "EnvgenRunSuite"
RISKY = "PHPUnit\\Framework\\RiskyTestError"

SUITE = r"""<?php
// Written by envgen's verifier kit for one run: the task's test files, loaded by PHPUnit itself.
final class EnvgenRunSuite
{
    public static function suite(): \PHPUnit\Framework\TestSuite
    {
        $suite = new \PHPUnit\Framework\TestSuite('envgen');
        foreach (%s as $file) {
            try {
                $suite->addTestFile($file);
            } catch (\Throwable $e) {
                fwrite(STDERR, 'envgen: ' . $file . ' did not load: ' . get_class($e) . ': ' . $e->getMessage() . "\n");
                $suite->addTest(new \PHPUnit\Framework\ErrorTestCase($file . ' did not load: ' . $e->getMessage()));
            }
        }
        return $suite;
    }
}
"""

PREPEND = r"""<?php
// Written by envgen's verifier kit for one run (auto_prepend_file: it runs before PHPUnit and before any
// code of the project). The first shutdown function: once PHPUnit has written its reports and exits (or
// the tested code exits), the process ends here, so no shutdown function or destructor the tested code
// registered can rewrite the reports afterwards.
%s
if (in_array(%s, $_SERVER['argv'] ?? [], true)) {
    register_shutdown_function(static function (): void {
        while (ob_get_level() > 0) {
            ob_end_flush();
        }
        if (function_exists('posix_kill')) {
            posix_kill(getmypid(), 9);
        }
    });
}
"""

COMPAT_AUTOLOAD = r"""// Compatibility mode: PHPUnit 4-7 names (PHPUnit_Framework_TestCase) as aliases of PHPUnit 9's classes.
spl_autoload_register(static function (string $name): void {
    if (strncmp($name, 'PHPUnit_', 8) !== 0) {
        return;
    }
    $target = str_replace('_', '\\', $name);
    if (class_exists($target) || interface_exists($target) || trait_exists($target)) {
        class_alias($target, $name);
    }
});"""
FIXTURE_METHODS = re.compile(
    r"(\b(?:public|protected)\s+(?:static\s+)?function\s+(?:setUp|tearDown|setUpBeforeClass|tearDownAfterClass|"
    r"assertPreConditions|assertPostConditions)\s*\(\s*\))(\s*)(?=\{)")
"""An old fixture method without a return type (``protected function setUp()``), followed by its body."""

CANARY = """<?php

final class {name} extends \\PHPUnit\\Framework\\TestCase
{{
    public function test{tok}(): void
    {{
        $this->fail('this test always fails; a run that reports it passing was taken over');
    }}
}}
"""


STOP = re.compile(r"""\s(?:stopOn\w+)\s*=\s*(?:"[^"]*"|'[^']*')""")
"""``stopOnFailure="true"`` and its kin on the configuration's root: a run that stops at the first failure
leaves the tests after it unreported, and at the base commit they would look like failures."""
MADE = "made.txt"
"""Files the run wrote into the tree, one path a line (in the report directory): removed after the run."""


def run_config(tree: str, config: str, report_dir: str) -> str:
    """The configuration the run uses: the project's own, or, when its root element stops the run at the
    first failure (``stopOn...``), a copy beside it (relative paths resolve alike) without those settings."""
    path = os.path.join(tree, config)
    text = read_text(path) or ""
    m = re.search(r"<phpunit\b[^>]*>", text)
    if not m or not STOP.search(m.group(0)):
        return path
    copy = os.path.join(os.path.dirname(path), f".envgen-{os.path.basename(report_dir)}.xml")
    with open(copy, "w", encoding="utf-8") as f:
        f.write(text[:m.start()] + STOP.sub("", m.group(0)) + text[m.end():])
    with open(os.path.join(report_dir, MADE), "a", encoding="utf-8") as f:
        f.write(copy + "\n")
    return copy


def void_fixtures(tree: str, files: list[str], test_dirs: list[str]) -> list[str]:
    """Compatibility mode: ``: void`` on the fixture methods of the run's test files and of the PHP files
    under the test directories (base test cases live there); returns the files changed. A regular
    expression, not a PHP parser: the kit has no PHP parser, and the pattern (a fixture method's name,
    empty parameters, then its body) does not occur elsewhere in test code."""
    paths = {os.path.join(tree, f) for f in files}
    for d in test_dirs:
        for root, dirs, names in os.walk(os.path.join(tree, d)):
            dirs[:] = [x for x in dirs if x != "vendor"]
            paths.update(os.path.join(root, n) for n in names if n.endswith(".php"))
    changed = []
    for path in sorted(paths):
        text = read_text(path)
        if not text or not FIXTURE_METHODS.search(text):
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(FIXTURE_METHODS.sub(lambda m: m.group(1) + ": void" + (m.group(2) or " "), text))
        changed.append(path)
    return changed


def php_string(text: str) -> str:
    """A single-quoted PHP string literal of ``text``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def config_file(tree: str, options: dict) -> str | None:
    """The configuration the run uses: the recipe's, else the first PHPUnit would find; None without one."""
    names = [options["config"]] if options.get("config") else list(CONFIG_FILES)
    return next((n for n in names if os.path.isfile(os.path.join(tree, n))), None)


_MODIFIERS = frozenset({"public", "protected", "private", "static", "final", "abstract"})
_TEST_TAG = re.compile(r"@test(?![\w-])")
_TEST_ATTR = re.compile(r"#\[(?:[^\]]*,)?\s*\\?(?:PHPUnit\\Framework\\Attributes\\)?Test\s*(?:[,\]])")
_PROVIDER = re.compile(r"@dataProvider\s+(\w+)(?![\w:])|"
                       r"#\[\s*\\?(?:PHPUnit\\Framework\\Attributes\\)?DataProvider\(\s*['\"](\w+)['\"]")
"""A test's data provider, a method of its own class (``@dataProvider rows``, ``#[DataProvider('rows')]``)."""
_HEREDOC = re.compile(r"<<<[ \t]*([\"']?)([A-Za-z_]\w*)\1[ \t]*\r?\n")
_DOC_LINES = ("/*", "*", "#[", "//", "#")
"""Lines above a method that belong to it: its doc comment, its attributes, comments."""


class PhpDialect(_twins.Dialect):
    """How PHPUnit tests are declared (``twins.Dialect``): public methods named ``test...`` of a class, or
    methods with a ``@test`` doc tag or a ``#[Test]`` attribute; a declaration starts at its doc comment
    and attributes and ends at its closing brace, and is named ``Namespace\\Class::method`` as PHPUnit's
    ids are (``Class::method with data set #0``: the data set dropped). Its data provider is shared by
    the twins (named in the doc comment, which the copies keep)."""

    line_comments = ("//", "#")
    quotes = ('"', "'")
    true_false = ("true", "false")
    expected_first = True  # assertSame(expected, actual)

    def methods(self, text: str) -> list[tuple[_twins.Decl, bool]]:
        """(declaration, is a test) of every method with a body of every class of ``text``."""
        toks = self.tokens(text)
        out: list = []
        namespace = ""
        i = 0
        n = len(toks)
        while i < n:
            kind, s, e = toks[i]
            word = text[s:e] if kind == "word" else ""
            if word == "namespace" and i + 1 < n and toks[i + 1][0] == "word" and not _after_arrow(text, toks, i):
                j, parts = i + 1, []
                while j < n and (toks[j][0] == "word" or text[toks[j][1]:toks[j][2]] == "\\"):
                    parts.append(text[toks[j][1]:toks[j][2]])
                    j += 1
                namespace = "".join(parts).strip("\\")
                i = j
                continue
            if word == "class" and i + 1 < n and toks[i + 1][0] == "word" and not _after_arrow(text, toks, i) \
                    and not (i > 0 and text[toks[i - 1][1]:toks[i - 1][2]] == "new"):
                name = text[toks[i + 1][1]:toks[i + 1][2]]
                j = i + 2
                while j < n and not (toks[j][0] == "other" and text[toks[j][1]] in "{;"):
                    j += 1
                if j >= n or text[toks[j][1]] != "{":
                    i = j
                    continue
                close = _close(text, toks, j)
                if close is None:
                    raise ValueError(f"class {name} does not close")
                cls = (namespace + "\\" + name) if namespace else name
                out += self._class_methods(text, toks, j, close, cls)
                while i < n and toks[i][1] < close:
                    i += 1
                continue
            i += 1
        return out

    def _class_methods(self, text: str, toks: list, open_i: int, close: int, cls: str) -> list:
        out = []
        depth = 0
        i = open_i
        n = len(toks)
        while i < n and toks[i][1] < close:
            kind, s, e = toks[i]
            ch = text[s] if kind == "other" else " "
            if ch in "{(":
                depth += 1
            elif ch in "})":
                depth -= 1
            elif kind == "word" and depth == 1 and text[s:e] == "function":
                j = i + 1
                if j < n and text[toks[j][1]:toks[j][2]] == "&":
                    j += 1
                if not (j < n and toks[j][0] == "word"):
                    i += 1
                    continue
                name_s, name_e = toks[j][1], toks[j][2]
                k = j + 1
                while k < n and toks[k][0] == "comment":
                    k += 1
                if not (k < n and text[toks[k][1]] == "("):
                    i += 1
                    continue
                params_end = _close(text, toks, k)
                if params_end is None:
                    raise ValueError(f"{cls}::{text[name_s:name_e]}: parameters do not close")
                k += 1
                while k < n and toks[k][1] < params_end:
                    k += 1
                while k < n and not (toks[k][0] == "other" and text[toks[k][1]] in "{;"):
                    k += 1
                if k >= n or text[toks[k][1]] == ";":  # abstract or interface method: no body
                    i = k
                    continue
                end = _close(text, toks, k)
                if end is None:
                    raise ValueError(f"{cls}::{text[name_s:name_e]}: body does not close")
                # the modifiers before ``function`` (words, comments and attributes between)
                m = i - 1
                mods = []
                first = s
                while m > open_i:
                    mk, ms, me = toks[m]
                    if mk == "word" and text[ms:me].lower() in _MODIFIERS:
                        mods.append(text[ms:me].lower())
                        first = ms
                    elif mk != "comment":
                        break
                    m -= 1
                start = _twins.leading_block(text, _twins.line_start(text, first), _DOC_LINES)
                head = text[start:s]
                method = text[name_s:name_e]
                public = not ({"private", "protected"} & set(mods))
                test = public and (method.startswith("test") or bool(_TEST_TAG.search(head))
                                   or bool(_TEST_ATTR.search(head)))
                out.append((_twins.Decl(f"{cls}::{method}", start, end, name_e), test))
                while i < n and toks[i][1] < end:
                    i += 1
                continue
            i += 1
        return out

    def declarations(self, text: str) -> list[_twins.Decl]:
        return [d for d, test in self.methods(text) if test]

    def tokens(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
        """The C-like scan without white space; a heredoc or nowdoc (``<<<EOT ... EOT``) one token, never
        a literal; an attribute (``#[...]``) kept out of comments; a double-quoted string that interpolates
        a variable (``"$x"``) not offered as a literal (its last character may be a variable's)."""
        end = len(text) if end is None else end
        out: list = []
        pos = start
        for m in _HEREDOC.finditer(text, start, end):
            if m.start() < pos:
                continue
            close = re.compile(r"^[ \t]*" + re.escape(m.group(2)) + r"(?![A-Za-z0-9_])", re.M).search(text, m.end())
            stop = min(close.end() if close else end, end)
            out += self._scan(text, pos, m.start())
            out.append(("heredoc", m.start(), stop))
            pos = stop
        return out + self._scan(text, pos, end)

    def _scan(self, text: str, start: int, end: int) -> list[tuple[str, int, int]]:
        out = []
        for kind, s, e in _twins.scan(text, start, end, self):
            if kind == "comment" and text.startswith("#[", s):
                out.append(("other", s, s + 1))
                out += self._scan(text, s + 1, e)
                continue
            if kind == "other" and text[s].isspace():
                continue
            if kind == "string" and text[s] == '"' and "$" in text[s:e]:
                kind = "interpolated"
            out.append((kind, s, e))
        return out

    def target(self, test_id: str, files: list[str], tree: str) -> tuple[str, str] | None:
        """(the run file declaring the id's class, ``Class::method``): files named after the class first."""
        if "::" not in test_id:
            return None
        cls, rest = test_id.split("::", 1)
        method = re.split(r"\s", rest, 1)[0]
        if not method:
            return None
        short_name = cls.rsplit("\\", 1)[-1]
        named = [f for f in files if f.rsplit("/", 1)[-1] == short_name + ".php"]
        decl = re.compile(r"\bclass\s+" + re.escape(short_name) + r"\b")
        for f in named + [f for f in files if f not in named]:
            text = read_text(os.path.join(tree, f)) if tree else None
            if text is None or not decl.search(text):
                continue
            try:
                names = {d.name.split("::", 1)[0] for d, _ in self.methods(text)}
            except ValueError:
                names = set()
            if cls in names or not names:
                return f, f"{cls}::{method}"
        if named:
            return max(named, key=lambda f: sum(1 for p in cls.split("\\")[:-1] if p in f.split("/"))), \
                f"{cls}::{method}"
        return None

    def copies(self, tree: str, path: str, text: str, names: list[str], state: _twins.Twins) -> None:
        """``twins.in_file_copies``, and for a test whose body has no literal to change but whose data come
        from a provider method of its class (``@dataProvider rows``, ``#[DataProvider('rows')]``): the real
        test and each twin get their own copy of the provider (``rows`` + their suffix, written after
        them), a twin's with one literal of its rows changed, the same one in every twin, to another value
        (a row's key is never changed: it names the data set), so that neither the tests nor their
        providers tell the real one from its twins."""
        methods = self.methods(text)
        decls = [d for d, test in methods if test]
        counts: dict = {}
        for d, _ in methods:
            counts[d.name] = counts.get(d.name, 0) + 1
        by_name = {d.name: d for d, _ in methods}
        edits = []
        for name in names:
            if state.budget <= 0:
                break
            dcl = next((x for x in decls if x.name == name), None)
            if dcl is None or counts[name] != 1:
                continue
            lits = self.literals(text, dcl)
            provider = None
            if not lits:
                cls, method = name.split("::", 1)
                head = text[dcl.start:dcl.name_end - len(method)]
                m = _PROVIDER.search(head)
                provider = by_name.get(f"{cls}::{m.group(1) or m.group(2)}") if m else None
                if provider is None or counts[provider.name] != 1:
                    continue
                lits = [x for x in self.literals(text, provider)
                        if not re.match(r"\s*=>", text[x.end:x.end + 20])]
            # every twin changes the same literal to another value (``twins.variants``)
            chosen = state.pick(path, name, lits)
            values = _twins.variants(chosen, self, state.per_test, state.rng) if chosen else []
            if not values:
                continue
            real = state.suffix(self)
            twin_suffixes = [state.suffix(self) for _ in values]
            blocks = []
            for suffix, value in [(real, None), *zip(twin_suffixes, values)]:
                lit = chosen if value is not None else None
                if provider is None:
                    blocks.append(_twins._copy(text, dcl, suffix, lit, value or ""))
                    continue
                p_name = provider.name.split("::", 1)[1]
                test = _twins._copy(text, dcl, suffix)
                ref = _PROVIDER.search(test[:dcl.name_end - dcl.start])
                at = ref.start(1) if ref.group(1) else ref.start(2)
                test = test[:at] + p_name + suffix + test[at + len(p_name):]
                blocks.append(test + "\n\n" + _twins._copy(text, provider, suffix, lit, value or ""))
            state.rng.shuffle(blocks)
            edits.append((dcl.start, dcl.end, "\n\n".join(blocks)))
            state.record(path, name, real, twin_suffixes)
        if not edits:
            return
        for s, e, new in sorted(edits, reverse=True):
            text = text[:s] + new + text[e:]
        state.out["files"][path] = text

    def changed(self, text: str, added: list, removed: list) -> list[str]:
        """``Dialect.changed``, and the tests that name a changed helper method of their class (a data
        provider in their doc comment or attributes, a method they call): a test patch that changes only
        a provider's data changes the tests it feeds."""
        names = set(super().changed(text, added, removed))
        lines = {no for no, t in added if t.strip()} | {no for no, ts in removed if any(t.strip() for t in ts)}
        methods = self.methods(text)
        helpers = set()
        for d, test in methods:
            if test:
                continue
            a = text.count("\n", 0, d.start) + 1
            b = text.count("\n", 0, d.end) + 1
            if any(a <= no <= b for no in lines):
                helpers.add(d.name.split("::", 1)[1])
        if helpers:
            words = re.compile(r"(?<![\w$])(?:" + "|".join(map(re.escape, sorted(helpers))) + r")\b")
            for d, test in methods:
                if test and (words.search(text, d.start, d.name_end - len(d.name.split("::", 1)[1]))
                             or words.search(text, d.name_end, d.end)):
                    names.add(d.name)
        return sorted(names)


def _close(text: str, toks: list, i: int) -> int | None:
    """Offset just past the bracket that closes the one at ``toks[i]`` (``twins.match_close`` on the
    file's tokens, scanned once)."""
    opener = text[toks[i][1]]
    closer = {"{": "}", "(": ")", "[": "]"}[opener]
    depth = 0
    for j in range(i, len(toks)):
        kind, s, e = toks[j]
        if kind != "other":
            continue
        if text[s] == opener:
            depth += 1
        elif text[s] == closer:
            depth -= 1
            if depth == 0:
                return e
    return None


def _after_arrow(text: str, toks: list, i: int) -> bool:
    """Whether the word at ``toks[i]`` follows ``->`` or ``::`` (a property or constant, not a keyword)."""
    s = toks[i][1]
    return text[max(0, s - 40):s].rstrip().endswith(("->", "::"))


PHP = PhpDialect()


class PHPUnit(Runner):
    framework = "phpunit"
    language = "php"
    config_names = INFRA_NAMES
    dialect = PHP

    def commands(self, tree: str, files: list[str], report_dir: str, options: dict) -> list[list[str]]:
        suite = os.path.join(report_dir, SUITE_CLASS + ".php")
        paths = "[" + ", ".join(php_string(os.path.join(tree, f)) for f in files) + "]"
        with open(suite, "w", encoding="utf-8") as f:
            f.write(SUITE % paths)
        prepend = os.path.join(report_dir, "envgen-prepend.php")
        compat = bool(options.get("compat"))
        with open(prepend, "w", encoding="utf-8") as f:
            f.write(PREPEND % (COMPAT_AUTOLOAD if compat else "", php_string(suite)))
        if compat:
            void_fixtures(tree, files, options.get("test_dirs") or [])
        script = options.get("phpunit") or "/usr/bin/phpunit"
        cmd = [options.get("php") or "php", "-d", f"auto_prepend_file={prepend}",
               script if os.path.isabs(script) else os.path.join(tree, script)]
        config = config_file(tree, options)
        if config:
            cmd += ["--configuration", run_config(tree, config, report_dir)]
        else:
            cmd.append("--no-configuration")
            if os.path.isfile(os.path.join(tree, "vendor", "autoload.php")):
                cmd += ["--bootstrap", os.path.join(tree, "vendor", "autoload.php")]
        cmd += ["--log-junit", os.path.join(report_dir, "junit.xml"),
                "--log-teamcity", os.path.join(report_dir, "teamcity.log"),
                "--do-not-cache-result", "--no-coverage", "--colors=never", suite]
        return [cmd]

    def env(self, env: dict, tree: str, options: dict) -> dict:
        return {**env, "XDEBUG_MODE": "off", "COMPOSER_NO_INTERACTION": "1"}

    def parse(self, report_dir: str, output: str, files: list[str], options: dict) -> tuple[dict, dict, str]:
        made = read_text(os.path.join(report_dir, MADE))
        for path in (made or "").splitlines():
            if path and os.path.lexists(path):
                os.unlink(path)
        junit = read_text(os.path.join(report_dir, "junit.xml"))
        teamcity = read_text(os.path.join(report_dir, "teamcity.log"))
        outcomes: dict = {}
        messages: dict = {}
        finished = parse_teamcity(teamcity, messages) if teamcity is not None else None
        if junit:
            try:
                cases = parse_junit(junit, messages)
            except ValueError:
                cases = None
            if cases is not None:
                for tid, outcome in cases.items():
                    merge(outcomes, messages, tid, outcome)
                    seen = (finished or {}).get(tid)
                    if seen is None:  # the JUnit log names a test that never finished: not this run's report
                        merge(outcomes, messages, tid, FAILED, "the test did not finish (no TeamCity record)")
                    elif seen in FAILING and outcomes[tid] not in FAILING:
                        merge(outcomes, messages, tid, seen)
                return outcomes, {k: v for k, v in messages.items() if k in outcomes}, "junit"
        if finished:
            return finished, {k: v for k, v in messages.items() if k in finished}, "teamcity"
        return parse_console(output, messages), messages, "phpunit-console"

    def infrastructure(self, path: str, options: dict) -> bool:
        parts = path.split("/")
        if parts[-1] in self.config_names or parts[0] == "vendor":
            return True
        if any(p in TEST_DIRS for p in parts[:-1]):
            return True
        if path == options.get("config") or path == options.get("bootstrap"):
            return True
        return any(path == d or path.startswith(d.rstrip("/") + "/") for d in options.get("test_dirs") or ())

    def canary(self, tree: str, files: list[str], tok: str, options: dict) -> tuple[str, str] | None:
        folder = files[-1].rsplit("/", 1)[0] if "/" in files[-1] else ""
        name = f"EnvgenCanary{tok}Test"
        return ("/".join(p for p in (folder, name + ".php") if p), CANARY.format(name=name, tok=tok))

    def test_path(self, test_id: str, files: list[str]) -> str:
        """The run file of ``Vendor\\Pkg\\FooTest::testX``: the one named ``FooTest.php`` (the deepest match of
        the class's namespace when several are)."""
        cls = test_id.split("::", 1)[0]
        parts = cls.split("\\")
        found = [f for f in files if f.rsplit("/", 1)[-1] == parts[-1] + ".php"]
        if not found:
            return ""
        return max(found, key=lambda f: sum(1 for p in parts[:-1] if p in f.split("/")))


def case_id(classname: str, name: str) -> str:
    """``Class::name`` from a JUnit case (PHPUnit writes the class dotted in ``classname``; PHP class names
    have no dots, so the backslashes come back exactly)."""
    return classname.replace(".", "\\") + "::" + name


def parse_junit(text: str, messages: dict) -> dict:
    """{Class::name: outcome} of PHPUnit's JUnit log (risky tests are errors there, incomplete ones skipped)."""
    out: dict = {}
    for c in junit_cases(text):
        if not c.classname:
            continue
        tid = case_id(c.classname, c.name)
        message = c.message
        if message.startswith(tid):  # PHPUnit's failure text starts with the test's name (and data)
            message = message.split(" | ", 1)[1] if " | " in message else ""
        merge(out, messages, tid, c.outcome, message)
    return out


_TC = re.compile(r"^##teamcity\[(\w+)((?:\s+\w+='(?:[^'|]|\|.)*')*)\s*\]\s*$")
_TC_ATTR = re.compile(r"(\w+)='((?:[^'|]|\|.)*)'")
_TC_ESC = {"n": "\n", "r": "\r", "'": "'", "|": "|", "[": "[", "]": "]"}


def _unescape(text: str) -> str:
    return re.sub(r"\|(0x[0-9a-fA-F]{4}|.)",
                  lambda m: chr(int(m.group(1)[2:], 16)) if m.group(1).startswith("0x") else
                  _TC_ESC.get(m.group(1), m.group(1)), text)


def parse_teamcity(text: str, messages: dict) -> dict:
    """{Class::name: outcome} of the tests a TeamCity log records as finished (a started test that never
    finished is left out: the run stopped inside it)."""
    out: dict = {}
    state: dict = {}
    ids: dict = {}
    for line in text.splitlines():
        m = _TC.match(line.strip())
        if not m:
            continue
        kind, attrs = m.group(1), {k: _unescape(v) for k, v in _TC_ATTR.findall(m.group(2))}
        name = attrs.get("name", "")
        if kind == "testStarted":
            hint = attrs.get("locationHint", "")
            where = hint.split("::\\", 1)[1] if "::\\" in hint else ""
            ids[name] = where if "::" in where else ""
            state[name] = PASSED
        elif kind == "testFailed" and name in state:
            state[name] = FAILED
            if ids.get(name):
                messages[ids[name]] = short(attrs.get("message", ""))
        elif kind == "testIgnored" and name in state and state[name] == PASSED:
            state[name] = SKIPPED
        elif kind == "testFinished" and name in state:
            tid = ids.pop(name, "")
            if tid:
                merge(out, messages, tid, state[name])
            state.pop(name, None)
    return out


_SECTION = re.compile(r"^There (?:was|were) \d+ (error|failure|risky test|warning|skipped test|incomplete test)s?:$")
_ITEM = re.compile(r"^\d+\) ((?:[A-Za-z_\x80-\uffff][\w\x80-\uffff]*\\)*[A-Za-z_\x80-\uffff][\w\x80-\uffff]*)"
                   r"::(\S+(?: with data set (?:#\d+|\".*\"))?)(?: \(.*\))?$")


def parse_console(text: str, messages: dict) -> dict:
    """{Class::name: outcome} of the tests PHPUnit's console lists (errors, failures, risky tests as
    errors, skipped and incomplete ones): the console never names a passing test."""
    out: dict = {}
    kind = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        m = _SECTION.match(s)
        if m:
            kind = m.group(1)
            continue
        m = _ITEM.match(s) if kind else None
        if m:
            outcome = {"error": ERROR, "failure": FAILED, "risky test": ERROR, "skipped test": SKIPPED,
                       "incomplete test": SKIPPED}.get(kind)
            if outcome:
                nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
                merge(out, messages, f"{m.group(1)}::{m.group(2)}", outcome, nxt)
    return out
