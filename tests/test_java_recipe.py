"""The Java language on the host: detection, test/code paths, runnable test classes and the recipe's choices
and rejections, on small git repositories made here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envgen.errors import InputError
from envgen.families.code.java import Java
from envgen.families.code.lang import RepoView
from envgen.families.code.languages import detect_language

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>com.acme</groupId><artifactId>{name}</artifactId><version>1.0</version>
<properties>{props}</properties>{modules}
<dependencies>{deps}</dependencies>{build}</project>"""


def pom(name="app", props="", modules="", deps="", build=""):
    return POM.format(name=name, props=props, modules=modules, deps=deps, build=build)


def dep(g, a, v="${v}"):
    return f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"


def repo(tmp_path: Path, files: dict[str, str]) -> RepoView:
    r = tmp_path / "r"
    for rel, text in files.items():
        p = r / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b",
           "HOME": str(r), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(r)], check=True, env=env)
    subprocess.run(["git", "-C", str(r), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(r), "commit", "-qm", "x"], check=True, env=env)
    sha = subprocess.run(["git", "-C", str(r), "rev-parse", "HEAD"], check=True, capture_output=True, text=True,
                         env=env).stdout.strip()
    return RepoView(r, sha)


def test_a_multi_module_project_with_debian_libraries(tmp_path):
    view = repo(tmp_path, {
        "pom.xml": pom(props="<maven.compiler.source>11</maven.compiler.source><v>4.13.2</v>",
                       modules="<modules><module>core</module></modules>"),
        "core/pom.xml": pom("core", deps=dep("junit", "junit") + dep("org.mockito", "mockito-core", "2.23.0")
                            + dep("org.assertj", "assertj-core", "3.14.0")),
        "core/src/main/java/com/acme/A.java": "package com.acme; class A {}",
        "core/src/main/java/com/acme/B.java": "package com.acme; class B {}",
        "core/src/test/java/com/acme/ATest.java": "package com.acme; class ATest {}",
        "scripts/helper.py": "print(1)\n",
    })
    lang = detect_language(view)
    assert lang.name == "java"
    recipe = lang.recipe(view)
    assert recipe.options == {"repo": "/usr/share/maven-repo", "junit": "junit4"}
    assert [s.name for s in recipe.steps] == ["debian-libraries"]
    assert "libassertj-core-java libmockito-java" in recipe.steps[0].run
    assert any("read 2 POM(s): pom.xml, core/pom.xml" in n for n in recipe.notes)


@pytest.mark.parametrize("props,build,why", [
    ("<maven.compiler.release>21</maven.compiler.release>", "", "needs Java 21 (pom.xml <maven.compiler.release>)"),
    ("<java.version>1.6</java.version>", "<build><plugins><plugin><artifactId>maven-compiler-plugin</artifactId>"
     "<configuration><source>${java.version}</source></configuration></plugin></plugins></build>",
     "targets Java 1.6 (pom.xml maven-compiler-plugin <source>)"),
])
def test_a_java_level_the_jdk_layer_cannot_build_is_rejected(tmp_path, props, build, why):
    view = repo(tmp_path, {"pom.xml": pom(props=props, build=build)})
    with pytest.raises(InputError, match=why.replace("(", r"\(").replace(")", r"\)")):
        Java().recipe(view)


@pytest.mark.parametrize("files,why", [
    ({"gradle/wrapper/gradle-wrapper.properties": "distributionUrl=https\\://example.invalid/gradle-8.5-bin.zip\n"},
     r"Gradle project: building it needs its wrapper's Gradle 8\.5"),
    ({"build.gradle.kts": "plugins { java }\n"}, r"Kotlin build script"),
    ({"build.gradle": "apply plugin: 'java'\ntest { useJUnitPlatform() }\n"}, r"JUnit 5 \(useJUnitPlatform\)"),
    ({"build.gradle": "plugins { id 'java'\n id 'org.springframework.boot' version '3.2.0' }\n"},
     r"plugins from the Gradle plugin portal \(org.springframework.boot\)"),
])
def test_a_gradle_build_debians_gradle_cannot_run_is_rejected_with_the_reason(tmp_path, files, why):
    view = repo(tmp_path, {"build.gradle": "plugins { id 'java' }\n", "src/main/java/A.java": "class A {}", **files})
    assert detect_language(view).name == "java"
    with pytest.raises(InputError, match=why):
        Java().recipe(view)


def test_a_plain_gradle_build_runs_with_debians_gradle(tmp_path):
    view = repo(tmp_path, {"build.gradle": "apply plugin: 'java'\nrepositories { mavenCentral() }\ndependencies {\n"
                                           "  testCompile 'junit:junit:4.13.2'\n"
                                           "  testCompile 'org.mockito:mockito-core:2.23.0'\n}\n",
                           "gradle/wrapper/gradle-wrapper.properties": "distributionUrl=x/gradle-4.4.1-bin.zip\n",
                           "src/main/java/A.java": "class A {}"})
    recipe = Java().recipe(view)
    assert (recipe.framework, recipe.toolchains) == ("gradle", ("gradle", "jdk"))
    assert recipe.options == {"repo": "/usr/share/maven-repo", "junit": "junit4"}
    assert [s.name for s in recipe.steps] == ["debian-libraries"] and "libmockito-java" in recipe.steps[0].run


def test_test_and_code_paths_and_runnable_test_classes():
    java = Java()
    assert java.is_test_path("core/src/test/java/com/acme/ATest.java")
    assert java.is_test_path("src/test/resources/data.json") and java.is_test_path("pom.xml")
    assert java.is_test_path(".mvn/maven.config") and java.is_test_path("build.gradle.kts")
    assert not java.is_test_path("src/main/java/com/acme/Test.java".replace("Test.java", "Parser.java"))
    assert java.is_code_path("src/main/java/com/acme/Parser.java") and not java.is_code_path("README.md")
    after = {"src/test/java/a/FooTest.java", "src/test/java/a/TestBar.java", "src/test/java/a/Helper.java",
             "src/test/java/a/AbstractBaseTest.java", "src/test/java/a/BazIT.java", "src/test/java/a/QuxTests.java",
             "src/test/resources/x.txt"}
    assert Java().runnable_tests(sorted(after) + ["src/test/java/a/GoneTest.java"], after) == [
        "src/test/java/a/FooTest.java", "src/test/java/a/QuxTests.java", "src/test/java/a/TestBar.java"]
