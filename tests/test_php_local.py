"""A PHP project through the code family without Docker (local backend: this machine's PHP and Debian's
PHPUnit), from ``git:`` history to validated packs graded by the kit's PHPUnit runner.

The fixture (tests/php_repo.py) vendors its autoloader (``vendor/`` committed), the shape a project
has when its dependencies must come with it; the Docker test builds the same project without it.
"""

from __future__ import annotations

import pytest

from envgen.episodes.gym import PackEnv
from envgen.families.code import build_code
from envgen.pack import load
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout

try:
    from .php_repo import make_money_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from php_repo import make_money_repo

T = "Acme\\Money\\Tests\\"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("php-local")
    shas = make_money_repo(root / "money", vendored=True)
    report = build_code(f"git:{root / 'money'}", root / "out", backend="local", store=root / "state.sqlite",
                        log=lambda m: None)
    return root, shas, report


def test_the_php_history_gives_two_validated_tasks_with_phpunit_ids(built):
    root, shas, report = built
    assert sorted(report.packs) == sorted(f"money-{shas[k][:12]}" for k in ("fix", "allocate"))
    assert report.rejected_by_reason == {"candidates: no test change": 1}
    task = load(root / "out" / f"money-{shas['fix'][:12]}").tasks[0]
    args = task.verifier.args
    assert args["framework"] == "phpunit" and args["files"] == ["tests/MoneyTest.php"]
    assert args["twins"]["files"] == "twins.json"  # hidden twin checks of testSubtract
    assert args["FAIL_TO_PASS"] == [T + "MoneyTest::testSubtract with data set #0",
                                    T + "MoneyTest::testSubtract with data set #1"]
    assert args["PASS_TO_PASS"] == [T + "MoneyTest::testAdd", T + "MoneyTest::testAddRefusesAnotherCurrency",
                                    T + 'MoneyTest::testFormat with data set "euro €"',
                                    T + 'MoneyTest::testFormat with data set "negative dollars"',
                                    T + "MoneyTest::testFormat with data set #0"]
    assert args["options"] == {"phpunit": "/usr/bin/phpunit", "php": "php",
                               "config": "phpunit.xml.dist", "bootstrap": "tests/bootstrap.php",
                               "test_dirs": ["tests"]}
    runs = task.meta["validation"]["runs"]
    assert [(r["mode"], r["source"], r["canary"]) for r in runs] == \
        [("base", "junit", "failed")] * 3 + [("gold", "junit", "failed")] * 3
    new = load(root / "out" / f"money-{shas['allocate'][:12]}").tasks[0].verifier.args
    # the new test file does not load at the base commit (no allocate yet): its tests are missing there
    assert new["FAIL_TO_PASS"] == [T + "AllocateTest::testOnePartKeepsTheAmount",
                                   T + "AllocateTest::testRemainderGoesToTheFirstShares"]


def test_the_gold_patch_scores_one_and_no_submission_zero(built):
    root, shas, report = built
    path = root / "out" / f"money-{shas['fix'][:12]}"
    gate = report.details["tasks"][f"money-{shas['fix'][:12]}"]["gate"]
    assert gate["reference"] == gate["reference-again"] == 1.0
    assert all(v == 0.0 for k, v in gate.items() if not k.startswith("reference")), gate
    assert gate["forgery"] == 0.0, gate  # envs/code/forgeries/phpunit.txt: the twins give it away
    env = PackEnv(path, sandbox="local")
    try:
        oracle = rollout(env, OraclePolicy())
        null = rollout(env, NullPolicy())
    finally:
        env.close()
    assert oracle.reward == 1.0 and oracle.reward_details["FAIL_TO_PASS"] == "2/2", oracle.reward_details
    assert oracle.reward_details["canary"] == "failed"
    assert null.reward == 0.0
