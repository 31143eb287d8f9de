"""``envgen eval swebench`` in Docker: a build's gold patches are all resolved, empty patches none."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from envgen.cli import app
from envgen.families.code import build_code, code_packs
from envgen.sandbox.images import stderr_log

try:
    from .code_repo import make_calc_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import make_calc_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-docker")
    make_calc_repo(root / "calc")
    report = build_code(f"git:{root / 'calc'}", root / "out", backend="docker", gate=False,
                        store=root / "state.sqlite", log=stderr_log)
    assert report.kept == 2, report.rejections
    tasks = [t for p in code_packs(root / "out") for t in p.tasks]
    return root, tasks


def _eval(root, preds, name):
    src = root / f"{name}.jsonl"
    src.write_text("".join(json.dumps(p) + "\n" for p in preds))
    res = CliRunner().invoke(app, ["eval", "swebench", "--predictions", str(src), str(root / "out"),
                                   "--out", str(root / "eval"), "--run-id", name, "--workers", "2", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_gold_patches_resolve_every_instance(built):
    root, tasks = built
    report = _eval(root, [{"instance_id": t.id, "model_patch": t.reference.patch, "model_name_or_path": "gold"}
                          for t in tasks], "gold")
    ids = sorted(t.id for t in tasks)
    assert report["resolved_ids"] == ids and report["completed_ids"] == ids and report["sandbox"] == "docker"
    assert (report["total_instances"], report["resolved_instances"], report["error_instances"]) == (2, 2, 0)
    for t in tasks:
        per = json.loads((root / "eval" / "logs" / "run_evaluation" / "gold" / "gold" / t.id / "report.json")
                         .read_text())[t.id]
        assert per["tests_status"]["FAIL_TO_PASS"]["success"] == t.verifier.args["FAIL_TO_PASS"]
        assert per["tests_status"]["PASS_TO_PASS"]["success"] == t.verifier.args["PASS_TO_PASS"]
        assert not per["tests_status"]["FAIL_TO_PASS"]["failure"] and not per["tests_status"]["PASS_TO_PASS"]["failure"]
    assert json.loads((root / "eval" / "gold.gold.json").read_text())["resolved_instances"] == 2


def test_empty_patches_resolve_none(built):
    root, tasks = built
    report = _eval(root, [{"instance_id": t.id, "model_patch": "", "model_name_or_path": "org/empty"}
                          for t in tasks], "empty")
    assert report["resolved_instances"] == 0 and report["completed_instances"] == 0
    assert report["empty_patch_ids"] == sorted(t.id for t in tasks)
    assert (root / "eval" / "org__empty.empty.json").is_file()
