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
for line in proc.stdout:
    sys.stdout.buffer.write(line)
    text = line.decode("utf-8", "replace").strip()
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
sys.exit(rc)
"""
"""Runs the build, then copies this run's reports (Maven: named with its suffix) out of the tree at once,
whatever the build's exit code; exits with it."""


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
    tasks with failures ignored; reports from ``build/test-results``, copied out the moment Gradle exits.
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
            return outcomes, messages, "junit"
        return printed, {}, "console"


GRADLE_INIT = """\
// envgen: every project resolves from the offline repository, whatever its build script names
allprojects {
    buildscript { repositories { maven { url 'REPO' } } }
    afterEvaluate { project ->
        project.repositories.clear()
        project.repositories.maven { url 'REPO' }
        project.tasks.withType(Test) { ignoreFailures = true; enabled = true; onlyIf { true } }
    }
}
"""
"""Gradle init script of a run: repositories replaced by the offline one, test tasks enabled and run."""


def wrap(tree: str, report_dir: str, kind: str, suffix: str, cmd: list[str]) -> list[str]:
    """``cmd`` run by ``RUN_AND_COLLECT`` (the kit's interpreter, isolated)."""
    return [sys.executable, "-I", "-S", "-c", RUN_AND_COLLECT, tree, report_dir, kind, suffix, "--", *cmd]


