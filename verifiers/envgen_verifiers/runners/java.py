"""Java test runners: Maven (Surefire/Failsafe reports) and Gradle (its JUnit XML), for JUnit 4/5 and TestNG.

Test ids are ``com.acme.FooTest.method`` (the report's ``classname`` and ``name``), nested classes as
``com.acme.FooTest$Inner.method`` and parameterised cases as the runner prints them
(``method[1]``, ``method{int}[1]``): stable across runs.

Maven runs offline (``-o``) against a local repository (``options["repo"]``: Debian's
``/usr/share/maven-repo`` by default, or the one the image's install step filled through a mirror),
only the task's test classes (``-Dtest``) with every switch that would skip them, ignore them or
rerun failures pinned on the command line. Surefire writes each report under a name carrying this
run's random suffix (``-Dsurefire.reportNameSuffix``), and the reports are copied out of the tree
the moment Maven exits: a report file the submission wrote, or that something it left running writes
later, is not read. What configures the run is infrastructure (restored to base + test patch before
it): build files (``pom.xml``, ``build.gradle*``, ``settings.gradle*``, ``gradle.properties``, the
wrapper), ``.mvn/``, everything under ``src/test`` and ``src/it`` of any module (test sources,
resources, ``junit-platform.properties``), JUnit/TestNG service registrations and configuration
files anywhere (a ``junit-platform.properties`` or an extension registered from main resources is on
the test class path too), and sources that would shadow a test library's classes
(``org/junit/...``, ``org/hamcrest/...``: the project's classes come first on the test class path).
The canary is a test class of the framework the run files use, in the first run file's package.
"""

from __future__ import annotations

import os
import re
import sys

from ..twins import Decl, Dialect, leading_block, line_start, match_close, scan
from .base import ERROR, FAILED, PASSED, SKIPPED, Runner, junit_cases, merge, read_reports

DEFAULT_REPO = "/usr/share/maven-repo"
"""Debian's Maven repository (packages maven, junit4, junit5, testng, libsurefire-java, ...)."""
BUILD_NAMES = frozenset({
    "pom.xml", "build.gradle", "build.gradle.kts", "settings.gradle", "settings.gradle.kts", "gradle.properties",
    "gradlew", "gradlew.bat", "junit-platform.properties", "testng.xml", "surefire.properties",
    "allure.properties", "cucumber.properties"})
INFRA_DIRS = (".mvn", "gradle", "buildSrc", ".gradle")
"""Directory names whose subtree configures the build: Maven's ``.mvn/`` (maven.config, jvm.config,
extensions.xml), the Gradle wrapper and version catalogues, ``buildSrc`` plugins, Gradle's caches."""
TEST_SOURCE_SETS = ("test", "it", "integrationTest", "testFixtures")
"""``src/<set>/`` directories of test code and resources."""
SHADOW_PACKAGES = ("org/junit/", "junit/framework/", "junit/extensions/", "org/testng/", "org/hamcrest/",
                   "org/opentest4j/", "org/apiguardian/", "org/apache/maven/surefire/", "org/assertj/",
                   "org/mockito/")
"""Packages of test libraries: a class of the project in one of them would shadow the library's."""
SERVICE_PREFIXES = ("org.junit.", "org.testng.", "org.apache.maven.surefire.")
PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.M)


def _module_of(tree: str, path: str) -> str:
    """The directory (tree-relative, ``""`` for the root) of the nearest build file above ``path``."""
    parts = path.split("/")[:-1]
    while parts:
        d = "/".join(parts)
        if any(os.path.isfile(os.path.join(tree, d, n)) for n in ("pom.xml", "build.gradle", "build.gradle.kts")):
            return d
        parts.pop()
    return ""


def class_of(tree: str, path: str) -> str:
    """The fully qualified class a test source file declares: its ``package`` line and file name; for a file
    not on disk, the path after ``src/<set>/java/``."""
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    try:
        with open(os.path.join(tree, path), encoding="utf-8", errors="replace") as f:
            m = PACKAGE.search(f.read(20000))
        return f"{m.group(1)}.{stem}" if m else stem  # no package line: the default package
    except OSError:
        pass
    m = re.search(r"(?:^|/)src/[^/]+/(?:java|kotlin|groovy|scala)/(.+)\.\w+$", path)
    return m.group(1).replace("/", ".") if m else stem


