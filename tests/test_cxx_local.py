"""C end to end without Docker: ``vec`` (CMake + CTest) and ``amcalc`` (Automake's make check), from
tests/cxx_repo.py, through build_code with the local backend (red-team gate included), then episodes in a
local sandbox: the gold patch scores 1, an empty submission 0."""

from __future__ import annotations

import shutil

import pytest

from envgen.episodes.episode import Episode
from envgen.families.code import build_code
from envgen.pack import load
from envgen.sandbox import open_sandbox

try:
    from .cxx_repo import make_amcalc_repo, make_vec_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from cxx_repo import make_amcalc_repo, make_vec_repo

pytestmark = [pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("cc")), reason="needs cmake and a C "
                                 "compiler (.ci/setup-toolchains.sh)"), pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("cxx-local")
    shas = make_vec_repo(root / "vec")
    report = build_code(f"git:{root / 'vec'}", root / "out", backend="local", store=root / "state.sqlite",
                        log=lambda m: None)
    return root, shas, report


def test_the_c_fix_becomes_a_validated_pack(built):
    root, shas, report = built
    assert report.packs == [f"vec-{shas['fix'][:12]}"]
    assert {r["task"]: r["reason"] for r in report.rejections} == {f"vec-{shas['docs'][:12]}": "no test change"}
    task = load(root / "out" / report.packs[0]).tasks[0]
    args = task.verifier.args
    assert (args["framework"], args["files"], args["options"]) == ("ctest", ["tests/test_vec.c"], {})
    assert load(root / "out" / report.packs[0]).manifest.image.base == "debian:bookworm+gcc"
    assert args["FAIL_TO_PASS"] == ["vec_pop_empty"]
    assert args["PASS_TO_PASS"] == ["vec_get", "vec_grow", "vec_push"]
    val = task.meta["validation"]
    assert args["twins"]["files"] == "twins.json" and val["twin_checks"] == 2  # vec_pop_empty's twin programs both fail
    assert [(r["mode"], r["source"], r["canary"]) for r in val["runs"]] == \
        [("base", "ctest-junit", "failed")] * 3 + [("gold", "ctest-junit", "failed")] * 3
    gate = report.details["tasks"][task.id]["gate"]
    assert gate["reference"] == 1.0 and gate["reference-again"] == 1.0
    assert gate["empty"] == 0.0 and gate["noop"] == 0.0 and gate["mutated"] == 0.0
    assert gate["forgery"] == 0.0  # envs/code/forgeries/ctest.txt: its process exits 0, the twin programs pass


def test_gold_scores_one_and_empty_zero_in_a_local_episode(built):
    root, shas, report = built
    pack = load(root / "out" / report.packs[0])
    task = pack.tasks[0]
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, task)
        assert not ep.call("submit", {}).ok  # nothing changed
        verdict = ep.finish("done")
        assert verdict.reward == 0.0
        ep = Episode(sbx, task)
        assert ep.call("submit", {"patch": task.reference.patch}).ok
        verdict = ep.finish("done")
        assert verdict.reward == 1.0, verdict.details
        assert verdict.details["FAIL_TO_PASS"] == "1/1" and verdict.details["PASS_TO_PASS"] == "3/3"
        assert verdict.details["report"] == "ctest-junit" and verdict.details["canary"] == "failed"
        assert verdict.details["twins"] == "2/2 failed as they must"


@pytest.mark.skipif(not shutil.which("autoreconf"), reason="needs autoconf, automake (.ci/setup-toolchains.sh)")
def test_an_automake_project_is_validated_from_its_trs_files_and_gated(tmp_path):
    shas = make_amcalc_repo(tmp_path / "amcalc")
    report = build_code(f"git:{tmp_path / 'amcalc'}", tmp_path / "out", backend="local",
                        store=tmp_path / "state.sqlite", log=lambda m: None)
    assert report.packs == [f"amcalc-{shas['fix'][:12]}"], report.rejections
    task = load(tmp_path / "out" / report.packs[0]).tasks[0]
    args = task.verifier.args
    assert (args["framework"], args["files"]) == ("make-check", ["tests/test_clamp.c"])
    assert (args["FAIL_TO_PASS"], args["PASS_TO_PASS"]) == (["tests/test_clamp"], ["tests/test_sum"])
    assert {(r["source"], r.get("canary")) for r in task.meta["validation"]["runs"]} == {("automake-trs", "failed")}
    assert args["twins"]["files"] == "twins.json" and task.meta["validation"]["twin_checks"] >= 1  # twin test programs
    gate = report.details["tasks"][task.id]["gate"]
    assert gate["reference"] == 1.0 and gate["empty"] == 0.0 and gate["mutated"] == 0.0 and gate["noop"] == 0.0
    assert gate["forgery"] == 0.0  # envs/code/forgeries/make-check.txt
