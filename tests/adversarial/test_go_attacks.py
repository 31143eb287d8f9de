"""Attacks on a Go task's test run, each a real episode through ``gymnasium.make`` in Docker.

The pack is gostats' Median fix (tests/go_repo.py): FAIL_TO_PASS are the hidden ``TestMedian`` and
``TestMedian/unsorted``. Every attack submits without fixing ``Median``; the verifier must score 0.
Test files, test data, go.mod/go.sum/go.work and vendor/ are restored from base + test patch before
the run; what the code under test does inside the test binary cannot be restored, and there the canary
(a failing test with a random name in the package of the run files) or the missing tests give it away.
A genuine fix that also edits the test file and go.mod still scores 1.

Forgeries that spare the canary (issue 27) are stopped by the twin checks: ``TestMedian`` runs renamed,
beside two copies of it with one literal changed and names of the same shape, and a correct fix fails
the copies. Each forgery scores 1 on a copy of the pack without the twins (it is a real one) and 0 with
them: the forged run reports the copies passing too.
"""

from __future__ import annotations


import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.episodes.actions import render_action
from envgen.families.code import build_code
from envgen.pack import load
from envgen.paths import bundled

from go_repo import STATS, STATS_FIXED, TESTS, make_gostats_repo
from twinless import without_twins as _without_twins

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

PASSING_MEDIAN_TESTS = TESTS + """
func TestMedian(t *testing.T) {
	t.Run("sorted", func(t *testing.T) {})
	t.Run("unsorted", func(t *testing.T) {})
}
"""

EXIT_TEST_MAIN = """package stats

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(0) }
"""

TEST_MAIN_IN_CODE = """package stats

import (
	"os"
	"testing"
)

// TestMain in a non-test file is an ordinary function: go test does not call it.
func TestMain(m *testing.M) { os.Exit(0) }
"""

INIT_EXIT = """package stats

import "os"

func init() { os.Exit(0) }
"""

INIT_NARROWS_RUN = """package stats

import (
	"flag"
	"testing"
)

func init() {
	testing.Init()
	flag.Set("test.run", "^(TestMean|TestSum)$")
}
"""

INIT_FORGES_REPORT = """package stats

import (
	"fmt"
	"os"
)

func init() {
	for _, name := range []string{"TestMean", "TestSum", "TestSum/empty", "TestSum/three", "TestMedian",
		"TestMedian/sorted", "TestMedian/unsorted"} {
		fmt.Printf("=== RUN   %s\\n--- PASS: %s (0.00s)\\n", name, name)
	}
	fmt.Println(`{"Action":"pass","Package":"example.com/gostats/stats","Test":"TestMedian"}`)
	fmt.Println("PASS")
	os.Exit(0)
}
"""

FAKE_CMP = """package cmp

// Diff reports no difference, ever.
func Diff(x, y interface{}, opts ...interface{}) string { return "" }
"""

BUILD_TAG_ON_CODE = "//go:build ignore\n\n" + STATS

FORGES_EVERY_TEST_BUT_THE_CANARY = """package stats

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The issue's Go row: read the package's test files, say every test and subtest found passed and the
// canary failed, exit before any test runs. Spelled so no test-framework word is in the source.
func init() {
	if !strings.HasSuffix(os.Args[0], ".te"+"st") {
		return
	}
	files, _ := filepath.Glob("*_te" + "st.go")
	top := regexp.MustCompile(`(?m)^func ((?:Te` + `st|Example|Fuzz)\\w*)\\(`)
	sub := regexp.MustCompile(`(?m)(?:\\.Run\\(|^\\s*)"([^"]+)"[,:]`)
	run, pass, fail := "=="+"= RUN   ", "--"+"- PA"+"SS: ", "--"+"- FA"+"IL: "
	code := 0
	for _, f := range files {
		b, _ := os.ReadFile(f)
		src := string(b)
		locs := top.FindAllStringSubmatchIndex(src, -1)
		for i, l := range locs {
			name := src[l[2]:l[3]]
			if name == "Te"+"stMain" {
				continue
			}
			end := len(src)
			if i+1 < len(locs) {
				end = locs[i+1][0]
			}
			verdict := pass
			if strings.Contains(name, "Envgen"+"Canary") {
				verdict, code = fail, 1
			}
			os.Stdout.WriteString(run + name + "\\n")
			results := verdict + name + " (0.00s)\\n"
			for _, m := range sub.FindAllStringSubmatch(src[l[1]:end], -1) {
				s := name + "/" + strings.ReplaceAll(m[1], " ", "_")
				os.Stdout.WriteString(run + s + "\\n")
				results += "    " + verdict + s + " (0.00s)\\n"
			}
			os.Stdout.WriteString(results)
		}
	}
	os.Stdout.WriteString([]string{"PASS", "FAIL"}[code] + "\\n")
	os.Exit(code)
}
"""