def framework_of(tree: str, files: list[str], options: dict) -> str:
    """``junit5``, ``junit4`` or ``testng``: what the run files import (the recipe's guess otherwise)."""
    for p in files:
        try:
            with open(os.path.join(tree, p), encoding="utf-8", errors="replace") as f:
                text = f.read(50000)
        except OSError:
            continue
        if "org.junit.jupiter" in text:
            return "junit5"
        if "org.testng" in text:
            return "testng"
        if re.search(r"\borg\.junit\.(Test|Assert|runner|Before|After|Ignore|Rule|\*)", text) or "junit.framework" in text:
            return "junit4"
    return str(options.get("junit") or "junit4")


CANARIES = {
    "junit5": ("import org.junit.jupiter.api.Test;\n\n"
               "public class {name} {{\n    @Test\n    public void canary() {{\n"
               "        org.junit.jupiter.api.Assertions.fail(\"{msg}\");\n    }}\n}}\n"),
    "junit4": ("import org.junit.Test;\n\n"
               "public class {name} {{\n    @Test\n    public void canary() {{\n"
               "        org.junit.Assert.fail(\"{msg}\");\n    }}\n}}\n"),
    "testng": ("import org.testng.annotations.Test;\n\n"
               "public class {name} {{\n    @Test\n    public void canary() {{\n"
               "        org.testng.Assert.fail(\"{msg}\");\n    }}\n}}\n"),
}
CANARY_MESSAGE = "this test always fails; a run that reports it passing was taken over"

RUN_AND_COLLECT = r"""
import os, re, shutil, subprocess, sys
tree, dest, kind, suffix = sys.argv[1:5]
proc = subprocess.Popen(sys.argv[6:], cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
first = None
failed = ""
for line in proc.stdout:
    sys.stdout.buffer.write(line)
    text = line.decode("utf-8", "replace").strip()
    if not failed and kind == "maven" and re.match(r"^\[ERROR\] (Tests run: .*(Failures: [1-9]|Errors: [1-9])|There (are|were) test failures|.*forked VM)", text):
        failed = text
    if first is None and re.match(r"^(\[ERROR\]|FAILURE:|> |e: )", text) and \
            not re.match(r"^\[ERROR\]\s*(COMPILATION ERROR\s*:?|-> \[Help.*|Re-run Maven.*|To see the full.*|)\s*$", text):
        first = text.replace(tree.rstrip("/") + "/", "")
rc = proc.wait()
sys.stdout.flush()
n = 0
for root, dirs, names in os.walk(tree):
    dirs[:] = sorted(d for d in dirs if d != ".git" and not os.path.islink(os.path.join(root, d)))
    rel = os.path.relpath(root, tree).replace(os.sep, "/")
    if kind == "maven":
        if os.path.basename(root) not in ("surefire-reports", "failsafe-reports"):
            continue
        want = lambda name: name.startswith("TEST-") and name.endswith("-" + suffix + ".xml")
    else:
        if "/build/test-results/" not in "/" + rel + "/":
            continue
        want = lambda name: name.startswith("TEST-") and name.endswith(".xml")
    for name in sorted(names):
        p = os.path.join(root, name)
        if want(name) and os.path.isfile(p) and not os.path.islink(p):
            n += 1
            shutil.copyfile(p, os.path.join(dest, "%04d-%s" % (n, name)))
print("envgen: %d report file(s)" % n)
if rc != 0:
    print("envgen: the build failed (exit %d): %s" % (rc, first or "no error line"))
elif failed:
    print("envgen: tests failed (%s): exit 1" % failed)
    rc = 1
sys.exit(rc)
"""
"""Runs the build, then copies this run's reports (Maven: named with its suffix) out of the tree at once,
whatever the build's exit code; exits with it, or with 1 where Maven, which runs with test failures ignored
(so that every module's tests run), logged failing tests: the exit status says whether tests failed."""


