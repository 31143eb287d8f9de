"""The Java runners' report parsing, on real Surefire reports and console output (tests/fixtures/reports/java,
made by running the kit's Maven command on small JUnit 5, JUnit 4 and TestNG projects with Debian's Maven
repository), and the runner's test-file mapping, infrastructure paths and canary."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verifiers"))

from envgen_verifiers.runners import get  # noqa: E402
from envgen_verifiers.runners.java import Maven, class_of, file_of, framework_of, java_infrastructure, parse_console  # noqa: E402
from envgen_verifiers.tests import first_error, is_changed  # noqa: E402

SAMPLES = Path(__file__).parent / "fixtures" / "reports" / "java"


def parse(kind: str, tmp_path: Path, *, drop_reports: bool = False):
    """The runner's parse of a sample, its reports in a report directory named as the run that wrote them."""
    rd = tmp_path / "envgen-report-SAMPLE"
    rd.mkdir()
    if not drop_reports:
        for p in (SAMPLES / kind).glob("TEST-*.xml"):
            shutil.copy(p, rd / p.name)
    text = (SAMPLES / kind / "console.txt").read_text(encoding="utf-8")
    return Maven().parse(str(rd), text, [], {})


def test_maven_is_the_runner_of_the_maven_framework():
    assert isinstance(get("maven"), Maven) and get("gradle").framework == "gradle"


def test_junit5_report_gives_every_outcome_with_nested_and_parameterised_ids(tmp_path):
    outcomes, messages, source = parse("junit5", tmp_path)
    assert source == "junit"
    assert outcomes == {
        "com.acme.CalcTest.add": "passed", "com.acme.CalcTest.bad": "failed", "com.acme.CalcTest.boom": "error",
        "com.acme.CalcTest.skipped": "skipped", "com.acme.CalcTest.assumed": "skipped",
        "com.acme.CalcTest.named": "passed", "com.acme.CalcTest$Inner.deep": "passed",
        "com.acme.CalcTest.positive{int}[1]": "passed", "com.acme.CalcTest.positive{int}[2]": "passed",
        "com.acme.CalcTest.positive{int}[3]": "failed"}
    assert messages["com.acme.CalcTest.bad"] == "expected: <héllo ✓ 日本> but was: <x>"
    assert messages["com.acme.CalcTest.boom"] == "kaboom ✗"


def test_junit4_report_with_parameterized_runner_ignore_and_errors(tmp_path):
    outcomes, messages, source = parse("junit4", tmp_path)
    assert source == "junit"
    assert outcomes == {
        "com.acme.CalcTest.adds": "passed", "com.acme.CalcTest.failsWithUnicode": "failed",
        "com.acme.CalcTest.errors": "error", "com.acme.CalcTest.ignored": "skipped",
        "com.acme.CalcTest.printsUnicode": "passed", "com.acme.SumParamTest.sums[0]": "passed",
        "com.acme.SumParamTest.sums[1]": "passed", "com.acme.SumParamTest.sums[2]": "failed"}
    assert "ïve ✓ 日本" in messages["com.acme.CalcTest.failsWithUnicode"]
    assert messages["com.acme.CalcTest.errors"] == "état invalide"


def test_testng_report_merges_data_provider_rows_failed_if_any_failed(tmp_path):
    outcomes, messages, source = parse("testng", tmp_path)
    assert source == "junit"
    assert outcomes == {
        "com.acme.CalcNgTest.adds": "passed", "com.acme.CalcNgTest.doubles": "failed",
        "com.acme.CalcNgTest.errors": "failed", "com.acme.CalcNgTest.failsWithUnicode": "failed",
        "com.acme.CalcNgTest.skipped": "skipped"}
    assert messages["com.acme.CalcNgTest.doubles"] == "expected [7] but found [6]"


