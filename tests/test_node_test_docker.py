"""A project of Node's built-in runner in Docker, one build for three real failure shapes: ``node --test``
(no jest, vitest or mocha: the kit's reporter), an ``.nvmrc`` asking for Node 22 (no base image suite has
it: the environment layer takes Node's release binary from the npm registry) and a test that inspects the
colour variables (the runner must leave ``FORCE_COLOR``/``NO_COLOR`` alone, as commander's tests need)."""

from __future__ import annotations

import json

import pytest

from envgen.families.code import build_code
from envgen.pack import load
from envgen.sandbox.images import stderr_log

try:
    from .node_repo import make_node_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from node_repo import make_node_repo

from twinless import episode, gate_forgery

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1500)]

F2P = "test/text.js > slugify > lowercases and joins words with dashes"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("node-test-docker")
    shas = make_node_repo(root / "textkit", "node-test", feature=False)
    report = build_code(f"git:{root / 'textkit'}", root / "out", backend="docker", gate=False,
                        store=root / "state.sqlite", log=stderr_log)
    return root, shas, report


def test_node_test_project_on_node_22_validates(built):
    root, shas, report = built
    assert report.packs == [f"textkit-{shas['fix'][:12]}"], report.rejections
    pack = load(root / "out" / report.packs[0])
    task = pack.tasks[0]
    args = task.verifier.args
    assert args["framework"] == "node-test" and args["files"] == ["test/text.js"]
    assert args["FAIL_TO_PASS"] == [F2P]
    # both environment tests pass on both sides: Node 22 runs them and the colour variables are unset
    assert "test/text.js > environment > runs on the Node the project asks for" in args["PASS_TO_PASS"]
    assert "test/text.js > environment > leaves the colour variables to the project" in args["PASS_TO_PASS"]
    assert len(args["PASS_TO_PASS"]) == 5 and args["twins"]
    runs = task.meta["validation"]["runs"]
    assert {(r["source"], r["canary"]) for r in runs} == {("node-test-json", "failed")}
    (key, env), = report.details["environments"].items()
    assert [(s["name"], s["rc"]) for s in env["steps"]] == [("node22", 0)]  # no dependencies to install
    assert "Node's release binary from the npm registry" in json.dumps(report.details) and ".nvmrc (Node 22)" in \
        json.dumps(report.details)


def test_oracle_passes_and_the_gates_node_test_forgery_scores_zero(built):
    root, shas, report = built
    pack = load(root / "out" / report.packs[0])
    reward, details = episode(pack, submit={"patch": pack.tasks[0].reference.patch}, sandbox="docker")
    n = pack.tasks[0].meta["validation"]["twin_checks"]
    assert reward == 1.0 and details["twins"] == f"{n}/{n} failed as they must", details
    reward, details = episode(pack, submit={"patch": gate_forgery(pack)}, sandbox="docker")
    assert reward == 0.0 and details["FAIL_TO_PASS"] == "1/1", details  # node:assert silenced: the twins pass too
    assert details["twins"].startswith("0/") and "twin checks" in details["reason"], details
