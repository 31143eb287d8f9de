"""Debian's versions standing in for the ones a POM asks for, without Docker: the host's plan (real POM shapes
of commons-codec, commons-cli and jsoup against real lines of Debian's Contents index) and the kit's repository
building (``envgen_verifiers.runners.java_debian``) on a small repository laid out as Debian's."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envgen.errors import InputError
from envgen.families.code.java import (
    Java,
    Pom,
    debian_maven,
    debian_pick,
    debian_plan,
    maven_contents_urls,
)
from envgen.families.code.lang import RepoView

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verifiers"))
from envgen_verifiers.runners import java_debian

try:
    from .java_repo import DEBIAN_VERSIONS_POM, debian_contents
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from java_repo import DEBIAN_VERSIONS_POM, debian_contents

NS = "{http://maven.apache.org/POM/4.0.0}"

CODEC = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
  <parent><groupId>org.apache.commons</groupId><artifactId>commons-parent</artifactId><version>58</version></parent>
  <artifactId>commons-codec</artifactId><version>1.16-SNAPSHOT</version>
  <properties><maven.compiler.source>1.8</maven.compiler.source></properties>
  <dependencies>
    <dependency><groupId>org.apache.commons</groupId><artifactId>commons-lang3</artifactId><version>3.12.0</version>
      <scope>test</scope></dependency>
    <dependency><groupId>org.junit.jupiter</groupId><artifactId>junit-jupiter</artifactId><scope>test</scope></dependency>
    <dependency><groupId>org.hamcrest</groupId><artifactId>hamcrest</artifactId>
      <version>${commons.hamcrest.version}</version><scope>test</scope></dependency>
  </dependencies>
  <build><plugins>
    <plugin><groupId>org.apache.rat</groupId><artifactId>apache-rat-plugin</artifactId></plugin>
    <plugin><artifactId>maven-surefire-plugin</artifactId><version>3.1.2</version></plugin>
  </plugins></build>
</project>"""
"""commons-codec's POM in 2023, shortened: parent 58 (Debian: 56), JUnit managed by the parent's junit-bom, a
version from a property only the parent defines, RAT without a version, Surefire 3."""

JSOUP_BOM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
  <groupId>org.jsoup</groupId><artifactId>jsoup</artifactId><version>1.17.1</version>
  <dependencyManagement><dependencies>
    <dependency><groupId>io.netty</groupId><artifactId>netty-bom</artifactId><version>4.1.100.Final</version>
      <type>pom</type><scope>import</scope></dependency>
    <dependency><groupId>org.junit</groupId><artifactId>junit-bom</artifactId><version>5.10.1</version>
      <type>pom</type><scope>import</scope></dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>org.junit.jupiter</groupId><artifactId>junit-jupiter</artifactId><scope>test</scope></dependency>
  </dependencies>
</project>"""
"""jsoup's shape: BOM imports, one Debian lacks (netty-bom), one at another version (junit-bom)."""


@pytest.fixture
def index(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVGEN_DEBIAN_CONTENTS", str(debian_contents(tmp_path / "Contents-all.gz")))
    monkeypatch.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))
    return debian_maven(tuple(maven_contents_urls()))


def test_the_contents_index_gives_versions_packages_and_jars(index):
    assert index["junit:junit"]["4.13.2"] == ["junit4", True] and index["junit:junit"]["3.8.2"] == ["junit", True]
    assert index["org.apache.commons:commons-parent"]["56"] == ["libcommons-parent-java", False]
    assert index["org.apache.maven.plugins:maven-surefire-plugin"]["2.17"] == ["libsurefire-java", False]


def test_the_version_that_stands_in(index):
    # a real release (not the debian/4.x aliases), of the asked major version, one that ships a jar
    assert debian_pick(index["junit:junit"], "4.12") == "4.13.2"
    assert debian_pick(index["junit:junit"], "3.8.1") == "3.8.2"
    assert debian_pick(index["org.apache.maven.plugins:maven-surefire-plugin"], "3.1.2") == "2.22.3"
    assert debian_pick(index["org.junit.jupiter:junit-jupiter"], None) == "5.9.2"


def test_commons_codecs_pom_is_planned_against_debians_versions(index):
    plan, pkgs, notes, missing = debian_plan([Pom("pom.xml", CODEC)], index)
    assert missing == []
    assert plan["aliases"] == [
        {"group": "org.apache.commons", "artifact": "commons-parent", "version": "58", "debian": "56", "manage": True},
        {"group": "org.apache.maven.plugins", "artifact": "maven-surefire-plugin", "version": "3.1.2",
         "debian": "2.22.3", "manage": False}]
    assert plan["standins"] == [] and plan["properties"] == {"commons.hamcrest.version": "2.2"}
    assert plan["managed"] == [{"groupId": "org.junit.jupiter", "artifactId": "junit-jupiter", "version": "5.9.2"}]
    assert pkgs == ["junit5", "libcommons-lang3-java", "libcommons-parent-java", "libhamcrest-java", "libsurefire-java"]
    assert "org.apache.commons:commons-parent:58 (parent) -> 56" in notes[0]
    assert "org.hamcrest:hamcrest ${commons.hamcrest.version} (the parent's property) -> 2.2" in notes[0]
    assert notes[1].endswith("org.apache.rat:apache-rat-plugin")


