"""Debian's versions standing in for the ones a Maven project asks for (stdlib only; run in the task image).

Debian builds Java packages offline by substituting the versions it packages for the ones a POM names
(maven-debian-helper's rules, its ``debian`` version alias). A task image cannot rewrite the project's
POMs: they are infrastructure, restored to base + test patch before every run. So the substitution goes
the other way: a local repository (``to``) that is Debian's (``from``, every file a symbolic link) plus,
for each coordinate the project asks for at a version Debian lacks, that version made of Debian's files
(its POM rewritten to carry the asked version), and for a parent or imported BOM Debian lacks altogether,
a stand-in POM. Parents and BOMs (aliased or stand-in) also manage the versions the project leaves to
them (``managed``, Debian's) and define the properties the project's versions name but only the missing
parent defined (``properties``). The host writes the plan (``envgen.families.code.java``); Maven then
runs offline against ``to`` at image build, validation and in episodes alike.

What the host cannot see is then settled by running the check (``mvn -o test-compile``) and reading what
Maven could not resolve, up to ``TRIES`` times: a version of an artifact the image's Debian repository has
at another version stands in the same way; a plugin the image lacks (Debian's parent POMs bind plugins the
project never names; release and lint plugins) is ignored, as maven-debian-helper's ignore rules do: a
no-op plugin of that version (its goals, as Maven asks for them, run nothing), managed by the parents when
the project gives it no version. Anything else is left for the check to report.

    python3 -m envgen_verifiers.runners.java_debian PLAN_JSON [CHECK_COMMAND ...]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile

POM_NS = "http://maven.apache.org/POM/4.0.0"
TRIES = 12
NOOP_VERSION = "0-envgen-ignored"
"""The version a plugin the project leaves unversioned and the image lacks is managed at (its no-op stands in)."""
NOOP_CLASS = "envgen/maven/NoOpMojo"
NOOP_SOURCE = """package envgen.maven;
public class NoOpMojo implements org.apache.maven.plugin.Mojo {
  private org.apache.maven.plugin.logging.Log log;
  public void execute() { if (log != null) log.info("envgen: plugin not in Debian's repository, ignored"); }
  public void setLog(org.apache.maven.plugin.logging.Log l) { log = l; }
  public org.apache.maven.plugin.logging.Log getLog() { return log; }
}
"""
MAVEN_API = "/usr/share/maven/lib"


def _dir(repo: str, group: str, artifact: str, version: str) -> str:
    return os.path.join(repo, *group.split("."), artifact, version)


def link_tree(src: str, dst: str) -> None:
    """``dst`` as a copy of ``src`` whose files are symbolic links (``cp -rs``): Maven may write beside them."""
    for here, dirs, files in os.walk(src):
        out = os.path.join(dst, os.path.relpath(here, src))
        os.makedirs(out, exist_ok=True)
        for f in files + [d for d in dirs if os.path.islink(os.path.join(here, d))]:  # (walk skips linked dirs)
            target = os.path.join(out, f)
            if not os.path.lexists(target):
                os.symlink(os.path.join(here, f), target)


def _ns(root: ET.Element) -> str:
    return root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""


def _child(parent: ET.Element, ns: str, name: str, *, create: bool = False, index: int | None = None) -> ET.Element:
    found = parent.find(ns + name)
    if found is None and create:
        found = ET.Element(ns + name)
        found.tail = "\n"
        if index is None:
            parent.append(found)
        else:
            parent.insert(index, found)
    return found


def amend(root: ET.Element, version: str | None, managed: list[dict], properties: dict[str, str]) -> None:
    """Set the project's own version; add ``managed`` to its dependencyManagement (ours first: Maven takes
    the first of duplicates) and ``properties`` to its properties (ours replace theirs)."""
    ns = _ns(root)
    if version is not None:
        v = _child(root, ns, "version")
        if v is None:
            a = root.find(ns + "artifactId")
            v = _child(root, ns, "version", create=True, index=list(root).index(a) + 1 if a is not None else None)
        v.text = version
    if properties:
        props = _child(root, ns, "properties", create=True)
        for k, val in properties.items():
            e = _child(props, ns, k, create=True)
            e.text = val
    if managed:
        deps = _child(_child(root, ns, "dependencyManagement", create=True), ns, "dependencies", create=True)
        for i, m in enumerate(managed):
            d = ET.Element(ns + "dependency")
            d.tail = "\n"
            for k in ("groupId", "artifactId", "version"):
                ET.SubElement(d, ns + k).text = m[k]
            deps.insert(i, d)


def _write(root: ET.Element, path: str) -> None:
    ET.register_namespace("", _ns(root)[1:-1] or POM_NS)
    if os.path.lexists(path):
        os.unlink(path)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def alias(plan: dict, item: dict) -> list[str]:
    """Version ``item["version"]`` of ``group:artifact`` made of Debian's ``item["debian"]``: its files linked
    under the asked version's names, its POM rewritten to that version (and amended for a parent or BOM)."""
    g, a, v, deb = item["group"], item["artifact"], item["version"], item["debian"]
    src, dst = _dir(plan["from"], g, a, deb), _dir(plan["to"], g, a, v)
    if not os.path.isdir(src):
        return [f"missing: {g}:{a}:{deb} is not in {plan['from']} (its Debian package is not installed)"]
    os.makedirs(dst, exist_ok=True)
    stem_from, stem_to = f"{a}-{deb}", f"{a}-{v}"
    for f in sorted(os.listdir(src)):
        if not f.startswith(stem_from):
            continue
        target = os.path.join(dst, stem_to + f[len(stem_from):])
        if f.endswith(".pom"):
            try:
                root = ET.parse(os.path.join(src, f)).getroot()
            except ET.ParseError as e:
                return [f"unreadable: {os.path.join(src, f)} ({e})"]
            amend(root, v, plan.get("managed", []) if item.get("manage") else [],
                  plan.get("properties", {}) if item.get("manage") else {})
            _write(root, target)
        elif not os.path.lexists(target):
            os.symlink(os.path.join(src, f), target)
    return [f"{g}:{a}:{v} <- Debian's {deb}"]