@pytest.mark.parametrize("kind,failing", [
    ("junit5", {"com.acme.CalcTest.bad": "failed", "com.acme.CalcTest.boom": "error",
                "com.acme.CalcTest.positive{int}[3]": "failed"}),
    ("junit4", {"com.acme.CalcTest.errors": "error", "com.acme.CalcTest.failsWithUnicode": "failed",
                "com.acme.SumParamTest.sums[2]": "failed"}),
    ("testng", {"com.acme.CalcNgTest.doubles": "failed", "com.acme.CalcNgTest.errors": "failed",
                "com.acme.CalcNgTest.failsWithUnicode": "failed"}),
])
def test_console_fallback_names_the_failures_surefire_printed(tmp_path, kind, failing):
    outcomes, messages, source = parse(kind, tmp_path, drop_reports=True)
    assert (outcomes, source) == (failing, "console")
    assert parse_console((SAMPLES / kind / "console.txt").read_text(encoding="utf-8")) == failing


def test_a_report_without_this_runs_suffix_is_not_read(tmp_path):
    rd = tmp_path / "envgen-report-OTHER"
    rd.mkdir()
    for p in (SAMPLES / "junit5").glob("TEST-*.xml"):
        shutil.copy(p, rd / p.name)  # written by another run (the suffix names SAMPLE): a planted report
    outcomes, _, source = Maven().parse(str(rd), "", [], {})
    assert all("(envgenreportSAMPLE)" in t for t in outcomes) and source == "junit"
    # the run-and-collect step only copies reports that carry the run's suffix
    tree = tmp_path / "tree"
    (tree / "target" / "surefire-reports").mkdir(parents=True)
    for p in (SAMPLES / "junit5").glob("TEST-*.xml"):
        shutil.copy(p, tree / "target" / "surefire-reports" / p.name)
    dest = tmp_path / "envgen-report-FRESH"
    dest.mkdir()
    import subprocess

    from envgen_verifiers.runners.java import wrap
    cmd = wrap(str(tree), str(dest), "maven", Maven().suffix(str(dest)), ["true"])
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0 and "envgen: 0 report file(s)" in out.stdout and not list(dest.iterdir())


def test_a_build_that_fails_to_compile_reports_no_test_and_names_the_error(tmp_path):
    outcomes, _, source = parse("compile-error", tmp_path)
    assert (outcomes, source) == ({}, "console")
    text = (SAMPLES / "compile-error" / "console.txt").read_text()
    assert first_error(text) == ("envgen: the build failed (exit 1): [ERROR] src/test/java/com/acme/CalcTest.java:"
                                 "[6,44] cannot find symbol")


def test_ids_map_to_the_run_file_of_their_outer_class():
    files = ["core/src/test/java/com/acme/CalcTest.java", "core/src/test/java/com/acme/SumParamTest.java"]
    assert file_of("com.acme.CalcTest.add", files) == files[0]
    assert file_of("com.acme.CalcTest$Inner.deep", files) == files[0]
    assert file_of("com.acme.SumParamTest.sums[2]", files) == files[1]
    assert file_of("com.acme.CalcTest.positive{int}[1]", files) == files[0]
    assert file_of("org.other.Missing.x", files) == ""
    changes = {"files": {files[1]: "all"}, "dirs": []}
    assert is_changed("com.acme.SumParamTest.sums[0]", changes, files, "maven")
    assert not is_changed("com.acme.CalcTest.add", changes, files, "maven")


@pytest.mark.parametrize("path,infra", [
    ("pom.xml", True), ("core/pom.xml", True), ("build.gradle.kts", True), ("settings.gradle", True),
    (".mvn/maven.config", True), (".mvn/extensions.xml", True), ("gradle/wrapper/gradle-wrapper.properties", True),
    ("src/test/java/com/acme/CalcTest.java", True), ("core/src/test/resources/data.json", True),
    ("src/main/resources/junit-platform.properties", True),
    ("src/main/resources/META-INF/services/org.junit.jupiter.api.extension.Extension", True),
    ("src/main/resources/META-INF/services/org.junit.platform.engine.TestEngine", True),
    ("src/main/java/org/junit/Assert.java", True), ("src/main/java/org/junit/jupiter/api/Assertions.java", True),
    ("lib/src/main/java/org/hamcrest/Matchers.java", True),
    ("src/main/java/com/acme/Calc.java", False), ("src/main/resources/app.properties", False),
    ("src/main/resources/META-INF/services/com.acme.Plugin", False), ("README.md", False),
    ("docs/testing.md", False),
])
def test_infrastructure_paths(path, infra):
    assert java_infrastructure(path) is infra
    assert Maven().infrastructure(path, {}) is infra


