"""A small real PHP project for the PHP code-family tests: ``acme/money`` (Composer, PHPUnit 9).

Shape: ``composer.json`` (PSR-4 ``Acme\\Money\\`` -> ``src/``, ``autoload-dev`` ``Acme\\Money\\Tests\\`` ->
``tests/``, PHP and PHPUnit constraints, a fixed autoloader suffix so the generated files are the same
on every machine), ``phpunit.xml.dist`` whose bootstrap is ``tests/bootstrap.php`` (which loads
``vendor/autoload.php``), ``src/Money.php``, ``tests/MoneyTest.php`` with data providers (numbered and
named, one name non-ASCII). ``vendored=True`` commits ``vendor/`` as ``composer dump-autoload`` writes
it (the project has no third-party packages, so no registry is needed); otherwise ``vendor/`` is
ignored and the environment generates it.

Commits after the initial one, each a candidate:

- fix: ``subtract`` had its operands swapped; the fix adds ``testSubtract`` with a data provider
  (FAIL_TO_PASS: both its cases);
- allocate: adds ``Money::allocate`` and a new test file ``tests/AllocateTest.php`` (its tests are
  missing at the base: the file does not load there);
- readme: documentation only (filtered: no test change).

Dates and identities are fixed, so commit ids are the same on every machine (given the same
``vendored``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

try:
    from .code_repo import _commit, _git, _write
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _commit, _git, _write

COMPOSER_JSON = """\
{
    "name": "acme/money",
    "description": "Money amounts in minor units",
    "type": "library",
    "license": "MIT",
    "require": {
        "php": ">=8.1",
        "ext-mbstring": "*"
    },
    "require-dev": {
        "phpunit/phpunit": "^9.6"
    },
    "autoload": {
        "psr-4": {"Acme\\\\Money\\\\": "src/"}
    },
    "autoload-dev": {
        "psr-4": {"Acme\\\\Money\\\\Tests\\\\": "tests/"}
    },
    "config": {
        "autoloader-suffix": "AcmeMoney",
        "platform-check": false
    }
}
"""

PHPUNIT_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<phpunit xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:noNamespaceSchemaLocation="https://schema.phpunit.de/9.6/phpunit.xsd"
         bootstrap="tests/bootstrap.php"
         colors="true"
         cacheResult="true">
    <testsuites>
        <testsuite name="money">
            <directory>tests</directory>
        </testsuite>
    </testsuites>
    <php>
        <ini name="precision" value="14"/>
    </php>
</phpunit>
"""

BOOTSTRAP = """\
<?php

declare(strict_types=1);

date_default_timezone_set('UTC');

require dirname(__DIR__) . '/vendor/autoload.php';
"""

MONEY = """\
<?php

declare(strict_types=1);

namespace Acme\\Money;

final class Money
{
    public function __construct(public readonly int $amount, public readonly string $currency)
    {
    }

    public function add(Money $other): Money
    {
        $this->sameCurrency($other);
        return new Money($this->amount + $other->amount, $this->currency);
    }

    public function subtract(Money $other): Money
    {
        $this->sameCurrency($other);
        return new Money(SUBTRACT, $this->currency);
    }

    public function format(): string
    {
        $symbols = ['EUR' => '€', 'USD' => '$', 'JPY' => '¥'];
        $sign = $this->amount < 0 ? '-' : '';
        $units = intdiv(abs($this->amount), 100);
        $cents = abs($this->amount) % 100;
        return sprintf('%s%s%d.%02d', $sign, $symbols[$this->currency] ?? $this->currency . ' ', $units, $cents);
    }
ALLOCATE
    private function sameCurrency(Money $other): void
    {
        if ($other->currency !== $this->currency) {
            throw new \\InvalidArgumentException("currencies differ: {$this->currency} and {$other->currency}");
        }
    }
}
"""

ALLOCATE = """
    /** @return list<Money> the amount split in ``$parts`` shares, the remainder to the first ones */
    public function allocate(int $parts): array
    {
        if ($parts < 1) {
            throw new \\InvalidArgumentException('parts must be at least 1');
        }
        $share = intdiv($this->amount, $parts);
        $left = $this->amount - $share * $parts;
        $out = [];
        for ($i = 0; $i < $parts; $i++) {
            $out[] = new Money($share + ($i < $left ? 1 : 0), $this->currency);
        }
        return $out;
    }
"""