def standin(plan: dict, item: dict) -> list[str]:
    """A POM Debian has no version of (a parent, an imported BOM): a bare ``pom`` project with the managed
    versions and properties the project needs from it."""
    g, a, v = item["group"], item["artifact"], item["version"]
    root = ET.Element(f"{{{POM_NS}}}project")
    for k, val in (("modelVersion", "4.0.0"), ("groupId", g), ("artifactId", a), ("version", v),
                   ("packaging", "pom")):
        ET.SubElement(root, f"{{{POM_NS}}}{k}").text = val
    amend(root, None, plan.get("managed", []), plan.get("properties", {}))
    dst = _dir(plan["to"], g, a, v)
    os.makedirs(dst, exist_ok=True)
    _write(root, os.path.join(dst, f"{a}-{v}.pom"))
    return [f"{g}:{a}:{v} <- a stand-in POM (Debian has no {g}:{a})"]


def _versions(repo: str, group: str, artifact: str) -> list[str]:
    d = os.path.join(repo, *group.split("."), artifact)
    return sorted(v for v in os.listdir(d) if os.path.isdir(os.path.join(d, v))) if os.path.isdir(d) else []


def _key(v: str) -> tuple:
    # Maven-like order, as the host's ``_version_key``: numbers as numbers, a qualifier before its release.
    return tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in re.split(r"[.-]", v))


def best(plan: dict, group: str, artifact: str, asked: str) -> str | None:
    """Debian's version (in the image) to stand in for ``asked``: a real release with a jar when there is
    one, the asked major version first, the newest."""
    vs = [v for v in _versions(plan["from"], group, artifact) if v != "debian" and not v.endswith(".x")]
    if not vs:
        vs = _versions(plan["from"], group, artifact)
    coded = [v for v in vs if any(f.endswith(".jar") for f in os.listdir(_dir(plan["from"], group, artifact, v)))]
    vs = coded or vs
    same = [v for v in vs if v.split(".")[0] == asked.split(".")[0]]
    return max(same or vs, key=_key) if vs else None