def test_class_and_framework_of_a_test_file(tmp_path):
    src = tmp_path / "src" / "test" / "java" / "com" / "acme"
    src.mkdir(parents=True)
    (src / "A5Test.java").write_text("package com.acme;\nimport org.junit.jupiter.api.Test;\nclass A5Test {}\n")
    (src / "A4Test.java").write_text("package com.acme;\n\nimport org.junit.Test;\npublic class A4Test {}\n")
    (src / "NgTest.java").write_text("// no package line\nimport org.testng.annotations.Test;\n")
    t = str(tmp_path)
    assert class_of(t, "src/test/java/com/acme/A5Test.java") == "com.acme.A5Test"
    assert class_of(t, "src/test/java/com/acme/NgTest.java") == "NgTest"
    assert class_of(t, "src/test/java/com/acme/Gone.java") == "com.acme.Gone"  # not on disk: from its path
    assert framework_of(t, ["src/test/java/com/acme/A5Test.java"], {}) == "junit5"
    assert framework_of(t, ["src/test/java/com/acme/A4Test.java"], {}) == "junit4"
    assert framework_of(t, ["src/test/java/com/acme/NgTest.java"], {}) == "testng"
    assert framework_of(t, ["src/test/java/com/acme/Gone.java"], {"junit": "junit5"}) == "junit5"
    path, text = Maven().canary(t, ["src/test/java/com/acme/A4Test.java"], "ab12", {})
    assert path == "src/test/java/com/acme/EnvgenCanaryab12Test.java"
    assert text.startswith("package com.acme;\n") and "org.junit.Assert.fail" in text


def test_the_maven_command_runs_only_the_task_classes_offline_with_skips_pinned(tmp_path):
    (tmp_path / "pom.xml").write_text("<project/>")
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "pom.xml").write_text("<project/>")
    (cmd,) = Maven().commands(str(tmp_path), ["core/src/test/java/com/acme/CalcTest.java"],
                              str(tmp_path / "envgen-report-x1"), {"repo": "/r"})
    mvn = cmd[cmd.index("--") + 1:]
    assert mvn[:5] == ["mvn", "-o", "-B", "-ntp", "-Dmaven.repo.local=/r"]
    assert ["-pl", "core", "-am"] == mvn[5:8] and "test" in mvn
    assert "-Dtest=com.acme.CalcTest,com.acme.CalcTest$*" in mvn
    for flag in ("-DskipTests=false", "-Dmaven.test.skip=false", "-Dmaven.test.skip.exec=false",
                 "-Dmaven.test.failure.ignore=true", "-Dsurefire.rerunFailingTestsCount=0",
                 "-Dsurefire.reportNameSuffix=envgenreportx1"):
        assert flag in mvn


def test_a_report_rewritten_to_fewer_failures_than_surefire_printed_counts_for_nothing(tmp_path):
    import re

    rd = tmp_path / "envgen-report-SAMPLE"
    rd.mkdir()
    (report,) = (SAMPLES / "junit5").glob("TEST-*.xml")
    text = report.read_text(encoding="utf-8")
    forged = re.sub(r"<(failure|error)\b.*?</\1>", "", text, flags=re.S)  # every test passed, says the file
    (rd / report.name).write_text(forged, encoding="utf-8")
    console = (SAMPLES / "junit5" / "console.txt").read_text(encoding="utf-8")
    outcomes, messages, _ = Maven().parse(str(rd), console, [], {})
    assert set(outcomes.values()) == {"error"} and len(outcomes) == 10
    assert "rewritten" in messages["com.acme.CalcTest.add"]
    # the same file with the console of a run that printed no failure for the class is believed
    clean = "\n".join(ln for ln in console.splitlines() if "<<<" not in ln or " - in " in ln)
    outcomes, _, _ = Maven().parse(str(rd), clean.replace("Failures: 2, Errors: 1", "Failures: 0, Errors: 0"), [], {})
    assert outcomes["com.acme.CalcTest.bad"] == "passed"


