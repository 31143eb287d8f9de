"""Go end to end without Docker: the gostats repository (tests/go_repo.py) through ``build_code`` with the
local backend (this machine's Go and Debian's golang-github-google-go-cmp-dev), the recipe it gets, the
pack's test lists, and the verifier's verdicts on the gold patch, an empty and a missing submission."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envgen.errors import InputError
from envgen.families.code import build_code
from envgen.families.code.golang import Go, GoMod, debian_package
from envgen.families.code.lang import RepoView
from envgen.families.code.languages import detect_language
from envgen.pack import load

try:
    from .go_repo import UUID_CONTAINS_STUB, make_gostats_repo, make_uuidish_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from go_repo import UUID_CONTAINS_STUB, make_gostats_repo, make_uuidish_repo

pytestmark = pytest.mark.skipif(
    shutil.which("go") is None or not Path("/usr/share/gocode/src/github.com/google/go-cmp/go.mod").is_file(),
    reason="needs golang-go and golang-github-google-go-cmp-dev")

F2P = ["example.com/gostats/stats.TestMedian", "example.com/gostats/stats.TestMedian/unsorted"]
P2P = ["example.com/gostats/stats.TestMean", "example.com/gostats/stats.TestMedian/sorted",
       "example.com/gostats/stats.TestSum", "example.com/gostats/stats.TestSum/empty",
       "example.com/gostats/stats.TestSum/three"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("go-local")
    shas = make_gostats_repo(root / "gostats")
    report = build_code(f"git:{root / 'gostats'}", root / "out", backend="local", store=root / "state.sqlite",
                        log=lambda m: None)
    return root, shas, report


def test_language_detection_and_recipe_from_go_mod(built):
    root, shas, _ = built
    view = RepoView(root / "gostats", shas["fix"])
    assert detect_language(view).name == "go"
    recipe = Go().recipe(view)
    assert (recipe.suite, recipe.toolchains, recipe.framework) == ("bookworm", ("go",), "go")
    assert recipe.image_base == "debian:bookworm+go"
    assert [s.name for s in recipe.steps] == ["debian-go-packages"]
    assert "golang-github-google-go-cmp-dev" in recipe.steps[0].run
    assert recipe.options == {"root": ".", "module": "example.com/gostats", "go": "1.19", "flags": [],
                              "replace": {"github.com/google/go-cmp": "/usr/share/gocode/src/github.com/google/go-cmp"}}


def test_build_keeps_the_fix_and_says_why_the_others_went(built):
    root, shas, report = built
    assert report.packs == [f"gostats-{shas['fix'][:12]}"], report.rejections
    assert report.rejected_by_reason == {"validate: PASS_TO_FAIL": 1, "candidates: no test change": 1}
    breaking = next(r for r in report.rejections if r["task"] == f"gostats-{shas['intmean'][:12]}")
    assert breaking["reason"] == ("PASS_TO_FAIL: the gold patch breaks 1 passing test(s): "
                                  "example.com/gostats/stats.TestMean")


def test_pack_lists_subtests_in_gos_convention_and_the_gate_scores(built):
    root, shas, report = built
    pack = load(root / "out" / report.packs[0])
    task = pack.tasks[0]
    args = task.verifier.args
    assert (args["framework"], args["files"]) == ("go", ["stats/stats_test.go"])
    assert args["FAIL_TO_PASS"] == F2P and args["PASS_TO_PASS"] == P2P
    val = task.meta["validation"]
    assert val["flaky"] == [] and val["fail_to_fail"] == []
    assert [(r["mode"], r["source"], r["canary"]) for r in val["runs"]] == \
        [("base", "go-test-json", "failed")] * 3 + [("gold", "go-test-json", "failed")] * 3
    gate = report.details["tasks"][task.id]["gate"]
    assert gate["reference"] == gate["reference-again"] == 1.0, gate
    assert all(v == 0.0 for k, v in gate.items() if k not in ("reference", "reference-again")), gate
    assert gate["forgery"] == 0.0  # envs/code/forgeries/go.txt, planted by the gate: the twins stop it
    # twin checks: TestMedian renamed, two twins beside it, each failing (with a subtest) under the fix
    assert args["twins"]["files"] == "twins.json" and val["twin_checks"] == 4
    (planned,) = args["twins"]["tests"]
    assert (planned["file"], planned["name"], len(planned["twins"])) == ("stats/stats_test.go", "TestMedian", 2)
    text = json.loads((pack.hidden_dir / "twins.json").read_text())["files"]["stats/stats_test.go"]
    assert "func TestMedian(" not in text and text.count("func TestMedian_") == 3
    assert all(t.startswith("example.com/gostats/stats.TestMedian_") for t in args["twins"]["expect_failing"])


def test_go_mod_parsing_and_debian_names():
    mod = GoMod("module  example.com/x // the module\n\ngo 1.21.3\ntoolchain go1.22.0\n\nrequire (\n"
                "\tgithub.com/google/go-cmp v0.5.9\n\tgolang.org/x/text v0.3.7 // indirect\n)\n"
                "require gopkg.in/yaml.v3 v3.0.1\nreplace golang.org/x/text => ./third_party/text\n")
    assert (mod.module, mod.go) == ("example.com/x", "1.21.3")
    assert mod.requires == [("github.com/google/go-cmp", "v0.5.9"), ("golang.org/x/text", "v0.3.7"),
                            ("gopkg.in/yaml.v3", "v3.0.1")]
    assert mod.replaces == {"golang.org/x/text": "./third_party/text"}
    assert [debian_package(m) for m, _ in mod.requires] == [
        "golang-github-google-go-cmp-dev", "golang-golang-x-text-dev", "golang-gopkg-yaml.v3-dev"]
    with pytest.raises(InputError, match="no module directive"):
        GoMod("go 1.19\n")


def _repo_with(tmp_path: Path, files: dict[str, str]) -> RepoView:
    import subprocess

    repo = tmp_path / "r"
    repo.mkdir(parents=True)
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x"],
                   check=True)
    return RepoView(repo, "HEAD")


def test_recipe_for_vendored_newer_and_too_new_modules(tmp_path, monkeypatch):
    monkeypatch.delenv("ENVGEN_GOPROXY", raising=False)
    view = _repo_with(tmp_path, {"go.mod": "module example.com/v\n\ngo 1.22\n\nrequire github.com/a/b v1.0.0\n",
                                 "vendor/modules.txt": "# github.com/a/b v1.0.0\n## explicit\ngithub.com/a/b\n",
                                 "vendor/github.com/a/b/b.go": "package b\n", "v.go": "package v\n"})
    recipe = Go().recipe(view)
    assert recipe.suite == "trixie" and recipe.steps == [] and recipe.options["flags"] == ["-mod=vendor"]
    assert Go().is_code_path("v.go") and not Go().is_code_path("vendor/github.com/a/b/b.go")
    too_new = _repo_with(tmp_path / "n", {"go.mod": "module example.com/n\n\ngo 1.30\n"})
    with pytest.raises(InputError, match=r"go.mod says go 1.30: no base image has that Go \(available: "
                                         r"Go 1.19 \(bookworm\), Go 1.24 \(trixie\)\)"):
        Go().recipe(too_new)


def test_a_go_mod_without_a_go_line_is_taken_as_go_1_16_and_the_note_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("ENVGEN_GOPROXY", raising=False)
    recipe = Go().recipe(_repo_with(tmp_path, {"go.mod": "module example.com/old\n", "old.go": "package old\n"}))
    assert recipe.suite == "bookworm" and recipe.options["go"] == ""
    note = next(n for n in recipe.notes if n.startswith("Go 1.19"))
    assert "go.mod has no go directive, so go 1.16 is assumed" in note and "?" not in note


def test_recipe_through_a_module_proxy_named_by_envgen_goproxy(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVGEN_GOPROXY", "file:///srv/goproxy")
    view = _repo_with(tmp_path, {"go.mod": "module example.com/p\n\ngo 1.19\n\nrequire github.com/a/b v1.0.0\n"})
    recipe = Go().recipe(view)
    assert recipe.steps == [] and [s.name for s in recipe.task_steps] == ["modules"]
    assert "GOPROXY=file:///srv/goproxy" in recipe.task_steps[0].run and "go mod download" in recipe.task_steps[0].run
    assert recipe.options["flags"] == ["-mod=mod"] and recipe.options["modcache"] == "/opt/envgen/gomodcache"


def test_runnable_tests_are_the_patchs_go_test_files_and_the_readers_of_changed_testdata():
    go = Go()
    after = {"go.mod", "a/a.go", "a/a_test.go", "a/b_test.go", "a/testdata/in.txt", "c/c_test.go"}
    assert go.runnable_tests(["a/testdata/in.txt", "c/c_test.go", "gone_test.go"], after) == \
        ["c/c_test.go", "a/a_test.go", "a/b_test.go"]
    assert go.is_test_path("a/testdata/x.go") and go.is_test_path("a/a_test.go") and not go.is_test_path("a/a.go")


@pytest.fixture(scope="module")
def uuidish(tmp_path_factory):
    root = tmp_path_factory.mktemp("go-uuidish")
    shas = make_uuidish_repo(root / "u")
    report = build_code(f"git:{root / 'u'}", root / "out", backend="local", store=root / "state.sqlite",
                        log=lambda m: None, gate=False)
    return root, shas, report


UUID_UNCHANGED = ("example.com/uuidish.TestParse, example.com/uuidish.TestString, "
                  "example.com/uuidish.TestVersion")


def test_a_test_patch_that_adds_only_a_benchmark_gives_no_task(uuidish):
    """Issue 27's google/uuid case: the test patch adds only ``BenchmarkUUIDs_Strings``, which calls the method
    the gold patch adds, so the package does not compile at the base and every test of it went FAIL_TO_PASS
    (a stub ``Strings`` returning nil scored 1). A benchmark changes no test: the candidate is rejected."""
    root, shas, report = uuidish
    rejected = {r["task"]: r["reason"] for r in report.rejections}
    assert rejected[f"u-{shas['strings'][:12]}"] == \
        f"FAIL_TO_PASS test(s) the test patch does not add or change: {UUID_UNCHANGED}"


def test_a_new_test_of_a_new_method_builds_a_task_that_a_stub_cannot_pass(uuidish):
    """The same shape with a real test of the new method: the package does not compile at the base, so every
    test fails there, but only the test the test patch adds is FAIL_TO_PASS; the others must still pass."""
    import gymnasium

    import envgen  # noqa: F401  (registers envgen/Pack-v0)
    from envgen.episodes.actions import render_action

    root, shas, report = uuidish
    name = f"u-{shas['contains'][:12]}"
    assert name in report.packs, report.rejections
    pack = load(root / "out" / name)
    args = pack.tasks[0].verifier.args
    assert args["FAIL_TO_PASS"] == ["example.com/uuidish.TestUUIDsContains"] and args.get("twins")
    assert {"example.com/uuidish.TestParse", "example.com/uuidish.TestVersion"} <= set(args["PASS_TO_PASS"])
    env = gymnasium.make("envgen/Pack-v0", pack=str(pack.root), sandbox="local")
    try:
        env.reset(options={"task_id": pack.tasks[0].id})
        for call in [("write_file", {"path": "uuid.go", "content": UUID_CONTAINS_STUB}), ("submit", {})]:
            env.step(render_action("", [call]))
        _, reward, terminated, _, info = env.step("Done.")
    finally:
        env.close()
    assert terminated and reward == 0.0, info["reward_details"]