class Maven(Runner):
    framework = "maven"
    language = "java"

    def suffix(self, report_dir: str) -> str:
        """This run's report name suffix: the random name of its report directory."""
        return re.sub(r"[^A-Za-z0-9]", "", os.path.basename(report_dir.rstrip("/"))) or "envgen"

    def modules(self, tree: str, files: list[str]) -> list[str]:
        return sorted({_module_of(tree, p) for p in files})

    def commands(self, tree: str, files: list[str], report_dir: str, options: dict) -> list[list[str]]:
        classes = []
        for p in files:
            c = class_of(tree, p)
            classes += [c, c + "$*"]
        mods = self.modules(tree, files)
        repo = options.get("repo") or DEFAULT_REPO
        cmd = ["mvn", "-o", "-B", "-ntp", f"-Dmaven.repo.local={repo}"]
        if options.get("settings"):
            cmd += ["-s", options["settings"]]
        if mods and mods != [""]:
            cmd += ["-pl", ",".join(m or "." for m in mods), "-am"]
        cmd += ["test" if options.get("phase") != "verify" else "verify", "-Dtest=" + ",".join(dict.fromkeys(classes)),
                "-DfailIfNoTests=false", "-Dsurefire.failIfNoSpecifiedTests=false", "-Dmaven.test.failure.ignore=true",
                "-DskipTests=false", "-Dmaven.test.skip=false", "-Dmaven.test.skip.exec=false",
                "-Dsurefire.rerunFailingTestsCount=0", "-Dsurefire.skipAfterFailureCount=0",
                f"-Dsurefire.reportNameSuffix={self.suffix(report_dir)}", "-Dstyle.color=never",
                *[str(a) for a in options.get("args") or []]]
        return [wrap(tree, report_dir, "maven", self.suffix(report_dir), cmd)]

    def parse(self, report_dir: str, output: str, files: list[str], options: dict) -> tuple[dict, dict, str]:
        outcomes: dict = {}
        messages: dict = {}
        tag = f"({self.suffix(report_dir)})"
        printed = console_failures(output)
        for text in read_reports(report_dir):
            try:
                cases = junit_cases(text)
            except ValueError:
                continue
            by_suite: dict = {}
            for c in cases:
                by_suite.setdefault(c.suite[:-len(tag)] if c.suite.endswith(tag) else c.suite, []).append(c)
            for suite, group in by_suite.items():
                # Surefire's own process printed how many of the class's tests failed; a report that
                # says fewer was rewritten after the fact: none of its tests counts as passing
                forged = sum(c.outcome in (FAILED, ERROR) for c in group) < printed.get(suite, 0)
                for c in group:
                    cls = c.classname[:-len(tag)] if c.classname.endswith(tag) else c.classname
                    name = c.name[:-len(tag)] if c.name.endswith(tag) else c.name
                    if not name:
                        continue
                    tid = f"{cls}.{name}" if cls else name
                    if forged:
                        merge(outcomes, messages, tid, ERROR, f"the report of {suite} says fewer failures than "
                                                              "Surefire printed: it was rewritten")
                    else:
                        merge(outcomes, messages, tid, c.outcome, c.message)
        console = parse_console(output)
        crashed = FORK_DIED.search(output)
        if outcomes and crashed:
            # the forked JVM died before it said goodbye: what its reports say is what it left on disk
            for tid in outcomes:
                outcomes[tid], messages[tid] = ERROR, f"the test JVM died ({crashed.group(0)}): its reports prove nothing"
        if outcomes:
            # and a test it printed as failing is failing, whatever a report says
            for tid, outcome in console.items():
                if outcomes.get(tid) in (FAILED, ERROR):
                    continue
                cls, _, name = tid.rpartition(".")
                if tid not in outcomes and any(k.startswith(cls + "$") and k.endswith("." + name) and
                                               v in (FAILED, ERROR) for k, v in outcomes.items()):
                    continue  # a nested class's failure, printed under its outer class
                merge(outcomes, messages, tid, outcome, "Surefire printed this test as failing")
            return outcomes, messages, "junit"
        return console, {}, "console"

    def env(self, env: dict, tree: str, options: dict) -> dict:
        out = dict(env)
        home = out.get("HOME", "/tmp")
        # Maven's user configuration lives in the private HOME; nothing from the caller's MAVEN_OPTS/JAVA_*
        # (C1 compilation only: a build's JVM is short-lived)
        out.update({"MAVEN_OPTS": f"-Duser.home={home} -Djava.io.tmpdir={out.get('TMPDIR', '/tmp')} "
                                  "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC", "MAVEN_SKIP_RC": "1",
                    "GRADLE_USER_HOME": os.path.join(home, ".gradle")})
        java_home = options.get("java_home")
        if java_home:
            out["JAVA_HOME"] = java_home
        return out

    def infrastructure(self, path: str, options: dict) -> bool:
        return java_infrastructure(path)

    def canary(self, tree: str, files: list[str], tok: str, options: dict) -> tuple[str, str] | None:
        first = files[0]
        kind = framework_of(tree, files, options)
        name = f"EnvgenCanary{tok}Test"
        cls = class_of(tree, first)
        pkg = cls.rsplit(".", 1)[0] if "." in cls else ""
        head = f"package {pkg};\n\n" if pkg else ""
        body = CANARIES[kind].format(name=name, msg=CANARY_MESSAGE)
        return first.rsplit("/", 1)[0] + f"/{name}.java" if "/" in first else f"{name}.java", head + body

    def test_path(self, test_id: str, files: list[str]) -> str:
        return file_of(test_id, files)


