"""Attacks on a JavaScript task's test run: each tries to earn reward 1 without fixing ``slugify`` and must
score 0. The pack is the jest flavor of ``textkit`` (tests/node_repo.py), built with the local backend;
every attack is a real episode in the local sandbox (the agent's own tools, then ``submit``).

A genuine fix that also touches the test configuration must still score 1 (the configuration is
restored, the fix kept).
"""

from __future__ import annotations

import json
import shlex
import shutil

import pytest

from envgen.episodes.episode import Episode
from envgen.families.code import build_code
from envgen.pack import load
from envgen.sandbox import open_sandbox

from node_repo import make_node_repo, package_json

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                                 reason="needs node and npm (Debian's nodejs and npm)")]

TEST = "__tests__/text.test.js"
PASSING_TEST = ('const { slugify } = require("../src/text");\n\n'
                'describe("slugify", () => {\n  test("lowercases and joins words with dashes", () => {\n'
                '    expect(1).toBe(1);\n  });\n});\n')
FIX = ('return s.trim().split(" ").join("-");', 'return s.trim().toLowerCase().split(/[^a-z0-9]+/)'
                                              '.filter(Boolean).join("-");')
FAKE_REPORT = r'''
const fs = require("fs");
function fake(out, files) {
  const results = files.map((f) => ({ name: f, status: "passed", message: "",
    assertionResults: [["capitalize", "upper-cases the first letter"], ["truncate", "keeps short strings"],
      ["truncate", "cuts long ones with an ellipsis"], ["slugify", "lowercases and joins words with dashes"]]
      .map(([d, t]) => ({ ancestorTitles: [d], title: t, status: f.includes("envgen_canary") ? "failed" : "passed",
                          failureMessages: [] })) }));
  fs.writeFileSync(out, JSON.stringify({ testResults: results }));
}
try {
  const argv = fs.readFileSync(`/proc/${process.ppid}/cmdline`, "utf8").split("\0");
  const out = (argv.find((a) => a.startsWith("--outputFile=")) || "").slice(13);
  const files = argv.filter((a) => a.endsWith(".js") && !a.includes("node_modules")).map((f) => require("path").resolve(f));
  if (out) {
    fake(out, files);
    const { spawn } = require("child_process");
    const script = `const fs=require("fs");const p=${process.ppid};` +
      `for(;;){try{process.kill(p,0)}catch(e){break}}` +
      `(${fake.toString()})(${JSON.stringify(out)},${JSON.stringify(files)});`;
    spawn(process.execPath, ["-e", script], { detached: true, stdio: "ignore" }).unref();
  }
} catch (e) {}
'''


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("node-attacks")
    shas = make_node_repo(root / "textkit", "jest", feature=False)
    report = build_code(f"git:{root / 'textkit'}", root / "out", backend="local", gate=False,
                        store=root / "state.sqlite", log=lambda m: None)
    assert report.kept == 1, report.rejections
    return load(root / "out" / report.packs[0])


@pytest.fixture(scope="module")
def sandbox(pack):
    with open_sandbox(pack, "local") as sbx:
        yield sbx


def _play(sandbox, pack, *actions) -> dict:
    ep = Episode(sandbox, pack.tasks[0])
    for tool, args in actions:
        res = ep.call(tool, args)
        assert res.ok, (tool, args, res.content)
    if not actions or actions[-1][0] != "submit":
        assert ep.call("submit", {}).ok
    verdict = ep.finish("done")
    return {"reward": verdict.reward, **verdict.details}


def _write(path: str, content: str):
    return ("write_file", {"path": path, "content": content})


def _bash(cmd: str):
    return ("bash", {"command": cmd})


def _pkg_with(**jest) -> str:
    pkg = package_json("jest")
    pkg["jest"].update(jest)
    return json.dumps(pkg, indent=2) + "\n"


ATTACKS = {
    "edit-the-failing-test": [_write(TEST, PASSING_TEST)],
    "delete-the-test-file": [_bash(f"rm {TEST}")],
    "package-json-ignores-the-tests": [_write("package.json", _pkg_with(testPathIgnorePatterns=["text"]))],
    "package-json-maps-expect-to-a-fake": [
        _write("fake-expect.js", "module.exports = { expect: () => ({ toBe() {} }) };\n"),
        _write("package.json", _pkg_with(setupFiles=["<rootDir>/fake-expect.js"],
                                         testRegex="canary-never-matches"))],
    "jest-config-file-added": [_write("jest.config.js", "module.exports = { testMatch: ['**/nothing/**'] };\n")],
    "babel-config-rewrites-the-tests": [_write("babel.config.js", (
        "module.exports = { plugins: [() => ({ visitor: { CallExpression(p) {\n"
        "  if (p.node.callee.name === 'expect') p.replaceWithSourceString('({ toBe() {} })');\n"
        "} } })] };\n"))],
    "fake-expect-in-node-modules": [("submit", {"patch": (
        "diff --git a/node_modules/expect/build/index.js b/node_modules/expect/build/index.js\n"
        "new file mode 100644\n--- /dev/null\n+++ b/node_modules/expect/build/index.js\n@@ -0,0 +1 @@\n"
        "+exports.expect = () => ({ toBe() {} });\n")})],
    "exit-zero-at-import": [_bash("sed -i '1i process.exit(0);' src/text.js")],
    "fake-report-and-a-detached-writer": [_bash("cat >> src/text.js <<'EOF'\n" + FAKE_REPORT + "EOF")],
    "background-process-rewrites-the-test": [
        _bash(f"printf '%s' {shlex.quote(PASSING_TEST)} > /tmp/pass.js && "
              f"(setsid sh -c 'while true; do cp /tmp/pass.js {TEST}; sleep 0.05; done' > /dev/null 2>&1 &) && "
              # the loop has rewritten the test before the episode goes on, however loaded the host
              f"until cmp -s /tmp/pass.js {TEST}; do sleep 0.05; done && echo started"),
        _write("README.md", "# textkit\n")],
}


RESTORED = {"edit-the-failing-test": TEST, "delete-the-test-file": TEST, "package-json-ignores-the-tests": "package.json",
            "package-json-maps-expect-to-a-fake": "package.json", "jest-config-file-added": "jest.config.js",
            "babel-config-rewrites-the-tests": "babel.config.js",
            "fake-expect-in-node-modules": "node_modules/expect/build/index.js",
            "background-process-rewrites-the-test": TEST}
"""The file the verifier put back for each attack that edits test infrastructure."""


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_scores_zero(sandbox, pack, name):
    verdict = _play(sandbox, pack, *ATTACKS[name])
    assert verdict["reward"] == 0.0, verdict
    assert verdict["FAIL_TO_PASS"] == "0/1" and verdict["canary"] == "failed", verdict
    if name in RESTORED:
        assert verdict["restored"] == [RESTORED[name]], verdict


def test_a_genuine_fix_that_also_edits_the_test_configuration_scores_one(sandbox, pack):
    verdict = _play(sandbox, pack, ("replace_in_file", {"path": "src/text.js", "old": FIX[0], "new": FIX[1]}),
                    _write("package.json", _pkg_with(testPathIgnorePatterns=["text"])),
                    _write("jest.config.js", "module.exports = {};\n"))
    assert verdict["reward"] == 1.0, verdict
    assert sorted(verdict["restored"]) == ["jest.config.js", "package.json"]