def _noop_class(plan: dict) -> bytes:
    """The no-op mojo's class file, compiled once against the image's Maven plugin API."""
    cached = os.path.join(plan["to"], ".envgen-noop.class")
    if not os.path.exists(cached):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "NoOpMojo.java")
            with open(src, "w") as f:
                f.write(NOOP_SOURCE)
            cp = ":".join(os.path.join(MAVEN_API, j) for j in sorted(os.listdir(MAVEN_API)) if j.endswith(".jar"))
            subprocess.run(["javac", "-nowarn", "--release", "8", "-cp", cp, "-d", tmp, src], check=True,
                           capture_output=True)
            with open(os.path.join(tmp, NOOP_CLASS + ".class"), "rb") as f, open(cached, "wb") as out:
                out.write(f.read())
    with open(cached, "rb") as f:
        return f.read()


def noop_plugin(plan: dict, group: str, artifact: str, version: str, goals: set[str]) -> None:
    """Plugin ``group:artifact:version`` whose ``goals`` each run the no-op mojo (bound to no phase: only an
    execution that names a phase runs it)."""
    dst = _dir(plan["to"], group, artifact, version)
    os.makedirs(dst, exist_ok=True)
    stem = os.path.join(dst, f"{artifact}-{version}")
    with open(stem + ".pom", "w") as f:
        f.write(f'<project xmlns="{POM_NS}"><modelVersion>4.0.0</modelVersion><groupId>{group}</groupId>'
                f"<artifactId>{artifact}</artifactId><version>{version}</version>"
                "<packaging>maven-plugin</packaging></project>\n")
    prefix = re.sub(r"-?maven-?|-?plugin-?", "", artifact) or artifact
    mojos = "".join(f"<mojo><goal>{g}</goal><implementation>{NOOP_CLASS.replace('/', '.')}</implementation>"
                    "<language>java</language><instantiationStrategy>per-lookup</instantiationStrategy>"
                    "<executionStrategy>once-per-session</executionStrategy><requiresProject>false"
                    "</requiresProject><threadSafe>true</threadSafe><parameters/></mojo>" for g in sorted(goals))
    descriptor = (f"<plugin><name>{artifact} (ignored)</name><groupId>{group}</groupId><artifactId>{artifact}"
                  f"</artifactId><version>{version}</version><goalPrefix>{prefix}</goalPrefix>"
                  f"<isolatedRealm>false</isolatedRealm><inheritedByDefault>true</inheritedByDefault>"
                  f"<mojos>{mojos}</mojos><dependencies/></plugin>\n")
    with zipfile.ZipFile(stem + ".jar", "w") as z:
        z.writestr("META-INF/maven/plugin.xml", descriptor)
        z.writestr(NOOP_CLASS + ".class", _noop_class(plan))
    with open(os.path.join(dst, ".envgen-goals"), "w") as f:
        f.write("\n".join(sorted(goals)))


def _goals(plan: dict, group: str, artifact: str, version: str) -> set[str]:
    p = os.path.join(_dir(plan["to"], group, artifact, version), ".envgen-goals")
    return set(open(p).read().split()) if os.path.exists(p) else set()


def manage_plugin(plan: dict, group: str, artifact: str, version: str) -> bool:
    """Add ``group:artifact:version`` to the pluginManagement of every parent that stands in; False if none."""
    done = False
    for item in plan.get("aliases", []) + plan.get("standins", []):
        if not item.get("manage", True) and item in plan.get("aliases", []):
            continue
        path = os.path.join(_dir(plan["to"], item["group"], item["artifact"], item["version"]),
                            f"{item['artifact']}-{item['version']}.pom")
        if not os.path.isfile(path):
            continue
        root = ET.parse(path).getroot()
        ns = _ns(root)
        plugins = _child(_child(_child(root, ns, "build", create=True), ns, "pluginManagement", create=True),
                         ns, "plugins", create=True)
        mine = [p for p in root.iter(ns + "plugin") if p.findtext(ns + "artifactId") == artifact and
                (p.findtext(ns + "groupId") or "org.apache.maven.plugins") == group]
        if not any(p in list(plugins) for p in mine):
            mine.append(ET.SubElement(plugins, ns + "plugin"))
            ET.SubElement(mine[-1], ns + "groupId").text = group
            ET.SubElement(mine[-1], ns + "artifactId").text = artifact
        for p in mine:  # a parent's own entry (pluginManagement or plugins, profiles too) gets the version
            _child(p, ns, "version", create=True).text = version
        _write(root, path)
        done = True
    return done