MONEY_TEST = """\
<?php

declare(strict_types=1);

namespace Acme\\Money\\Tests;

use Acme\\Money\\Money;
use PHPUnit\\Framework\\TestCase;

final class MoneyTest extends TestCase
{
    public function testAdd(): void
    {
        $this->assertSame(350, (new Money(100, 'EUR'))->add(new Money(250, 'EUR'))->amount);
    }

    public function testAddRefusesAnotherCurrency(): void
    {
        $this->expectException(\\InvalidArgumentException::class);
        (new Money(100, 'EUR'))->add(new Money(1, 'USD'));
    }

    /** @dataProvider formats */
    public function testFormat(int $amount, string $currency, string $expected): void
    {
        $this->assertSame($expected, (new Money($amount, $currency))->format());
    }

    public function formats(): array
    {
        return [
            'euro €' => [1234, 'EUR', '€12.34'],
            'negative dollars' => [-5, 'USD', '-$0.05'],
            [100, 'CHF', 'CHF 1.00'],
        ];
    }
SUBTRACT_TESTS}
"""

SUBTRACT_TESTS = """
    /** @dataProvider differences */
    public function testSubtract(int $a, int $b, int $expected): void
    {
        $this->assertSame($expected, (new Money($a, 'EUR'))->subtract(new Money($b, 'EUR'))->amount);
    }

    public function differences(): array
    {
        return [[500, 300, 200], [300, 500, -200]];
    }
"""

ALLOCATE_TEST = """\
<?php

declare(strict_types=1);

namespace Acme\\Money\\Tests;

use Acme\\Money\\Money;
use PHPUnit\\Framework\\TestCase;

final class AllocateTest extends TestCase
{
    public function testRemainderGoesToTheFirstShares(): void
    {
        $amounts = array_map(fn (Money $m) => $m->amount, (new Money(100, 'EUR'))->allocate(3));
        $this->assertSame([34, 33, 33], $amounts);
    }

    public function testOnePartKeepsTheAmount(): void
    {
        $this->assertSame(7, (new Money(7, 'JPY'))->allocate(1)[0]->amount);
    }
}
"""

README = "# acme/money\n\nMoney amounts in minor units.\n"
README_MORE = README + "\nRun the tests with `phpunit` after `composer install`.\n"

FIX_MSG = """Fix subtract returning the negated difference (fixes #3)

(new Money(500, 'EUR'))->subtract(new Money(300, 'EUR')) gave -200: the
operands were swapped."""
ALLOCATE_MSG = """Add Money::allocate to split an amount in equal shares

Splitting 1.00 EUR three ways gives 0.34, 0.33 and 0.33: the remainder
goes to the first shares, so nothing is lost."""
README_MSG = "Say in the README how to run the test suite with PHPUnit after installing"


def money_source(*, fixed: bool, allocate: bool) -> str:
    sub = "$this->amount - $other->amount" if fixed else "$other->amount - $this->amount"
    return MONEY.replace("SUBTRACT", sub).replace("ALLOCATE", ALLOCATE if allocate else "")


def make_money_repo(root: Path, *, vendored: bool) -> dict[str, str]:
    """Create the repository at ``root``; return {initial, fix, allocate, readme: commit id}. ``vendored``
    needs Composer on this machine (``composer dump-autoload`` writes the committed ``vendor/``)."""
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"composer.json": COMPOSER_JSON, "phpunit.xml.dist": PHPUNIT_XML, "tests/bootstrap.php": BOOTSTRAP,
                  "src/Money.php": money_source(fixed=False, allocate=False),
                  "tests/MoneyTest.php": MONEY_TEST.replace("SUBTRACT_TESTS", ""), "README.md": README,
                  ".gitignore": ".phpunit.result.cache\n" + ("" if vendored else "/vendor/\n")})
    if vendored:
        composer = shutil.which("composer")
        if composer is None:
            raise RuntimeError("the vendored fixture needs Composer (Debian package composer)")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root / ".home"),
               "COMPOSER_HOME": str(root / ".home"), "COMPOSER_ALLOW_SUPERUSER": "1", "COMPOSER_NO_INTERACTION": "1"}
        subprocess.run([composer, "dump-autoload", "--no-interaction", "--quiet"], cwd=root, env=env, check=True)
        shutil.rmtree(root / ".home", ignore_errors=True)
    shas = {"initial": _commit(root, "acme/money: Money with add, subtract and format", 1)}
    _write(root, {"src/Money.php": money_source(fixed=True, allocate=False),
                  "tests/MoneyTest.php": MONEY_TEST.replace("SUBTRACT_TESTS", SUBTRACT_TESTS)})
    shas["fix"] = _commit(root, FIX_MSG, 2)
    _write(root, {"src/Money.php": money_source(fixed=True, allocate=True), "tests/AllocateTest.php": ALLOCATE_TEST})
    shas["allocate"] = _commit(root, ALLOCATE_MSG, 3)
    _write(root, {"README.md": README_MORE})
    shas["readme"] = _commit(root, README_MSG, 4)
    return shas