FORK_DIED = re.compile(r"The forked VM terminated without properly saying goodbye|There was an error in the forked "
                       r"process|ExecutionException[^\n]*forked|The forked VM terminated|Crashed tests:")
"""What Maven logs when a test JVM it forked died (``System.exit``, ``halt``, a crash) instead of finishing."""
SUMMARY = re.compile(r"Tests run: (\d+), Failures: (\d+), Errors: (\d+), Skipped: (\d+).*? - in ([\w.$]+)")


def console_failures(output: str) -> dict:
    """{class: the most failures + errors any of Surefire's ``Tests run: ... - in Class`` lines gave it}."""
    out: dict = {}
    for m in SUMMARY.finditer(output):
        out[m.group(5)] = max(out.get(m.group(5), 0), int(m.group(2)) + int(m.group(3)))
    return out


def parse_console(output: str) -> dict:
    """Failing tests Surefire printed (``name(Class)  Time elapsed: ... <<< FAILURE!`` for JUnit 4,
    ``name  Time elapsed`` after a ``Tests run: ... - in Class`` line for JUnit 5): a crash's fallback,
    which names failures only (a passing test is never printed one by one)."""
    out: dict = {}
    current = ""
    for line in output.splitlines():
        m = re.search(r"Tests run:.*? - in ([\w.$]+)", line)
        if m:
            current = m.group(1)
            continue
        m = re.match(r"^\[?(?:ERROR)?\]?\s*(\S+?)(?:\(([\w.$]+)\))?\s+Time elapsed:.*<<<\s*(FAILURE|ERROR)!", line)
        if m:
            cls = m.group(2) or current
            name = m.group(1)
            if cls and name.startswith(cls + "."):
                name = name[len(cls) + 1:]
            out[f"{cls}.{name}" if cls else name] = FAILED if m.group(3) == "FAILURE" else ERROR
    return out


def file_of(test_id: str, files: list[str]) -> str:
    """The run file declaring the test's (outer) class: the one whose path ends with its package path."""
    head = re.split(r"[\[({]", test_id, maxsplit=1)[0]
    cls = head.rsplit(".", 1)[0].split("$", 1)[0] if "." in head else head
    tail = "/" + cls.replace(".", "/")
    for f in sorted(files, key=len, reverse=True):
        stem = "/" + f.rsplit(".", 1)[0]
        if stem.endswith(tail):
            return f
    simple = tail.rsplit("/", 1)[-1]
    for f in files:
        if f.rsplit("/", 1)[-1].rsplit(".", 1)[0] == simple.lstrip("/"):
            return f
    return ""


def java_infrastructure(path: str) -> bool:
    """Whether ``path`` configures a JVM project's test run (see the module's docstring)."""
    parts = path.split("/")
    name = parts[-1]
    if name in BUILD_NAMES or name.endswith((".gradle", ".gradle.kts")):
        return True
    if any(p in INFRA_DIRS for p in parts[:-1]):
        return True
    for i in range(len(parts) - 2):
        if parts[i] == "src" and parts[i + 1] in TEST_SOURCE_SETS:
            return True
    if "META-INF" in parts and name.startswith(SERVICE_PREFIXES):
        return True
    slashed = "/" + path
    return any(f"/{pkg}" in slashed for pkg in SHADOW_PACKAGES)


