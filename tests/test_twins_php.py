"""PHP's twin-check dialect (``runners.phpunit.PhpDialect``): which methods are PHPUnit tests (``test*`` names,
``@test`` doc tags, ``#[Test]`` attributes; public only), where a declaration starts (its doc comment and
attributes) and ends, the plan's renamed tests and twins (linted with ``php -l`` and run with Debian's
PHPUnit where they are installed: the real tests pass, their twins fail), which tests a test patch adds or
changes (a data provider's rows change the tests it feeds), and how PHPUnit ids map to a file and a
declaration (no Docker)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "verifiers"))

from envgen_verifiers import twins  # noqa: E402
from envgen_verifiers.runners.phpunit import PHP  # noqa: E402
from envgen_verifiers.tests import _diff_lines, dialect  # noqa: E402

needs_php = pytest.mark.skipif(not shutil.which("php"), reason="needs php")
needs_phpunit = pytest.mark.skipif(not (shutil.which("php") and Path("/usr/bin/phpunit").is_file()),
                                   reason="needs php and Debian's phpunit")

CALC = """\
<?php

declare(strict_types=1);

namespace Acme\\Calc;

final class Calc
{
    public static function add(int $a, int $b): int
    {
        return $a + $b;
    }

    public static function label(string $s): string
    {
        return strtolower(trim($s));
    }

    public static function positive(int $x): bool
    {
        return $x > 0;
    }
}
"""

CALC_TEST = """\
<?php

declare(strict_types=1);

namespace Acme\\Calc\\Tests;

use Acme\\Calc\\Calc;
use PHPUnit\\Framework\\TestCase;

/**
 * The calculator's tests: a function test, data providers, doc-tagged and attributed tests.
 */
final class CalcTest extends TestCase
{
    private const BASE = 40;

    private array $seen = [];

    protected function setUp(): void
    {
        $this->seen = [Calc::class];
    }

    public function testAdds(): void
    {
        $sum = array_reduce([1, 2], fn (int $c, int $x) => Calc::add($c, $x), 0);
        $this->assertSame(3, $sum);
        $this->assertSame(42, Calc::add(self::BASE, 2));
    }

    /**
     * Rows from a provider.
     *
     * @dataProvider sums
     */
    public function testAddsRows(int $a, int $b, int $expected): void
    {
        $this->assertSame($expected, Calc::add($a, $b), "adding $a and $b");
    }

    public function sums(): array
    {
        return [
            'small' => [1, 2, 3],
            'négatif' => [-4, 10, 6],
            [0, 0, 0],
        ];
    }

    /** @test */
    public function labelsAreTrimmedAndLowered(): void
    {
        $this->assertSame('abc', Calc::label('  ABC '));
    }

    #[\\PHPUnit\\Framework\\Attributes\\Test]
    public function positiveNumbers(): void
    {
        $this->assertTrue(Calc::positive(5) === true);
        $check = function (int $x): void {
            $this->assertFalse(Calc::positive($x));
        };
        $check(-1);
    }

    public function testTwiceUsesTheHelper(): void
    {
        $this->assertSame(8, $this->twice(4));
    }

    /**
     * @testdox a helper, not a test
     */
    private function twice(int $x): int
    {
        return Calc::add($x, $x);
    }

    protected function testLooksLikeATestButIsProtected(): void
    {
        $this->assertSame(1, 1);
    }

    public function testHeredocKeepsItsBraces(): void
    {
        $text = <<<EOT
            a brace { and a quote ' that close nothing
            EOT;
        $this->assertSame(8, strpos($text, '{'));
    }

    public function testNothingToChange(): void
    {
        $this->expectException(\\TypeError::class);
        Calc::add(...[null, null]);
    }
}
"""

OTHER_TEST = """\
<?php

namespace Acme\\Calc\\Tests\\Edge;

use Acme\\Calc\\Calc;

abstract class Base extends \\PHPUnit\\Framework\\TestCase
{
    abstract protected function value(): int;
}

class EdgeTest extends Base
{
    protected function value(): int
    {
        return 7;
    }

