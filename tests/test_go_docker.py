"""Go end to end in Docker: one build of the gostats repository (Debian's Go toolchain layer, the module's
dependency from Debian's packages), validation in the task image, and the pack rolled out through
``gymnasium.make`` with the oracle (1) and the null policy (0)."""

from __future__ import annotations

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.families.code import build_code
from envgen.pack import load
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout
from envgen.sandbox.images import stderr_log

try:
    from .go_repo import make_gostats_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from go_repo import make_gostats_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

F2P = ["example.com/gostats/stats.TestMedian", "example.com/gostats/stats.TestMedian/unsorted"]
P2P = ["example.com/gostats/stats.TestMean", "example.com/gostats/stats.TestMedian/sorted",
       "example.com/gostats/stats.TestSum", "example.com/gostats/stats.TestSum/empty",
       "example.com/gostats/stats.TestSum/three"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("go-docker")
    shas = make_gostats_repo(root / "gostats")
    report = build_code(f"git:{root / 'gostats'}", root / "out", backend="docker", store=root / "state.sqlite",
                        log=stderr_log)
    return root, shas, report


def test_docker_build_validates_the_fix_and_rejects_the_breaking_change(built):
    root, shas, report = built
    assert report.packs == [f"gostats-{shas['fix'][:12]}"], report.rejections
    assert report.rejected_by_reason == {"validate: PASS_TO_FAIL": 1, "candidates: no test change": 1}
    breaking = next(r for r in report.rejections if r["task"] == f"gostats-{shas['intmean'][:12]}")
    assert breaking["reason"] == ("PASS_TO_FAIL: the gold patch breaks 1 passing test(s): "
                                  "example.com/gostats/stats.TestMean")
    pack = load(root / "out" / report.packs[0])
    task = pack.tasks[0]
    assert pack.manifest.image.base == "debian:bookworm+go"
    assert task.verifier.args["FAIL_TO_PASS"] == F2P and task.verifier.args["PASS_TO_PASS"] == P2P
    runs = task.meta["validation"]["runs"]
    assert [(r["mode"], r["source"], r["canary"]) for r in runs] == \
        [("base", "go-test-json", "failed")] * 3 + [("gold", "go-test-json", "failed")] * 3
    (key, env), = report.details["environments"].items()
    assert [(s["name"], s["rc"]) for s in env["steps"]] == [("debian-go-packages", 0)]
    gate = report.details["tasks"][task.id]["gate"]
    assert gate["reference"] == gate["reference-again"] == 1.0 and gate["empty"] == 0.0, gate
    assert gate["forgery"] == 0.0, gate  # the Go forgery payload, planted by the gate: the twin checks stop it
    assert task.verifier.args["twins"]["files"] == "twins.json" and task.meta["validation"]["twin_checks"] >= 2


def test_oracle_scores_one_and_null_zero_through_gymnasium(built):
    root, shas, report = built
    env = gymnasium.make("envgen/Pack-v0", pack=str(root / "out" / report.packs[0]), sandbox="docker")
    try:
        oracle = rollout(env.unwrapped, OraclePolicy())
        null = rollout(env.unwrapped, NullPolicy())
    finally:
        env.close()
    assert oracle.reward == 1.0, oracle.reward_details
    assert oracle.reward_details["FAIL_TO_PASS"] == "2/2" and oracle.reward_details["PASS_TO_PASS"] == "5/5"
    assert oracle.reward_details["canary"] == "failed"
    assert oracle.reward_details["twins"].endswith("failed as they must"), oracle.reward_details
    held, total = oracle.reward_details["twins"].split()[0].split("/")
    assert held == total and int(total) >= 2, oracle.reward_details
    assert null.reward == 0.0