def test_gradle_junit_xml_and_its_console(tmp_path):
    from envgen_verifiers.runners.java import Gradle

    rd = tmp_path / "envgen-report-G"
    rd.mkdir()
    for p in (SAMPLES / "gradle-junit4").glob("TEST-*.xml"):
        shutil.copy(p, rd / p.name)
    console = (SAMPLES / "gradle-junit4" / "console.txt").read_text(encoding="utf-8")
    outcomes, messages, source = Gradle().parse(str(rd), console, [], {})
    assert source == "junit"
    assert outcomes == {
        "com.acme.CalcTest.adds": "passed", "com.acme.CalcTest.failsWithUnicode": "failed",
        "com.acme.CalcTest.errors": "failed", "com.acme.CalcTest.ignored": "skipped",
        "com.acme.CalcTest.printsUnicode": "passed", "com.acme.SumParamTest.sums[0]": "passed",
        "com.acme.SumParamTest.sums[1]": "passed", "com.acme.SumParamTest.sums[2]": "failed"}
    assert "ïve ✓ 日本" in messages["com.acme.CalcTest.failsWithUnicode"]
    # without reports, Gradle's console names the failures
    empty = tmp_path / "none"
    empty.mkdir()
    assert Gradle().parse(str(empty), console, [], {}) == (
        {"com.acme.CalcTest.errors": "failed", "com.acme.CalcTest.failsWithUnicode": "failed",
         "com.acme.SumParamTest.sums[2]": "failed"}, {}, "console")
    # a report rewritten to pass a test Gradle printed as failed does not make it pass
    import re

    for p in rd.iterdir():
        p.write_text(re.sub(r"<failure\b.*?</failure>", "", p.read_text(encoding="utf-8"), flags=re.S), encoding="utf-8")
    outcomes, _, _ = Gradle().parse(str(rd), console, [], {})
    assert outcomes["com.acme.SumParamTest.sums[2]"] == "failed" and outcomes["com.acme.SumParamTest.sums[0]"] == "passed"


def test_the_gradle_command_is_offline_with_an_init_script_for_the_offline_repository(tmp_path):
    from envgen_verifiers.runners.java import Gradle

    (tmp_path / "build.gradle").write_text("apply plugin: 'java'\n")
    rd = tmp_path / "envgen-report-g"
    rd.mkdir()
    (cmd,) = Gradle().commands(str(tmp_path), ["src/test/java/com/acme/CalcTest.java"], str(rd), {})
    gradle = cmd[cmd.index("--") + 1:]
    assert gradle[:5] == ["gradle", "--offline", "--no-daemon", "--console=plain", "--continue"]
    assert gradle[-3:] == ["test", "--tests", "com.acme.CalcTest"]
    init = (rd / "envgen-init.gradle").read_text()
    assert "maven { url 'file:///usr/share/maven-repo' }" in init and "repositories.clear()" in init


def test_a_failure_moved_to_another_test_in_a_rewritten_report_is_still_seen(tmp_path):
    rd = tmp_path / "envgen-report-SAMPLE"
    rd.mkdir()
    (report,) = (SAMPLES / "junit4").glob("TEST-com.acme.SumParamTest*.xml")
    text = report.read_text(encoding="utf-8")
    # same failure count, on a test that does not exist: sums[2] "passes"
    forged = text.replace('name="sums[2]"', 'name="sums[9]"')
    (rd / report.name).write_text(forged, encoding="utf-8")
    console = (SAMPLES / "junit4" / "console.txt").read_text(encoding="utf-8")
    outcomes, messages, _ = Maven().parse(str(rd), console, [], {})
    assert outcomes["com.acme.SumParamTest.sums[2]"] == "failed"
    assert messages["com.acme.SumParamTest.sums[2]"] == "Surefire printed this test as failing"