    // a comment with a brace { and a string 'class Fake {'
    public function testValue()
    {
        $this->assertEquals(14, Calc::add($this->value(), 7));
        $o = new class {
            public function testInAnonymousClass(): void
            {
            }
        };
    }
}
"""

FILES = {"tests/CalcTest.php": CALC_TEST, "tests/Edge/EdgeTest.php": OTHER_TEST}
RUN_FILES = list(FILES)
T = "Acme\\Calc\\Tests\\"


def test_phpunit_has_the_php_dialect():
    assert dialect("phpunit") is PHP


def test_declarations_are_public_test_methods_from_their_doc_comment_to_their_closing_brace():
    decls = PHP.declarations(CALC_TEST)
    assert [d.name for d in decls] == [T + "CalcTest::" + n for n in (
        "testAdds", "testAddsRows", "labelsAreTrimmedAndLowered", "positiveNumbers", "testTwiceUsesTheHelper",
        "testHeredocKeepsItsBraces", "testNothingToChange")]
    rows = decls[1]
    text = CALC_TEST[rows.start:rows.end]
    assert text.startswith("    /**\n     * Rows from a provider") and text.endswith('"adding $a and $b");\n    }')
    assert CALC_TEST[:rows.name_end].endswith("function testAddsRows")
    tagged, attributed = decls[2], decls[3]
    assert CALC_TEST[tagged.start:tagged.end].startswith("    /** @test */\n    public function labels")
    assert CALC_TEST[attributed.start:attributed.end].startswith("    #[\\PHPUnit\\Framework\\Attributes\\Test]\n")
    assert CALC_TEST[attributed.start:attributed.end].endswith("$check(-1);\n    }")
    # a class in a namespace without strict types, beside an abstract class; a brace in a comment, a method of
    # an anonymous class
    (edge,) = PHP.declarations(OTHER_TEST)
    assert edge.name == T + "Edge\\EdgeTest::testValue"
    assert OTHER_TEST[edge.start:edge.end].startswith("    // a comment with a brace {")
    assert OTHER_TEST[edge.start:edge.end].endswith("        };\n    }")


@pytest.mark.parametrize("test_id, expected", [
    (T + "CalcTest::testAdds", ("tests/CalcTest.php", T + "CalcTest::testAdds")),
    (T + "CalcTest::testAddsRows with data set #0", ("tests/CalcTest.php", T + "CalcTest::testAddsRows")),
    (T + 'CalcTest::testAddsRows with data set "négatif"', ("tests/CalcTest.php", T + "CalcTest::testAddsRows")),
    (T + "Edge\\EdgeTest::testValue", ("tests/Edge/EdgeTest.php", T + "Edge\\EdgeTest::testValue")),
    ("Acme\\Calc\\Tests\\Missing::testX", None),
    ("no separator", None),
])
def test_target_maps_phpunit_ids_to_the_file_declaring_the_class(tmp_path, test_id, expected):
    _write(tmp_path, FILES)
    assert PHP.target(test_id, RUN_FILES, str(tmp_path)) == expected


def test_target_finds_a_class_in_a_file_named_otherwise(tmp_path):
    odd = ("<?php\nnamespace Acme\\Calc\\Tests;\n\nfinal class OddTest extends \\PHPUnit\\Framework\\TestCase\n{\n"
           "    public function testOdd(): void\n    {\n        $this->assertSame(1, 3 % 2);\n    }\n}\n")
    files = {**FILES, "tests/Misc.php": odd}
    _write(tmp_path, files)
    assert PHP.target(T + "OddTest::testOdd", list(files), str(tmp_path)) == ("tests/Misc.php", T + "OddTest::testOdd")


def _write(tmp_path: Path, files: dict) -> None:
    for p, t in files.items():
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text(t, encoding="utf-8")


IDS = [T + "CalcTest::testAdds", T + "CalcTest::testAddsRows with data set \"small\"",
       T + "CalcTest::testAddsRows with data set #0", T + "CalcTest::labelsAreTrimmedAndLowered",
       T + "CalcTest::positiveNumbers", T + "CalcTest::testNothingToChange", T + "Edge\\EdgeTest::testValue",
       T + "CalcTest::testHeredocKeepsItsBraces"]


def _plan(tmp_path: Path, ids: list[str] = IDS, seed: int = 3) -> dict:
    _write(tmp_path, {**FILES, "src/Calc.php": CALC})
    return twins.plan(str(tmp_path), PHP, ids, RUN_FILES, seed=seed)


def test_a_plan_renames_the_tests_and_writes_twins_that_differ_by_one_literal(tmp_path):
    plan = _plan(tmp_path)
    # testNothingToChange has no literal a twin could change; a data-provider test is twinned once, whatever
    # data sets it runs
    assert [t["name"] for t in plan["tests"]] == [T + "CalcTest::" + n for n in (
        "labelsAreTrimmedAndLowered", "positiveNumbers", "testAdds", "testAddsRows", "testHeredocKeepsItsBraces")] + \
        [T + "Edge\\EdgeTest::testValue"]
    # each twin changes the same literal, the expected value first (assertSame(expected, actual)), to another value
    assert [len(t["twins"]) for t in plan["tests"]] == [2, 2, 2, 2, 2, 2]
    text = plan["files"]["tests/CalcTest.php"]
    decls = {d.name: d for d in PHP.declarations(text)}
    for t in plan["tests"]:
        if "Edge" in t["name"] or t["name"].endswith("testAddsRows"):
            continue
        cls, name = t["name"].split("::")
        real = text[decls[f"{cls}::{name}{t['real']}"].start:decls[f"{cls}::{name}{t['real']}"].end]
        assert real.replace(t["real"], "") in CALC_TEST  # the real test: renamed, nothing else changed
        for suffix in t["twins"]:
            twin = text[decls[f"{cls}::{name}{suffix}"].start:decls[f"{cls}::{name}{suffix}"].end]
            a, b = real.replace(t["real"], ""), twin.replace(suffix, "")
            head = len(os.path.commonprefix([a, b]))
            tail = len(os.path.commonprefix([a[head:][::-1], b[head:][::-1]]))
            assert a != b and len(a) - head - tail <= 5 and len(b) - head - tail <= 5, (a, b)  # one literal
    # testAddsRows has no literal of its own: it and its twins each get a copy of its provider, a twin's with
    # one value of its rows changed (never a row's key), and the provider stays for whoever else uses it
    rows = next(t for t in plan["tests"] if t["name"].endswith("testAddsRows"))
    for suffix in [rows["real"], *rows["twins"]]:
        assert f"@dataProvider sums{suffix}\n" in text and f"public function sums{suffix}(): array" in text
    assert "'small' => [1, 2, 3]," in text.split(f"function sums{rows['real']}(")[1].split("}")[0]
    assert text.count("'small' => ") == 4 and "function sums(): array" in text and "private function twice(" in text
    assert all(len(s) == 6 and s[0] == "_" for t in plan["tests"] for s in [t["real"], *t["twins"]])
    assert plan == _plan(tmp_path)  # seeded: the same plan at every validation


@needs_php
def test_the_planned_sources_parse(tmp_path):
    plan = _plan(tmp_path)
    twins.write(str(tmp_path), plan)
    for path in plan["files"]:
        out = subprocess.run(["php", "-l", str(tmp_path / path)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


@needs_phpunit
def test_with_the_code_right_the_real_tests_pass_and_every_twin_fails(tmp_path):
    plan = _plan(tmp_path)
    twins.write(str(tmp_path), plan)
    (tmp_path / "boot.php").write_text("<?php\nrequire __DIR__ . '/src/Calc.php';\n")
    junit = tmp_path / "junit.xml"
    outcomes = {}
    for path in RUN_FILES:
        subprocess.run(["php", "/usr/bin/phpunit", "--no-configuration", "--bootstrap", str(tmp_path / "boot.php"),
                        "--do-not-cache-result", "--log-junit", str(junit), str(tmp_path / path)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
        for case in ET.parse(junit).iter("testcase"):
            failed = any(c.tag in ("failure", "error") for c in case)
            outcomes[case.get("class", "") + "::" + case.get("name")] = "failed" if failed else "passed"
    real, twin = twins.split(outcomes, plan)
    assert real and all(o == "passed" for o in real.values()), real
    assert T + 'CalcTest::testAddsRows with data set "négatif"' in real and len(real) == 9, real
    for t in plan["tests"]:  # every test has twins that fail (a twin whose change makes no difference is
        if t["name"].endswith("::positiveNumbers"):  # #[Test] is PHPUnit 10's: PHPUnit 9 runs none of them
            assert not any(t["real"] in i or any(s in i for s in t["twins"]) for i in outcomes)
            continue
        failing = [i for i, o in twin.items() if o == "failed" and any(s in i for s in t["twins"])]
        assert failing, (t, twin)  # left out at validation: only the twins failing in every gold run count)
    rows = next(t for t in plan["tests"] if t["name"].endswith("testAddsRows"))
    # a provider's twin changes one row: that data set fails, the others pass
    assert sorted(o for i, o in twin.items() if rows["twins"][0] in i) == ["failed", "passed", "passed"], twin


def _changed(before: str, after: str, tmp_path: Path) -> list[str]:
    (tmp_path / "a").write_text(before, encoding="utf-8")
    (tmp_path / "b").write_text(after, encoding="utf-8")
    diff = subprocess.run(["git", "diff", "--no-index", "--", "a", "b"], capture_output=True, text=True,
                          cwd=tmp_path).stdout
    lines = next(iter(_diff_lines(diff).values()))
    return [n.rsplit("\\", 1)[-1] for n in PHP.changed(after, lines["added"], lines["removed"])]


def test_a_test_patch_changes_the_tests_it_adds_or_edits(tmp_path):
    added = CALC_TEST.replace("    public function testTwiceUsesTheHelper", "    public function testAddsZero(): void\n"
                              "    {\n        $this->assertSame(5, Calc::add(5, 0));\n    }\n\n"
                              "    public function testTwiceUsesTheHelper")
    assert _changed(CALC_TEST, added, tmp_path) == ["CalcTest::testAddsZero"]
    assert _changed(CALC_TEST, CALC_TEST.replace("assertSame(42,", "assertSame(43,"), tmp_path) == \
        ["CalcTest::testAdds"]
    assert _changed(CALC_TEST, CALC_TEST.replace("/** @test */", "/**\n     * @test\n     */"), tmp_path) == []


def test_providers_and_helpers_change_the_tests_that_use_them(tmp_path):
    assert _changed(CALC_TEST, CALC_TEST.replace("[0, 0, 0],", "[0, 0, 0],\n            [2, 2, 4],"),
                    tmp_path) == ["CalcTest::testAddsRows"]
    assert _changed(CALC_TEST, CALC_TEST.replace("return Calc::add($x, $x);", "return 2 * $x;"), tmp_path) == \
        ["CalcTest::testTwiceUsesTheHelper"]


def test_imports_comments_and_non_test_methods_change_no_test(tmp_path):
    assert _changed(CALC_TEST, CALC_TEST.replace("use Acme\\Calc\\Calc;", "use Acme\\Calc\\Calc;\nuse Stringable;"),
                    tmp_path) == []
    assert _changed(CALC_TEST, CALC_TEST.replace(" * The calculator's tests", " * The calculator's own tests"),
                    tmp_path) == []
    bench = CALC_TEST.replace("    public function testNothingToChange", "    public function benchAdd(): void\n"
                              "    {\n        Calc::add(1, 2);\n    }\n\n    public function testNothingToChange")
    assert _changed(CALC_TEST, bench, tmp_path) == []