def test_a_bom_debian_lacks_stands_in_and_one_it_has_is_aliased(index):
    plan, _, notes, missing = debian_plan([Pom("pom.xml", JSOUP_BOM)], index)
    assert missing == []
    assert plan["standins"] == [{"group": "io.netty", "artifact": "netty-bom", "version": "4.1.100.Final"}]
    assert plan["aliases"] == [{"group": "org.junit", "artifact": "junit-bom", "version": "5.10.1", "debian": "5.9.2",
                                "manage": True}]
    assert plan["managed"] == [{"groupId": "org.junit.jupiter", "artifactId": "junit-jupiter", "version": "5.9.2"}]
    assert "io.netty:netty-bom:4.1.100.Final (bom) -> a stand-in POM (not in Debian)" in notes[0]


def _view(tmp_path: Path, files: dict[str, str]) -> RepoView:
    r = tmp_path / "r"
    for rel, text in files.items():
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        (r / rel).write_text(text)
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b",
           "HOME": str(r), "PATH": "/usr/bin:/bin"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(r), *cmd], check=True, env=env)
    sha = subprocess.run(["git", "-C", str(r), "rev-parse", "HEAD"], check=True, capture_output=True, text=True,
                         env=env).stdout.strip()
    return RepoView(r, sha)


def test_the_recipe_substitutes_in_a_task_step_and_runs_against_that_repository(index, tmp_path):
    view = _view(tmp_path, {"pom.xml": CODEC, "src/main/java/A.java": "class A {}"})
    recipe = Java().recipe(view)
    assert recipe.options == {"repo": "/opt/envgen/m2", "junit": "junit5"}
    assert [s.name for s in recipe.steps] == ["debian-libraries"]
    assert "libcommons-parent-java" in recipe.steps[0].run and "junit5" not in recipe.steps[0].run  # jdk layer's
    assert recipe.steps[0].run.startswith("dpkg -s ")  # no index fetched when all are there
    assert [s.name for s in recipe.task_steps] == ["debian-versions", "check"]
    words = shlex.split(recipe.task_steps[0].run)
    plan = json.loads(words[words.index("envgen_verifiers.runners.java_debian") + 1])
    assert plan["to"] == "/opt/envgen/m2" and plan["aliases"][0]["version"] == "58"
    assert "-Dmaven.repo.local=/opt/envgen/m2" in recipe.task_steps[0].run and "test-compile" in words
    assert "-Dmaven.repo.local=/opt/envgen/m2" in recipe.task_steps[1].run


def test_a_dependency_debian_does_not_package_is_rejected_before_any_build(index, tmp_path):
    pom = CODEC.replace("  </dependencies>", "<dependency><groupId>org.junit-pioneer</groupId><artifactId>"
                        "junit-pioneer</artifactId><scope>test</scope></dependency></dependencies>")
    with pytest.raises(InputError, match=r"^dependencies with no Debian counterpart: org.junit-pioneer:junit-pioneer "
                                         r"\(no Debian package ships them in /usr/share/maven-repo; set "
                                         r"ENVGEN_MAVEN_MIRROR"):
        Java().recipe(_view(tmp_path, {"pom.xml": pom}))


def test_without_a_contents_index_nothing_is_substituted(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVGEN_DEBIAN_CONTENTS", str(tmp_path / "missing.gz"))
    monkeypatch.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))
    recipe = Java().recipe(_view(tmp_path, {"pom.xml": DEBIAN_VERSIONS_POM}))
    assert recipe.options["repo"] == "/usr/share/maven-repo" and [s.name for s in recipe.task_steps] == ["check"]
    assert any(n.startswith("versions not substituted: Debian's Contents index") for n in recipe.notes)


def _debian_repo(root: Path) -> Path:
    """A repository laid out as Debian's: commons-parent 56 (managing a plugin, version-less), junit 4.13.2."""
    parent = root / "org/apache/commons/commons-parent/56"
    parent.mkdir(parents=True)
    (parent / "commons-parent-56.pom").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><groupId>org.apache.commons</groupId>'
        "<artifactId>commons-parent</artifactId><version>56</version><packaging>pom</packaging>"
        "<properties><commons.junit.version>5.9.2</commons.junit.version></properties>"
        "<build><pluginManagement><plugins><plugin><groupId>org.apache.felix</groupId>"
        "<artifactId>maven-bundle-plugin</artifactId></plugin></plugins></pluginManagement></build></project>")
    (parent / "commons-parent-56-site.xml").write_text("<project/>")
    junit = root / "junit/junit/4.13.2"
    junit.mkdir(parents=True)
    (junit / "junit-4.13.2.pom").write_text("<project><groupId>junit</groupId><artifactId>junit</artifactId>"
                                            "<version>4.13.2</version></project>")
    (junit / "junit-4.13.2.jar").write_bytes(b"PK")
    return root


