"""A Maven project through the code family without Docker: ``build_code("git:...", backend="local")`` with this
machine's JDK, Maven and Debian's Maven repository (packages default-jdk-headless, maven, junit5,
libsurefire-java, libmaven-compiler-plugin-java, libmaven-resources-plugin-java), then episodes in a local
sandbox: the gold patch scores 1, nothing or an empty patch 0."""

from __future__ import annotations

import shutil

import pytest

from envgen.episodes.episode import Episode
from envgen.families.code import build_code
from envgen.families.code.java import Java
from envgen.families.code.lang import RepoView
from envgen.families.code.languages import detect_language
from envgen.pack import load
from envgen.sandbox import open_sandbox

try:
    from .java_repo import SLUG_PATH, make_slugs_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from java_repo import SLUG_PATH, make_slugs_repo

pytestmark = [pytest.mark.skipif(not (shutil.which("mvn") and shutil.which("javac")),
                                 reason="needs a JDK and Maven (apt-get install default-jdk-headless maven)"),
              pytest.mark.timeout(900)]

SLUG_TEST = "com.acme.text.SlugTest"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("java-local")
    shas = make_slugs_repo(root / "slugs")
    report = build_code(f"git:{root / 'slugs'}", root / "out", backend="local", store=root / "state.sqlite",
                        runs=1, gate=False, log=lambda m: None)
    return root, shas, report


def test_the_repository_is_java_and_its_recipe_runs_maven_offline(built):
    root, shas, _ = built
    view = RepoView(root / "slugs", shas["fix"])
    assert detect_language(view).name == "java"
    recipe = Java().recipe(view)
    assert (recipe.framework, recipe.toolchains, recipe.options) == ("maven", ("jdk",),
                                                                     {"repo": "/usr/share/maven-repo", "junit": "junit5"})
    assert [s.name for s in recipe.task_steps] == ["check"] and recipe.steps == []


def test_validation_finds_fail_to_pass_and_pass_to_pass_in_the_junit_ids(built):
    root, shas, report = built
    assert sorted(report.packs) == sorted([f"slugs-{shas['fix'][:12]}", f"slugs-{shas['words'][:12]}"])
    assert report.rejected_by_reason == {"candidates: no test change": 1}
    args = load(root / "out" / f"slugs-{shas['fix'][:12]}").tasks[0].verifier.args
    assert args["framework"] == "maven" and args["files"] == ["src/test/java/com/acme/text/SlugTest.java"]
    assert args["FAIL_TO_PASS"] == [f"{SLUG_TEST}.keepsDigits"]
    assert args["PASS_TO_PASS"] == sorted([f"{SLUG_TEST}$Punctuation.collapsesRuns", f"{SLUG_TEST}.lowercasesWords",
                                           f"{SLUG_TEST}.stripsAccents"] +
                                          [f"{SLUG_TEST}.trimsSeparators{{String}}[{i}]" for i in (1, 2, 3)])
    words = load(root / "out" / f"slugs-{shas['words'][:12]}").tasks[0].verifier.args
    # WordsTest does not compile at the base commit: its tests are missing there, hence failing
    assert words["FAIL_TO_PASS"] == ["com.acme.text.WordsTest.countsWords", "com.acme.text.WordsTest.emptyTitleHasNoWords"]
    assert words["PASS_TO_PASS"] == []


def test_gold_scores_one_and_nothing_or_an_empty_patch_zero(built):
    root, shas, _ = built
    pack = load(root / "out" / f"slugs-{shas['fix'][:12]}")
    task = pack.tasks[0]
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, task)
        assert ep.call("submit", {"patch": task.reference.patch}).ok
        verdict = ep.finish("done")
        assert verdict.reward == 1.0, verdict.details
        assert (verdict.details["FAIL_TO_PASS"], verdict.details["PASS_TO_PASS"]) == ("1/1", "6/6")
        assert verdict.details["report"] == "junit" and verdict.details["canary"] == "failed"
        assert verdict.details["twins"] == "2/2 failed as they must"  # keepsDigits' hidden twins

        ep = Episode(sbx, task)
        assert "[^a-z]+" in ep.call("view_file", {"path": SLUG_PATH}).content
        verdict = ep.finish("done")
        assert verdict.reward == 0.0 and "nothing was submitted" in verdict.details["reason"]