_UNVERSIONED = re.compile(r"Error resolving version for plugin '([\w.-]+):([\w.-]+)'")
_PLUGIN = re.compile(r"Plugin ([\w.-]+):([\w.-]+):([\w.-]+) or one of its dependencies could not be resolved")
_ARTIFACT = re.compile(r"(?:Could not find artifact|The POM for|Failed to read artifact descriptor for|the artifact|"
                       r"Non-resolvable (?:parent|import) POM.*?) ?([\w.-]+):([\w.-]+):(?:(?:jar|pom|maven-plugin|"
                       r"test-jar):)?(?:[\w.-]+:)?([\w.-]+)")
_GOAL = re.compile(r"Could not find goal '([\w.-]+)' in plugin ([\w.-]+):([\w.-]+):([\w.-]+)")


def settle(plan: dict, check: list[str]) -> list[str]:
    """Run ``check`` until it passes or Maven names nothing this can stand in for; the lines say what."""
    out: list[str] = []
    seen: set[str] = set()
    for _ in range(TRIES):
        run = subprocess.run(check, check=False, capture_output=True, text=True)
        if run.returncode == 0:
            return out
        log = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)
        before = len(out)
        for g, a in set(_UNVERSIONED.findall(log)):
            v = best(plan, g, a, "") or NOOP_VERSION
            if v == NOOP_VERSION:
                noop_plugin(plan, g, a, v, _goals(plan, g, a, v))
            if manage_plugin(plan, g, a, v):
                out.append(f"{g}:{a} (no version) <- " + ("ignored (not in the image)" if v == NOOP_VERSION else
                                                          f"Debian's {v}"))
        for g, a, v, goal in [(g, a, v, goal) for goal, g, a, v in set(_GOAL.findall(log))]:
            if os.path.exists(os.path.join(_dir(plan["to"], g, a, v), ".envgen-goals")):
                noop_plugin(plan, g, a, v, _goals(plan, g, a, v) | {goal})
                out.append(f"{g}:{a}:{v} goal {goal} ignored")
        plugins = set(_PLUGIN.findall(log))
        for g, a, v in plugins | set(_ARTIFACT.findall(log)):
            if os.path.exists(_dir(plan["to"], g, a, v)) and not os.path.exists(
                    os.path.join(_dir(plan["to"], g, a, v), ".envgen-goals")) and \
                    os.listdir(_dir(plan["to"], g, a, v)):
                continue
            deb = best(plan, g, a, v)
            if deb is not None and deb != v:
                out += alias(plan, {"group": g, "artifact": a, "version": v, "debian": deb})
            elif (g, a, v) in plugins and not os.path.exists(_dir(plan["to"], g, a, v)):
                noop_plugin(plan, g, a, v, set())
                out.append(f"{g}:{a}:{v} <- ignored (not in the image)")
        if set(out[before:]) <= seen:
            break
        seen.update(out[before:])
    return out


def apply(plan: dict) -> list[str]:
    """Build the repository ``plan["to"]``; the lines say what stands in for what."""
    link_tree(plan["from"], plan["to"])
    out: list[str] = []
    for item in plan.get("aliases", []):
        out += alias(plan, item)
    for item in plan.get("standins", []):
        out += standin(plan, item)
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    try:
        plan = json.loads(argv[0])
    except json.JSONDecodeError as e:
        print(f"java_debian: the plan is not JSON ({e})", file=sys.stderr)
        return 2
    lines = apply(plan)
    if argv[1:]:
        lines += settle(plan, argv[1:])
    for line in lines:
        print("envgen maven:", line)
    bad = [line for line in lines if line.startswith(("missing:", "unreadable:"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
