"""The Java recipe: Maven projects end to end, Gradle projects as far as they can be built offline.

Metadata is read statically at the task's commit (the root ``pom.xml`` and the module POMs it lists,
with ``${property}`` references resolved from their ``<properties>``), never by running Maven on the host.

- Toolchain: the base image's ``jdk`` layer (OpenJDK 17, Maven 3.8 and Debian's Maven repository at
  /usr/share/maven-repo with JUnit 4/5, TestNG, Surefire and the compiler/resources plugins). A project
  that targets a newer Java (``maven.compiler.release``/``source``/``target``, the compiler plugin's
  ``<release>``/``<source>``) or one JDK 17 no longer compiles (below 7) is rejected saying so.
- Dependencies: offline. Common libraries Debian packages (Mockito, AssertJ, Guava, ...) are installed as
  Debian packages in the environment layer and resolve from /usr/share/maven-repo. With
  ``ENVGEN_MAVEN_MIRROR`` set (a Maven repository URL, e.g. a company proxy of Maven Central), the recipe
  writes a settings.xml whose mirror is that URL, and the task layer runs the project's tests once with
  the registry reachable into a repository in the image (``/opt/envgen/m2``); validation and episodes
  run offline against it. Either way the task layer's check compiles the project and its tests offline,
  as the runs will, and fails the build with Maven's own words when something is missing.
- Tests: Surefire (``envgen_verifiers.runners.java``), the test patch's classes that Surefire's default
  includes name (``Test*``, ``*Test``, ``*Tests``, ``*TestCase``) under a test source set.
- Gradle (no ``pom.xml``): what Debian's Gradle 4.4 (the ``gradle`` toolchain layer) runs offline is set up:
  a Groovy build script without plugin-portal plugins, no wrapper or a 4.x one, JUnit 4 or TestNG; every
  project's repositories are pointed at Debian's Maven repository at run time. Anything else (Kotlin DSL, a
  newer wrapper whose distribution would be downloaded, plugins, ``useJUnitPlatform``) is rejected saying so.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import xml.etree.ElementTree as ET


from ...errors import InputError
from ...sandbox.images import DEFAULT_SUITE, TOOLCHAINS, VERIFIERS_DIR
from .debian import CONTENTS_ENV, cached_index, contents_urls
from .lang import Language, Recipe, RepoView, Step
from .repo_image import REASON_MARK
from .test_layout import TestLayout, java_tests

JDK = 17
"""The Java the base image's jdk layer has (Debian bookworm's default-jdk-headless)."""
DEBIAN_REPO = "/usr/share/maven-repo"
GRADLE = "4.4"
"""Debian bookworm's Gradle (the ``gradle`` toolchain layer)."""
APT = "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
APT_DONE = " >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*"


def apt_install(pkgs: list[str]) -> str:
    """Install Debian packages unless all are there already (Maven's own dependencies, Apache's parent POM
    among them, come with the jdk layer): no package index is fetched for nothing."""
    names = " ".join(pkgs)
    return f"dpkg -s {names} >/dev/null 2>&1 || {{ {APT}{names}{APT_DONE}; }}"
MIRROR_ENV = "ENVGEN_MAVEN_MIRROR"
MAVEN_DIR = "/opt/envgen/maven"
IMAGE_REPO = "/opt/envgen/m2"
REPO_IN_IMAGE = "/work/repo"
DEBIAN_ARTIFACTS = {
    "org.mockito": "libmockito-java",
    "org.assertj": "libassertj-core-java",
    "org.apache.commons:commons-lang3": "libcommons-lang3-java",
    "com.google.guava": "libguava-java",
    "commons-io": "libcommons-io-java",
    "com.google.code.gson": "libgoogle-gson-java",
    "org.slf4j": "libslf4j-java",
    "com.fasterxml.jackson.core": "libjackson2-databind-java",
    "org.hamcrest": "libhamcrest-java",
}
"""Libraries (by groupId, or groupId:artifactId) that Debian packages into its Maven repository, and the
package; the jdk layer already has JUnit 4/5, TestNG and Surefire."""
BUILD_NAMES = frozenset({"pom.xml", "build.gradle", "build.gradle.kts", "settings.gradle", "settings.gradle.kts",
                         "gradle.properties", "gradlew", "gradlew.bat", "mvnw", "mvnw.cmd"})
