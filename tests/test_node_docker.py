"""A JavaScript repository (jest, npm lockfile) end to end in Docker: the Node toolchain layer, the
dependencies installed from the lockfile in the shared environment layer, validation in the task image,
and the pack through gymnasium.make with the oracle (1) and the null policy (0)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.families.code import build_code
from envgen.families.code.repo_image import layer_sharing
from envgen.pack import load
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout
from envgen.sandbox.images import stderr_log

try:
    from .node_repo import make_node_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from node_repo import make_node_repo

from twinless import episode, gate_forgery

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("node-docker")
    shas = make_node_repo(root / "textkit", "jest", feature=False)
    report = build_code(f"git:{root / 'textkit'}", root / "out", backend="docker", gate=False,
                        store=root / "state.sqlite", log=stderr_log)
    return root, shas, report


def test_jest_task_validates_in_its_image_on_the_shared_environment(built):
    root, shas, report = built
    assert report.packs == [f"textkit-{shas['fix'][:12]}"], report.rejections
    pack = load(root / "out" / report.packs[0])
    task = pack.tasks[0]
    assert pack.manifest.image.base == "debian:bookworm+node"
    assert task.verifier.args["FAIL_TO_PASS"] == ["__tests__/text.test.js > slugify > lowercases and joins words "
                                                  "with dashes"]
    assert len(task.verifier.args["PASS_TO_PASS"]) == 3
    assert task.verifier.args["twins"] and task.meta["validation"]["twin_checks"] >= 1  # hidden, must fail
    runs = task.meta["validation"]["runs"]
    assert [(r["mode"], r["source"], r["canary"]) for r in runs] == \
        [("base", "jest-json", "failed")] * 3 + [("gold", "jest-json", "failed")] * 3
    (key, env), = report.details["environments"].items()
    assert [(s["name"], s["rc"]) for s in env["steps"]] == [("package.json", 0), ("package-lock.json", 0),
                                                            ("install", 0), ("link", 0), ("check", 0)]
    import docker
    share = layer_sharing(docker.from_env(), pack.manifest.image.tag, env["tag"])
    assert share["shares_environment"] and share["unique_bytes"] < 1_000_000, share


def test_gymnasium_oracle_scores_one_and_null_zero(built):
    root, shas, report = built
    env = gym.make("envgen/Pack-v0", pack=str(root / "out" / report.packs[0]), sandbox="docker")
    try:
        oracle = rollout(env, OraclePolicy())
        null = rollout(env, NullPolicy())
    finally:
        env.close()
    assert oracle.reward == 1.0, oracle.reward_details
    assert oracle.reward_details["FAIL_TO_PASS"] == "1/1" and oracle.reward_details["PASS_TO_PASS"] == "3/3"
    n = load(root / "out" / report.packs[0]).tasks[0].meta["validation"]["twin_checks"]
    assert oracle.reward_details["twins"] == f"{n}/{n} failed as they must", oracle.reward_details
    assert null.reward == 0.0


def test_the_gates_jest_forgery_scores_zero_in_docker(built):
    """``expect`` made a proxy that never throws, planted by the gate in the library: the twins pass too."""
    root, shas, report = built
    pack = load(root / "out" / report.packs[0])
    reward, details = episode(pack, submit={"patch": gate_forgery(pack)}, sandbox="docker")
    assert reward == 0.0 and details["FAIL_TO_PASS"] == "1/1", details  # forged: believed by no one
    assert details["twins"].startswith("0/") and "twin checks" in details["reason"], details
