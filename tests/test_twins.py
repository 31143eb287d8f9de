"""The twin checks' core, the static screen and the report trust rules of the code verifier (no Docker)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "verifiers"))

from envgen_verifiers import screen, twins  # noqa: E402
from envgen_verifiers.tests import _diff_lines, changed_by_test_patch, distrust, is_changed  # noqa: E402

PYTEST_FILE = '''import pytest
from lib import f


class TestF:
    @pytest.mark.parametrize("x,y", [(1, 2), (3, 4)])
    def test_pairs(self, x, y):
        assert f(x) == y - 1  # 9 in a comment is not a literal

    def test_flag(self):
        assert f.enabled is True
        assert True


def test_top():
    result = f("ab")
    assert result == "ab"


def test_no_literal(expected):
    assert f() == expected
'''


def _plan(tmp_path, ids, text=PYTEST_FILE, seed=3):
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_a.py").write_text(text)
    return twins.plan(str(tmp_path), twins.PYTHON, ids, ["tests/test_a.py"], seed=seed)


IDS = ["tests/test_a.py::TestF::test_pairs[1-2]", "tests/test_a.py::TestF::test_pairs[3-4]",
       "tests/test_a.py::test_top", "tests/test_a.py::test_no_literal"]


def test_a_plan_renames_each_test_and_writes_its_twins_beside_it(tmp_path):
    plan = _plan(tmp_path, IDS)
    text = plan["files"]["tests/test_a.py"]
    ast.parse(text)
    assert "def test_pairs(" not in text and "def test_top(" not in text
    assert "def test_no_literal(" in text  # nothing a twin could change: left alone
    assert [t["name"] for t in plan["tests"]] == ["TestF::test_pairs", "test_top"]
    assert len(plan["real"]) == 2 and len(plan["twins"]) == 4
    suffixes = plan["real"] + plan["twins"]
    assert len({len(s) for s in suffixes}) == 1 and len(set(suffixes)) == 6  # one shape, never repeated
    # every copy of a test differs from the others in the same literal only: the expected value, the last
    # literal of its assertion line
    pairs = re.findall(r"assert f\(x\) == y - (\d+)", text)
    assert len(pairs) == 3 and "1" in pairs and len(set(pairs)) == 3
    tops = re.findall(r'assert result == "(a.)"', text)
    assert len(tops) == 3 and "ab" in tops and len(set(tops)) == 3 and text.count('result = f("ab")') == 3
    assert "# 9 in a comment" in text and "# 10 in a comment" not in text
    assert plan == _plan(tmp_path, IDS)  # seeded


def test_the_real_value_is_not_always_the_smallest_of_its_window(tmp_path):
    """Which copy is real must not follow from the values: over seeds, the real one takes every place."""
    places = set()
    for seed in range(40):
        text = _plan(tmp_path, ["tests/test_a.py::test_n"], "def test_n():\n    assert f(5) == 50\n",
                     seed=seed)["files"]["tests/test_a.py"]
        values = sorted(int(v) for v in re.findall(r"assert f\(5\) == (\d+)", text))
        places.add(values.index(50))
    assert places == {0, 1, 2}


def test_numbers_keep_their_spelling_and_never_go_below_zero():
    rng = __import__("random").Random(1)
    lit = twins.Literal(0, 3, "number", "007", True)
    for _ in range(20):
        vals = twins.variants(lit, twins.PYTHON, 2, rng)
        assert len(vals) == 2 and all(len(v) == 3 and v != "007" and int(v) >= 5 for v in vals)
    zero = twins.Literal(0, 1, "number", "0", True)
    assert sorted(twins.variants(zero, twins.PYTHON, 2, rng)) == ["1", "2"]
    assert twins.variants(twins.Literal(0, 4, "bool", "True", True), twins.PYTHON, 2, rng) == ["False"]


def test_functions_named_as_the_projects_pytest_configuration_says_get_twins(tmp_path):
    """``python_functions = ["check_*"]`` (scmdemo, real projects): a test need not be named test_*."""
    plan = _plan(tmp_path, ["tests/test_a.py::check_km"], "def check_km():\n    assert km(1000) == 1\n")
    assert plan["tests"] and plan["tests"][0]["name"] == "check_km"


def test_a_lone_boolean_is_never_flipped(tmp_path):
    """``assert True`` -> ``assert False`` would fail whatever the code does, and say it is a twin."""
    plan = _plan(tmp_path, ["tests/test_a.py::TestF::test_flag"])
    text = plan["files"]["tests/test_a.py"]
    assert "assert False" not in text and text.count("assert f.enabled is False") == 1


def test_split_maps_reported_ids_back_and_judge_requires_every_twin_to_fail(tmp_path):
    plan = _plan(tmp_path, ["tests/test_a.py::test_top"])
    real, twin_a, twin_b = plan["real"][0], *plan["twins"]
    outcomes = {f"tests/test_a.py::test_top{real}": "passed", f"tests/test_a.py::test_top{twin_a}": "failed",
                f"tests/test_a.py::test_top{twin_b}": "failed", "tests/test_a.py::test_other": "passed"}
    messages = {f"tests/test_a.py::test_top{twin_a}": "assert 'ab' == 'ac'"}
    real_out, twin_out = twins.split(outcomes, plan, messages)
    assert real_out == {"tests/test_a.py::test_top": "passed", "tests/test_a.py::test_other": "passed"}
    assert sorted(twin_out) == sorted(t for t in outcomes if twin_a in t or twin_b in t)
    expect = sorted(twin_out)
    assert twins.judge(twin_out, expect) is None
    forged = dict(twin_out, **{expect[0]: "passed"})
    assert "reported passing" in twins.judge(forged, expect)
    assert "not reported" in twins.judge({expect[0]: "failed"}, expect)


def test_write_lays_the_plan_over_a_tree_and_none_removes_a_file(tmp_path):
    (tmp_path / "old.c").write_text("int main(void) { return 0; }\n")
    assert twins.write(str(tmp_path), {"files": {"old.c": None, "new/x.c": "int x;\n"}}) == ["new/x.c", "old.c"]
    assert not (tmp_path / "old.c").exists() and (tmp_path / "new" / "x.c").read_text() == "int x;\n"


C_LIKE = twins.Dialect()


def test_the_c_like_lexer_skips_comments_and_strings_and_matches_brackets():
    text = 'f("a { \\" }", 1) /* { */ { x = 2; // }\n}'
    kinds = [(k, text[s:e]) for k, s, e in twins.scan(text, 0, len(text), C_LIKE)]
    assert ("string", '"a { \\" }"') in kinds and ("number", "1") in kinds and ("comment", "/* { */") in kinds
    assert ("comment", "// }") in kinds and ("number", "2") in kinds
    open_at = text.index("{ x")
    assert text[:twins.match_close(text, open_at, C_LIKE)].endswith("}") and twins.match_close(text, open_at, C_LIKE) == len(text)


# ---------------------------------------------------------------- which tests a test patch changes


GO_DIALECT_LIKE = '''package stats

import "testing"

var cases = []float64{1, 2}

func TestMean(t *testing.T) {
	if Mean(cases) != 1.5 {
		t.Fatal("mean")
	}
}

func TestSum(t *testing.T) {
	if Sum([]float64{1, 2}) != 3 {
		t.Fatal("sum")
	}
}
'''


class _FuncDialect(twins.Dialect):
    """Just enough of a brace language (``func TestX(`` declarations) to test ``Dialect.changed``."""

    def declarations(self, text):
        import re

        out = []
        for m in re.finditer(r"^func (Test\w+)\(", text, re.M):
            end = twins.match_close(text, text.index("{", m.end()), self)
            out.append(twins.Decl(m.group(1), m.start(), end, m.end(1)))
        return out


def _changed(before: str, after: str, tmp_path: Path) -> list[str]:
    (tmp_path / "a").write_text(before)
    (tmp_path / "b").write_text(after)
    diff = subprocess.run(["git", "diff", "--no-index", "a", "b"], cwd=tmp_path, capture_output=True, text=True).stdout
    lines = next(iter(_diff_lines(diff).values()))
    return _FuncDialect().changed(after, lines["added"], lines["removed"])


def test_a_test_patch_changes_the_tests_it_edits_and_those_using_what_it_redefines(tmp_path):
    assert _changed(GO_DIALECT_LIKE, GO_DIALECT_LIKE.replace("!= 3", "!= 3.0"), tmp_path) == ["TestSum"]
    assert _changed(GO_DIALECT_LIKE, GO_DIALECT_LIKE.replace("{1, 2}\n", "{1, 2, 3}\n"), tmp_path) == ["TestMean"]
    bench = GO_DIALECT_LIKE + "\nfunc BenchmarkSum(b *testing.B) {\n\tfor i := 0; i < b.N; i++ {\n\t\tSum(cases)\n\t}\n}\n"
    assert _changed(GO_DIALECT_LIKE, bench, tmp_path) == []  # a benchmark changes no test
    uses = GO_DIALECT_LIKE.replace("Sum([]float64{1, 2})", "Sum(cases)")
    local = uses + "\nfunc BenchmarkMean(b *testing.B) {\n\tcases := []float64{3}\n\tMean(cases)\n}\n"
    assert _changed(uses, local, tmp_path) == []  # google/uuid's shape: a benchmark's local, not the table
    imports = GO_DIALECT_LIKE.replace('import "testing"', 'import (\n\t"fmt"\n\t"testing"\n)')
    assert _changed(GO_DIALECT_LIKE, imports, tmp_path) == []
    assert _changed(GO_DIALECT_LIKE, GO_DIALECT_LIKE.replace('t.Fatal("sum")', '// why\n\t\tt.Fatal("sum")'),
                    tmp_path) == []  # a comment changes nothing


def test_python_changes_stay_at_function_granularity(tmp_path):
    (tmp_path / "tests").mkdir()
    after = PYTEST_FILE.replace('assert result == "ab"', 'assert result == "ab", result')
    (tmp_path / "tests" / "test_a.py").write_text(after)
    (tmp_path / "a.py").write_text(PYTEST_FILE)
    (tmp_path / "b.py").write_text(after)
    diff = subprocess.run(["git", "diff", "--no-index", "a.py", "b.py"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.replace("a/a.py", "a/tests/test_a.py").replace("b/b.py", "b/tests/test_a.py")
    changes = changed_by_test_patch(str(tmp_path), diff, ["tests/test_a.py"])
    assert changes["files"] == {"tests/test_a.py": ["test_top"]}
    assert is_changed("tests/test_a.py::test_top", changes, ["tests/test_a.py"])
    assert not is_changed("tests/test_a.py::TestF::test_pairs[1-2]", changes, ["tests/test_a.py"])


# ---------------------------------------------------------------- trust rules


def test_a_report_is_believed_only_from_the_runner_itself_with_a_failing_exit_status():
    honest = {"canary": "failed", "source": "junit", "rc": 1, "timed_out": False}
    assert distrust(honest) is None
    assert "canary" in distrust(dict(honest, canary="passed"))
    assert "console output" in distrust(dict(honest, source="pytest-rA"))
    assert "console output" in distrust(dict(honest, source="gtest-xml+none"))
    assert "exited 0" in distrust(dict(honest, rc=0))
    assert distrust(dict(honest, rc=None, timed_out=True)) is None  # cut short: its missing tests fail it
    assert "reported passing" in distrust(honest, ["t_x"], {"t_x": "passed"})


# ---------------------------------------------------------------- the static screen


def _repo(tmp_path: Path, files: dict) -> str:
    for p, t in files.items():
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text(t)
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b",
           "GIT_AUTHOR_DATE": "2024-01-02T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-02T00:00:00Z",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # fixed dates: the same base commit, so the same twin seed
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *cmd], cwd=tmp_path, check=True, env=env)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()


def _patch(path: str, *lines: str) -> str:
    body = "".join(f"+{ln}\n" for ln in lines)
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,0 +1,{len(lines)} @@\n{body}"


def test_the_screen_names_framework_internals_in_added_code(tmp_path):
    base = _repo(tmp_path, {"lib/core.py": "x = 1\n"})
    cases = {
        "pytest internals": _patch("lib/core.py", "import _pytest.reports"),
        "an equality that always holds": _patch("lib/core.py", "class N(int):", "    def __eq__(self, o):",
                                                "        return True"),
        "the JS test globals": _patch("lib/index.js", "globalThis.expect = new Proxy(real, {});"),
        "Go's test output or flags": _patch("stats/zz.go", 'fmt.Println("--- PASS: TestMedian (0.00s)")'),
        "the JUnit runner or its reports": _patch("src/Foo.java", "import org.junit.runner.notification.RunListener;"),
        "PHPUnit's runner": _patch("src/Foo.php", "foreach (debug_backtrace() as $frame) {",
                                   "    if ($frame['object'] instanceof \\PHPUnit\\Framework\\TestResult) {"),
        "GoogleTest's runner or reports": _patch("src/calc.cc", 'std::ofstream out("test_detail.xml");'),
    }
    for what, patch in cases.items():
        found = screen.screen(patch, str(tmp_path), base)
        assert len(found) == 1 and f": {what}: " in found[0], (what, found)
    assert screen.screen(_patch("lib/core.py", "def spread(v):", "    return max(v) - min(v)"), str(tmp_path), base) == []
    legit = _patch("src/Log.php", "$caller = debug_backtrace()[1]['function'];", "$this->events->addListener('x', $f);")
    assert screen.screen(legit, str(tmp_path), base) == []  # a logger's backtrace, an event dispatcher
    assert screen.screen(cases["pytest internals"], str(tmp_path), base, skip={"lib/core.py"}.__contains__) == []


def test_a_lockfile_naming_the_framework_does_not_hide_an_attack(tmp_path):
    """Every jest project's package-lock.json names ``@jest/...``: only the project's own code counts."""
    base = _repo(tmp_path, {"src/index.js": "module.exports = 1;\n",
                            "package-lock.json": '{"packages": {"node_modules/@jest/core": {}}}\n',
                            "node_modules/jest-circus/build/run.js": "global.expect = x;\n"})
    found = screen.screen(_patch("src/index.js", "require('@jest/expect'); globalThis.expect = () => ({});"),
                          str(tmp_path), base)
    assert sorted(f.split(": ")[1] for f in found) == ["a JS test runner's internals", "the JS test globals"]


def test_the_screen_spares_what_the_project_itself_already_uses(tmp_path):
    """The project under test may be pytest: a fix inside ``_pytest`` is not an attack on it."""
    base = _repo(tmp_path, {"src/_pytest/reports.py": "class TestReport:\n    pass\n"})
    patch = _patch("src/_pytest/reports.py", "from _pytest.nodes import Item")
    assert screen.screen(patch, str(tmp_path), base) == []


# ---------------------------------------------------------------- which literal the twins change


TAIL = '''def tail(n, s):
    return list(s)[len(s) - n:] if n else []
'''
TAIL_GOLD = '''def tail(n, s):
    if n < 0:
        raise ValueError("negative tail size")
    return list(s)[len(s) - n:] if n else []
'''
TAIL_TEST = '''import unittest

from tailmod import tail


class TailTests(unittest.TestCase):
    def test_sized(self):
        self.assertEqual(tail(2, 'ABC'), ['B', 'C'])

    def test_sized_negative(self):
        self.assertRaises(ValueError, lambda: tail(-1, 'ABCDEFG'))
'''


def test_twins_move_to_a_literal_that_decides_the_outcome(tmp_path):
    """more-itertools' ``assertRaises(ValueError, lambda: tail(-1, 'ABCDEFG'))``: the string, the first
    literal offered, raises for any value, so its twins pass with the gold patch and told nothing (the task
    was rejected as forgeable); the validation run moves the twins to the next literal (``-1``) and keeps
    the twins that fail."""
    import difflib

    from envgen.families.code.execution import run_matrix_local

    repo = tmp_path / "repo"
    base = _repo(repo, {"tailmod.py": TAIL, "tests/test_tail.py": TAIL_TEST.split("    def test_sized_negative")[0]})

    def diff(path, a, b):
        return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), f"a/{path}", f"b/{path}"))

    test_patch = diff("tests/test_tail.py", TAIL_TEST.split("    def test_sized_negative")[0], TAIL_TEST)
    gold = diff("tailmod.py", TAIL, TAIL_GOLD)
    files = ["tests/test_tail.py"]
    res = run_matrix_local(repo / ".git", base=base, framework="pytest", files=files, python=None, pythonpath=[],
                           gold=gold, test=test_patch, runs=2, timeout_s=60)
    assert res["twins"], res["twin_note"]
    (planned,) = res["twins"]["plan"]["tests"]
    assert planned["name"].endswith("test_sized_negative") and planned["literal"] >= 1
    text = res["twins"]["plan"]["files"]["tests/test_tail.py"]
    sizes = re.findall(r"tail\(-(\d), 'ABCDEFG'\)", text)  # the copies differ in the size, not the string
    assert len(sizes) == 3 and len(set(sizes)) == 3 and "1" in sizes
    assert res["twins"]["expect_failing"]
    # every gold run with the final plan: the real test passed, the expected twins failed
    twin_runs = [r for r in res["runs"] if "twin_outcomes" in r]
    assert twin_runs and all(r["outcomes"][t] == "passed" for r in twin_runs for t in r["outcomes"]
                             if "test_sized_negative" in t)


def test_a_string_ending_in_punctuation_gets_twins_on_its_last_plain_letter(tmp_path):
    """astroid-1268's ``assert nodes.Unknown(lineno=1, col_offset=0).as_string() == "Unknown.Unknown()"``:
    the numbers do not decide the outcome and the string ends in ``)``; its last letter is changed
    instead, never an escape or an interpolated name."""
    assert twins.changeable_char('"Unknown.Unknown()"') == 15
    assert [twins.changeable_char(t) for t in ('"a\\n"', '"x {y}"', '"hi $name"', '"()"')] == [None] * 4
    (tmp_path / "test_nodes.py").write_text(
        "def test_as_string_unknown():\n"
        "    assert Unknown(lineno=1, col_offset=0).as_string() == \"Unknown.Unknown()\"\n")
    plan = twins.plan(str(tmp_path), twins.PythonDialect(), ["test_nodes.py::test_as_string_unknown"],
                      ["test_nodes.py"], seed=5)
    found = re.findall(r'== "Unknown\.Unknow(\w)\(\)"', plan["files"]["test_nodes.py"])
    assert len(found) == 3 and len(set(found)) == 3 and "n" in found


def test_literals_of_an_assert_not_equal_line_are_tried_last(tmp_path):
    """more-itertools' numeric_range __eq__/__hash__ commit: ``assertNotEqual(r, 1)`` holds for 0 and 2 as
    well, so twins there never fail with the gold patch; the equal pairs' table below decides."""
    text = ('class T:\n'
            '    def test_eq(self):\n'
            '        self.assertNotEqual(numeric_range(7.0), 1)\n'
            '        self.assertNotEqual(numeric_range(7.0), "abc")\n'
            '        assert numeric_range(3) != 4\n'
            '        for a, b in [((0, 5, 2), (0, 6, 2))]:\n'
            '            self.assertEqual(numeric_range(*a), numeric_range(*b))\n')
    decl = twins.PYTHON.declarations(text)[0]
    lits = [x.text for x in twins.PYTHON.literals(text, decl)]
    assert lits[:6] == ["0", "5", "2", "0", "6", "2"]  # the table first, in order
    assert sorted(lits[6:]) == sorted(["1", "7.0", '"abc"', "7.0", "4", "3"])
    plan = _plan(tmp_path, ["tests/test_a.py::T::test_eq"], text)
    # the first literal twins change is the table's: every copy differs in ((N, 5, 2), ...)
    assert len(set(re.findall(r"for a, b in \[\(\((\d+), 5, 2\)", plan["files"]["tests/test_a.py"]))) == 3
    # other languages' negative-looking lines keep their place (Go's ``if got != want`` states the failure)
    assert twins.Dialect.negated_words is None