LEGACY_COMPOSER = """{
    "name": "acme/calc",
    "description": "A calculator written for PHPUnit 4",
    "license": "MIT",
    "require": {"php": ">=5.3.0"},
    "require-dev": {"phpunit/phpunit": "^4.8.35"},
    "autoload": {"psr-0": {"Calc": "src/"}}
}
"""
LEGACY_SOURCE = """<?php

class Calc
{
    public function add($a, $b)
    {
        return $a + $b;
    }

    public function sub($a, $b)
    {
        return %s;
    }
}
"""
LEGACY_TEST = """<?php

class CalcTest extends PHPUnit_Framework_TestCase
{
    private $calc;

    protected function setUp()
    {
        $this->calc = new Calc();
    }

    public function testAdd()
    {
        $this->assertEquals(3, $this->calc->add(1, 2));
    }
%s}
"""
LEGACY_SUB_TEST = """
    public function testSub()
    {
        $this->assertEquals(2, $this->calc->sub(5, 3));
    }
"""


TOOLS_COMPOSER = """{
    "name": "acme/calc",
    "description": "A calculator whose PHPUnit lives in tools/phpunit",
    "license": "MIT",
    "require": {"php": ">=5.3.0"},
    "require-dev": {"phpstan/phpstan": "^1.10", "friendsofphp/php-cs-fixer": "^3.0", "phpspec/prophecy": "^1.6"},
    "autoload": {"psr-0": {"Calc": "src/"}},
    "autoload-dev": {"psr-0": {"CalcCase": "tests/"}}
}
"""
CALC_CASE = """<?php

abstract class CalcCase extends PHPUnit_Framework_TestCase
{
    protected $calc;

    protected function setUp()
    {
        $this->calc = new Calc();
    }
}
"""


def make_legacy_repo(root: Path, *, tools: bool = False) -> dict[str, str]:
    """``acme/calc``, written for PHPUnit 4.8 (which Packagist would have to provide): its test case extends
    ``PHPUnit_Framework_TestCase`` and declares ``setUp()`` without a return type; the fix commit makes
    ``sub`` subtract and adds ``testSub``. Returns {initial, fix: commit id}.

    ``tools=True`` gives the shapes of real projects around it: PHPUnit pinned (``^5.7``) only in
    ``tools/phpunit/composer.json`` (webmozart/assert), ``require-dev`` holding phpstan, php-cs-fixer and a
    prophecy pin no test calls (php-markdown), the test case's base class ``CalcCase`` autoloaded from
    ``autoload-dev`` by the Composer autoloader the configuration bootstraps (parsedown's ``TestParsedown``).
    No ``vendor/``: only a Docker build, whose task layer generates the autoloader, runs it."""
    root = Path(root)
    root.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.com"}

    def git(*args: str, date: str = "2016-05-01T12:00:00+00:00") -> str:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                             env={**env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        return out.stdout.strip()

    git("init", "-q", "-b", "main")
    files = {"composer.json": LEGACY_COMPOSER, ".gitignore": "vendor/\n",
             "phpunit.xml.dist": '<?xml version="1.0"?>\n<phpunit bootstrap="tests/bootstrap.php">\n'
                                 '  <testsuites><testsuite name="calc"><directory>tests</directory></testsuite>'
                                 '</testsuites>\n</phpunit>\n',
             "tests/bootstrap.php": "<?php\n\nrequire __DIR__ . '/../src/Calc.php';\n",
             "src/Calc.php": LEGACY_SOURCE % "$b - $a", "tests/CalcTest.php": LEGACY_TEST % ""}
    test = LEGACY_TEST
    if tools:
        test = LEGACY_TEST.replace("extends PHPUnit_Framework_TestCase\n{\n    private $calc;\n\n    protected "
                                   "function setUp()\n    {\n        $this->calc = new Calc();\n    }\n",
                                   "extends CalcCase\n{")
        assert test != LEGACY_TEST
        files.update({"composer.json": TOOLS_COMPOSER, "tests/CalcCase.php": CALC_CASE, "tests/CalcTest.php": test % "",
                      "tools/phpunit/composer.json": '{"require-dev": {"phpunit/phpunit": "^5.7"}}\n',
                      "phpunit.xml.dist": files["phpunit.xml.dist"].replace("tests/bootstrap.php", "vendor/autoload.php")})
        del files["tests/bootstrap.php"]
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git("add", "-A")
    git("commit", "-q", "-m", "Calc: add and sub, tested with PHPUnit 4")
    shas = {"initial": git("rev-parse", "HEAD")}
    (root / "src/Calc.php").write_text(LEGACY_SOURCE % "$a - $b")
    (root / "tests/CalcTest.php").write_text(test % LEGACY_SUB_TEST)
    git("commit", "-q", "-am", "Fix sub: it subtracted the first operand from the second (fixes #2)",
        date="2016-05-02T12:00:00+00:00")
    shas["fix"] = git("rev-parse", "HEAD")
    return shas