"""Build files: the test patch carries their changes (the verifier restores them to base + test patch)."""
CODE_SUFFIXES = (".java", ".kt", ".groovy", ".scala")
TEST_SETS = ("test", "it", "integrationTest", "testFixtures")
SUREFIRE_INCLUDES = (re.compile(r"^Test.*"), re.compile(r".*Test$"), re.compile(r".*Tests$"),
                     re.compile(r".*TestCase$"))
"""Surefire's default includes (by class name)."""


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(elem: ET.Element | None, *names: str) -> ET.Element | None:
    for name in names:
        if elem is None:
            return None
        elem = next((c for c in elem if _local(c.tag) == name), None)
    return elem


def _text(elem: ET.Element | None, *names: str) -> str | None:
    e = _child(elem, *names)
    return e.text.strip() if e is not None and e.text else None


class Pom:
    """One POM's properties, dependencies, plugins, modules and Java level."""

    def __init__(self, path: str, text: str):
        self.path = path
        try:
            self.root = ET.fromstring(text)
        except ET.ParseError as e:
            raise InputError(f"{path} is not valid XML ({e})") from None
        if _local(self.root.tag) != "project":
            raise InputError(f"{path} is not a Maven POM (root element {_local(self.root.tag)!r})")
        self.props: dict[str, str] = {}
        for e in _child(self.root, "properties") or []:
            if e.text:
                self.props[_local(e.tag)] = e.text.strip()
        for key, names in (("project.version", ("version",)), ("project.groupId", ("groupId",)),
                           ("project.parent.version", ("parent", "version"))):
            v = _text(self.root, *names)
            if v:
                self.props[key] = v

    def resolve(self, value: str | None, props: dict[str, str]) -> str | None:
        for _ in range(5):
            if not value or "${" not in value:
                break
            value = re.sub(r"\$\{([^}]+)\}", lambda m: props.get(m.group(1), m.group(0)), value)
        return value

    def modules(self) -> list[str]:
        out = [m.text.strip() for m in (_child(self.root, "modules") or []) if m.text and m.text.strip()]
        for prof in _child(self.root, "profiles") or []:
            out += [m.text.strip() for m in (_child(prof, "modules") or []) if m.text and m.text.strip()]
        return out

    def dependencies(self, props: dict[str, str]) -> list[tuple[str, str, str | None]]:
        out = []
        for where in (_child(self.root, "dependencies"), _child(self.root, "dependencyManagement", "dependencies")):
            for d in where or []:
                g, a = _text(d, "groupId"), _text(d, "artifactId")
                if g and a:
                    out.append((self.resolve(g, props), self.resolve(a, props), self.resolve(_text(d, "version"), props)))
        return out

    def java_levels(self, props: dict[str, str]) -> list[tuple[str, str]]:
        """(where, level) of every Java level the build names."""
        out = [(f"{self.path} <{k}>", props[k]) for k in ("maven.compiler.release", "maven.compiler.source",
                                                         "maven.compiler.target") if k in props]
        for plugins in (_child(self.root, "build", "plugins"), _child(self.root, "build", "pluginManagement", "plugins")):
            for p in plugins or []:
                if _text(p, "artifactId") != "maven-compiler-plugin":
                    continue
                for k in ("release", "source", "target"):
                    v = self.resolve(_text(p, "configuration", k), props)
                    if v:
                        out.append((f"{self.path} maven-compiler-plugin <{k}>", v))
        return out


