"""Twin checks for Go (``runners.golang.GoDialect``), without Docker: which functions of a ``_test.go`` file
are tests, which file and function a ``go test`` id runs, which literals a twin may change (and still
compile), which tests a test patch adds or changes (a benchmark or an import added beside the tests
changes none), and a planned file that compiles and runs with Go: each real test passes, its twins fail."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import twins  # noqa: E402
from envgen_verifiers.runners import get  # noqa: E402
from envgen_verifiers.runners.golang import GoDialect, is_test_name  # noqa: E402
from envgen_verifiers.tests import changed_by_test_patch, dialect, is_changed  # noqa: E402

needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="needs the go toolchain (apt-get install golang-go)")
GO = GoDialect()
M = "example.com/conv/conv."

CODE = textwrap.dedent('''\
    // Package conv converts between units and formats.
    package conv

    import (
    \t"fmt"
    \t"strings"
    )

    // Celsius converts Fahrenheit to Celsius.
    func Celsius(f float64) float64 { return (f - 32) * 5 / 9 }

    // Slug lower-cases words and joins them with dashes.
    func Slug(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), "-")) }

    // Clamp keeps n within [lo, hi].
    func Clamp(n, lo, hi int) int {
    \tif n < lo {
    \t\treturn lo
    \t}
    \tif n > hi {
    \t\treturn hi
    \t}
    \treturn n
    }

    // Valid says whether a port number is usable.
    func Valid(port int) bool { return port > 0 && port < 65536 }

    // Pair formats two ints.
    func Pair(a, b int) string { return fmt.Sprintf("(%d, %d)", a, b) }
    ''')

TESTS = textwrap.dedent('''\
    package conv

    import (
    \t"fmt"
    \t"os"
    \t"testing"
    )

    var fixtures = map[string]float64{
    \t"freezing": 32,
    \t"boiling":  212,
    }

    type clampCase struct {
    \tname      string
    \tn, lo, hi int
    \twant      int
    }

    func TestMain(m *testing.M) {
    \tos.Exit(m.Run())
    }

    // near reports whether two floats are within a hundredth.
    func near(a, b float64) bool {
    \td := a - b
    \treturn d < 0.01 && d > -0.01
    }

    // TestCelsius checks the fixed points of water.
    // It reads the fixtures table.
    func TestCelsius(t *testing.T) {
    \tif got := Celsius(fixtures["freezing"]); !near(got, 0) {
    \t\tt.Errorf("Celsius(32) = %v, want 0", got)
    \t}
    \tif got := Celsius(fixtures["boiling"]); !near(got, 100) {
    \t\tt.Fatalf("Celsius(212) = %v, want %v", got, 100)
    \t}
    }

    func TestClamp(t *testing.T) {
    \tfor _, c := range []clampCase{
    \t\t{name: "below", n: -5, lo: 0, hi: 10, want: 0},
    \t\t{name: "inside", n: 7, lo: 0, hi: 10, want: 7},
    \t\t{"above", 99, 0, 10, 10},
    \t} {
    \t\tc := c
    \t\tt.Run(c.name, func(t *testing.T) {
    \t\t\tif got := Clamp(c.n, c.lo, c.hi); got != c.want {
    \t\t\t\tt.Errorf("Clamp(%d, %d, %d) = %d, want %d", c.n, c.lo, c.hi, got, c.want)
    \t\t\t}
    \t\t})
    \t}
    }

    func TestSlug(t *testing.T) {
    \tt.Run("spaces", func(t *testing.T) {
    \t\tt.Run("many", func(t *testing.T) {
    \t\t\tif got, want := Slug("Hello   Big World"), "hello-big-world"; got != want {
    \t\t\t\tt.Errorf("got %q want %q", got, want)
    \t\t\t}
    \t\t})
    \t})
    \traw := `{"not": "a brace"}`
    \tif len(raw) == 0 || '{' != raw[0] {
    \t\tt.Fatal("raw string")
    \t}
    }

    func TestValid(t *testing.T) {
    \tports := map[int]bool{80: true, 0: false, 65535: true}
    \tfor port, ok := range ports {
    \t\tif Valid(port) != ok {
    \t\t\tt.Errorf("Valid(%d) != %v", port, ok)
    \t\t}
    \t}
    \tif Valid(8080) != true {
    \t\tt.Error("8080")
    \t}
    }

    func (c clampCase) TestNotATest(t *testing.T) {}

    func Testable() {}

    func BenchmarkClamp(b *testing.B) {
    \tfor i := 0; i < b.N; i++ {
    \t\tClamp(i, 0, 100)
    \t}
    }

    func ExamplePair() {
    \tfmt.Println(Pair(1, 2))
    \t// Output: (1, 2)
    }

    func FuzzSlug(f *testing.F) {
    \tf.Add("a b")
    \tf.Fuzz(func(t *testing.T, s string) {
    \t\tif Slug(Slug(s)) != Slug(s) {
    \t\t\tt.Errorf("not idempotent: %q", s)
    \t\t}
    \t})
    }
    ''')

EXTERNAL = textwrap.dedent('''\
    package conv_test

    import (
    \t"testing"

    \t"example.com/conv/conv"
    )

    func TestPairExternal(t *testing.T) {
    \tif got := conv.Pair(3, 4); got != "(3, 4)" {
    \t\tt.Fatalf("got %s", got)
    \t}
    }
    ''')


def _module(root: Path, tests: str = TESTS) -> Path:
    (root / "conv").mkdir(parents=True, exist_ok=True)
    (root / "go.mod").write_text("module example.com/conv\n\ngo 1.19\n")
    (root / "conv" / "conv.go").write_text(CODE)
    (root / "conv" / "conv_test.go").write_text(tests)
    (root / "conv" / "external_test.go").write_text(EXTERNAL)
    (root / "root_test.go").write_text("package conv\n\nimport \"testing\"\n\nfunc TestRoot(t *testing.T) {\n"
                                       "\tif 1+1 != 2 {\n\t\tt.Fatal(\"math\")\n\t}\n}\n")
    return root


def test_the_go_runner_has_the_dialect_and_names():
    assert dialect("go") is get("go").dialect and isinstance(dialect("go"), GoDialect)
    assert [n for n in ("Test", "TestX", "Test_x", "Test2", "Example", "ExampleT_m", "Fuzz", "FuzzY")
            if is_test_name(n)] == ["Test", "TestX", "Test_x", "Test2", "Example", "ExampleT_m", "Fuzz", "FuzzY"]
    assert not any(is_test_name(n) for n in ("TestMain", "Testable", "Examples", "Benchmark", "BenchmarkX", "test"))


def test_declarations_are_top_level_tests_with_their_doc_comments():
    decls = GO.declarations(TESTS)
    assert [d.name for d in decls] == ["TestCelsius", "TestClamp", "TestSlug", "TestValid", "ExamplePair", "FuzzSlug"]
    cel = decls[0]
    assert TESTS[cel.start:].startswith("// TestCelsius checks the fixed points of water.\n// It reads")
    assert TESTS[cel.start:cel.name_end].endswith("func TestCelsius")
    for d in decls:
        assert TESTS[d.end - 1] == "}" and TESTS[d.end:d.end + 2] in ("\n\n", "\n")
    slug = next(d for d in decls if d.name == "TestSlug")  # braces in raw strings and runes are not code
    assert TESTS[slug.start:slug.end].rstrip().endswith('t.Fatal("raw string")\n\t}\n}')


def test_literals_skip_messages_subtest_names_keys_indexes_and_start_at_the_expectation():
    def lits(name, text=TESTS):
        d = next(x for x in GO.declarations(text) if x.name == name)
        return [x.text for x in twins.literals(text, d, GO)]

    # no literal compared: numbers, then strings (not "Celsius(32) = %v, want 0" nor the 100 given to Fatalf,
    # a message; not "freezing", an index)
    assert lits("TestCelsius") == ["0", "100"]
    assert lits("TestClamp") == ["0", "7"]  # the want fields only: an input changed might panic
    assert lits("TestSlug") == ['"hello-big-world"', "0"]  # what want is given; a length checked last
    assert lits("TestValid") == ["true"]  # not 8080 (an input), not 80 or 65535 (map keys)
    inputs = textwrap.dedent('''\
        package x

        func TestInputs(t *testing.T) {
        \tif !ok(f("testdata/in.json", "out.txt", "abc", 7)) {
        \t\tt.Fatal(g(2))
        \t}
        }
        ''')
    assert lits("TestInputs", inputs) == ["7", '"abc"']  # file names are not changed
    wants = "package x\n\nfunc TestW(t *testing.T) {\n\tgot, want := f(1, 2), 3\n\twant2 := g(4)\n\twant3 = 5\n" \
            "\tif got != want || h(want2) != want3 {\n\t\tt.Fail()\n\t}\n}\n"
    assert lits("TestW", wants) == ["3", "5"]  # assigned to an expectation outside any call
    odd = textwrap.dedent('''\
        package x

        func TestOdd(t *testing.T) {
        \tif got := f("a\\n", xs[2], uint8(255), 1<<3); got != "ok\\x4f" {
        \t\tt.Fatal(got)
        \t}
        \tswitch n {
        \tcase 4:
        \t}
        }
        ''')
    assert lits("TestOdd", odd) == []  # an escape, an index, an overflow, a shift, a case label


def test_target_finds_the_file_that_declares_the_function(tmp_path):
    root = _module(tmp_path)
    files = ["conv/conv_test.go", "root_test.go"]
    for tid, want in [(M + "TestCelsius", ("conv/conv_test.go", "TestCelsius")),
                      (M + "TestClamp/below", ("conv/conv_test.go", "TestClamp")),
                      (M + "TestSlug/spaces/many", ("conv/conv_test.go", "TestSlug")),
                      (M + "FuzzSlug/seed#0", ("conv/conv_test.go", "FuzzSlug")),
                      (M + "ExamplePair", ("conv/conv_test.go", "ExamplePair")),
                      (M + "TestPairExternal", ("conv/external_test.go", "TestPairExternal")),  # not a run file
                      ("example.com/conv.TestRoot", ("root_test.go", "TestRoot"))]:
        assert GO.target(tid, files, str(root)) == want, tid
    assert GO.target(M + "TestNope", files, str(root)) is None
    assert GO.target(M + "TestNotATest", files, str(root)) is None  # a method
    assert GO.target("not a go id", files, str(root)) is None
    (root / "conv" / "dup_test.go").write_text("//go:build other\n\npackage conv\n\n"
                                               "func TestCelsius(t *testing.T) {}\n")
    assert GO.target(M + "TestCelsius", files, str(root)) is None  # declared twice (build tags): no twin


def test_a_plan_compiles_renames_and_its_twins_fail_while_the_real_tests_pass(tmp_path):
    root = _module(tmp_path)
    ids = [M + n for n in ("TestCelsius", "TestClamp", "TestClamp/below", "TestSlug/spaces/many", "TestValid",
                           "ExamplePair")]
    plan = twins.plan(str(root), GO, ids, ["conv/conv_test.go"], seed=7)
    assert list(plan["files"]) == ["conv/conv_test.go"]
    text = plan["files"]["conv/conv_test.go"]
    assert [t["name"] for t in plan["tests"]] == ["ExamplePair", "TestCelsius", "TestClamp", "TestSlug", "TestValid"]
    for t in plan["tests"]:
        assert f"func {t['name']}(" not in text
        assert all(text.count(f"func {t['name']}{s}(") == 1 for s in [t["real"], *t["twins"]])
        assert 1 <= len(t["twins"]) <= 2
    assert text.count("// TestCelsius checks the fixed points of water.") == 3  # doc comments go with them
    if shutil.which("go") is None:
        pytest.skip("needs the go toolchain to compile the plan")
    twins.write(str(root), plan)
    out = subprocess.run(["go", "test", "-json", "-count=1", "-vet=off", "./conv"], cwd=root, capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GOFLAGS": "",
                                         "GOCACHE": str(tmp_path / "cache"), "GOPROXY": "off", "GO111MODULE": "on"})
    events = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    results = {e["Test"]: e["Action"] for e in events if e.get("Test") and e["Action"] in ("pass", "fail")}
    assert results, out.stdout + out.stderr
    real, twin_out = twins.split({M + k: ("passed" if v == "pass" else "failed") for k, v in results.items()}, plan)
    assert all(real[M + n] == "passed" for n in ("TestCelsius", "TestClamp", "TestClamp/below", "TestSlug/spaces/many",
                                                  "TestValid", "ExamplePair", "FuzzSlug", "TestPairExternal")), real
    for t in plan["tests"]:  # every test has a twin that fails with the right code
        assert any(twin_out.get(f"{M}{t['name']}{s}") == "failed" for s in t["twins"]), (t, twin_out)


def test_a_test_the_package_names_elsewhere_gets_no_twin(tmp_path):
    root = _module(tmp_path)
    (root / "conv" / "table_test.go").write_text("package conv\n\nvar all = []interface{}{TestValid}\n")
    plan = twins.plan(str(root), GO, [M + "TestValid", M + "TestClamp"], ["conv/conv_test.go"], seed=1)
    assert [t["name"] for t in plan["tests"]] == ["TestClamp"]  # renamed, TestValid would not compile
    (root / "conv" / "table_test.go").unlink()
    text = (root / "conv" / "conv_test.go").read_text()
    (root / "conv" / "conv_test.go").write_text(
        text.replace('\tt.Run("spaces"', '\tif t.Name() != "TestSlug" {\n\t\tt.Skip()\n\t}\n\tt.Run("spaces"')
        .replace('t.Errorf("Valid(%d) != %v", port, ok)', 't.Errorf("%d, in TestValid", port)')
        + '\nfunc TestSelf(t *testing.T) {\n\tif name(TestSelf) != "conv.TestSelf" {\n\t\tt.Fail()\n\t}\n}\n')
    ids = [M + n for n in ("TestValid", "TestClamp", "TestSlug", "TestSelf", "TestCelsius")]
    plan = twins.plan(str(root), GO, ids, ["conv/conv_test.go"], seed=1)
    assert [t["name"] for t in plan["tests"]] == ["TestCelsius", "TestClamp"]  # their names matter to the others


def _diff(tmp_path: Path, before: str, after: str, name: str = "conv/conv_test.go") -> dict:
    """What ``changed_by_test_patch`` says of a real git diff of one test file."""
    repo = _module(tmp_path / "r", before)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    (repo / name).write_text(after)
    patch = subprocess.run(["git", "-C", str(repo), "diff"], check=True, capture_output=True, text=True).stdout
    return changed_by_test_patch(str(repo), patch, [name], "go")


BENCH_ONLY = '''
func BenchmarkPair(b *testing.B) {
\tcases, err := load()
\t_ = err
\tfixtures := cases
\tfor i := 0; i < b.N; i++ {
\t\t_ = fixtures.Strings()
\t}
}
'''


@pytest.mark.parametrize("edit, want", [
    ("benchmark-only", []),
    ("import-and-benchmark", []),
    ("new-test", ["TestPairMore"]),
    ("literal-in-a-test", ["TestClamp"]),
    ("helper-used-by-one-test", ["TestCelsius"]),
    ("table-used-by-one-test", ["TestCelsius"]),
    ("type-used-by-one-test", ["TestClamp"]),
    ("helper-through-a-helper", ["TestCelsius"]),
    ("comment-only", []),
    ("test-removed", []),
    ("test-main-changed", ["ExamplePair", "FuzzSlug", "TestCelsius", "TestClamp", "TestSlug", "TestValid"]),
])
def test_changed_picks_the_tests_a_patch_adds_or_changes(tmp_path, edit, want):
    after = {
        "benchmark-only": TESTS + BENCH_ONLY,
        "import-and-benchmark": TESTS.replace('\t"os"\n', '\t"os"\n\t"strings"\n') + BENCH_ONLY.replace(
            "_ = err", "_ = strings.ToLower(err.Error())"),
        "new-test": TESTS + '\nfunc TestPairMore(t *testing.T) {\n\tif Pair(0, 0) != "(0, 0)" {\n'
                            '\t\tt.Fail()\n\t}\n}\n',
        "literal-in-a-test": TESTS.replace("n: 7, lo: 0, hi: 10, want: 7", "n: 8, lo: 0, hi: 10, want: 8"),
        "helper-used-by-one-test": TESTS.replace("d < 0.01 && d > -0.01", "d < 0.001 && d > -0.001"),
        "table-used-by-one-test": TESTS.replace('\t"boiling":  212,\n', '\t"boiling":  212,\n\t"body":     98.6,\n'),
        "type-used-by-one-test": TESTS.replace("\twant      int\n", "\twant      int\n\tnote      string\n"),
        "helper-through-a-helper": TESTS.replace("\td := a - b\n", "\td := diff(a, b)\n") +
        "\nfunc diff(a, b float64) float64 {\n\treturn a - b\n}\n",
        "comment-only": TESTS.replace("// near reports", "// near says"),
        "test-removed": TESTS.split("func FuzzSlug(")[0],
        "test-main-changed": TESTS.replace("\tos.Exit(m.Run())\n", "\tcode := m.Run()\n\tos.Exit(code)\n"),
    }[edit]
    changes = _diff(tmp_path, TESTS, after)
    assert changes["declarations"] and changes["files"] == {"conv/conv_test.go": want}, changes


def test_a_new_test_file_changes_all_its_tests_and_ids_are_matched_by_declaration(tmp_path):
    changes = _diff(tmp_path, TESTS, TESTS + BENCH_ONLY)
    files = ["conv/conv_test.go"]
    tree = str(tmp_path / "r")
    assert not is_changed(M + "TestClamp/below", changes, files, "go", tree)
    changes = _diff(tmp_path / "2", TESTS, TESTS.replace("want: 7}", "want: 7},\n\t\t{\"top\", 11, 0, 10, 10}"))
    assert changes["files"] == {"conv/conv_test.go": ["TestClamp"]}
    tree = str(tmp_path / "2" / "r")
    assert is_changed(M + "TestClamp/top", changes, files, "go", tree) and is_changed(M + "TestClamp", changes, files,
                                                                                     "go", tree)
    assert not is_changed(M + "TestValid", changes, files, "go", tree)
    assert is_changed(M + "TestX", {"files": {"conv/new_test.go": "all"}, "dirs": [], "declarations": True},
                      files, "go", tree)  # an id the dialect cannot place: any new file counts


@needs_go
def test_declarations_hold_on_a_large_real_test_file():
    """Go's own strings tests (the toolchain's sources): every ``func TestX(t *testing.T)`` found, fast."""
    import time

    goroot = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True).stdout.strip()
    path = Path(goroot) / "src" / "strings" / "strings_test.go"
    if not path.is_file():
        pytest.skip("no Go sources installed")
    text = path.read_text()
    t0 = time.monotonic()
    names = [d.name for d in GO.declarations(text)]
    assert time.monotonic() - t0 < 5
    import re

    assert names == re.findall(r"^func ((?:Test|Example|Fuzz)\w*)\(", text, re.M)
    assert all(text[d.end - 1] == "}" for d in GO.declarations(text))
