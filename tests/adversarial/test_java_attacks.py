"""Attacks on a Java (Maven/Surefire) task's test run: submissions that try to score 1 without fixing anything.

The pack is built from ``slugs`` (tests/java_repo.py) with the local backend; the task is to make
``Slug.of`` keep digits, FAIL_TO_PASS is the hidden ``SlugTest.keepsDigits``. Each attack is a patch
over the base commit submitted in a local-sandbox episode, and must score 0; a genuine fix that also
edits the build file and the test file still scores 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from envgen.episodes.episode import Episode
from envgen.families.code import build_code
from envgen.pack import load
from envgen.sandbox import open_sandbox

from java_repo import POM, SLUG, SLUG_PATH, SLUG_TEST_PATH, make_slugs_repo

pytestmark = [pytest.mark.skipif(not (shutil.which("mvn") and shutil.which("javac")),
                                 reason="needs a JDK and Maven (apt-get install default-jdk-headless maven)"),
              pytest.mark.timeout(900)]

FIXED_SLUG = SLUG.replace('"[^a-z]+"', '"[^a-z0-9]+"')

PASSING_SLUG_TEST = """\
package com.acme.text;

import org.junit.jupiter.api.Test;

class SlugTest {
    @Test
    void keepsDigits() {
    }

    @Test
    void lowercasesWords() {
    }
}
"""

SKIPPING_POM = POM.replace("</dependencies>", """</dependencies>
  <build>
    <plugins>
      <plugin>
        <artifactId>maven-surefire-plugin</artifactId>
        <configuration>
          <skipTests>true</skipTests>
          <testFailureIgnore>true</testFailureIgnore>
          <excludes><exclude>**/SlugTest.java</exclude></excludes>
        </configuration>
      </plugin>
    </plugins>
  </build>""")

SHADOW_ASSERTIONS = """\
package org.junit.jupiter.api;

/** Every assertion passes: the project's classes come before JUnit's jar on the test class path. */
public final class Assertions {
    private Assertions() {
    }

    public static void assertEquals(Object expected, Object actual) {
    }

    public static void assertEquals(int expected, int actual) {
    }

    public static void fail(String message) {
    }
}
"""

REWRITER = ("for i in $(seq 400); do "
            "for f in target/surefire-reports/TEST-com.acme.text.SlugTest*.xml; do "
            "[ -f \\\"$f\\\" ] && sed -i -e '/<failure/,/<\\\\/failure>/d' -e 's/failures=\\\"[0-9]*\\\"/failures=\\\"0\\\"/' \\\"$f\\\"; "
            "done; sleep 0.02; done")

BACKGROUND_SLUG = SLUG.replace("    private Slug() {\n    }\n", """\
    static {
        try {
            java.io.File reports = new java.io.File("target/surefire-reports");
            reports.mkdirs();
            java.nio.file.Files.writeString(reports.toPath().resolve("TEST-com.acme.text.SlugTest.xml"),
                "<testsuite name=\\"com.acme.text.SlugTest\\" tests=\\"1\\"><testcase name=\\"keepsDigits\\" "
                + "classname=\\"com.acme.text.SlugTest\\"/></testsuite>");
            new ProcessBuilder("setsid", "sh", "-c", "REWRITER").inheritIO().start();
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    private Slug() {
    }
""".replace("REWRITER", REWRITER))

EXITING_SLUG = SLUG.replace("    private Slug() {\n    }\n", """\
    static {
        Runtime.getRuntime().halt(0);
    }

    private Slug() {
    }
""")

ATTACKS = {
    "rewrite-the-test-file": {SLUG_TEST_PATH: PASSING_SLUG_TEST},
    "delete-the-test-file": {SLUG_TEST_PATH: None},
    "pom-skips-and-excludes-tests": {"pom.xml": SKIPPING_POM},
    "maven-config-selects-no-test": {".mvn/maven.config": "-ntp\n-DskipTests\n-Dtest=NoSuchTest\n",
                                     ".mvn/jvm.config": "-Dsurefire.skip=true\n"},
    "test-resources-redefine-the-run": {"src/test/resources/junit-platform.properties":
                                        "junit.jupiter.conditions.deactivate=*\n"
                                        "junit.jupiter.extensions.autodetection.enabled=true\n"},
    "shadow-junit-assertions": {"src/main/java/org/junit/jupiter/api/Assertions.java": SHADOW_ASSERTIONS},
    "fake-and-rewritten-reports-from-a-background-process": {SLUG_PATH: BACKGROUND_SLUG},
    "exit-the-test-jvm-early": {SLUG_PATH: EXITING_SLUG},
}


def _git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo)})
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("java-attacks")
    shas = make_slugs_repo(root / "slugs")
    report = build_code(f"git:{root / 'slugs'}", root / "out", backend="local", store=root / "state.sqlite",
                        runs=1, gate=False, log=lambda m: None)
    name = f"slugs-{shas['fix'][:12]}"
    assert name in report.packs, report.rejections
    pack = load(root / "out" / name)
    work = root / "work"
    _git(root, "clone", "-q", str(root / "slugs"), str(work))
    _git(work, "checkout", "-q", shas["initial"])
    return pack, work


def submission(work: Path, files: dict) -> str:
    """The patch over the base commit that writes (or, for None, deletes) these files."""
    _git(work, "reset", "-q", "--hard")
    _git(work, "clean", "-qfdx")
    for rel, text in files.items():
        p = work / rel
        if text is None:
            p.unlink()
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
    _git(work, "add", "-A")
    return _git(work, "diff", "--cached", "--binary")


def score(pack, patch: str):
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, pack.tasks[0])
        assert ep.call("submit", {"patch": patch}).ok
        return ep.finish("done")


RESTORED = {
    "rewrite-the-test-file": [SLUG_TEST_PATH], "delete-the-test-file": [SLUG_TEST_PATH],
    "pom-skips-and-excludes-tests": ["pom.xml"], "maven-config-selects-no-test": [".mvn/jvm.config", ".mvn/maven.config"],
    "test-resources-redefine-the-run": ["src/test/resources/junit-platform.properties"],
    "shadow-junit-assertions": ["src/main/java/org/junit/jupiter/api/Assertions.java"],
}
"""The paths the verifier puts back (base + test patch) before the run, by attack."""


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_scores_zero(task, attack):
    pack, work = task
    verdict = score(pack, submission(work, ATTACKS[attack]))
    assert verdict.reward == 0.0, (attack, verdict.details)
    assert verdict.details["FAIL_TO_PASS"] == "0/1" and verdict.details["canary"] in ("failed", "missing")
    assert sorted(verdict.details.get("restored", [])) == RESTORED.get(attack, [])
    if attack.startswith("fake-and-rewritten"):
        # the background process stripped the failures from the run's own report the moment Surefire wrote
        # it: the report disagrees with the failure count Surefire printed, so none of its tests passed
        assert verdict.details["PASS_TO_PASS"] == "0/6" and verdict.details["report"] == "junit"
    if attack == "exit-the-test-jvm-early":
        assert verdict.details["PASS_TO_PASS"] == "0/6"


def test_a_real_fix_that_also_edits_the_build_and_the_test_file_still_scores_one(task):
    pack, work = task
    verdict = score(pack, submission(work, {SLUG_PATH: FIXED_SLUG, "pom.xml": SKIPPING_POM,
                                            SLUG_TEST_PATH: PASSING_SLUG_TEST}))
    assert verdict.reward == 1.0, verdict.details
    assert sorted(verdict.details["restored"]) == ["pom.xml", SLUG_TEST_PATH]