def _level(text: str) -> int | None:
    m = re.fullmatch(r"\s*(?:1\.)?(\d+)\s*", text or "")
    return int(m.group(1)) if m else None


def read_poms(view: RepoView) -> list[Pom]:
    """The root POM and its modules' (recursively), each with its parents' properties folded in."""
    out: list[Pom] = []
    todo = [("", {})]
    seen = set()
    while todo:
        d, inherited = todo.pop(0)
        path = f"{d}/pom.xml" if d else "pom.xml"
        if path in seen:
            continue
        seen.add(path)
        text = view.read(path)
        if text is None:
            continue
        pom = Pom(path, text)
        pom.props = {**inherited, **pom.props}
        out.append(pom)
        for m in pom.modules():
            sub = os.path.normpath(os.path.join(d, m)).replace(os.sep, "/")
            if sub.endswith("pom.xml"):
                sub = sub.rsplit("/", 1)[0] if "/" in sub else ""
            if not sub.startswith(".."):
                todo.append((sub, pom.props))
    return out


# ---------------------------------------------------------------- Debian's versions for the ones a POM asks
# Debian builds Java offline by substituting the versions it packages for those a POM names (maven-debian-
# helper). Which groupId:artifactId Debian ships, at which versions and in which package, is in its Contents
# index (every file of every package of the suite; Maven artifacts live in arch-independent packages, so the
# ``all`` index): read once per machine and kept in the cache folder. The recipe plans the substitution on the
# host (so the build notes list it and a dependency with no Debian counterpart is rejected before any build);
# the task image applies it (``envgen_verifiers.runners.java_debian``) to a repository of its own, since the
# project's POMs are infrastructure the verifier restores.

SUBST_REPO = "/opt/envgen/m2"
_MAVEN_FILE = re.compile(r"^usr/share/maven-repo/(\S+)/([^/\s]+)/([^/\s]+)/(\S+)\s+(\S+)$")
_CODE_FILE = (".jar", ".war", ".aar", ".zip")


def maven_contents_urls() -> list[str]:
    """ENVGEN_DEBIAN_CONTENTS when set, else the suite's ``all`` Contents index."""
    urls = contents_urls()
    return urls if os.environ.get(CONTENTS_ENV, "").split() else [u for u in urls if u.endswith("-all.gz")]


@functools.lru_cache(maxsize=4)
def debian_maven(urls: tuple[str, ...]) -> dict[str, dict[str, list]]:
    """{"group:artifact": {version: [package, ships a jar]}} of Debian's Maven repository, from the Contents
    indexes at ``urls`` (``debian.cached_index``); OSError when an index cannot be read."""

    def reduce(lines) -> dict:
        out: dict[str, dict[str, list]] = {}
        for line in lines:
            if not line.startswith("usr/share/maven-repo/"):
                continue
            m = _MAVEN_FILE.match(line.strip())
            if not m or not m.group(4).startswith(f"{m.group(2)}-{m.group(3)}"):
                continue
            key = f"{m.group(1).replace('/', '.')}:{m.group(2)}"
            entry = out.setdefault(key, {}).setdefault(m.group(3), [m.group(5).split(",")[0].rsplit("/", 1)[-1],
                                                                   False])
            entry[1] = entry[1] or m.group(4).endswith(_CODE_FILE)
        return out

    return cached_index("maven-", urls, reduce)


def _version_key(v: str) -> tuple:
    """Maven-like order (numbers as numbers, a qualifier before its release). Hand-written: no Python library
    implements Maven's ComparableVersion, and only Debian's own versions of one artifact are compared."""
    parts = re.split(r"[.-]", v)
    return tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in parts)


def debian_pick(versions: dict[str, list], asked: str | None) -> str:
    """The version of Debian's that stands in for ``asked``: a real release (not the ``debian``/``4.x``
    aliases), one that ships code when any does, of the asked major version when Debian has one, the newest."""
    real = [v for v in versions if v != "debian" and not v.endswith(".x")] or list(versions)
    coded = [v for v in real if versions[v][1]] or real
    major = (asked or "").split(".")[0]
    same = [v for v in coded if major and v.split(".")[0] == major] if major.isdigit() else []
    return max(same or coded, key=_version_key)


