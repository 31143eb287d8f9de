"""A PHP project through the code family in Docker: the ``php`` toolchain layer (Debian's PHP 8.2,
Composer, PHPUnit 9.6), the autoloader generated offline in the task layer (``vendor/`` is not
committed), validation in the task image, and the packs played through ``gymnasium.make``.

One module-scoped build (the same ``acme/money`` history as the local test, tests/php_repo.py).
"""

from __future__ import annotations

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.families.code import build_code
from envgen.pack import load
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout

try:
    from .php_repo import make_money_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from php_repo import make_money_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]
T = "Acme\\Money\\Tests\\"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("php-docker")
    shas = make_money_repo(root / "money", vendored=False)
    report = build_code(f"git:{root / 'money'}", root / "out", backend="docker", store=root / "state.sqlite",
                        log=lambda m: None)
    return root, shas, report


def test_docker_validation_gives_the_phpunit_lists_with_the_autoloader_generated_in_the_image(built):
    root, shas, report = built
    assert sorted(report.packs) == sorted(f"money-{shas[k][:12]}" for k in ("fix", "allocate")), report.rejections
    (key, env), = report.details["environments"].items()
    assert env["tag"].startswith(f"envgen/repoenv:php-{key}-") and env["steps"] == []
    assert "composer dump-autoload" in " ".join(env["notes"])
    task = load(root / "out" / f"money-{shas['fix'][:12]}").tasks[0]
    args = task.verifier.args
    assert args["FAIL_TO_PASS"] == [T + "MoneyTest::testSubtract with data set #0",
                                    T + "MoneyTest::testSubtract with data set #1"]
    assert T + 'MoneyTest::testFormat with data set "euro €"' in args["PASS_TO_PASS"] and len(args["PASS_TO_PASS"]) == 5
    runs = task.meta["validation"]["runs"]
    assert [(r["mode"], r["source"], r["canary"]) for r in runs] == \
        [("base", "junit", "failed")] * 3 + [("gold", "junit", "failed")] * 3
    pack = load(root / "out" / f"money-{shas['fix'][:12]}")
    assert pack.manifest.image.base == "debian:bookworm+php"


def test_gymnasium_make_in_docker_scores_the_oracle_one_and_null_zero(built):
    root, shas, _ = built
    env = gymnasium.make("envgen/Pack-v0", pack=str(root / "out" / f"money-{shas['fix'][:12]}"), sandbox="docker")
    try:
        oracle = rollout(env, OraclePolicy())
        null = rollout(env, NullPolicy())
    finally:
        env.close()
    assert oracle.reward == 1.0, oracle.reward_details
    assert oracle.reward_details["FAIL_TO_PASS"] == "2/2" and oracle.reward_details["PASS_TO_PASS"] == "5/5"
    assert oracle.reward_details["canary"] == "failed"
    assert null.reward == 0.0
