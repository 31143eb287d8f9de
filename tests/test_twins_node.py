"""Twin checks for JavaScript and TypeScript (jest, vitest, mocha): how test files declare their tests
(``runners.node_dialect``), the plans made from realistic test files, which tests a test patch changes,
and how reported ids map back to declarations (no Docker; ``node --check`` where Node is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "verifiers"))

from envgen_verifiers import twins  # noqa: E402
from envgen_verifiers.runners import get as runner  # noqa: E402
from envgen_verifiers.runners.node_dialect import JS, js_tokens, unquote  # noqa: E402
from envgen_verifiers.tests import _diff_lines, changed_by_test_patch, dialect, is_changed  # noqa: E402

NODE = shutil.which("node")

JEST_FILE = '''const { slugify, parse } = require("../src/text");

const SAMPLE = "  Hello, World  ";

// a helper the tests share
function words(n) {
  return Array.from({ length: n }, (_, i) => `w${i}`).join(" ");
}

describe("slugify", () => {
  beforeEach(() => {
    jest.resetModules();
  });

  test("lowercases and joins words with dashes", () => {
    expect(slugify(SAMPLE)).toBe("hello-world");
  });

  it("drops \\"quotes\\" and it's apostrophes", () => {
    expect(slugify(`it's "x"`)).toEqual("its-x");
    expect(/["']/.test(slugify("a'b"))).toBe(false);
  });

  test.each([
    ["A b", "a-b"],
    ["x  y", "x-y"],
  ])("slugify(%j) is %s", (input, out) => {
    expect(slugify(input)).toBe(out);
  });

  describe("long input", () => {
    it("keeps 3 words", async () => {
      const s = await Promise.resolve(words(3));
      expect(slugify(s).split("-")).toHaveLength(3);
    }, 10000);

    it.skip("is skipped", () => {
      expect(1).toBe(2);
    });
  });
});

describe.each([[1], [2]])("parse(%i)", (n) => {
  test(`returns ${n}`, () => {
    expect(parse(String(n))).toBe(n);
  });
});

for (const c of [{ name: "empty", input: "", want: "" }]) {
  test(c.name, () => {
    expect(slugify(c.input)).toBe(c.want);
  });
}
'''

VITEST_FILE = '''import { describe, expect, it, test } from "vitest";
import { sum, Parser } from "./calc";

describe("sum", () => {
  it("adds two numbers", () => {
    expect(sum(1, 2)).toBe(3);
  });

  it.concurrent("adds many", async () => {
    expect(sum(1, 2, 3, 4)).toBe(10);
  });

  test.skipIf(process.platform === "win32")("is exact", () => {
    expect(sum(0.1, 0.2)).toBeCloseTo(0.3);
  });

  test.each`
    a    | b    | expected
    ${1} | ${1} | ${2}
  `("returns $expected when $a is added to $b", ({ a, b, expected }) => {
    expect(sum(a, b)).toBe(expected);
  });
});

describe("Parser", () => {
  it("reads a flag", () => {
    const p = new Parser({ strict: true });
    expect(p.parse("--x").x).toBe(true);
  });
});
'''

TS_FILE = '''import { describe, expect, it } from "vitest";
import { render } from "./render";

type Row = { id: number; label: string };

const rows: Array<Row> = [{ id: 1, label: "a" }];

describe("render", () => {
  it("renders a row's label", () => {
    const out: string = render<Row>(rows[0]!, (r: Row) => r.label as string);
    expect(out).toBe("<li>a</li>");
  });

  it("divides / by 2 / and keeps 'quotes'", () => {
    const half = rows.length / 2 / 1;
    expect(half).toBe(0.5);
  });
});
'''

MOCHA_FILE = '''"use strict";
const assert = require("node:assert");
const { expect } = require("chai");
const { wordCount } = require("../dist/count.js");

describe("wordCount", function () {
  this.timeout(5000);

  context("with spaces", function () {
    it("counts words", function () {
      assert.strictEqual(wordCount("one two  three"), 3);
    });

    specify("counts nothing in an empty string", function () {
      expect(wordCount("")).to.equal(0);
    });
  });

  it("handles a slow input", async function () {
    assert.deepStrictEqual([wordCount("a b")], [2]);
  }).timeout(10000);
});
'''


def _tree(tmp_path: Path, files: dict) -> str:
    for p, t in files.items():
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text(t, encoding="utf-8")
    return str(tmp_path)


def _node_check(tmp_path: Path, name: str, text: str) -> None:
    """The file parses (``node --check``), when Node is installed."""
    if NODE is None:
        return
    path = tmp_path / "check" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    out = subprocess.run([NODE, "--check", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + "\n" + text


def test_every_node_runner_has_the_dialect():
    for fw in ("jest", "vitest", "mocha"):
        assert dialect(fw) is JS and runner(fw).dialect is JS


def test_the_lexer_knows_regexes_templates_and_an_apostrophe_in_jsx_text():
    text = 'x = /["{]/g; y = a / b / c; z = `t ${f("}")} ${`n${1}`}`; r(<p>Don\'t</p>); q = "a\\"b";'
    toks = [(k, text[s:e]) for k, s, e in js_tokens(text)]
    assert ("regex", '/["{]/g') in toks
    assert ("other", "/") in toks and ("word", "b") in toks  # division
    assert ("string", '`t ${f("}")} ${`n${1}`}`') in toks
    assert ("other", "'") in toks and ("other", ")") in toks  # Don't: no string to the end of the line
    assert ("string", '"a\\"b"') in toks
    assert unquote('"drops \\"q\\" and it\\u2019s \\x41"') == 'drops "q" and it\u2019s A'


def test_declarations_name_tests_by_their_describe_path_and_span_the_whole_call():
    decls = {d.name: d for d in JS.declarations(JEST_FILE)}
    assert list(decls) == [
        "slugify > lowercases and joins words with dashes",
        "slugify > drops \"quotes\" and it's apostrophes",
        "slugify > slugify(%j) is %s",
        "slugify > long input > keeps 3 words",
        "slugify > long input > is skipped",
        "parse(%i) > returns ${n}",
        "\x00c.name"]
    d = decls["slugify > long input > keeps 3 words"]
    code = JEST_FILE[d.start:d.end]
    assert code.startswith('    it("keeps 3 words"') and code.endswith("}, 10000);")
    assert JEST_FILE[:d.name_end].endswith('it("keeps 3 words')
    each = decls["slugify > slugify(%j) is %s"]
    assert JEST_FILE[each.start:each.end].lstrip().startswith("test.each([")
    assert JEST_FILE[each.start:each.end].rstrip().endswith("});")
    # a function or a method named like a test runner is not a test
    assert JS.declarations("function test(x) { return x; }\nconst o = { it(a) { return a; } };\n") == []


def test_mocha_declarations_chained_calls_and_context_blocks():
    decls = {d.name: d for d in JS.declarations(MOCHA_FILE)}
    assert list(decls) == ["wordCount > with spaces > counts words",
                           "wordCount > with spaces > counts nothing in an empty string",
                           "wordCount > handles a slow input"]
    slow = decls["wordCount > handles a slow input"]
    assert MOCHA_FILE[slow.start:slow.end].endswith("}).timeout(10000);")


def test_target_maps_reported_ids_to_declarations_tables_and_patterns_included(tmp_path):
    tree = _tree(tmp_path, {"__tests__/text.test.js": JEST_FILE, "__tests__/text.test.jsx": "",
                            "src/sum.test.ts": VITEST_FILE, "test/count.test.js": MOCHA_FILE})
    files = ["__tests__/text.test.js", "src/sum.test.ts", "test/count.test.js"]
    f = "__tests__/text.test.js"
    cases = {
        f"{f} > slugify > lowercases and joins words with dashes": "slugify > lowercases and joins words with dashes",
        f"{f} > slugify > drops \"quotes\" and it's apostrophes": "slugify > drops \"quotes\" and it's apostrophes",
        f'{f} > slugify > slugify("x  y") is x-y': "slugify > slugify(%j) is %s",
        f"{f} > parse(2) > returns 2": "parse(%i) > returns ${n}",
        f"{f} > empty": "\x00c.name",
        "src/sum.test.ts > sum > returns 2 when 1 is added to 1": "sum > returns $expected when $a is added to $b",
        "src/sum.test.ts > sum > is exact": "sum > is exact",
        "test/count.test.js > wordCount > with spaces > counts words": "wordCount > with spaces > counts words",
    }
    for tid, name in cases.items():
        assert JS.target(tid, files, tree) == (tid.split(" > ", 1)[0], name), tid
    assert JS.target(f"{f} > slugify > no such test", files, tree) is None
    assert JS.target(f, files, tree) is None  # a file that did not load
    assert JS.target("other.test.js > x", files, tree) is None


def test_a_plan_renames_real_tests_and_writes_twins_that_still_parse(tmp_path):
    f = "__tests__/text.test.js"
    tree = _tree(tmp_path, {f: JEST_FILE})
    ids = [f"{f} > slugify > lowercases and joins words with dashes",
           f'{f} > slugify > slugify("A b") is a-b', f'{f} > slugify > slugify("x  y") is x-y',
           f"{f} > slugify > long input > keeps 3 words", f"{f} > parse(1) > returns 1", f"{f} > empty"]
    plan = twins.plan(tree, JS, ids, [f], seed=7)
    text = plan["files"][f]
    _node_check(tmp_path, "text.test.js", text)
    assert [t["name"] for t in plan["tests"]] == ["slugify > long input > keeps 3 words",
                                                  "slugify > lowercases and joins words with dashes",
                                                  "slugify > slugify(%j) is %s"]
    # template-literal titles with placeholders and expression titles get no twin, and stay as they were
    assert "test(`returns ${n}`, () => {" in text and "test(c.name, () => {" in text
    suffixes = plan["real"] + plan["twins"]
    assert all(re.fullmatch(r" [a-z0-9]{5}", s) for s in suffixes) and len(set(suffixes)) == len(suffixes)
    real = plan["tests"][1]["real"]
    assert text.count(f'test("lowercases and joins words with dashes{real}", () => {{') == 1
    assert 'test("lowercases and joins words with dashes", ' not in text
    for tw in plan["tests"][1]["twins"]:
        assert f'test("lowercases and joins words with dashes{tw}", () => {{' in text
    # the copies of a test differ in one literal only, the expected value first, each copy another value
    worlds = re.findall(r'\.toBe\("(hello-worl.)"\)', text)
    assert len(worlds) == 3 and len(set(worlds)) == 3 and "hello-world" in worlds
    lengths = re.findall(r"toHaveLength\((\d+)\)", text)
    assert len(set(lengths)) == 3 and "3" in lengths and text.count("}, 10000);") == 3  # the timeout stays
    assert text.count('("slugify(%j) is %s ') == 3  # the table's strings are the twins' literals
    firsts = re.findall(r'\["A (.)", "a-b"\]', text)
    assert len(firsts) == 3 and len(set(firsts)) == 3 and "b" in firsts
    assert plan == twins.plan(tree, JS, ids, [f], seed=7)  # seeded


def test_a_test_in_a_describe_named_by_an_expression_gets_twins(tmp_path):
    text = ('const { Parser } = require("../src/parser");\n\ndescribe(Parser.name, () => {\n'
            '  it("parses a number", () => {\n    expect(new Parser().parse("12")).toBe(12);\n  });\n});\n')
    tree = _tree(tmp_path, {"test/parser.test.js": text})
    assert JS.target("test/parser.test.js > Parser > parses a number", ["test/parser.test.js"], tree) == \
        ("test/parser.test.js", "\x00Parser.name > parses a number")
    plan = twins.plan(tree, JS, ["test/parser.test.js > Parser > parses a number"], ["test/parser.test.js"])
    assert len(plan["tests"]) == 1 and plan["files"]["test/parser.test.js"].count("describe(Parser.name") == 1


def test_vitest_typescript_and_mocha_plans_keep_each_file_valid(tmp_path):
    files = {"src/sum.test.js": VITEST_FILE, "src/render.test.ts": TS_FILE, "test/count.test.js": MOCHA_FILE}
    tree = _tree(tmp_path, files)
    ids = ["src/sum.test.js > sum > adds two numbers", "src/sum.test.js > sum > adds many",
           "src/sum.test.js > sum > is exact", "src/sum.test.js > Parser > reads a flag",
           "src/render.test.ts > render > renders a row's label",
           "test/count.test.js > wordCount > with spaces > counts words",
           "test/count.test.js > wordCount > handles a slow input"]
    plan = twins.plan(tree, JS, ids, list(files), seed=1, max_tests=10)
    assert sorted(plan["files"]) == sorted(files)
    vit = plan["files"]["src/sum.test.js"]
    _node_check(tmp_path, "sum.test.mjs", vit)
    sums = re.findall(r"expect\(sum\(1, 2\)\)\.toBe\((\d+)\)", vit)  # the twins change the expected value
    assert len(sums) == 3 and len(set(sums)) == 3 and "3" in sums
    assert vit.count('test.skipIf(process.platform === "win32")("is exact ') == 3
    assert "expect(p.parse(\"--x\").x).toBe(false)" in vit  # a bool compared on an assertion line
    mocha = plan["files"]["test/count.test.js"]
    _node_check(tmp_path, "count.test.cjs", mocha)
    assert mocha.count("}).timeout(10000);") == 3  # the copies of the slow test differ in what it expects
    assert mocha.count('specify("counts nothing in an empty string", function () {') == 1  # not asked for
    ts = plan["files"]["src/render.test.ts"]
    # the expected string's last letter is the literal the copies differ in (the input's index is kept)
    tags = re.findall(r'expect\(out\)\.toBe\("<li>a</l(\w)>"\)', ts)
    assert len(tags) == 3 and len(set(tags)) == 3 and "i" in tags
    assert ts.count("render<Row>(rows[0]!") == 3
    assert ts.count("it(\"divides / by 2 / and keeps 'quotes'\"") == 1
    _ts_check(tmp_path, ts)


def _ts_check(tmp_path: Path, text: str) -> None:
    """The TypeScript file still parses (typescript's own parser), when the fixture's typescript is installed."""
    from node_repo import cache_root

    found = sorted(cache_root().glob("tsc-*/node_modules/typescript/lib/typescript.js"))
    if NODE is None or not found:
        return
    (tmp_path / "t.ts").write_text(text, encoding="utf-8")
    script = (f"const ts = require({str(found[-1])!r}); const fs = require('fs');"
              f"const src = ts.createSourceFile('t.ts', fs.readFileSync({str(tmp_path / 't.ts')!r}, 'utf8'),"
              " ts.ScriptTarget.Latest, true);"
              "if (src.parseDiagnostics.length) {"
              " console.error(JSON.stringify(src.parseDiagnostics.map(d => d.messageText))); process.exit(1); }")
    out = subprocess.run([NODE, "-e", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + "\n" + text


def _changed(tmp_path: Path, before: str, after: str, name: str = "__tests__/a.test.js") -> list:
    (tmp_path / "a").write_text(before)
    (tmp_path / "b").write_text(after)
    diff = subprocess.run(["git", "diff", "--no-index", "a", "b"], cwd=tmp_path, capture_output=True, text=True).stdout
    lines = next(iter(_diff_lines(diff).values()))
    return JS.changed(after, lines["added"], lines["removed"])


def test_a_test_patch_changes_the_tests_it_adds_or_edits_and_not_an_import_a_bench_or_an_unused_helper(tmp_path):
    edited = JEST_FILE.replace('.toBe("hello-world")', '.toBe("hello-world-")')
    assert _changed(tmp_path, JEST_FILE, edited) == ["slugify > lowercases and joins words with dashes"]
    added = JEST_FILE.replace('  describe("long input"',
                              '  it("trims", () => {\n    expect(slugify(" a ")).toBe("a");\n'
                              '  });\n\n  describe("long input"')
    assert _changed(tmp_path, JEST_FILE, added) == ["slugify > trims"]
    imports = JEST_FILE.replace('require("../src/text");', 'require("../src/text");\nconst path = require("path");')
    assert _changed(tmp_path, JEST_FILE, imports) == []
    bench = VITEST_FILE.replace('import { describe', 'import { bench, describe') + (
        '\nbench("sum of many", () => {\n  const xs = [1, 2, 3];\n  sum(...xs);\n});\n')
    assert _changed(tmp_path, VITEST_FILE, bench) == []
    helper = JEST_FILE.replace("`w${i}`", "`word${i}`")
    assert _changed(tmp_path, JEST_FILE, helper) == []  # inside a helper's body
    helper = JEST_FILE.replace("function words(n) {", "function words(n, sep = \" \") {")
    helper = helper.replace('.join(" ")', ".join(sep)")
    assert _changed(tmp_path, JEST_FILE, helper) == ["slugify > long input > keeps 3 words"]  # its only user
    constant = JEST_FILE.replace('const SAMPLE = "  Hello, World  ";', 'const SAMPLE = "  Hello,  World  ";')
    assert _changed(tmp_path, JEST_FILE, constant) == ["slugify > lowercases and joins words with dashes"]
    inner = VITEST_FILE.replace('describe("Parser", () => {\n',
                                'describe("Parser", () => {\n  const opts = { strict: true };\n')
    uses = inner.replace("new Parser({ strict: true })", "new Parser(opts)")
    assert _changed(tmp_path, uses, uses.replace("{ strict: true }", "{ strict: false }")) == ["Parser > reads a flag"]
    hook = VITEST_FILE.replace('describe("sum", () => {\n', 'describe("sum", () => {\n  beforeEach(() => {\n'
                               '    const n = 2;\n    sum(n);\n  });\n')
    assert _changed(tmp_path, VITEST_FILE, hook) == []  # a hook's locals define nothing the tests use
    comment = JEST_FILE.replace("// a helper the tests share", "// a helper the tests share (words)")
    assert _changed(tmp_path, JEST_FILE, comment) == []
    table = JEST_FILE.replace('["x  y", "x-y"]', '["x  y", "x-y"],\n    ["Z", "z"]')
    assert _changed(tmp_path, JEST_FILE, table) == ["slugify > slugify(%j) is %s"]


def test_is_changed_maps_ids_through_the_dialect(tmp_path):
    f = "__tests__/text.test.js"
    after = JEST_FILE.replace('["x  y", "x-y"]', '["x  y", "x-y"],\n    ["Z", "z"]')
    _tree(tmp_path, {f: after, "a": JEST_FILE, "b": after})
    diff = subprocess.run(["git", "diff", "--no-index", "a", "b"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.replace("a/a", f"a/{f}").replace("b/b", f"b/{f}")
    changes = changed_by_test_patch(str(tmp_path), diff, [f], "jest")
    assert changes["files"] == {f: ["slugify > slugify(%j) is %s"]} and changes["declarations"]
    assert is_changed(f'{f} > slugify > slugify("Z") is z', changes, [f], "jest", str(tmp_path))
    assert not is_changed(f"{f} > slugify > lowercases and joins words with dashes", changes, [f], "jest",
                          str(tmp_path))


@pytest.mark.parametrize("flavor", ["jest", "vitest", "tsc"])
def test_the_fixture_repositories_fail_to_pass_test_gets_a_twin(tmp_path, flavor):
    from node_repo import _count_test, _tests

    path = {"jest": "__tests__/text.test.js", "vitest": "src/text.test.js", "tsc": "test/text.test.js"}[flavor]
    count = {"jest": "__tests__/count.test.js", "vitest": "src/count.test.js", "tsc": "test/count.test.js"}[flavor]
    tree = _tree(tmp_path, {path: _tests(flavor, True), count: _count_test(flavor)})
    ids = [f"{path} > slugify > lowercases and joins words with dashes",
           f'{count} > wordCount("") is 0' if flavor != "tsc" else f"{count} > wordCount > counts words"]
    plan = twins.plan(tree, JS, ids, [path, count], seed=5)
    assert len(plan["tests"]) == 2 and all(t["twins"] for t in plan["tests"]), plan["tests"]
    for p, text in plan["files"].items():
        _node_check(tmp_path, p.replace("/", "_").replace(".js", ".mjs" if flavor == "vitest" else ".cjs"), text)


SNAP_TEST = '''const { slugify } = require("./text");

describe("slugify", () => {
  test("makes a slug", () => {
    expect({ slug: slugify("Hello World") }).toMatchSnapshot();
    expect(slugify("A b")).toMatchSnapshot("second");
  });

  test.each([["X y"], ["Q r"]])("slugs %s", (s) => {
    expect(slugify(s)).toMatchSnapshot();
  });
});
'''


@pytest.mark.parametrize("framework", ["jest", "vitest"])
def test_snapshots_follow_the_renamed_tests_and_their_twins_fail_against_them(tmp_path, framework):
    """A real run (``--ci``: a snapshot missing under a test's new name would fail it): the renamed test
    passes against its own snapshots, each twin fails against them."""
    from node_repo import cache_root

    found = sorted(cache_root().glob(f"{framework}-*/node_modules"))
    if NODE is None or not found:
        pytest.skip(f"needs node and the {framework} fixture's dependencies (tests/node_repo.py)")
    from envgen_verifiers.tests import run_tests

    ext = ".test.js"
    test_text = SNAP_TEST if framework == "jest" else (
        'import { describe, test, expect } from "vitest";\n' + SNAP_TEST.replace(
            'const { slugify } = require("./text");', 'import { slugify } from "./text.cjs";'))
    files = {"package.json": '{"name": "s", "private": true}\n',
             "src/text.cjs": 'exports.slugify = (s) => s.trim().toLowerCase().split(" ").join("-");\n',
             f"src/text{ext}": test_text.replace("./text", "./text.cjs") if framework == "jest" else test_text}
    tree = Path(_tree(tmp_path / "repo", files))
    (tree / "node_modules").symlink_to(found[-1])
    options = {"modules": [str(found[-1])]}
    path = f"src/text{ext}"
    cmd = ([NODE, str(found[-1] / "jest/bin/jest.js"), "--ci=false", path] if framework == "jest"
           else [NODE, str(found[-1] / "vitest/vitest.mjs"), "run", path])
    made = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "CI": ""})
    assert made.returncode == 0, made.stdout + made.stderr
    snap = tree / "src" / "__snapshots__" / f"text{ext}.snap"
    assert snap.is_file()
    ids = [f"{path} > slugify > makes a slug", f"{path} > slugify > slugs X y"]
    plan = twins.plan(str(tree), JS, ids, [path], seed=2)
    assert sorted(plan["files"]) == [f"src/__snapshots__/text{ext}.snap", path]
    new_snap = plan["files"][f"src/__snapshots__/text{ext}.snap"]
    before = snap.read_text()
    assert before.count("exports[") == 4
    # makes a slug: 2 snapshots x (the real test and its twins); slugs X y / Q r: 1 each, x (real + twins)
    n = {t["name"]: 1 + len(t["twins"]) for t in plan["tests"]}
    assert new_snap.count("exports[") == 2 * n["slugify > makes a slug"] + 2 * n["slugify > slugs %s"], new_snap
    twins.write(str(tree), plan)
    res = run_tests(str(tree), framework, [path], options=options)
    real, twin_out = twins.split(res["outcomes"], plan)
    assert real == {f"{path} > slugify > makes a slug": "passed", f"{path} > slugify > slugs X y": "passed",
                    f"{path} > slugify > slugs Q r": "passed"}, res["tail"]
    # each twin changes one literal: the row or the assertion it changes fails against the snapshot
    failing = {t for t, o in twin_out.items() if o == "failed"}
    for t in plan["tests"]:
        for s in t["twins"]:
            assert any(s in f for f in failing), (s, twin_out, res["tail"])