DEFAULT_PLUGIN_GROUP = "org.apache.maven.plugins"


def _coords(pom: Pom) -> list[tuple[str, str, str, str | None, str | None]]:
    """(kind, group, artifact, version as written, scope) of what ``pom`` asks for: its parent, dependencies
    (direct, managed, BOM imports, plugins'), plugins and build extensions."""
    root, out = pom.root, []
    par = _child(root, "parent")
    if par is not None:
        out.append(("parent", _text(par, "groupId"), _text(par, "artifactId"), _text(par, "version"), None))
    for kind, where in (("dependency", ("dependencies",)), ("managed", ("dependencyManagement", "dependencies"))):
        for d in _child(root, *where) or []:
            scope = _text(d, "scope")
            out.append(("bom" if kind == "managed" and scope == "import" else kind, _text(d, "groupId"),
                        _text(d, "artifactId"), _text(d, "version"), scope))
    for where in (("build", "plugins"), ("build", "pluginManagement", "plugins"), ("build", "extensions")):
        for p in _child(root, *where) or []:
            out.append(("plugin", _text(p, "groupId") or DEFAULT_PLUGIN_GROUP, _text(p, "artifactId"),
                        _text(p, "version"), None))
            for d in _child(p, "dependencies") or []:  # the plugin's: wanted only with the plugin (scope)
                out.append(("plugin", _text(d, "groupId"), _text(d, "artifactId"), _text(d, "version"),
                            f"{_text(p, 'groupId') or DEFAULT_PLUGIN_GROUP}:{_text(p, 'artifactId')}"))
    return [c for c in out if c[1] and c[2]]


