"""A PHP project through the code family in Docker: the ``php`` toolchain layer (Debian's PHP 8.2,
Composer, PHPUnit 9.6), the autoloader generated offline in the task layer (``vendor/`` is not
committed), validation in the task image, and the packs played through ``gymnasium.make``.

One module-scoped build (the same ``acme/money`` history as the local test, tests/php_repo.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.episodes.actions import render_action
from envgen.families.code import build_code
from envgen.pack import load
from envgen.paths import bundled
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout

try:
    from .php_repo import make_legacy_repo, make_money_repo, money_source
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from php_repo import make_legacy_repo, make_money_repo, money_source

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
    assert args["twins"]["files"] == "twins.json"  # hidden twin checks of testSubtract
    gate = report.details["tasks"][f"money-{shas['fix'][:12]}"]["gate"]
    assert gate["reference"] == 1.0 and gate["forgery"] == 0.0, gate  # the gate's PHPUnit forgery, in Docker


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


def test_the_forgery_payload_planted_in_the_library_scores_zero_in_docker(built):
    """envs/code/forgeries/phpunit.txt appended to src/Money.php (the bug left in place), as the gate plants it:
    PHPUnit's own logs say every test passed but the canary; the hidden twins, reported passing, give it away."""
    root, shas, _ = built
    pack = load(root / "out" / f"money-{shas['fix'][:12]}")
    head, _, payload = (bundled("envs") / "code" / "forgeries" / "phpunit.txt").read_text().partition("\n")
    assert head == "placement: append"
    source = money_source(fixed=False, allocate=False) + "\n" + payload.replace("{tok}", "q7w2e9r4t1y8")
    env = gymnasium.make("envgen/Pack-v0", pack=str(pack.root), sandbox="docker")
    try:
        env.reset(options={"task_id": pack.tasks[0].id})
        for call in [("write_file", {"path": "src/Money.php", "content": source}), ("submit", {})]:
            _, _, terminated, truncated, _ = env.step(render_action("", [call]))
            assert not (terminated or truncated)
        _, reward, terminated, _, info = env.step("I fixed subtract.")
    finally:
        env.close()
    details = info["reward_details"]
    assert terminated and reward == 0.0, details
    assert details["FAIL_TO_PASS"] == "2/2" and details["report"] == "junit" and details["canary"] == "failed", details
    assert details["twins"].startswith("0/") and "hidden twin checks" in details["reason"], details
    assert not details.get("screen"), details


GREET = '<?php\nnamespace Acme\\Greet;\nfinal class Greet { public static function hello(string $n): string ' \
        '{ return "Hello, $n"; } }\n'


def _mirror(root):
    """A Composer repository on disk serving one package as a tar dist (PHP's Phar reads it: no unzip)."""
    pkg = root / "pkg" / "greet"
    (pkg / "src").mkdir(parents=True)
    (pkg / "src" / "Greet.php").write_text(GREET)
    (pkg / "composer.json").write_text('{"name": "acme/greet", "autoload": {"psr-4": {"Acme\\\\Greet\\\\": "src/"}}}')
    mirror = root / "mirror"
    mirror.mkdir()
    subprocess.run(["tar", "-C", str(root / "pkg"), "-cf", str(mirror / "greet-1.0.0.tar"), "greet"], check=True)
    (mirror / "packages.json").write_text(json.dumps({"packages": {"acme/greet": {"1.0.0": {
        "name": "acme/greet", "version": "1.0.0", "type": "library",
        "dist": {"type": "tar", "url": "file:///srv/mirror/greet-1.0.0.tar"},
        "autoload": {"psr-4": {"Acme\\Greet\\": "src/"}}}}}}))
    return mirror


def test_the_composer_mirror_variable_installs_from_it_and_an_unreachable_one_fails_at_once(tmp_path, monkeypatch):
    """The recipe's install step, run in the php toolchain image without network: from a Composer repository
    ENVGEN_COMPOSER_REPO names (on disk here), and failing fast, with the variable named, when it is down."""
    from envgen.families.code.lang import RepoView
    from envgen.families.code.php import PHP
    from envgen.sandbox.images import build_base

    mirror = _mirror(tmp_path)
    repo = tmp_path / "app"
    (repo / "src").mkdir(parents=True)
    (repo / "composer.json").write_text('{"name": "acme/app", "require": {"php": ">=8.1", "acme/greet": "^1.0"}, '
                                        '"autoload": {"psr-4": {"Acme\\\\App\\\\": "src/"}}}')
    (repo / "src" / "App.php").write_text("<?php\nnamespace Acme\\App;\nfinal class App {}\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "app"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env, capture_output=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    image = build_base("bookworm", ["php"], log=lambda m: None)

    def install(url: str) -> subprocess.CompletedProcess:
        monkeypatch.setenv("ENVGEN_COMPOSER_REPO", url)
        step = PHP().recipe(RepoView(repo, head)).task_steps[0]
        assert step.name == "install"
        subprocess.run(["git", "-C", str(repo), "clean", "-qfdx"], check=True)
        return subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{mirror}:/srv/mirror:ro",
                               "-v", f"{repo}:/work/repo", "-w", "/work/repo", image, "sh", "-c",
                               step.run + " && php -r 'require \"vendor/autoload.php\"; "
                               "echo Acme\\Greet\\Greet::hello(\"mirror\"), PHP_EOL;'"],
                              capture_output=True, text=True, timeout=300)

    good = install("file:///srv/mirror")
    assert good.returncode == 0 and "Hello, mirror" in good.stdout, good.stdout + good.stderr
    t0 = time.monotonic()
    down = install("http://127.0.0.1:9")
    assert down.returncode != 0 and time.monotonic() - t0 < 120
    said = down.stdout + down.stderr
    assert "envgen: composer install failed" in said and "ENVGEN_COMPOSER_REPO=http://127.0.0.1:9" in said, said


def test_a_phpunit5_project_with_dev_tools_and_autoload_dev_helpers_validates_in_docker(tmp_path, monkeypatch):
    """Real projects' shapes in one build (tests/php_repo.py ``make_legacy_repo(tools=True)``): PHPUnit pinned only
    in tools/phpunit/composer.json, phpstan/php-cs-fixer/an unused prophecy pin in require-dev (left out, not a
    rejection for want of Packagist), the tests' base class from autoload-dev (the offline autoloader keeps it)."""
    monkeypatch.delenv("ENVGEN_COMPOSER_REPO", raising=False)
    shas = make_legacy_repo(tmp_path / "calc", tools=True)
    report = build_code(f"git:{tmp_path / 'calc'}", tmp_path / "out", backend="docker", gate=False, runs=1,
                        store=tmp_path / "s.sqlite", log=lambda m: None)
    assert report.packs == [f"calc-{shas['fix'][:12]}"], report.rejections
    (env,) = report.details["environments"].values()
    notes = " | ".join(env["notes"])
    assert "PHPUnit ^5.7 from tools/phpunit/composer.json" in notes and "compatibility mode" in notes, notes
    assert "3 development tool(s) no test loads left out: friendsofphp/php-cs-fixer, phpspec/prophecy, " \
           "phpstan/phpstan" in notes, notes
    args = load(tmp_path / "out" / report.packs[0]).tasks[0].verifier.args
    assert args["FAIL_TO_PASS"] == ["CalcTest::testSub"] and args["PASS_TO_PASS"] == ["CalcTest::testAdd"], args
    assert args["options"]["compat"] == 5 and args["twins"]