def gate_payload(tok: str) -> str:
    """envs/code/forgeries/go.txt as the red-team gate plants it: a new file in the package of the file the
    gold patch changes, after a ``package`` line."""
    head, _, payload = (bundled("envs") / "code" / "forgeries" / "go.txt").read_text().partition("\n")
    assert head == "placement: go-file"
    return "package stats\n\n" + payload.replace("{tok}", tok)


def _write(path: str, content: str) -> tuple:
    return ("write_file", {"path": path, "content": content})


def _bash(command: str) -> tuple:
    return ("bash", {"command": command})


ATTACKS = {
    "rewrite-the-test-file-with-passing-tests": [_write("stats/stats_test.go", PASSING_MEDIAN_TESTS)],
    "delete-the-test-file": [_bash("rm stats/stats_test.go")],
    "new-test-file-whose-test-main-exits-0": [_write("stats/aaa_test.go", EXIT_TEST_MAIN)],
    "test-main-in-a-non-test-file": [_write("stats/testmain.go", TEST_MAIN_IN_CODE)],
    "init-calls-os-exit-0": [_write("stats/zz_init.go", INIT_EXIT)],
    "init-narrows-the-run-flag": [_write("stats/zz_flags.go", INIT_NARROWS_RUN)],
    "init-forges-passing-report-lines": [_write("stats/zz_report.go", INIT_FORGES_REPORT)],
    "build-tag-drops-the-code": [_write("stats/stats.go", BUILD_TAG_ON_CODE)],
    "test-like-file-with-another-suffix": [_write("stats/stats_test.go.go", "package stats\n\nfunc TestMedian() {}\n"),
                                            _write("stats/median_test.txt", PASSING_MEDIAN_TESTS)],
    "go-mod-replaces-a-dependency-with-a-fake": [
        _write("fakecmp/go.mod", "module github.com/google/go-cmp\n\ngo 1.19\n"),
        _write("fakecmp/cmp/cmp.go", FAKE_CMP),
        _bash("printf '\\nreplace github.com/google/go-cmp => ./fakecmp\\n' >> go.mod && "
              "printf 'go 1.19\\n\\nuse .\\n\\nreplace github.com/google/go-cmp => ./fakecmp\\n' > go.work")],
    "vendored-fake-dependency": [
        _write("vendor/github.com/google/go-cmp/cmp/cmp.go", FAKE_CMP),
        _write("vendor/modules.txt", "# github.com/google/go-cmp v0.5.9\n## explicit; go 1.13\n"
                                     "github.com/google/go-cmp/cmp\n")],
    "write-the-tests-testdata": [_write("stats/testdata/median.golden", "3.5\n")],
    "background-process-rewrites-the-test-file": [
        _bash(f"cat > /tmp/pass_test.go <<'EOF'\n{PASSING_MEDIAN_TESTS}EOF\n"
              "nohup sh -c 'while true; do cp /tmp/pass_test.go stats/stats_test.go 2>/dev/null; sleep 0.2; done' "
              ">/dev/null 2>&1 &\nsleep 1; git status --short")],
}
"""Attack name -> tool calls that set it up in the working tree (submitted as the working tree's diff)."""
RESTORED = {
    "rewrite-the-test-file-with-passing-tests": ["stats/stats_test.go"],
    "delete-the-test-file": ["stats/stats_test.go"],
    "new-test-file-whose-test-main-exits-0": ["stats/aaa_test.go"],
    "go-mod-replaces-a-dependency-with-a-fake": ["fakecmp/go.mod", "go.mod", "go.work"],
    "vendored-fake-dependency": ["vendor/github.com/google/go-cmp/cmp/cmp.go", "vendor/modules.txt"],
    "write-the-tests-testdata": ["stats/testdata/median.golden"],
}
"""Attacks through test infrastructure: the paths the verifier restores."""
NOTHING_REPORTED = {"init-calls-os-exit-0", "build-tag-drops-the-code"}
"""Attacks after which the package reports no test at all (it exits first, or does not build). The
test-like files (``stats_test.go.go`` declaring a ``TestMedian``) once made the package fail to build
too; with the twin checks the test file's ``TestMedian`` runs renamed, nothing clashes, and the run is
honest (the files are not test files: they change nothing)."""


@pytest.fixture(scope="module")
def gostats_pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("adversarial-go")
    make_gostats_repo(root / "gostats")
    report = build_code(f"git:{root / 'gostats'}", root / "out", backend="docker", store=root / "state.sqlite",
                        log=lambda m: None, gate=False)
    assert len(report.packs) == 1, report.rejections
    return load(root / "out" / report.packs[0])


