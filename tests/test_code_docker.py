"""The code family in Docker: layered images, fail-to-pass validation, the red-team gate, SWE-bench round trip."""

from __future__ import annotations

import json

import pytest

from envgen.build.offline import validate_pack as gate_pack
from envgen.families.code import build_code, export_swebench
from envgen.families.code.repo_image import EnvironmentFailed, build_environment, layer_sharing
from envgen.families.code.lang import Recipe, Step
from envgen.episodes.gym import PackEnv
from envgen.sandbox.images import stderr_log
from envgen.pack import load
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout

try:
    from .code_repo import diff, make_calc_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import diff, make_calc_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("code-docker")
    shas = make_calc_repo(root / "calc")
    report = build_code(f"git:{root / 'calc'}", root / "out", backend="docker", store=root / "state.sqlite",
                        log=stderr_log)
    return root, shas, report


def test_validation_in_docker_finds_the_lists_excludes_flaky_and_rejects_the_breaking_fix(built):
    root, shas, report = built
    assert sorted(report.packs) == [f"calc-{shas['fix'][:12]}", f"calc-{shas['power'][:12]}"]
    breaking = next(r for r in report.rejections if r["task"] == f"calc-{shas['float'][:12]}")
    assert (breaking["stage"], breaking["reason"]) == (
        "validate", "PASS_TO_FAIL: the gold patch breaks 1 passing test(s): tests/test_core.py::test_multiply_int")
    task = load(root / "out" / f"calc-{shas['fix'][:12]}").tasks[0]
    assert task.verifier.args["FAIL_TO_PASS"] == ["tests/test_core.py::test_subtract"]
    assert task.verifier.args["PASS_TO_PASS"] == ["tests/test_core.py::test_add", "tests/test_core.py::test_divide",
                                                  "tests/test_core.py::test_multiply_int"]
    val = task.meta["validation"]
    assert val["flaky"] == ["tests/test_core.py::test_flaky"]
    assert [(r["mode"], r["run"], r["source"]) for r in val["runs"]] == \
        [("base", i, "junit") for i in (1, 2, 3)] + [("gold", i, "junit") for i in (1, 2, 3)]
    assert val["test_seconds"] > 0 and val["wall_seconds"] >= val["test_seconds"]


def test_tasks_share_the_repository_environment_layers(built):
    root, shas, report = built
    (key, env), = report.details["environments"].items()
    assert env["tag"].startswith(f"envgen/repoenv:python-{key}-")
    assert [(s["name"], s["rc"]) for s in env["steps"]] == [("venv", 0)]  # no dependencies: pytest is Debian's
    assert sorted(env["tasks"]) == sorted(f"calc-{shas[k][:12]}" for k in ("fix", "float", "power"))
    import docker

    client = docker.from_env()
    for name in report.packs:
        pack = load(root / "out" / name)
        assert pack.manifest.image.base == "debian:bookworm+python" and pack.manifest.image.tag
        share = layer_sharing(client, pack.manifest.image.tag, env["tag"])
        assert share["shares_environment"], share
        assert share["unique_bytes"] < 1_000_000, share  # the task adds its snapshot and tools only
        assert report.details["tasks"][pack.tasks[0].id]["unique_image_bytes"] == share["unique_bytes"]


def test_oracle_scores_one_and_null_zero_in_docker(built):
    root, shas, report = built
    path = root / "out" / f"calc-{shas['fix'][:12]}"
    (res,) = gate_pack(path, workers=1, sandbox="docker")
    assert res.passed, res.reason
    assert res.probes == {"reference": 1.0, "reference-again": 1.0, "empty": 0.0, "claim": 0.0, "mutated": 0.0,
                          "noop": 0.0, "plugin-addopts": 0.0, "plugin-conftest": 0.0, "config-only": 0.0,
                          "forgery": 0.0}
    env = PackEnv(path, sandbox="docker")
    try:
        oracle = rollout(env, OraclePolicy())
        null = rollout(env, NullPolicy())
    finally:
        env.close()
    assert oracle.reward == 1.0 and oracle.reward_details["FAIL_TO_PASS"] == "1/1", oracle.reward_details
    assert null.reward == 0.0


def test_swebench_file_round_trips_through_docker_validation(built, tmp_path):
    root, shas, _ = built
    repo = root / "calc"
    expected = {
        "calc__calc-2": (shas["initial"], shas["fix"], ["tests/test_core.py::test_subtract"],
                         ["tests/test_core.py::test_add", "tests/test_core.py::test_divide",
                          "tests/test_core.py::test_multiply_int"]),
        "calc__calc-5": (shas["docs"], shas["power"],
                         ["tests/test_power.py::test_power", "tests/test_power.py::test_power_zero"], []),
    }
    from envgen.families.code.candidates import split_patch
    from envgen.families.code.python import Python

    lines = []
    for iid, (base, head, f2p, p2p) in expected.items():
        gold, test, _, _ = split_patch(diff(repo, base, head), Python())
        lines.append(json.dumps({
            "instance_id": iid, "repo": "calc/calc", "base_commit": base, "patch": gold, "test_patch": test,
            "problem_statement": f"Issue text of {iid}", "hints_text": "", "created_at": "2024-01-02T12:00:00Z",
            "version": "0.1", "environment_setup_commit": shas["initial"],
            "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p)}))
    src = tmp_path / "instances.jsonl"
    src.write_text("\n".join(lines) + "\n")
    report = build_code(f"swebench:{src}", tmp_path / "out", repo_path=repo, backend="docker", gate=False,
                        store=tmp_path / "s.sqlite", log=stderr_log)
    assert report.kept == 2, report.rejections
    rows = {r["instance_id"]: r for r in export_swebench(tmp_path / "out", tmp_path / "back.jsonl")}
    for iid, (base, _, f2p, p2p) in expected.items():
        row = rows[iid]
        assert json.loads(row["FAIL_TO_PASS"]) == f2p and json.loads(row["PASS_TO_PASS"]) == p2p
        assert (row["base_commit"], row["version"], row["environment_setup_commit"]) == (base, "0.1", shas["initial"])
    original = {json.loads(line)["instance_id"]: json.loads(line) for line in lines}
    assert all(rows[i]["patch"] == original[i]["patch"] and rows[i]["test_patch"] == original[i]["test_patch"]
               for i in expected)


def test_a_failing_install_step_is_recorded_with_its_exit_code():
    recipe = Recipe("python", "bookworm", ("python",), [Step("venv", "python3 -m venv --without-pip /opt/t"),
                                                        Step("broken", "echo installing && exit 3"),
                                                        Step("never", "true")], "pytest")
    with pytest.raises(EnvironmentFailed) as info:
        build_environment(recipe, log=lambda m: None)
    assert [(s.name, s.rc) for s in info.value.steps] == [("venv", 0), ("broken", 3), ("never", None)]
    assert "step 'broken' exited with 3" in str(info.value)
