"""The kit's PHPUnit runner: report parsing on real PHPUnit 9.6 reports, ids, infrastructure, canary, and
the PHP language's recipe decisions.

The samples in tests/fixtures/reports/php/ were written by Debian's PHPUnit 9.6.7 running the kit's own
command (``PHPUnit.commands``) over a small project: ``mixed.*`` (a passing, a failing with non-ASCII
text, an erroring, a skipped, an incomplete, a risky and a warning test, numbered and named data sets,
one name non-ASCII with quotes) and ``exit.*`` (the same run where a test calls ``exit(0)``: no JUnit
log, a TeamCity log that stops inside that test, a console without a summary).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envgen.errors import InputError
from envgen.families.code.lang import RepoView
from envgen.families.code.php import PHP, allows
from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers.runners import get  # noqa: E402
from envgen_verifiers.runners.phpunit import parse_console, parse_junit, parse_teamcity  # noqa: E402
from envgen_verifiers.tests import run_tests  # noqa: E402

SAMPLES = Path(__file__).parent / "fixtures" / "reports" / "php"
C = "Acme\\Calc\\Tests\\Unit\\CalcTest::"
S = "Acme\\Calc\\Tests\\Unit\\StopTest::"
MIXED = {
    C + "testAdd": "passed", C + "testFails": "failed", C + "testErrors": "error", C + "testSkipped": "skipped",
    C + "testIncomplete": "skipped", C + "testRisky": "error", C + "testSum with data set #0": "passed",
    C + "testSum with data set #1": "failed", C + 'testNamed with data set "plain"': "passed",
    C + 'testNamed with data set "émoji ✓ "q""': "failed", C + "testWarning": "passed",
    S + "testFirst": "passed", S + "testExits": "passed", S + "testLast": "passed"}
RUNNER = get("phpunit")


def _report(tmp_path: Path, **files: str) -> str:
    for name, sample in files.items():
        shutil.copy(SAMPLES / sample, tmp_path / name)
    return str(tmp_path)


def test_the_junit_log_checked_against_teamcity_gives_every_outcome(tmp_path):
    rd = _report(tmp_path, **{"junit.xml": "mixed.junit.xml", "teamcity.log": "mixed.teamcity.log"})
    out, messages, source = RUNNER.parse(rd, (SAMPLES / "mixed.console.txt").read_text(), [], {})
    assert source == "junit" and out == MIXED
    assert messages[C + "testFails"].startswith("naïve — ünïcode | Failed asserting that two strings are identical")
    assert messages[C + "testErrors"].startswith("RuntimeException: boom é")
    assert set(messages) == {t for t, o in MIXED.items() if o in ("failed", "error")}


def test_teamcity_alone_and_console_alone_agree_on_what_they_can_tell():
    msgs: dict = {}
    tc = parse_teamcity((SAMPLES / "mixed.teamcity.log").read_text(encoding="utf-8"), msgs)
    # TeamCity has no separate error kind: errors and risky tests are failures there
    assert tc == {t: "failed" if o == "error" else o for t, o in MIXED.items()}
    assert msgs[C + 'testNamed with data set "émoji ✓ "q""'] == "Failed asserting that two strings are not identical."
    console = parse_console((SAMPLES / "mixed.console.txt").read_text(encoding="utf-8"), {})
    assert console == {t: o for t, o in MIXED.items() if o in ("failed", "error")}  # passes are never listed


def test_a_run_that_exits_early_reports_only_the_tests_that_finished(tmp_path):
    rd = _report(tmp_path, **{"teamcity.log": "exit.teamcity.log"})
    (tmp_path / "junit.xml").write_text("")  # PHPUnit opens it at the start and writes it at the end
    out, _, source = RUNNER.parse(rd, (SAMPLES / "exit.console.txt").read_text(), [], {})
    assert source == "teamcity"
    assert out[S + "testFirst"] == "passed" and S + "testExits" not in out and S + "testLast" not in out
    assert out[C + "testFails"] == "failed" and out[C + "testAdd"] == "passed"


def test_a_junit_log_rewritten_after_the_run_does_not_outvote_teamcity(tmp_path):
    forged = (SAMPLES / "mixed.junit.xml").read_text(encoding="utf-8")
    forged = re.sub(r"<(failure|error)[^>]*>.*?</\1>", "", forged, flags=re.S)
    assert "<failure" not in forged and all(o == "passed" for o in parse_junit(forged, {}).values()
                                            if o != "skipped")
    (tmp_path / "junit.xml").write_text(forged, encoding="utf-8")
    shutil.copy(SAMPLES / "mixed.teamcity.log", tmp_path / "teamcity.log")
    out, _, _ = RUNNER.parse(str(tmp_path), "", [], {})
    assert out[C + "testFails"] == "failed" and out[C + "testSum with data set #1"] == "failed"
    os.unlink(tmp_path / "teamcity.log")  # no TeamCity log: no test of the JUnit log is believed
    out, messages, _ = RUNNER.parse(str(tmp_path), "", [], {})
    assert set(out.values()) == {"failed"} and "did not finish" in messages[C + "testAdd"]


def test_the_console_fallback_reads_data_set_names_without_their_values():
    text = ("There were 2 failures:\n\n1) Foo\\BarTest::testA with data set #3 (1, 'x')\nboom\n\n"
            '2) Foo\\BarTest::testB with data set "a b" (\'\')\nbang\n\nFAILURES!\n')
    assert parse_console(text, {}) == {"Foo\\BarTest::testA with data set #3": "failed",
                                       'Foo\\BarTest::testB with data set "a b"': "failed"}


def test_ids_map_to_their_run_file_and_infrastructure_is_the_test_configuration():
    files = ["tests/Unit/MoneyTest.php", "modules/Unit/MoneyTest.php", "tests/AllocateTest.php"]
    assert RUNNER.test_path("Acme\\Money\\Tests\\Unit\\MoneyTest::testA with data set #0", files) == files[0]
    assert RUNNER.test_path("Acme\\Money\\Tests\\AllocateTest::testB", files) == files[2]
    assert RUNNER.test_path("Other\\Thing::testC", files) == ""
    opts = {"config": "config/phpunit.xml", "bootstrap": "config/boot.php", "test_dirs": ["spec"]}
    infra = [p for p in ["phpunit.xml", "phpunit.xml.dist", "sub/phpunit.dist.xml", ".phpunit.result.cache",
                         "composer.json", "composer.lock", "vendor/autoload.php", "vendor/bin/phpunit",
                         "tests/fixtures/data.json", "Tests/bootstrap.php", "config/phpunit.xml", "config/boot.php",
                         "spec/MoneySpec.php", "src/Money.php", "src/tests.php", "README.md", "config/app.php"]
             if RUNNER.infrastructure(p, opts)]
    assert infra[-1] == "spec/MoneySpec.php" and "src/Money.php" not in infra and len(infra) == 13


def test_the_canary_runs_with_named_files_and_must_fail(tmp_path):
    """PHPUnit 9 runs one path: the kit's suite file adds each run file (the canary's too); a file that
    does not load is an error and the others still run."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "OkTest.php").write_text(
        "<?php\nfinal class OkTest extends \\PHPUnit\\Framework\\TestCase {\n"
        "    public function testOk(): void { $this->assertTrue(true); }\n}\n")
    (tmp_path / "tests" / "BrokenTest.php").write_text("<?php\nfinal class BrokenTest {\n")
    res = run_tests(str(tmp_path), "phpunit", ["tests/BrokenTest.php", "tests/OkTest.php"], timeout_s=120)
    assert res["outcomes"] == {"OkTest::testOk": "passed"} and res["canary"] == "failed", res
    assert "BrokenTest.php did not load" in res["tail"]
    assert sorted(os.listdir(tmp_path / "tests")) == ["BrokenTest.php", "OkTest.php"]  # the canary is gone