def test_a_mirror_fills_a_repository_that_the_offline_runs_use(built, tmp_path, monkeypatch):
    """ENVGEN_MAVEN_MIRROR: the recipe's steps (settings.xml with the mirror, the project's tests run once
    online into the image's repository, the offline check) run here as the image build runs them, with
    Debian's repository served as a file:// mirror; then the verifier's offline run resolves from it."""
    import subprocess
    import sys

    from envgen.families.code import java

    root, shas, _ = built
    monkeypatch.setenv(java.MIRROR_ENV, "file:///usr/share/maven-repo")
    monkeypatch.setattr(java, "MAVEN_DIR", str(tmp_path / "maven"))
    monkeypatch.setattr(java, "IMAGE_REPO", str(tmp_path / "m2"))
    recipe = Java().recipe(RepoView(root / "slugs", shas["fix"]))
    assert recipe.options == {"repo": str(tmp_path / "m2"), "junit": "junit5",
                              "settings": str(tmp_path / "maven" / "settings.xml")}
    assert [s.name for s in recipe.steps] == ["maven-settings"]
    assert [s.name for s in recipe.task_steps] == ["dependencies", "check"]
    tree = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(root / "slugs"), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "-q", shas["fix"]], check=True)
    for step in recipe.steps + recipe.task_steps:
        out = subprocess.run(["bash", "-c", step.run], check=False, cwd=tree, capture_output=True, text=True)
        assert out.returncode == 0, (step.name, out.stdout[-2000:], out.stderr[-2000:])
    assert (tmp_path / "m2" / "org" / "junit" / "jupiter" / "junit-jupiter" / "5.9.2").is_dir()
    subprocess.run(["git", "-C", str(tree), "clean", "-qfdx"], check=True)
    sys.path.insert(0, str(__import__("envgen.paths", fromlist=["bundled"]).bundled("verifiers")))
    from envgen_verifiers.tests import run_tests

    res = run_tests(str(tree), "maven", ["src/test/java/com/acme/text/SlugTest.java"], options=recipe.options)
    assert res["outcomes"]["com.acme.text.SlugTest.keepsDigits"] == "passed" and len(res["outcomes"]) == 7
    assert res["canary"] == "failed"


@pytest.mark.skipif(not shutil.which("gradle"), reason="needs Debian's Gradle (apt-get install gradle)")
def test_a_gradle_build_goes_through_with_debians_gradle(tmp_path):
    try:
        from .java_repo import make_gradle_slugs_repo
    except ImportError:
        from java_repo import make_gradle_slugs_repo

    shas = make_gradle_slugs_repo(tmp_path / "slugs")
    report = build_code(f"git:{tmp_path / 'slugs'}", tmp_path / "out", backend="local", store=tmp_path / "s.sqlite",
                        runs=1, gate=False, log=lambda m: None)
    assert report.packs == [f"slugs-{shas['fix'][:12]}"], report.rejections
    pack = load(tmp_path / "out" / report.packs[0])
    args = pack.tasks[0].verifier.args
    assert args["framework"] == "gradle"
    assert args["FAIL_TO_PASS"] == [f"{SLUG_TEST}.keepsDigits"]
    assert args["PASS_TO_PASS"] == [f"{SLUG_TEST}.lowercasesWords", f"{SLUG_TEST}.stripsAccents"]
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, pack.tasks[0])
        assert ep.call("submit", {"patch": pack.tasks[0].reference.patch}).ok
        verdict = ep.finish("done")
    assert verdict.reward == 1.0, verdict.details
    assert verdict.details["canary"] == "failed" and verdict.details["report"] == "junit"
    assert verdict.details["twins"] == "2/2 failed as they must"


def test_the_offline_check_names_the_coordinates_debian_lacks(tmp_path, monkeypatch):
    """The task layer's check, run here as the image build runs it, on a POM that needs an artifact Debian's
    Maven repository lacks: it fails and its reason line names the coordinates."""
    import subprocess

    monkeypatch.delenv("ENVGEN_MAVEN_MIRROR", raising=False)
    # no Contents index to plan with (with one the recipe itself rejects it: tests/test_java_debian.py)
    monkeypatch.setenv("ENVGEN_DEBIAN_CONTENTS", str(tmp_path / "missing.gz"))
    monkeypatch.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))
    make_slugs_repo(tmp_path / "slugs", upto="fix", unpackaged=True)
    (check,) = Java().recipe(RepoView(tmp_path / "slugs", "HEAD")).task_steps
    out = subprocess.run(["bash", "-c", check.run], check=False, cwd=tmp_path / "slugs", capture_output=True,
                         text=True)
    assert out.returncode == 1
    assert out.stdout.splitlines()[-1].endswith(
        "envgen task step reason: dependencies unavailable offline: org.example.unpackaged:nowhere:1.2 (not in "
        "Debian's Maven repository; set ENVGEN_MAVEN_MIRROR for others)"), out.stdout[-2000:]