class Gradle(Maven):
    """Gradle's ``test`` task, offline (``gradle``, or the project's ``./gradlew`` when ``options["wrapper"]``
    says its distribution is in the image), with the task's classes as ``--tests`` filters and an init script
    that points every project's repositories at the offline one (``options["repo"]``) and runs its test
    tasks (a failing test fails the build, the other tasks run on: ``--continue``); reports from ``build/test-results``, copied out the moment Gradle exits.
    A test Gradle printed as FAILED counts as failed whatever the report says."""

    framework = "gradle"

    def commands(self, tree: str, files: list[str], report_dir: str, options: dict) -> list[list[str]]:
        wrapper = options.get("wrapper") and os.path.isfile(os.path.join(tree, "gradlew"))
        cmd = ["sh", "./gradlew"] if wrapper else [options.get("gradle") or "gradle"]
        mods = self.modules(tree, files)
        tasks = [f":{m.replace('/', ':')}:test" if m else "test" for m in mods] or ["test"]
        init = os.path.join(report_dir, "envgen-init.gradle")
        with open(init, "w", encoding="utf-8") as f:
            f.write(GRADLE_INIT.replace("REPO", "file://" + (options.get("repo") or DEFAULT_REPO)))
        cmd += ["--offline", "--no-daemon", "--console=plain", "--continue", "--init-script", init, *tasks]
        for p in files:
            cmd += ["--tests", class_of(tree, p)]
        cmd += [str(a) for a in options.get("args") or []]
        return [wrap(tree, report_dir, "gradle", "", cmd)]

    def parse(self, report_dir: str, output: str, files: list[str], options: dict) -> tuple[dict, dict, str]:
        outcomes: dict = {}
        messages: dict = {}
        for text in read_reports(report_dir):
            try:
                cases = junit_cases(text)
            except ValueError:
                continue
            for c in cases:
                if c.name:
                    merge(outcomes, messages, f"{c.classname}.{c.name}" if c.classname else c.name, c.outcome,
                          c.message)
        printed = {}
        for m in re.finditer(r"^([\w.$]+) > (.+?) (FAILED|PASSED|SKIPPED)\s*$", output, re.M):
            printed[f"{m.group(1)}.{m.group(2)}"] = {"FAILED": FAILED, "PASSED": PASSED, "SKIPPED": SKIPPED}[m.group(3)]
        if outcomes:
            # Gradle's own process printed these failures: a report that says otherwise was rewritten
            for tid, outcome in printed.items():
                if outcome == FAILED and outcomes.get(tid) not in (FAILED, ERROR):
                    merge(outcomes, messages, tid, FAILED, "Gradle printed this test as failed")
            # and it prints every failure it saw (the test worker's output never reaches its console): a
            # failure it did not print is in a report it did not write; that test was not reported
            for tid in [t for t, o in outcomes.items() if o in (FAILED, ERROR) and printed.get(t) != FAILED]:
                del outcomes[tid]
                messages.pop(tid, None)
            return outcomes, messages, "junit"
        return printed, {}, "console"


GRADLE_INIT = """\
// envgen: every project resolves from the offline repository, whatever its build script names
allprojects {
    buildscript { repositories { maven { url 'REPO' } } }
    afterEvaluate { project ->
        project.repositories.clear()
        project.repositories.maven { url 'REPO' }
        project.tasks.withType(Test) {
            ignoreFailures = false; enabled = true; onlyIf { true }
            testLogging { events 'failed' }
        }
    }
}
"""
"""Gradle init script of a run: repositories replaced by the offline one, test tasks enabled and run, and a
failing test fails its task (``--continue`` runs the other projects' tests all the same), so Gradle's exit
status says whether tests failed, and Gradle prints every failing test (the runner reads those lines)."""


def wrap(tree: str, report_dir: str, kind: str, suffix: str, cmd: list[str]) -> list[str]:
    """``cmd`` run by ``RUN_AND_COLLECT`` (the kit's interpreter, isolated)."""
    return [sys.executable, "-I", "-S", "-c", RUN_AND_COLLECT, tree, report_dir, kind, suffix, "--", *cmd]




# ---------------------------------------------------------------- test declarations (twin checks)


