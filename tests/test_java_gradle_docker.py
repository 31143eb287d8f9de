"""A Gradle build through the code family in Docker: the gradle + jdk toolchain layers (Debian's Gradle 4.4),
validation offline in a container (the runner's init script points ``mavenCentral()`` at Debian's Maven
repository), and the oracle scores 1, the null policy 0. One build, one candidate, one run per side."""

from __future__ import annotations

import pytest

from envgen.episodes.gym import PackEnv
from envgen.families.code import build_code
from envgen.pack import load
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout
from envgen.sandbox.images import stderr_log

try:
    from .java_repo import make_gradle_slugs_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from java_repo import make_gradle_slugs_repo

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1200)]


def test_gradle_build_validates_and_scores_in_docker(tmp_path):
    shas = make_gradle_slugs_repo(tmp_path / "slugs")
    report = build_code(f"git:{tmp_path / 'slugs'}", tmp_path / "out", backend="docker", store=tmp_path / "s.sqlite",
                        runs=1, gate=False, log=stderr_log)
    assert report.packs == [f"slugs-{shas['fix'][:12]}"], report.rejections
    pack = load(tmp_path / "out" / report.packs[0])
    assert pack.manifest.image.base == "debian:bookworm+gradle+jdk"
    args = pack.tasks[0].verifier.args
    assert args["FAIL_TO_PASS"] == ["com.acme.text.SlugTest.keepsDigits"]
    assert args["PASS_TO_PASS"] == ["com.acme.text.SlugTest.lowercasesWords", "com.acme.text.SlugTest.stripsAccents"]
    env = PackEnv(tmp_path / "out" / report.packs[0], sandbox="docker")
    try:
        oracle = rollout(env, OraclePolicy())
        null = rollout(env, NullPolicy())
    finally:
        env.close()
    assert oracle.reward == 1.0 and oracle.reward_details["FAIL_TO_PASS"] == "1/1", oracle.reward_details
    assert oracle.reward_details["twins"] == "2/2 failed as they must" and args["twins"]["files"] == "twins.json"
    assert null.reward == 0.0