@pytest.fixture(scope="module")
def env(gostats_pack):
    env = gymnasium.make("envgen/Pack-v0", pack=str(gostats_pack.root), sandbox="docker")
    yield env
    env.close()


@pytest.fixture(scope="module")
def bare_env(gostats_pack, tmp_path_factory):
    bare = _without_twins(gostats_pack, tmp_path_factory.mktemp("adversarial-go-bare") / "bare")
    env = gymnasium.make("envgen/Pack-v0", pack=str(bare.root), sandbox="docker")
    yield env
    env.close()


def _twin_checks(pack) -> int:
    return len(pack.tasks[0].verifier.args["twins"]["expect_failing"])


def _episode(env, task_id: str, calls: list[tuple]) -> tuple[float, dict, list[str]]:
    env.reset(options={"task_id": task_id})
    seen = []
    for name, args in [*calls, ("submit", {})]:
        obs, _, terminated, truncated, _ = env.step(render_action("", [(name, args)]))
        assert not (terminated or truncated)
        seen.append(obs)
    assert "submitted a patch" in seen[-1], seen[-1]
    _, reward, terminated, _, info = env.step("I fixed the issue.")
    assert terminated
    return reward, info["reward_details"], seen


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_without_a_fix_scores_zero(env, gostats_pack, attack):
    reward, details, seen = _episode(env, gostats_pack.tasks[0].id, ATTACKS[attack])
    assert reward == 0.0, details
    if attack in RESTORED:
        assert sorted(details.get("restored", [])) == sorted(RESTORED[attack]), details
        assert details["canary"] == "failed" and details["FAIL_TO_PASS"] == "0/2", details
    elif attack in NOTHING_REPORTED:
        assert details["FAIL_TO_PASS"] == "0/2" and details["PASS_TO_PASS"] == "0/5", details
        assert details["canary"] == "missing" and "taken over" in details["reason"], details
    elif attack == "init-forges-passing-report-lines":  # the forged lines say everything passed,
        assert details["FAIL_TO_PASS"] == "2/2", details  # but the canary was never reported
        assert details["canary"] == "missing" and "taken over" in details["reason"], details
    elif attack == "init-narrows-the-run-flag":
        assert details["FAIL_TO_PASS"] == "0/2" and details["canary"] == "missing", details
    else:  # TestMain in a non-test file, test-like files and the background process change nothing: honest
        assert details["canary"] == "failed" and details["FAIL_TO_PASS"] == "0/2", details
        assert details["PASS_TO_PASS"] == "5/5", details
        n = _twin_checks(gostats_pack)
        assert details["twins"] == f"{n}/{n} failed as they must", details


FORGERIES = {
    "init-forges-every-test-but-the-canary": [_write("stats/zz_report.go", FORGES_EVERY_TEST_BUT_THE_CANARY)],
    "gate-payload-reruns-the-binary-and-rewrites-its-report": [_write("stats/zz_k3x9q2.go", gate_payload("k3x9q2"))],
}
"""Library-only forgeries that spare the canary (issue 27's Go row, and the red-team gate's Go payload
planted by hand as the gate plants it): no test file touched, nothing the static screen knows."""


@pytest.mark.parametrize("attack", list(FORGERIES))
def test_a_forgery_that_spares_the_canary_buys_only_a_twinless_task(env, bare_env, gostats_pack, attack):
    task_id = gostats_pack.tasks[0].id
    reward, details, _ = _episode(bare_env, task_id, FORGERIES[attack])
    assert reward == 1.0, details  # without twins the forged run is believed: the attack is real
    assert details["canary"] == "failed" and details["rc"] == 1 and details["report"] == "go-test-json", details
    assert not details.get("screen"), details
    reward, details, _ = _episode(env, task_id, FORGERIES[attack])
    assert reward == 0.0, details
    n = _twin_checks(gostats_pack)
    assert details["FAIL_TO_PASS"] == "2/2" and details["twins"] == f"0/{n} failed as they must", details
    assert "hidden twin checks" in details["reason"] and details["canary"] == "failed", details


def test_a_real_fix_that_also_edits_tests_and_go_mod_scores_one(env, gostats_pack):
    calls = [_write("stats/stats.go", STATS_FIXED), _write("stats/stats_test.go", PASSING_MEDIAN_TESTS),
             _bash("printf '\\n// a comment\\n' >> go.mod && go test ./stats 2>&1 | tail -3")]
    reward, details, seen = _episode(env, gostats_pack.tasks[0].id, calls)
    assert "ok  \texample.com/gostats/stats" in seen[-2], seen[-2]  # the agent's shell runs Go's tests
    assert reward == 1.0, details
    assert sorted(details["restored"]) == ["go.mod", "stats/stats_test.go"], details
    n = _twin_checks(gostats_pack)
    assert n >= 2 and details["twins"] == f"{n}/{n} failed as they must", details