def _view(tmp_path: Path, files: dict[str, str]) -> RepoView:
    repo = tmp_path / "r"
    repo.mkdir()
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    env = {"PATH": os.environ["PATH"], "HOME": str(repo), "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env, capture_output=True)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return RepoView(repo, sha)


def test_composer_constraints_against_the_toolchains_versions():
    assert allows("^7.4 || ^8.0", (8, 2)) and allows(">=8.1 <8.4", (8, 2)) and allows("8.2.*", (8, 2))
    assert not allows("^8.3", (8, 2)) and not allows("~8.1.0", (8, 2)) and allows("~8.1", (8, 2))
    assert allows("^8.5|^9.5", (9, 6)) and not allows("^10.5", (9, 6)) and allows("7.4 - 8.3", (8, 2))


@pytest.mark.parametrize("manifest,why", [
    ('{"require": {"php": "^8.3"}}', "requires PHP ^8.3; the base image has PHP 8.2"),
    ('{"require-dev": {"phpunit/phpunit": "^10.5"}}', "the runner drives PHPUnit 9"),
    ('{"require": {"monolog/monolog": "^3.0"}}', "set ENVGEN_COMPOSER_REPO"),
    ('{"require": {"ext-sockets2": "*"}}', "extension 'sockets2'"),
    ('{"require": ', "not valid JSON")])
def test_a_project_the_toolchain_cannot_serve_is_rejected_with_the_reason(tmp_path, monkeypatch, manifest, why):
    monkeypatch.delenv("ENVGEN_COMPOSER_REPO", raising=False)
    view = _view(tmp_path, {"composer.json": manifest, "src/A.php": "<?php\n"})
    with pytest.raises(InputError, match=why.replace("(", r"\(").replace("^", r"\^")):
        PHP().recipe(view)


def test_dev_tools_no_test_loads_are_left_out_and_the_rest_still_needs_a_repository(tmp_path, monkeypatch):
    """php-markdown's shape: PHPUnit plus phpstan and php-cs-fixer in require-dev; the tools no test loads
    are dropped with a note, so the project builds offline; so is a pinned prophecy no test calls, never one a
    test calls."""
    monkeypatch.delenv("ENVGEN_COMPOSER_REPO", raising=False)
    dev = {"friendsofphp/php-cs-fixer": "^3.0", "phpunit/phpunit": "^9.5", "phpstan/phpstan": ">=1.0",
           "phpstan/phpstan-phpunit": ">=1.0", "doctrine/coding-standard": "^9"}
    view = _view(tmp_path, {"composer.json": json.dumps({"require": {"php": ">=7.4"}, "require-dev": dev}),
                            "src/A.php": "<?php\n", "tests/ATest.php": "<?php\n"})
    recipe = PHP().recipe(view)
    assert [s.name for s in recipe.task_steps] == ["autoload", "generated"]
    assert "composer dump-autoload --dev" in recipe.task_steps[0].run  # autoload-dev: the tests' own classes
    assert "4 development tool(s) no test loads left out: doctrine/coding-standard, friendsofphp/php-cs-fixer, " \
           "phpstan/phpstan, phpstan/phpstan-phpunit" in recipe.notes
    dev["phpspec/prophecy"] = "^1.15"  # pinned, never called: left out too
    (tmp_path / "b").mkdir()
    view = _view(tmp_path / "b", {"composer.json": json.dumps({"require-dev": dev}), "src/A.php": "<?php\n",
                                  "tests/ATest.php": "<?php\nclass ATest {}\n"})
    assert any(n.startswith("5 development tool(s)") and "phpspec/prophecy" in n for n in PHP().recipe(view).notes)
    (tmp_path / "c").mkdir()
    view = _view(tmp_path / "c", {"composer.json": json.dumps({"require-dev": dev}), "src/A.php": "<?php\n",
                                  "tests/ATest.php": "<?php\n$a = $this->prophesize(A::class);\n"})
    with pytest.raises(InputError, match=r"needs 1 package\(s\) from a Composer repository \(phpspec/prophecy\)"):
        PHP().recipe(view)


@pytest.mark.parametrize("constraint,compat", [("^8.5", 8), ("^9.6", None), ("^11.0", None)])
def test_phpunit_pinned_in_a_tools_manifest_decides_the_mode(tmp_path, monkeypatch, constraint, compat):
    """webmozart/assert's shape: the root manifest names no PHPUnit; tools/phpunit/composer.json pins it."""
    monkeypatch.delenv("ENVGEN_COMPOSER_REPO", raising=False)
    tools = json.dumps({"require-dev": {"phpunit/phpunit": constraint}})
    view = _view(tmp_path, {"composer.json": '{"require": {"php": "^7.2 || ^8.0"}}', "src/A.php": "<?php\n",
                            "tools/phpunit/composer.json": tools})
    if constraint == "^11.0":
        with pytest.raises(InputError, match=r"tools/phpunit/composer.json requires phpunit/phpunit \^11.0"):
            PHP().recipe(view)
        return
    recipe = PHP().recipe(view)
    assert recipe.options.get("compat") == compat
    assert f"PHPUnit {constraint} from tools/phpunit/composer.json" in recipe.notes


def test_the_mirror_variable_is_written_into_the_composer_config_and_extensions_come_from_debian(tmp_path,
                                                                                              monkeypatch):
    view = _view(tmp_path, {"composer.json": '{"require": {"php": ">=8.1", "psr/log": "^3", "ext-intl": "*"},'
                                             ' "require-dev": {"phpunit/phpunit": "^9.6"}}',
                            "src/A.php": "<?php\n", "tests/ATest.php": "<?php\n"})
    monkeypatch.setenv("ENVGEN_COMPOSER_REPO", "file:///srv/composer-mirror")
    recipe = PHP().recipe(view)
    assert [s.name for s in recipe.steps] == ["extensions"] and "php8.2-intl" in recipe.steps[0].run
    install = recipe.task_steps[0]
    assert install.name == "install" and "repositories.envgen composer file:///srv/composer-mirror" in install.run
    assert "repo.packagist false" in install.run and "composer install --no-interaction" in install.run
    assert recipe.options["phpunit"] == "vendor/bin/phpunit" and recipe.options["test_dirs"] == []
    assert recipe.framework == "phpunit" and recipe.toolchains == ("php",)


def test_a_configuration_that_stops_at_the_first_failure_still_reports_every_test(tmp_path):
    """At the base commit the tests after a failing one would look failed too: the run uses a copy of the
    configuration without ``stopOnFailure`` (beside it, so its bootstrap path resolves), removed after."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "boot.php").write_text("<?php\ndefine('BOOTED', 1);\n")
    (tmp_path / "phpunit.xml").write_text(
        '<?xml version="1.0"?>\n<phpunit bootstrap="tests/boot.php" stopOnFailure="true" stopOnError=\'true\'>\n'
        '  <testsuites><testsuite name="t"><directory>tests</directory></testsuite></testsuites>\n</phpunit>\n')
    (tmp_path / "tests" / "StopTest.php").write_text(
        "<?php\nfinal class StopTest extends \\PHPUnit\\Framework\\TestCase {\n"
        "    public function testA(): void { $this->fail('first'); }\n"
        "    public function testB(): void { $this->assertSame(1, BOOTED); }\n}\n")
    res = run_tests(str(tmp_path), "phpunit", ["tests/StopTest.php"], timeout_s=120,
                    options={"config": "phpunit.xml"})
    assert res["outcomes"] == {"StopTest::testA": "failed", "StopTest::testB": "passed"}, res
    assert res["canary"] == "failed"
    assert sorted(os.listdir(tmp_path)) == ["phpunit.xml", "tests"]


def test_without_a_configuration_the_composer_autoloader_bootstraps_the_run(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "composer.json").write_text('{"autoload": {"psr-4": {"Lib\\\\": "src/"}}}')
    (tmp_path / "src" / "Two.php").write_text("<?php\nnamespace Lib;\nfinal class Two { const N = 2; }\n")
    (tmp_path / "tests" / "TwoTest.php").write_text(
        "<?php\nnamespace Lib\\Tests;\nfinal class TwoTest extends \\PHPUnit\\Framework\\TestCase {\n"
        "    public function testTwo(): void { $this->assertSame(2, \\Lib\\Two::N); }\n}\n")
    subprocess.run(["composer", "dump-autoload", "--no-interaction", "--quiet"], cwd=tmp_path, check=True,
                   env={"PATH": os.environ["PATH"], "COMPOSER_HOME": str(tmp_path / ".c"),
                        "COMPOSER_ALLOW_SUPERUSER": "1"})
    res = run_tests(str(tmp_path), "phpunit", ["tests/TwoTest.php"], timeout_s=120, options={"config": None})
    assert res["outcomes"] == {"Lib\\Tests\\TwoTest::testTwo": "passed"} and res["canary"] == "failed", res


def test_tests_in_isolated_processes_report_and_the_canary_still_fails(tmp_path):
    """``processIsolation``: PHPUnit runs each test in a child PHP process (which loads the kit's prepend
    file too, without ending early: it is not the run's main process)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "phpunit.xml").write_text('<?xml version="1.0"?>\n<phpunit processIsolation="true"/>\n')
    (tmp_path / "tests" / "IsoTest.php").write_text(
        "<?php\nfinal class IsoTest extends \\PHPUnit\\Framework\\TestCase {\n"
        "    public function testA(): void { $this->assertSame(getmypid(), getmypid()); }\n"
        "    public function testB(): void { $this->assertSame(1, 2); }\n}\n")
    res = run_tests(str(tmp_path), "phpunit", ["tests/IsoTest.php"], timeout_s=120, options={"config": "phpunit.xml"})
    assert res["outcomes"] == {"IsoTest::testA": "passed", "IsoTest::testB": "failed"} and res["canary"] == "failed"