TEST_ANNOTATIONS = frozenset({"Test", "ParameterizedTest", "RepeatedTest", "TestFactory", "TestTemplate", "Theory",
                              "Property", "Example", "CartesianTest", "RetryingTest"})
"""Annotations that make a method a test: JUnit 4 and 5 (``@Test``, ``@ParameterizedTest``, ...), TestNG
(``@Test``), junit-quickcheck/jqwik (``@Property``, ``@Example``), junit-pioneer."""
LIFECYCLE = frozenset({"Before", "BeforeEach", "BeforeClass", "BeforeAll", "BeforeMethod", "BeforeTest", "After",
                       "AfterEach", "AfterClass", "AfterAll", "AfterMethod", "AfterTest"})
"""Annotations of set-up and tear-down methods: a change there changes every test of their class."""
TYPE_WORDS = frozenset({"class", "interface", "enum", "record"})
NOT_TYPES = frozenset({"return", "new", "throw", "else", "case", "package", "import", "yield", "assert", "goto"})
MEMBER = re.compile(
    r"^\s*(?:@[\w.]+(?:\([^)]*\))?\s+)*(?:(?:public|protected|private|static|final|abstract|synchronized|default|"
    r"transient|volatile|native|strictfp)\s+)*(?:<[^>]*>\s+)?([\w$.]+)(?:<.*>)?(?:\[\])*\s+([A-Za-z_$][\w$]*)\s*"
    r"(?:=(?!=)|;|\(|,)")
"""A field or method declaration outside the tests: its type word and its name."""


CSV_TABLE = re.compile(r"@(?:[\w.]+\.)?CsvSource\s*\(")
CSV_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