def debian_plan(poms: list[Pom], index: dict[str, dict[str, list]]) -> tuple[dict, list[str], list[str], list[str]]:
    """(plan for ``java_debian``, Debian packages to install, notes, dependencies with no Debian counterpart).

    A version Debian lacks gets Debian's (``debian_pick``) under the asked version; a parent or BOM Debian
    lacks altogether gets a stand-in POM; both manage the project's version-less dependencies at Debian's
    versions, and a version written as a property no project POM defines (the parent's, now Debian's) is
    defined as Debian's version. Plugins Debian lacks are noted, not rejected: Maven only needs those bound to
    the phases up to ``test``, and the task image's check says which."""
    own = {(_text(p.root, "groupId") or _text(p.root, "parent", "groupId"), _text(p.root, "artifactId"))
           for p in poms}
    aliases: dict[tuple, dict] = {}
    standins: dict[tuple, dict] = {}
    properties: dict[str, str] = {}
    managed: dict[tuple, dict] = {}
    own_managed: set[tuple] = set()
    loose: list[tuple[str, str]] = []
    pkgs: set[str] = set()
    subst: list[str] = []
    missing: list[str] = []
    absent_plugins: list[str] = []
    for pom in poms:
        for kind, g, a, written, scope in _coords(pom):
            g, a = pom.resolve(g, pom.props), pom.resolve(a, pom.props)
            v = pom.resolve(written, pom.props)
            if (g, a) in own or "${" in g + a:
                continue
            if kind == "managed" and v:
                own_managed.add((g, a))
            versions = index.get(f"{g}:{a}")
            if kind == "plugin" and scope and scope not in index:
                continue  # a dependency of a plugin Debian lacks (ignored with it)
            if versions is None:
                if kind in ("parent", "bom") and v and "${" not in v:
                    standins[(g, a, v)] = {"group": g, "artifact": a, "version": v}
                    subst.append(f"{g}:{a}:{v} ({kind}) -> a stand-in POM (not in Debian)")
                elif kind == "dependency" and scope not in ("system", "import"):
                    missing.append(f"{g}:{a}" + (f":{v}" if v else ""))
                elif kind == "plugin":
                    absent_plugins.append(f"{g}:{a}")
                continue
            pick = debian_pick(versions, v)
            pkgs.add(versions.get(v, versions[pick])[0])
            if not v:
                if kind == "dependency":
                    loose.append((g, a))
                continue
            if v.startswith(("[", "(")) or v in versions:
                continue
            m = re.fullmatch(r"\$\{([^}]+)\}", v)
            if m:
                if m.group(1) not in properties:
                    properties[m.group(1)] = pick
                    subst.append(f"{g}:{a} ${{{m.group(1)}}} (the parent's property) -> {pick}")
                continue
            if "${" in v:
                continue
            manage = kind in ("parent", "bom")
            if (g, a, v) not in aliases:
                aliases[(g, a, v)] = {"group": g, "artifact": a, "version": v, "debian": pick, "manage": manage}
                subst.append(f"{g}:{a}:{v}" + (f" ({kind})" if manage else "") + f" -> {pick}")
            aliases[(g, a, v)]["manage"] |= manage
    for g, a in loose:
        if (g, a) not in own_managed and (g, a) not in managed:
            pick = debian_pick(index[f"{g}:{a}"], None)
            managed[(g, a)] = {"groupId": g, "artifactId": a, "version": pick}
    carriers = standins or any(x["manage"] for x in aliases.values())
    if managed and carriers:
        subst.append("the parent/BOM manages at Debian's versions: " +
                     ", ".join(f"{m['groupId']}:{m['artifactId']}:{m['version']}" for m in managed.values()))
    plan = {"from": DEBIAN_REPO, "to": SUBST_REPO, "aliases": list(aliases.values()),
            "standins": list(standins.values()), "managed": list(managed.values()) if carriers else [],
            "properties": properties}
    notes = []
    if subst:
        notes.append(f"Debian's versions stand in (as maven-debian-helper substitutes them), in {SUBST_REPO}: "
                     + "; ".join(subst))
    if absent_plugins:
        notes.append("plugins Debian does not package (Maven needs them only when bound up to the test phase): "
                     + ", ".join(sorted(set(absent_plugins))))
    return plan, sorted(pkgs), notes, sorted(set(missing))


MAVEN_LOG = "/tmp/envgen-maven-check.log"
_MISSING = (r"(artifact|Plugin|resolved:|Could not find artifact) [A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+"
            r"(:[A-Za-z0-9_.-]+){1,3}")
"""Maven's words before a coordinate it could not resolve offline (3.8 and 3.9): "the artifact g:a:pom:1 has
not been downloaded", "Plugin g:a:1 or one of its dependencies", "could not be resolved: g:a:jar:1"."""


def offline_check(mvn: str, where: str) -> str:
    """The task layer's check: compile the project and its tests offline, as every run will. On failure the
    step prints Maven's last lines and one reason line (``REASON_MARK``): the coordinates Maven could not
    resolve (``dependencies unavailable offline: g:a:v, ...``), else Maven's first error; the environment is
    then rejected with that reason, and a rerun does not build it again. (Maven's report is text: grep and
    sed pick the coordinates out in the image, where no other tool reads it.)"""
    coords = (f"grep -oE {shlex.quote(_MISSING)} {MAVEN_LOG} | awk '{{print $NF}}' | "
              "sed -E 's/:(jar|pom|maven-plugin|test-jar|war)(:[^:]+)?:([^:]+)$/:\\3/' | sort -u | head -8 | "
              "paste -sd, - | sed 's/,/, /g'")
    plain = f"sed 's/\\x1b\\[[0-9;]*m//g' {MAVEN_LOG} | grep -E '^\\[(ERROR|FATAL)\\] .{{3}}'"
    first = (f"err=$({plain} | grep -m1 -E '\\.java:\\[[0-9]+'); [ -n \"$err\" ] || err=$({plain} | head -1); "
             "err=$(printf %s \"$err\" | cut -c1-300)")
    reason = shlex.quote(REASON_MARK)
    return (f"{mvn} -o -q test-compile > {MAVEN_LOG} 2>&1 || {{ tail -n 40 {MAVEN_LOG}; missing=$({coords}); "
            f"if [ -n \"$missing\" ]; then echo {reason}\"dependencies unavailable offline: $missing (not in "
            f"{where})\"; else {first}; echo {reason}\"the project does not compile offline: $err\"; fi; exit 1; }}")


