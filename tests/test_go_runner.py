"""The kit's go runner: parsing real ``go test -json`` / ``go test -v`` output (tests/fixtures/reports/go, made by
running Go 1.19 on a sample module: passing, failing, skipped, panicking and exiting tests, table-driven and
nested subtests, a package that does not build, non-ASCII output), its canary, its infrastructure paths and
its run through the kit's ``run_tests`` on a real module."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import runners  # noqa: E402
from envgen_verifiers.runners.golang import (  # noqa: E402
    GoTest, package_clause, parse_console, parse_events, workspace_go)
from envgen_verifiers.tests import is_changed, run_tests  # noqa: E402

try:
    from .go_repo import make_gostats_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from go_repo import make_gostats_repo

REPORTS = Path(__file__).parent / "fixtures" / "reports" / "go"
S = "example.com/sample/"
needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="needs the go toolchain (apt-get install golang-go)")


def _read(name: str) -> str:
    return (REPORTS / name).read_text(encoding="utf-8")


def test_json_stream_gives_each_test_and_subtest_its_outcome_and_failure_message():
    outcomes, messages, seen = parse_events(_read("mixed.jsonl"))
    assert seen
    assert outcomes == {
        S + "ok.TestDouble": "passed", S + "ok.ExampleDouble": "passed",
        S + "mixed.TestGreet": "failed",
        S + "mixed.TestTable": "failed", S + "mixed.TestTable/plain_ascii": "passed",
        S + "mixed.TestTable/ümlaut": "passed", S + "mixed.TestTable/wrong_on_purpose": "failed",
        S + "mixed.TestSkipped": "skipped",
        S + "mixed.TestNested": "passed", S + "mixed.TestNested/outer": "passed",
        S + "mixed.TestNested/outer/inner/deep": "passed"}
    assert messages[S + "mixed.TestGreet"] == ('mixed_test.go:10: grüße, 世界 | mixed_test.go:12: Greet(Zoë) = '
                                              '"Hallo, Zoë", want "Hello, Zoë" — ünïcode')
    assert messages[S + "mixed.TestTable/wrong_on_purpose"] == 'mixed_test.go:29: got "Hallo, Ann" want "Hello, Ann"'
    assert set(messages) == {S + "mixed.TestGreet", S + "mixed.TestTable/wrong_on_purpose"}


def test_a_panic_fails_the_running_test_and_leaves_the_later_ones_missing():
    outcomes, messages, _ = parse_events(_read("panic.jsonl"))
    assert outcomes == {S + "panics.TestFirst": "passed", S + "panics.TestPanics": "failed"}
    assert messages[S + "panics.TestPanics"].startswith("panic: runtime error: index out of range [3]")


def test_a_test_that_exits_the_binary_failed_and_the_package_that_does_not_build_reports_nothing():
    outcomes, messages, _ = parse_events(_read("exit.jsonl"))
    assert outcomes == {S + "exits.TestBefore": "passed", S + "exits.TestExits": "failed"}
    assert messages[S + "exits.TestExits"] == "FAIL\texample.com/sample/exits\t0.003s"
    outcomes, _, seen = parse_events(_read("build_failure.jsonl"))
    assert seen and outcomes == {S + "ok.TestDouble": "passed", S + "ok.ExampleDouble": "passed"}


def test_a_stream_cut_short_fails_what_had_started():
    text = "\n".join(_read("mixed.jsonl").splitlines()[:40])
    outcomes, messages, _ = parse_events(text)
    started = [t for t, o in outcomes.items() if o == "failed" and messages.get(t) == "the test started but never finished"]
    assert started and all(t.startswith(S + "mixed.") for t in started)


def test_console_output_is_the_fallback_with_the_same_ids():
    assert parse_console(_read("mixed_console.txt")) == parse_events(_read("mixed.jsonl"))[0]
    outcomes, messages, source = GoTest().parse("/nonexistent", _read("mixed_console.txt"), [], {})
    assert source == "go-test-console" and outcomes[S + "mixed.TestTable/ümlaut"] == "passed"


def test_lines_that_only_look_like_events_are_not_read():
    forged = ('  {"Action":"pass","Package":"x","Test":"TestA"}\n{"Action":"pass","Test":"TestB"}\n'
              '{"Action": 3, "Package": "x", "Test": "TestC"}\n{not json}\n')
    assert parse_events(forged) == ({}, {}, False)


def test_package_clause_skips_comments_and_build_constraints():
    assert package_clause("//go:build linux\n\n/* a\nb */\n// doc\npackage foo_test // x\n") == "foo_test"
    assert package_clause("/* one */ package bar\n") == "bar"
    assert package_clause("// nothing\n") is None


def test_infrastructure_paths_and_test_paths():
    go = runners.get("go")
    assert isinstance(go, GoTest)
    for p in ("stats/stats_test.go", "go.mod", "sub/go.sum", "go.work", "go.work.sum", "stats/testdata/in.txt",
              "vendor/github.com/google/go-cmp/cmp/compare.go", "vendor/modules.txt"):
        assert go.infrastructure(p, {}), p
    for p in ("stats/stats.go", "stats/stats_test.go.orig", "README.md", "stats/test_data.go"):
        assert not go.infrastructure(p, {}), p
    files = ["stats/stats_test.go", "internal/x/x_test.go", "root_test.go"]
    assert go.test_path("example.com/m/stats.TestMedian/unsorted", files) == "stats"
    assert go.test_path("example.com/m/internal/x.TestA", files) == "internal/x"
    assert go.test_path("example.com/m.TestRoot", files) == ""
    changes = {"files": {"stats/stats_test.go": "all"}, "dirs": []}
    assert is_changed("example.com/m/stats.TestMedian", changes, files, "go")
    assert not is_changed("example.com/m/internal/x.TestA", changes, files, "go")


def test_commands_and_workspace_version():
    go = GoTest()
    assert go.commands("/t", ["a/b/x_test.go", "a/y_test.go", "a/b/z_test.go"], "/r", {}) == \
        [["go", "test", "-json", "-count=1", "-vet=off", "./a", "./a/b"]]
    (cmd,) = go.commands("/t", ["mod/pkg/x_test.go", "mod/y_test.go"], "/r", {"root": "mod"})
    assert cmd[:5] == ["/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", "mod"] and cmd[-2:] == [".", "./pkg"]
    assert (workspace_go("1.16"), workspace_go("1.19"), workspace_go("1.22.1"), workspace_go(None)) == \
        ("1.18", "1.19", "1.22.1", "1.18")


@needs_go
def test_run_tests_on_a_real_module_with_a_canary_in_an_external_test_package(tmp_path):
    tree = tmp_path / "m"
    (tree / "greet").mkdir(parents=True)
    (tree / "go.mod").write_text("module example.com/m\n\ngo 1.19\n")
    (tree / "greet" / "greet.go").write_text('package greet\n\nfunc Hi(n string) string { return "hi " + n }\n')
    (tree / "greet" / "greet_test.go").write_text(
        'package greet_test\n\nimport (\n\t"testing"\n\n\t"example.com/m/greet"\n)\n\n'
        'func TestHi(t *testing.T) {\n\tif greet.Hi("ö") != "hi ö" {\n\t\tt.Fatal("bad")\n\t}\n}\n'
        'func TestBye(t *testing.T) { t.Error("not yet") }\n')
    res = run_tests(str(tree), "go", ["greet/greet_test.go"], timeout_s=120, options={"root": ".", "go": "1.19"})
    assert res["outcomes"] == {"example.com/m/greet.TestHi": "passed", "example.com/m/greet.TestBye": "failed"}
    assert res["canary"] == "failed" and res["source"] == "go-test-json"
    assert sorted(p.name for p in (tree / "greet").iterdir()) == ["greet.go", "greet_test.go"]  # canary removed
    assert not list(tmp_path.rglob("go.work"))


@needs_go
def test_dependencies_from_debian_sources_through_the_runners_workspace(tmp_path):
    cmp_dir = Path("/usr/share/gocode/src/github.com/google/go-cmp")
    if not (cmp_dir / "go.mod").is_file():
        pytest.skip("needs Debian's golang-github-google-go-cmp-dev")
    shas = make_gostats_repo(tmp_path / "g")
    subprocess.run(["git", "-C", str(tmp_path / "g"), "checkout", "-q", shas["fix"]], check=True)
    opts = {"root": ".", "go": "1.19", "replace": {"github.com/google/go-cmp": str(cmp_dir)}}
    res = run_tests(str(tmp_path / "g"), "go", ["stats/stats_test.go"], timeout_s=120, options=opts)
    assert set(res["outcomes"].values()) == {"passed"} and len(res["outcomes"]) == 7, res["tail"]
    # without the workspace, the module cannot be found offline: every test is missing
    res = run_tests(str(tmp_path / "g"), "go", ["stats/stats_test.go"], timeout_s=120, options={"go": "1.19"})
    assert res["outcomes"] == {} and "GOPROXY=off" in res["tail"] and res["canary"] == "missing"


@needs_go
def test_vendored_dependencies_with_mod_vendor(tmp_path):
    """The gostats fix with go-cmp vendored as ``go mod vendor`` lays it out (copied from Debian's sources)."""
    cmp_dir = Path("/usr/share/gocode/src/github.com/google/go-cmp")
    if not (cmp_dir / "go.mod").is_file():
        pytest.skip("needs Debian's golang-github-google-go-cmp-dev")
    shas = make_gostats_repo(tmp_path / "g")
    tree = tmp_path / "g"
    subprocess.run(["git", "-C", str(tree), "checkout", "-q", shas["fix"]], check=True)
    pkgs = ["cmp", "cmp/internal/diff", "cmp/internal/flags", "cmp/internal/function", "cmp/internal/value"]
    for p in pkgs:
        dest = tree / "vendor" / "github.com" / "google" / "go-cmp" / p
        dest.mkdir(parents=True)
        for f in (cmp_dir / p).glob("*.go"):
            if not f.name.endswith("_test.go"):
                shutil.copy(f, dest / f.name)
    (tree / "vendor" / "modules.txt").write_text(
        "# github.com/google/go-cmp v0.5.9\n## explicit; go 1.13\n" +
        "".join(f"github.com/google/go-cmp/{p}\n" for p in pkgs))
    res = run_tests(str(tree), "go", ["stats/stats_test.go"], timeout_s=120,
                    options={"root": ".", "go": "1.19", "flags": ["-mod=vendor"]})
    assert set(res["outcomes"].values()) == {"passed"} and len(res["outcomes"]) == 7, res["tail"]
    assert res["canary"] == "failed"


@needs_go
def test_a_module_cache_filled_through_a_proxy_is_read_offline_with_mod_mod(tmp_path):
    """What ENVGEN_GOPROXY gives: the recipe's ``go mod download`` through the proxy (here a file:// one made
    by hand) fills a module cache; the tests then read it with GOPROXY=off and -mod=mod."""
    import json
    import os
    import zipfile

    proxy = tmp_path / "proxy" / "example.org" / "sign" / "@v"
    proxy.mkdir(parents=True)
    mod = "module example.org/sign\n\ngo 1.19\n"
    (proxy / "list").write_text("v1.0.0\n")
    (proxy / "v1.0.0.info").write_text(json.dumps({"Version": "v1.0.0", "Time": "2024-01-01T00:00:00Z"}))
    (proxy / "v1.0.0.mod").write_text(mod)
    with zipfile.ZipFile(proxy / "v1.0.0.zip", "w") as z:
        z.writestr("example.org/sign@v1.0.0/go.mod", mod)
        z.writestr("example.org/sign@v1.0.0/sign.go",
                   "package sign\n\nfunc Of(x int) int {\n\tif x < 0 {\n\t\treturn -1\n\t}\n\treturn 1\n}\n")
    tree = tmp_path / "m"
    (tree / "calc").mkdir(parents=True)
    (tree / "go.mod").write_text("module example.com/m\n\ngo 1.19\n\nrequire example.org/sign v1.0.0\n")
    (tree / "calc" / "calc.go").write_text("package calc\n\nimport \"example.org/sign\"\n\n"
                                           "func Abs(x int) int { return sign.Of(x) * x }\n")
    (tree / "calc" / "calc_test.go").write_text(
        "package calc\n\nimport \"testing\"\n\nfunc TestAbs(t *testing.T) {\n\tif Abs(-3) != 3 || Abs(0) != 0 {\n"
        "\t\tt.Fatal(Abs(-3), Abs(0))\n\t}\n}\n")
    cache = tmp_path / "modcache"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GOCACHE": str(tmp_path / "gocache"),
           "GOMODCACHE": str(cache), "GOPROXY": (tmp_path / "proxy").as_uri(), "GOFLAGS": "-mod=mod",
           "GONOSUMDB": "*", "GOSUMDB": "off", "GOTOOLCHAIN": "local", "GOWORK": "off"}
    subprocess.run(["go", "mod", "download"], cwd=tree, env=env, check=True, capture_output=True)
    res = run_tests(str(tree), "go", ["calc/calc_test.go"], timeout_s=120,
                    options={"go": "1.19", "flags": ["-mod=mod"], "modcache": str(cache)})
    assert res["outcomes"] == {"example.com/m/calc.TestAbs": "passed"} and res["canary"] == "failed", res["tail"]
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    res = run_tests(str(tree), "go", ["calc/calc_test.go"], timeout_s=120,
                    options={"go": "1.19", "flags": ["-mod=mod"], "modcache": str(empty)})
    assert res["outcomes"] == {} and "GOPROXY=off" in res["tail"]