def test_the_kit_builds_the_substituted_repository(tmp_path):
    src = _debian_repo(tmp_path / "debian")
    plan = {"from": str(src), "to": str(tmp_path / "m2"),
            "aliases": [{"group": "org.apache.commons", "artifact": "commons-parent", "version": "58", "debian": "56",
                         "manage": True},
                        {"group": "junit", "artifact": "junit", "version": "4.12", "debian": "4.13.2"}],
            "standins": [{"group": "io.netty", "artifact": "netty-bom", "version": "4.1.100.Final"}],
            "managed": [{"groupId": "org.junit.jupiter", "artifactId": "junit-jupiter", "version": "5.9.2"}],
            "properties": {"commons.junit.version": "5.9.2", "commons.hamcrest.version": "2.2"}}
    lines = java_debian.apply(plan)
    assert lines == ["org.apache.commons:commons-parent:58 <- Debian's 56", "junit:junit:4.12 <- Debian's 4.13.2",
                     "io.netty:netty-bom:4.1.100.Final <- a stand-in POM (Debian has no io.netty:netty-bom)"]
    m2 = tmp_path / "m2"
    assert (m2 / "junit/junit/4.13.2/junit-4.13.2.jar").is_symlink()  # Debian's own, linked
    assert (m2 / "junit/junit/4.12/junit-4.12.jar").resolve() == (src / "junit/junit/4.13.2/junit-4.13.2.jar")
    assert ET.parse(m2 / "junit/junit/4.12/junit-4.12.pom").getroot().findtext("version") == "4.12"
    assert (m2 / "org/apache/commons/commons-parent/58/commons-parent-58-site.xml").is_symlink()
    for path in (m2 / "org/apache/commons/commons-parent/58/commons-parent-58.pom",
                 m2 / "io/netty/netty-bom/4.1.100.Final/netty-bom-4.1.100.Final.pom"):
        root = ET.parse(path).getroot()
        assert root.findtext(NS + "version") == path.parent.name
        (dep,) = root.findall(f"{NS}dependencyManagement/{NS}dependencies/{NS}dependency")
        assert [dep.findtext(NS + k) for k in ("groupId", "artifactId", "version")] == \
            ["org.junit.jupiter", "junit-jupiter", "5.9.2"]
        assert root.findtext(f"{NS}properties/{NS}commons.hamcrest.version") == "2.2"
    # a plugin Maven finds no version for gets one in the stand-in parent's own entry (Maven keeps the last)
    assert java_debian.manage_plugin(plan, "org.apache.felix", "maven-bundle-plugin", java_debian.NOOP_VERSION)
    root = ET.parse(m2 / "org/apache/commons/commons-parent/58/commons-parent-58.pom").getroot()
    (plugin,) = root.iter(NS + "plugin")
    assert plugin.findtext(NS + "version") == java_debian.NOOP_VERSION
    assert "envgen" not in (src / "org/apache/commons/commons-parent/56/commons-parent-56.pom").read_text()  # untouched


def test_mavens_words_for_what_it_could_not_resolve_are_read():
    """Maven 3.8's own lines (commons-codec in the jdk image)."""
    log = ("[ERROR] Error resolving version for plugin 'org.apache.rat:apache-rat-plugin' from the repositories "
           "[local (/opt/envgen/m2), central (https://repo.maven.apache.org/maven2)]: Plugin not found in any plugin "
           "repository -> [Help 1]\n"
           "[ERROR] Failed to execute goal org.apache.felix:maven-bundle-plugin:0-envgen-ignored:manifest "
           "(bundle-manifest) on project commons-codec: Execution bundle-manifest of goal org.apache.felix:maven-"
           "bundle-plugin:0-envgen-ignored:manifest failed: Plugin org.apache.felix:maven-bundle-plugin:0-envgen-"
           "ignored or one of its dependencies could not be resolved: Cannot access central (https://repo.maven."
           "apache.org/maven2) in offline mode and the artifact org.codehaus.plexus:plexus-utils:jar:1.1 has not "
           "been downloaded from it before. -> [Help 1]\n"
           "[ERROR] Could not find goal 'check' in plugin org.apache.rat:apache-rat-plugin:0-envgen-ignored among "
           "available goals -> [Help 1]\n")
    assert java_debian._UNVERSIONED.findall(log) == [("org.apache.rat", "apache-rat-plugin")]
    assert java_debian._PLUGIN.findall(log) == [("org.apache.felix", "maven-bundle-plugin", "0-envgen-ignored")]
    assert ("org.codehaus.plexus", "plexus-utils", "1.1") in java_debian._ARTIFACT.findall(log)
    assert java_debian._GOAL.findall(log) == [("check", "org.apache.rat", "apache-rat-plugin", "0-envgen-ignored")]
