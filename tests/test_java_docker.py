"""A Maven project through the code family in Docker: the jdk toolchain layer (OpenJDK 17, Maven, Debian's Maven
repository), the task image whose check compiles the project offline, validation in a container without
network, and episodes through ``gymnasium.make``: the oracle scores 1, the null policy 0.

One build (module scope), one candidate (the repository up to the fix commit), one validation run per side, no
red-team gate (tests/adversarial/test_java_attacks.py attacks the same verifier), so it stays within a few
minutes on two cores once the jdk layer is built.
"""

from __future__ import annotations

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.families.code import build_code
from envgen.pack import load
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout
from envgen.sandbox.images import stderr_log

try:
    from .java_repo import debian_contents, make_slugs_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from java_repo import debian_contents, make_slugs_repo

from twinless import episode, gate_forgery

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The slugs project with the real failure shape: a parent, JUnit and a plugin at versions Debian does not
    package (``DEBIAN_VERSIONS_POM``); Debian's Contents index is a few real lines of it."""
    root = tmp_path_factory.mktemp("java-docker")
    shas = make_slugs_repo(root / "slugs", upto="fix", debian_versions=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENVGEN_DEBIAN_CONTENTS", str(debian_contents(root / "Contents-all.gz")))
        mp.setenv("ENVGEN_CACHE", str(root / "cache"))
        report = build_code(f"git:{root / 'slugs'}", root / "out", backend="docker", store=root / "state.sqlite",
                            runs=1, gate=False, log=stderr_log)
    return root, shas, report


def test_validation_in_docker_finds_the_lists(built):
    root, shas, report = built
    assert report.packs == [f"slugs-{shas['fix'][:12]}"], report.rejections
    task = load(root / "out" / report.packs[0]).tasks[0]
    assert task.verifier.args["FAIL_TO_PASS"] == ["com.acme.text.SlugTest.keepsDigits"]
    assert len(task.verifier.args["PASS_TO_PASS"]) == 6
    runs = task.meta["validation"]["runs"]
    # the second gold run runs with keepsDigits' twin checks beside it: both fail, as they must
    assert [(r["mode"], r["source"], r["canary"]) for r in runs] == [("base", "junit", "failed"),
                                                                     ("gold", "junit", "failed"),
                                                                     ("gold", "junit", "failed")]
    assert task.meta["validation"]["twin_checks"] == 2 and task.verifier.args["twins"]["files"] == "twins.json"
    (env,) = report.details["environments"].values()
    assert env["tag"].startswith("envgen/repoenv:java-")
    assert [s["name"] for s in env["steps"]] == ["debian-libraries"]  # Apache's parent: installed with Maven
    assert any("org.apache:apache:33 (parent) -> 29" in n and "org.junit.jupiter:junit-jupiter:5.10.2 -> 5.9.2" in n
               and "org.junit.jupiter:junit-jupiter-api:5.9.2" in n for n in env["notes"]), env["notes"]
    pack = load(root / "out" / report.packs[0])
    assert pack.manifest.image.base == "debian:bookworm+jdk"
    assert task.verifier.args["options"]["repo"] == "/opt/envgen/m2"  # the substituted repository, every run
    assert "envgen task step: debian-versions" in (pack.root / "env" / "Dockerfile").read_text()


def test_oracle_scores_one_and_null_zero_through_gymnasium(built):
    root, _, report = built
    env = gymnasium.make("envgen/Pack-v0", pack=str(root / "out" / report.packs[0]), sandbox="docker")
    try:
        oracle = rollout(env.unwrapped, OraclePolicy())
        null = rollout(env.unwrapped, NullPolicy())
    finally:
        env.close()
    assert oracle.reward == 1.0, oracle.reward_details
    assert oracle.reward_details["FAIL_TO_PASS"] == "1/1" and oracle.reward_details["PASS_TO_PASS"] == "6/6"
    assert oracle.reward_details["twins"] == "2/2 failed as they must"
    assert null.reward == 0.0


def test_the_gates_maven_forgery_scores_zero_in_docker(built):
    """Surefire's channel in the forked JVM rewritten by the library's static initializer (the gate's payload):
    the twins are reported passing too."""
    root, _, report = built
    pack = load(root / "out" / report.packs[0])
    reward, details = episode(pack, submit={"patch": gate_forgery(pack)}, sandbox="docker")
    assert reward == 0.0 and details["FAIL_TO_PASS"] == "1/1", details
    assert details["twins"].startswith("0/") and "twin checks" in details["reason"], details


def test_a_dependency_debian_lacks_is_an_environment_rejection_a_rerun_does_not_rebuild(tmp_path):
    """The task layer's offline check fails on a POM that needs an artifact Debian's Maven repository lacks: the
    candidate is rejected at the environment stage with the coordinates (not an error, which every rerun
    would build again), and the rerun resumes it from the store."""
    shas = make_slugs_repo(tmp_path / "slugs", upto="fix", unpackaged=True)
    with pytest.MonkeyPatch.context() as mp:  # no Contents index to plan with: the check is what finds it
        mp.setenv("ENVGEN_DEBIAN_CONTENTS", str(tmp_path / "missing.gz"))
        mp.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))
        reports = [build_code(f"git:{tmp_path / 'slugs'}", tmp_path / "out", backend="docker",
                              store=tmp_path / "state.sqlite", runs=1, gate=False, log=stderr_log) for _ in range(2)]
    for report in reports:
        assert report.packs == [] and report.rejected_by_reason == {"environment: dependencies unavailable offline": 1}
        (rej,) = report.rejections
        assert rej["task"] == f"slugs-{shas['fix'][:12]}" and rej["stage"] == "environment"
        assert rej["reason"] == ("dependencies unavailable offline: org.example.unpackaged:nowhere:1.2 (not in "
                                 "Debian's Maven repository; set ENVGEN_MAVEN_MIRROR for others) (task image: step "
                                 "'check' exited with 1)")
    assert reports[0].details["resumed"] == 0 and reports[1].details["resumed"] == 1