def test_a_nested_class_failure_printed_under_its_outer_class_adds_no_test(tmp_path):
    rd = tmp_path / "envgen-report-SAMPLE"
    rd.mkdir()
    (report,) = (SAMPLES / "junit5").glob("TEST-*.xml")
    text = report.read_text(encoding="utf-8").replace(
        '<testcase name="deep" classname="com.acme.CalcTest$Inner(envgenreportSAMPLE)" time="0.096"/>',
        '<testcase name="deep" classname="com.acme.CalcTest$Inner(envgenreportSAMPLE)" time="0.096">'
        '<failure message="no">x</failure></testcase>')
    (rd / report.name).write_text(text, encoding="utf-8")
    console = (SAMPLES / "junit5" / "console.txt").read_text(encoding="utf-8").replace(
        "Failures: 2, Errors: 1", "Failures: 3, Errors: 1").replace(
        "[ERROR] boom ", "[ERROR] deep  Time elapsed: 0.1 s  <<< FAILURE!\n[ERROR] boom ")
    outcomes, _, _ = Maven().parse(str(rd), console, [], {})
    assert outcomes["com.acme.CalcTest$Inner.deep"] == "failed" and "com.acme.CalcTest.deep" not in outcomes
    assert outcomes["com.acme.CalcTest.add"] == "passed"


def test_a_failure_gradle_did_not_print_is_in_a_report_it_did_not_write(tmp_path):
    """Gradle prints every failing test (the init script asks for it; the test worker's own output never reaches
    its console): a report that names a failure Gradle did not print was written by someone else, and that test
    counts as not reported (a forged canary failure is a missing canary)."""
    from envgen_verifiers.runners.java import GRADLE_INIT, Gradle

    assert "testLogging { events 'failed' }" in GRADLE_INIT and "ignoreFailures = false" in GRADLE_INIT
    rd = tmp_path / "envgen-report-G"
    rd.mkdir()
    for p in (SAMPLES / "gradle-junit4").glob("TEST-*.xml"):
        shutil.copy(p, rd / p.name)
    console = (SAMPLES / "gradle-junit4" / "console.txt").read_text(encoding="utf-8")
    quiet = "\n".join(ln for ln in console.splitlines() if "sums[2] FAILED" not in ln)
    outcomes, messages, _ = Gradle().parse(str(rd), quiet, [], {})
    assert "com.acme.SumParamTest.sums[2]" not in outcomes and "com.acme.SumParamTest.sums[2]" not in messages
    assert outcomes["com.acme.CalcTest.failsWithUnicode"] == "failed" and outcomes["com.acme.SumParamTest.sums[0]"] == "passed"


def test_the_reports_of_a_run_whose_test_jvm_died_prove_nothing(tmp_path):
    """Surefire logs a forked JVM that exited (``System.exit``, ``halt``) before saying goodbye; with test failures
    ignored Maven still exits 0. What the reports say is then what the dead JVM left on disk: every test errs."""
    rd = tmp_path / "envgen-report-SAMPLE"
    rd.mkdir()
    for p in (SAMPLES / "junit5").glob("TEST-*.xml"):
        shutil.copy(p, rd / p.name)
    console = (SAMPLES / "junit5" / "console.txt").read_text(encoding="utf-8")
    died = console + ("\n[ERROR] ExecutionException The forked VM terminated without properly saying goodbye. VM crash or "
                      "System.exit called?\n")
    outcomes, messages, source = Maven().parse(str(rd), died, [], {})
    assert source == "junit" and set(outcomes.values()) == {"error"}
    assert "the test JVM died" in messages["com.acme.CalcTest.add"]
    assert set(Maven().parse(str(rd), console, [], {})[0].values()) != {"error"}
