"""JavaScript and TypeScript repositories end to end without Docker (local backend: this machine's Node and
the fixture's dependencies, installed once per machine by ``node_repo.node_deps``).

jest (CommonJS) goes through the whole build with the red-team gate and an episode in the local sandbox;
vitest (ES modules) and TypeScript (tsc build, mocha) through validation, each task's gold patch and an
empty submission judged by the verifier.
"""

from __future__ import annotations

import shutil

import pytest

from envgen.episodes.episode import Episode
from envgen.families.code import build_code
from envgen.pack import load
from envgen.sandbox import open_sandbox

try:
    from .node_repo import make_node_repo, node_deps
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from node_repo import make_node_repo, node_deps

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                                 reason="needs node and npm (Debian's nodejs and npm)")]

F2P = "lowercases and joins words with dashes"
P2P = [("capitalize", "upper-cases the first letter"), ("truncate", "cuts long ones with an ellipsis"),
       ("truncate", "keeps short strings")]


def _build(root, flavor, gate, feature=True):
    shas = make_node_repo(root / flavor, flavor, feature)
    report = build_code(f"git:{root / flavor}", root / f"out-{flavor}", backend="local", gate=gate,
                        store=root / f"{flavor}.sqlite", log=lambda m: None)
    return shas, report


@pytest.fixture(scope="module")
def jest_built(tmp_path_factory):
    root = tmp_path_factory.mktemp("node-local")
    shas, report = _build(root, "jest", True)
    return root, shas, report


def test_jest_build_keeps_the_fix_and_the_feature_and_says_why_the_docs_went(jest_built):
    root, shas, report = jest_built
    assert report.proposed == 3 and report.kept == 2, report.rejections
    assert sorted(report.packs) == sorted(f"jest-{shas[k][:12]}" for k in ("fix", "count"))
    assert [(r["task"], r["reason"]) for r in report.rejections] == [(f"jest-{shas['docs'][:12]}", "no test change")]
    task = load(root / "out-jest" / f"jest-{shas['fix'][:12]}").tasks[0]
    args = task.verifier.args
    assert args["framework"] == "jest" and args["files"] == ["__tests__/text.test.js"]
    assert args["FAIL_TO_PASS"] == [f"__tests__/text.test.js > slugify > {F2P}"]
    assert args["PASS_TO_PASS"] == [f"__tests__/text.test.js > {d} > {t}" for d, t in P2P]
    assert {r["source"] for r in task.meta["validation"]["runs"]} == {"jest-json"}
    gate = report.details["tasks"][task.id]["gate"]
    assert gate["reference"] == 1.0 and gate["reference-again"] == 1.0
    assert all(v == 0.0 for k, v in gate.items() if not k.startswith("reference")), gate
    assert gate["forgery"] == 0.0  # jest's expect made a proxy that never throws: the twins give it away
    assert args["twins"] and task.meta["validation"]["twin_checks"] >= 1
    count = load(root / "out-jest" / f"jest-{shas['count'][:12]}").tasks[0].verifier.args
    assert count["twins"]  # the test.each table's values are what its twins change
    # the new test file cannot load at the base: its parameterised tests are missing there, so failing
    assert count["FAIL_TO_PASS"] == ['__tests__/count.test.js > wordCount("") is 0',
                                     '__tests__/count.test.js > wordCount("one two  three") is 3']


def test_jest_episode_in_the_local_sandbox(jest_built):
    root, shas, _ = jest_built
    pack = load(root / "out-jest" / f"jest-{shas['fix'][:12]}")
    task = pack.tasks[0]
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, task)
        assert ep.call("replace_in_file", {"path": "src/text.js", "old": 'return s.trim().split(" ").join("-");',
                                           "new": 'return s.trim().toLowerCase().split(/[^a-z0-9]+/)'
                                                  '.filter(Boolean).join("-");'}).ok
        assert ep.call("submit", {}).ok
        verdict = ep.finish("done")
        assert verdict.reward == 1.0, verdict.details
        assert verdict.details["FAIL_TO_PASS"] == "1/1" and verdict.details["report"] == "jest-json"
        assert verdict.details["canary"] == "failed"

        ep = Episode(sbx, task)
        assert not ep.call("submit", {}).ok  # nothing changed
        verdict = ep.finish("done")
        assert verdict.reward == 0.0


@pytest.mark.parametrize("flavor,framework,test_file,source", [
    ("vitest", "vitest", "src/text.test.js", "vitest-json"),
    ("tsc", "mocha", "test/text.test.js", "mocha-json"),
])
def test_vitest_and_typescript_validate_and_judge_gold_and_empty(tmp_path, flavor, framework, test_file, source):
    shas, report = _build(tmp_path, flavor, False, feature=False)  # the fix only
    assert report.kept == 1, report.rejections
    pack = load(tmp_path / f"out-{flavor}" / f"{flavor}-{shas['fix'][:12]}")
    task = pack.tasks[0]
    args = task.verifier.args
    assert args["framework"] == framework and args["files"] == [test_file]
    assert args["FAIL_TO_PASS"] == [f"{test_file} > slugify > {F2P}"]
    assert args["PASS_TO_PASS"] == [f"{test_file} > {d} > {t}" for d, t in P2P]
    assert {r["source"] for r in task.meta["validation"]["runs"]} == {source}
    assert args["twins"] and task.meta["validation"]["twin_checks"] >= 1  # the F2P test's hidden twins
    if flavor == "tsc":
        assert pack.manifest.family == "code" and args["options"]["build"] == ["-p", "tsconfig.json"]
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, task)
        assert ep.call("submit", {"patch": task.reference.patch}).ok
        gold = ep.finish("done")
        ep = Episode(sbx, task)
        empty = ep.finish("done")
    assert gold.reward == 1.0, gold.details
    assert gold.details["twins"].endswith("failed as they must") and gold.details["twins"].split("/")[0] != "0"
    assert empty.reward == 0.0


def test_jest_on_es_modules_runs_with_the_test_scripts_node_options(tmp_path):
    import json
    import sys

    from envgen.families.code.lang import RepoView
    from envgen.families.code.node import JavaScript
    from envgen.paths import bundled

    sys.path.insert(0, str(bundled("verifiers")))
    from envgen_verifiers.tests import run_tests

    tree = tmp_path / "esm"
    tree.mkdir()
    (tree / "package.json").write_text(json.dumps({"name": "esm", "type": "module", "scripts": {
        "test": "NODE_OPTIONS=--experimental-vm-modules jest"}, "devDependencies": {"jest": "29.7.0"}}))
    (tree / "package-lock.json").write_text((node_deps("jest") / "package-lock.json").read_text())
    (tree / "a.js").write_text("export const one = () => 1;\n")
    (tree / "a.test.js").write_text('import { one } from "./a.js";\n\ntest("one", () => { expect(one()).toBe(1); });\n')
    import subprocess
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(tree), *cmd], check=True)
    sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    options = JavaScript().recipe(RepoView(tree, sha)).options
    assert options["env"] == {"NODE_OPTIONS": "--experimental-vm-modules"}
    options["modules"] = [str(node_deps("jest") / "node_modules")]
    res = run_tests(str(tree), "jest", ["a.test.js"], options=options)
    assert res["outcomes"] == {"a.test.js > one": "passed"} and res["canary"] == "failed", res["tail"]
    without = run_tests(str(tree), "jest", ["a.test.js"], options={**options, "env": {}})
    assert without["outcomes"] == {"a.test.js": "error"}  # import statements outside a module