def mirror_settings(url: str) -> str:
    """A Maven settings.xml whose one mirror (of every repository) is ``url``."""
    from xml.sax.saxutils import escape

    return ("<settings>\n  <mirrors>\n    <mirror>\n      <id>envgen-mirror</id>\n      <mirrorOf>*</mirrorOf>\n"
            f"      <url>{escape(url)}</url>\n    </mirror>\n  </mirrors>\n</settings>\n")


class Java(Language):
    name = "java"

    def is_test_path(self, path: str) -> bool:
        parts = path.split("/")
        if parts[-1] in BUILD_NAMES or any(p in (".mvn", "gradle", "buildSrc") for p in parts[:-1]):
            return True
        if any(parts[i] == "src" and parts[i + 1] in TEST_SETS for i in range(len(parts) - 2)):
            return True
        if any(p in ("test", "tests") for p in parts[:-1]) and path.endswith(CODE_SUFFIXES):
            return True
        stem = parts[-1].rsplit(".", 1)[0]
        return path.endswith(CODE_SUFFIXES) and any(r.match(stem) for r in SUREFIRE_INCLUDES) and \
            not any(p == "main" for p in parts)

    def is_code_path(self, path: str) -> bool:
        return path.endswith(CODE_SUFFIXES) and not self.is_test_path(path)

    def detect(self, view: RepoView) -> bool:
        return any(view.exists(f) for f in ("pom.xml", "build.gradle", "build.gradle.kts"))

    def configured_tests(self, view: RepoView) -> TestLayout | None:
        """Maven's ``testSourceDirectory`` (and build-helper test sources), Gradle's ``sourceSets.test``."""
        return java_tests(view)

    def runnable_tests(self, paths: list[str], view_after: set[str], view: RepoView | None = None) -> list[str]:
        """The test patch's Java test classes Surefire's default includes name, under a test source set
        (``src/test/java``, or the one the build configures); abstract bases by their ``Abstract`` prefix are
        left out."""
        layout = self.configured_tests(view) if view is not None else None
        out = []
        for p in paths:
            parts = p.split("/")
            stem = parts[-1].rsplit(".", 1)[0]
            if p not in view_after or not p.endswith(".java") or stem.startswith("Abstract"):
                continue
            if not any(parts[i] == "src" and parts[i + 1] == "test" and parts[i + 2] == "java"
                       for i in range(len(parts) - 3)) and not (layout is not None and layout.matches(p)):
                continue
            if any(r.match(stem) for r in SUREFIRE_INCLUDES):
                out.append(p)
        return out

    def gradle_recipe(self, view: RepoView) -> Recipe:
        """A Gradle build Debian's Gradle 4.4 runs offline: Groovy DSL, no wrapper or a 4.x one, JUnit 4 or
        TestNG (JUnit 5 needs Gradle 4.6); its repositories are replaced with Debian's Maven repository at
        run time (the runner's init script)."""
        wrapper = view.read("gradle/wrapper/gradle-wrapper.properties") or ""
        m = re.search(r"gradle-([\d.]+)-", wrapper)
        if view.exists("build.gradle.kts") or view.exists("settings.gradle.kts"):
            raise InputError("Gradle project with a Kotlin build script: the offline image has Debian's Gradle "
                              f"{GRADLE}, which predates the Kotlin DSL; only Maven projects and Groovy Gradle "
                              f"builds that Gradle {GRADLE} runs are set up")
        if m and not m.group(1).startswith("4."):
            raise InputError(f"Gradle project: building it needs its wrapper's Gradle {m.group(1)}, whose distribution "
                              "an offline image cannot download, and the plugins and dependencies of Gradle's "
                              f"repositories; the image has Debian's Gradle {GRADLE} (set up instead: Maven projects)")
        scripts = [f for f in view.files if f.rsplit("/", 1)[-1] in ("build.gradle", "settings.gradle")]
        text = "\n".join(view.read(f) or "" for f in scripts)
        if "useJUnitPlatform" in text:
            raise InputError(f"Gradle project on JUnit 5 (useJUnitPlatform): that needs Gradle 4.6 or newer; the "
                              f"offline image has Debian's Gradle {GRADLE}")
        plugins = sorted(set(re.findall(r"""\bid\s*\(?\s*['"]([\w.-]+)['"]""", text)) - {"java", "java-library",
                                                                                      "application"})
        if plugins:
            raise InputError(f"Gradle project using plugins from the Gradle plugin portal ({', '.join(plugins)}), "
                              "which an offline image does not have")
        coords = re.findall(r"""['"]([\w.-]+):([\w.-]+):([\w.${}-]+)['"]""", text)
        junit = "testng" if any(g == "org.testng" for g, _, _ in coords) else "junit4"
        pkgs = sorted({pkg for key, pkg in DEBIAN_ARTIFACTS.items() for g, a, _ in coords
                       if key == g or key == f"{g}:{a}"})
        steps = [Step("debian-libraries", APT + " ".join(pkgs) + APT_DONE)] if pkgs else []
        notes = [f"Gradle {GRADLE} (Debian), offline, repositories replaced with {DEBIAN_REPO}; tests run with {junit}"]
        if m:
            notes.append(f"the wrapper's Gradle {m.group(1)} is not downloaded: Debian's Gradle {GRADLE} runs")
        return Recipe(language=self.name, suite=DEFAULT_SUITE, toolchains=("gradle", "jdk"), steps=steps,
                      framework="gradle", options={"repo": DEBIAN_REPO, "junit": junit}, notes=notes)

    @staticmethod
    def _debian_versions(poms: list[Pom], pkgs: list[str], notes: list[str], options: dict,
                         task_steps: list[Step], mvn: str) -> list[str]:
        """Plan Debian's versions for the POMs (``debian_plan``): the packages to install (the jdk layer's
        left out), the task step that builds the substituted repository and points the runs at it; a
        dependency Debian does not package is rejected here, before any build."""
        try:
            index = debian_maven(tuple(maven_contents_urls()))
        except (OSError, InputError) as e:
            notes.append(f"versions not substituted: {e}")
            return pkgs
        plan, wanted, more, missing = debian_plan(poms, index)
        if missing:
            raise InputError(f"dependencies with no Debian counterpart: {', '.join(missing[:8])} (no Debian package "
                              f"ships them in {DEBIAN_REPO}; set {MIRROR_ENV} to fetch them from a Maven "
                              "repository mirror)")
        notes += more
        if plan["aliases"] or plan["standins"] or plan["properties"]:
            task_steps.append(Step("debian-versions", f"PYTHONPATH={VERIFIERS_DIR} python3 -m "
                                   f"envgen_verifiers.runners.java_debian {shlex.quote(json.dumps(plan))} "
                                   f"{mvn.format(repo=SUBST_REPO)} -o -q test-compile && chmod -R a+rX {SUBST_REPO}"))
            notes.append("what Maven still cannot resolve offline is settled at image build: other versions of "
                         "Debian's stand in, plugins the image lacks are ignored (a no-op plugin); the image "
                         "build's log lists each")
            options["repo"] = SUBST_REPO
        return sorted((set(pkgs) | set(wanted)) - set(TOOLCHAINS["jdk"]))

    def recipe(self, view: RepoView, *, python: str | None = None) -> Recipe:
        if python:
            raise InputError(f"--python {python} does not apply to a Java project")
        if not view.exists("pom.xml"):
            if view.exists("build.gradle") or view.exists("build.gradle.kts"):
                return self.gradle_recipe(view)
            raise InputError("no pom.xml or build.gradle at the repository root: not a Maven or Gradle project")
        notes: list[str] = []
        poms = read_poms(view)
        notes.append(f"read {len(poms)} POM(s): {', '.join(p.path for p in poms[:8])}")
        for pom in poms:
            for where, text in pom.java_levels(pom.props):
                lvl = _level(text)
                if lvl is None:
                    continue
                if lvl > JDK:
                    raise InputError(f"the project needs Java {lvl} ({where}); the base image's jdk layer has "
                                      f"OpenJDK {JDK} (Debian {DEFAULT_SUITE})")
                if lvl < 7:
                    raise InputError(f"the project targets Java {text} ({where}), which OpenJDK {JDK} no longer "
                                      "compiles (7 at least)")
        deps = [d for pom in poms for d in pom.dependencies(pom.props)]
        groups = {g for g, _, _ in deps}
        junit = "junit5" if "org.junit.jupiter" in groups else "testng" if "org.testng" in groups else "junit4"
        notes.append(f"tests run with Maven Surefire ({junit}), offline")
        if view.exists("mvnw") or view.exists(".mvn/wrapper/maven-wrapper.properties"):
            notes.append("the Maven wrapper is not used: its distribution would be downloaded; Debian's Maven 3.8 runs")
        pkgs = sorted({pkg for key, pkg in DEBIAN_ARTIFACTS.items() for g, a, _ in deps
                       if key == g or key == f"{g}:{a}"})
        steps: list[Step] = []
        options: dict = {"repo": DEBIAN_REPO, "junit": junit}
        task_steps: list[Step] = []
        mirror = os.environ.get(MIRROR_ENV, "").strip()
        mvn = "mvn -B -ntp -Dstyle.color=never -Dmaven.repo.local={repo}"
        if mirror:
            settings = mirror_settings(mirror)
            steps.append(Step("maven-settings", f"mkdir -p {MAVEN_DIR} && printf %s {shlex.quote(settings)} > "
                                                f"{MAVEN_DIR}/settings.xml"))
            options.update(repo=IMAGE_REPO, settings=f"{MAVEN_DIR}/settings.xml")  # (Maven matches what it
            # fetched to the repository it came from: offline runs name the same mirror)
            task_steps.append(Step("dependencies", mvn.format(repo=IMAGE_REPO) + f" -s {MAVEN_DIR}/settings.xml "
                                   "test -Dmaven.test.failure.ignore=true -DfailIfNoTests=false && "
                                   f"chmod -R a+rX {IMAGE_REPO}"))
            notes.append(f"dependencies and plugins from the mirror in {MIRROR_ENV} into {IMAGE_REPO} at image "
                         "build; offline at test time")
        else:
            pkgs = self._debian_versions(poms, pkgs, notes, options, task_steps, mvn)
            if pkgs:
                steps.append(Step("debian-libraries", apt_install(pkgs)))
                notes.append(f"libraries from Debian packages: {', '.join(pkgs)}")
            notes.append(f"dependencies from Debian's Maven repository ({DEBIAN_REPO}), offline; set {MIRROR_ENV} "
                         "to fetch others from a Maven repository mirror")
        settings = f" -s {options['settings']}" if options.get("settings") else ""
        where = f"the mirror in {MIRROR_ENV}" if mirror else f"Debian's Maven repository; set {MIRROR_ENV} for others"
        task_steps.append(Step("check", offline_check(mvn.format(repo=options["repo"]) + settings, where)))
        return Recipe(language=self.name, suite=DEFAULT_SUITE, toolchains=("jdk",), steps=steps, framework="maven",
                      options=options, notes=notes, task_steps=task_steps)
