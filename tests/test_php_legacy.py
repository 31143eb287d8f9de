"""A project written for PHPUnit 4 (``PHPUnit_Framework_TestCase``, ``setUp()`` without ``: void``; parsedown's
shape from 2013 to 2024) runs on Debian's PHPUnit 9 in the runner's compatibility mode: the recipe keeps it
with a note, validation finds its FAIL_TO_PASS test (local backend: this machine's PHP and PHPUnit)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from envgen.errors import InputError
from envgen.families.code import build_code
from envgen.families.code.lang import RepoView
from envgen.families.code.php import PHP
from envgen.pack import load

try:
    from .php_repo import make_legacy_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from php_repo import make_legacy_repo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "verifiers"))
from envgen_verifiers.runners.phpunit import PHPUnit, void_fixtures  # noqa: E402


def test_older_phpunit_runs_in_compatibility_mode_and_newer_is_rejected(tmp_path):
    shas = make_legacy_repo(tmp_path / "calc")
    recipe = PHP().recipe(RepoView(tmp_path / "calc", shas["fix"]))
    assert recipe.options["compat"] == 4
    assert any("PHPUnit 4" in n and "compatibility" in n for n in recipe.notes), recipe.notes
    assert PHP._check_phpunit("^9.5") is None and PHP._check_phpunit("^5.7 || ^6.5") == 6
    with pytest.raises(InputError, match="PHPUnit 9"):
        PHP._check_phpunit("^10.5")


def test_compatibility_mode_declares_old_fixture_methods_void(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "BaseCase.php").write_text("<?php\nabstract class BaseCase {\n    public static function setUpBeforeClass()\n"
                                        "    {\n    }\n    protected function tearDown(): void {}\n}\n")
    (tests / "ATest.php").write_text("<?php\nclass ATest extends BaseCase {\n    protected function setUp() {}\n"
                                     "    public function setUpData() { return 1; }\n}\n")
    changed = void_fixtures(str(tmp_path), ["tests/ATest.php"], ["tests"])
    assert sorted(Path(p).name for p in changed) == ["ATest.php", "BaseCase.php"]
    assert "protected function setUp(): void {}" in (tests / "ATest.php").read_text()
    assert "public function setUpData() { return 1; }" in (tests / "ATest.php").read_text()  # not a fixture
    assert "function setUpBeforeClass(): void\n" in (tests / "BaseCase.php").read_text()
    assert "tearDown(): void {}" in (tests / "BaseCase.php").read_text()  # already declared: unchanged
    # without compat the run leaves the files alone and aliases nothing
    cmd = PHPUnit().commands(str(tmp_path), ["tests/ATest.php"], str(tmp_path), {"test_dirs": ["tests"]})
    prepend = next(a.split("=", 1)[1] for a in cmd[0] if a.startswith("auto_prepend_file="))
    assert "PHPUnit_" not in Path(prepend).read_text()


@pytest.mark.skipif(shutil.which("php") is None or shutil.which("phpunit") is None,
                    reason="needs Debian's php-cli and phpunit")
@pytest.mark.timeout(600)
def test_phpunit4_project_validates_on_phpunit9(tmp_path):
    shas = make_legacy_repo(tmp_path / "calc")
    report = build_code(f"git:{tmp_path / 'calc'}", tmp_path / "out", backend="local", gate=False,
                        store=tmp_path / "s.sqlite", log=lambda m: None)
    assert report.packs == [f"calc-{shas['fix'][:12]}"], report.rejections
    args = load(tmp_path / "out" / report.packs[0]).tasks[0].verifier.args
    assert args["FAIL_TO_PASS"] == ["CalcTest::testSub"] and args["PASS_TO_PASS"] == ["CalcTest::testAdd"]
    assert args["twins"]