class JavaDialect(Dialect):
    """JUnit 4/5 and TestNG test methods: a method annotated ``@Test`` (``@ParameterizedTest``, ...), from its
    first annotation (and the javadoc or comments right above) to the closing brace of its body; JUnit 3
    ``public void testX()`` methods of a ``TestCase``; and public methods of a class TestNG's class-level
    ``@Test`` annotates. Declaration names are ``Outer$Inner.method`` (the report's class, without its
    package, and the method); ids ``com.acme.FooTest$Inner.method[1]`` (parameters dropped) map to the run
    file of ``com.acme.FooTest``."""

    line_comments = ("//",)
    block_comments = (("/*", "*/"),)
    quotes = ('"', "'")
    true_false = ("true", "false")
    expected_first = True  # assertEquals(expected, actual)

    def tokens(self, text: str, start: int = 0, end: int | None = None) -> list[tuple[str, int, int]]:
        """``scan``'s tokens, with no string that has escapes (a bumped ``'\\n'`` does not compile) and no
        number of ten digits or more (one more could overflow an ``int``); the numbers of a ``@CsvSource``
        table's rows are numbers (its rows are strings)."""
        out = []
        tables = [(m.end() - 1, match_close(text, m.end() - 1, self) or m.end())
                  for m in CSV_TABLE.finditer(text, 0, len(text) if end is None else end)]
        for kind, s, e in scan(text, start, len(text) if end is None else end, self):
            if kind == "string" and ("\\" in text[s:e] or text[s:e].startswith('"""') or text[e - 1] != text[s]):
                kind = "other"  # escapes, text blocks, unterminated: no twin edits them
            elif kind == "number" and len(text[s:e]) >= 10:
                kind = "other"
            elif kind == "string" and any(a < s < b for a, b in tables):
                out += [("number", s + 1 + m.start(), s + 1 + m.end()) for m in CSV_NUMBER.finditer(text[s + 1:e - 1])
                        if len(m.group()) < 10]
                continue
            out.append((kind, s, e))
        return out

    def declarations(self, text: str) -> list[Decl]:
        return [d for d, _ in self._members(text) if d is not None]

    def _members(self, text: str) -> list[tuple[Decl | None, dict]]:
        """(test declaration or None, info) of every method and class member with a body: info has
        ``chain`` (the enclosing classes), ``name``, ``annotations``, ``start``, ``end``, ``kind`` (method,
        class, other)."""
        toks = [t for t in scan(text, 0, len(text), self) if t[0] != "comment" and not text[t[1]].isspace()]
        out: list = []

        def body(i: int, chain: tuple, testng_all: bool, junit3: bool) -> int:
            """Members of a class body starting after its ``{`` at token ``i``; the index past its ``}``."""
            head = i
            paren = 0
            while i < len(toks):
                kind, s, e = toks[i]
                ch = text[s] if kind == "other" else " "
                if ch in "([":
                    paren += 1
                elif ch in ")]":
                    paren -= 1
                elif paren == 0 and ch == ";":
                    if head < i:  # a field (or an abstract method): what it names
                        words = [text[a:b] for k, a, b in toks[head:i] if k == "word"]
                        eq = next((k for k in range(head, i) if text[toks[k][1]] == "=" and toks[k][0] == "other"), i)
                        name = next((text[a:b] for k, a, b in reversed(toks[head:eq]) if k == "word"), "")
                        if words:
                            out.append((None, {"chain": chain, "annotations": [], "start": toks[head][1], "end": e,
                                               "header": text[toks[head][1]:e], "kind": "field", "name": name,
                                               "name_end": 0}))
                    head = i + 1
                elif paren == 0 and ch == "}":
                    return i + 1
                elif paren == 0 and ch == "{":
                    close = match_close(text, s, self)
                    if close is None:
                        return len(toks)
                    j = i + 1
                    while j < len(toks) and toks[j][1] < close:
                        j += 1
                    info = self._member(text, toks, head, i, chain, close)
                    if info["kind"] == "class":
                        body(i + 1, (*chain, info["name"]), "Test" in info["annotations"],
                             bool(re.search(r"\bextends\s+(?:[\w.]+\.)?TestCase\b", info["header"])))
                    out.append((self._decl(text, info, testng_all, junit3), info))
                    i = j
                    head = i
                    paren = 0
                    continue
                i += 1
            return i

        body(0, (), False, False)
        return out

    def _member(self, text: str, toks: list, head: int, brace: int, chain: tuple, close: int) -> dict:
        """What the tokens ``head..brace`` (up to a ``{`` whose body closes at ``close``) declare."""
        words, annotations = [], []
        paren = 0
        name_tok = None
        assigns = False
        field = ""
        for k in range(head, brace):
            kind, s, e = toks[k]
            t = text[s:e]
            if kind == "other" and t in "([":
                if t == "(" and paren == 0 and name_tok is None and k > head and toks[k - 1][0] == "word" \
                        and not (k - 2 >= head and text[toks[k - 2][1]:toks[k - 2][2]] == "@") \
                        and not (k - 2 >= head and text[toks[k - 2][1]:toks[k - 2][2]] == "." and
                                 self._annotated_dot(text, toks, head, k - 2)):
                    name_tok = toks[k - 1]
                paren += 1
            elif kind == "other" and t in ")]":
                paren -= 1
            elif paren == 0 and t == "=":
                if not assigns and words:
                    field = words[-1][0]
                assigns = True  # a field's initializer (an array, a lambda, an anonymous class)
            elif paren == 0 and kind == "word":
                if k > head and text[toks[k - 1][1]:toks[k - 1][2]] == "@" and t != "interface":
                    annotations.append(t)
                elif k > head and text[toks[k - 1][1]:toks[k - 1][2]] == "." and annotations and \
                        self._annotated_dot(text, toks, head, k - 1):
                    annotations[-1] = t  # @org.junit.Test: the last part names it
                else:
                    words.append((t, s, e, k))
        start = toks[head][1] if head < brace else toks[brace][1]
        header = text[start:toks[brace][1]]
        kw = next((w for w in words if w[0] in TYPE_WORDS and not (w[3] > head and
                                                                    text[toks[w[3] - 1][1]] == ".")), None)
        info = {"chain": chain, "annotations": annotations, "start": start, "end": close, "header": header,
                "kind": "other", "name": "", "name_end": 0, "brace": toks[brace][1]}
        if kw is not None:
            nxt = next((w for w in words if w[3] > kw[3]), None)
            if nxt is not None:
                info.update(kind="class", name=nxt[0], name_end=nxt[2])
            return info
        if assigns:
            info["name"] = field
        elif name_tok is not None:
            name = text[name_tok[1]:name_tok[2]]
            if name not in NOT_TYPES and name not in ("if", "for", "while", "switch", "catch", "synchronized",
                                                     "try", "do", "else"):
                info.update(kind="method", name=name, name_end=name_tok[2],
                            params=text[name_tok[2]:toks[brace][1]])
        return info

    @staticmethod
    def _annotated_dot(text: str, toks: list, head: int, dot: int) -> bool:
        """Whether the ``.`` at token ``dot`` is inside a qualified annotation name (``@org.junit.Test``)."""
        k = dot
        while k - 1 >= head and toks[k - 1][0] == "word" and k - 2 >= head:
            p = text[toks[k - 2][1]:toks[k - 2][2]]
            if p == "@":
                return True
            if p != ".":
                return False
            k -= 2
        return False

    def _decl(self, text: str, info: dict, testng_all: bool, junit3: bool) -> Decl | None:
        if info["kind"] != "method" or not info["chain"]:
            return None
        ann = set(info["annotations"])
        header = info["header"]
        is_test = bool(ann & TEST_ANNOTATIONS)
        if not is_test and not ann & LIFECYCLE and "static" not in header.split():
            public = re.search(r"\bpublic\b", header) is not None
            plain = re.search(r"\bvoid\s+" + re.escape(info["name"]) + r"\s*\(\s*\)", header) is not None
            is_test = (testng_all and public and "DataProvider" not in ann and "Factory" not in ann
                       and "void" in header.split()) or (junit3 and public and plain
                                                          and info["name"].startswith("test"))
        if not is_test:
            return None
        start = leading_block(text, line_start(text, info["start"]), ("/**", "/*", "*", "//"))
        return Decl("$".join(info["chain"]) + "." + info["name"], start, info["end"], info["name_end"])

    def target(self, test_id: str, files: list[str], tree: str = "") -> tuple[str, str] | None:
        head = re.split(r"[\[({]", test_id, maxsplit=1)[0].strip()
        cls, _, method = head.rpartition(".")
        if not cls or not re.fullmatch(r"[A-Za-z_$][\w$]*", method):
            return None
        path = file_of(test_id, files)
        if not path:
            return None
        return path, cls.rsplit(".", 1)[-1] + "." + method

    def defined(self, line: str) -> list[str]:
        m = MEMBER.match(line)
        return [m.group(2)] if m is not None and m.group(1) not in NOT_TYPES else super().defined(line)

    def changed(self, text: str, added: list, removed: list) -> list[str]:
        """The tests a test patch adds or changes (see ``Dialect.changed``), member by member: a changed line
        in a test is that test's; one in a helper method, a data provider or a field changes the tests that
        name it (in their annotations too: ``@MethodSource("cases")``), directly or through other helpers;
        one in a set-up or tear-down method or an initializer block every test of its class; an import, a
        ``main`` or a helper no test uses changes none."""
        def code(t: str) -> bool:
            t = t.strip()
            return bool(t) and not t.startswith((*self.line_comments, "/*", "*", "*/"))

        members = self._members(text)
        rows = [(d, info, text.count("\n", 0, info["start"]) + 1, text.count("\n", 0, info["end"]) + 1)
                for d, info in members if info["kind"] != "class"]
        tests = [(d, info) for d, info in members if d is not None]
        at = [no for no, t in added if code(t)] + [no for no, ts in removed if any(code(t) for t in ts)]
        names: set = set()
        helpers: set = set()
        for no in at:
            inside = [(d, info) for d, info, a, b in rows if a <= no <= b]
            for d, info in inside:
                if d is not None:
                    names.add(d.name)
                elif set(info["annotations"]) & LIFECYCLE or (info["kind"] == "other" and not info["name"]):
                    names.update(t.name for t, ti in tests if ti["chain"][:len(info["chain"])] == info["chain"])
                elif info["name"]:
                    helpers.add(info["name"])
        bodies = [(info["name"], info["start"], info["end"]) for d, info in members
                  if d is None and info["kind"] in ("method", "field", "other") and info["name"]]
        while helpers:
            words = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(helpers))) + r")\b")
            names.update(d.name for d, _ in tests if words.search(text, d.start, d.end))
            more = {n for n, a, b in bodies if n not in helpers and words.search(text, a, b)}
            if not more:
                break
            helpers |= more
        return sorted(names)


JAVA = JavaDialect()
Maven.dialect = JAVA
