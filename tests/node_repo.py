"""Small real JavaScript/TypeScript repositories for the code family's Node tests.

``make_node_repo(path, flavor)`` builds ``textkit``, a string helper library, in one of three shapes:

- ``jest``: CommonJS, jest configured in package.json's ``jest`` key, tests under ``__tests__/``;
- ``vitest``: ES modules (``"type": "module"``), ``vitest.config.js``, tests next to the sources;
- ``tsc``: TypeScript sources compiled by ``tsc`` in the test script, mocha tests (``test/*.test.js``,
  ``.mocharc.json``) that require the compiled ``dist/``;
- ``node-test``: no dependencies at all, ``node --test`` (Node's built-in runner, ``node:test`` and
  ``node:assert``) on ``test/text.js``, an ``.nvmrc`` asking for Node 22 (``lts/jod``: no base image suite
  has it), and two more tests that pass only where the run leaves the colour variables alone
  (``FORCE_COLOR``/``NO_COLOR`` unset, as commander's own tests need) and runs the Node the project asks for.

Commits after the initial one, each a candidate:

- fix-slugify: ``slugify`` did not lowercase nor collapse separators; the fix and a new test of it
  (FAIL_TO_PASS; the other tests of the file PASS_TO_PASS);
- docs: README only (filtered: no test change);
- count (unless ``feature=False``): a new module ``count`` and a new test file (its tests cannot load at
  the base: failing).

The lockfile is npm's, made once per machine by ``npm install`` in a cache folder
(``node_deps(flavor)``, outside /tmp: the local sandbox has a private /tmp), whose ``node_modules``
the checkout links to (ignored by git): the local backend's dependencies. Dates and identities are
fixed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

DEV_DEPS = {
    "jest": {"jest": "29.7.0"},
    "vitest": {"vitest": "1.6.0"},
    "tsc": {"mocha": "10.4.0", "typescript": "5.4.5"},
    "node-test": {},
}
SCRIPTS = {"jest": {"test": "jest"}, "vitest": {"test": "vitest run"},
           "tsc": {"test": "tsc -p tsconfig.json && mocha"}, "node-test": {"test": "node --test"}}
NODE_TEST_EXTRA = '''
describe("environment", () => {
  it("leaves the colour variables to the project", () => {
    assert.deepStrictEqual([process.env.FORCE_COLOR, process.env.NO_COLOR], [undefined, undefined]);
  });
  it("runs on the Node the project asks for", () => {
    assert.ok(Number(process.versions.node.split(".")[0]) >= 22, process.version);
  });
});
'''

TEXT_JS = '''\
"use strict";

function capitalize(s) {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

function slugify(s) {
  return s.trim().split(" ").join("-");
}

function truncate(s, n) {
  return s.length <= n ? s : s.slice(0, n - 1) + "…";
}

module.exports = { capitalize, slugify, truncate };
'''
TEXT_FIX = ('  return s.trim().split(" ").join("-");\n',
            '  return s.trim().toLowerCase().split(/[^a-z0-9]+/).filter(Boolean).join("-");\n')

COUNT_JS = '''\
"use strict";

function wordCount(s) {
  return s.split(/\\s+/).filter(Boolean).length;
}

module.exports = { wordCount };
'''


def _esm(js: str) -> str:
    body = js.replace('"use strict";\n\n', "")
    names = body.rsplit("module.exports = ", 1)[1].strip().rstrip(";")
    return body.rsplit("module.exports = ", 1)[0].rstrip() + f"\n\nexport {names};\n"


def _ts(js: str) -> str:
    out = _esm(js)
    out = out.replace("function capitalize(s)", "function capitalize(s: string): string")
    out = out.replace("function slugify(s)", "function slugify(s: string): string")
    out = out.replace("function truncate(s, n)", "function truncate(s: string, n: number): string")
    out = out.replace("function wordCount(s)", "function wordCount(s: string): number")
    return out


def _tests(flavor: str, with_slugify: bool) -> str:
    imp = {"jest": 'const { capitalize, slugify, truncate } = require("../src/text");\n',
           "vitest": 'import { describe, test, expect } from "vitest";\n'
                     'import { capitalize, slugify, truncate } from "./text.js";\n',
           "tsc": 'const assert = require("assert");\nconst { capitalize, slugify, truncate } = '
                  'require("../dist/text.js");\n',
           "node-test": 'const { describe, it } = require("node:test");\nconst assert = require("node:assert");\n'
                        'const { capitalize, slugify, truncate } = require("../src/text");\n'}[flavor]
    if flavor in ("tsc", "node-test"):
        eq = "assert.strictEqual({a}, {b});"
        t = "it"
    else:
        eq = "expect({a}).toBe({b});"
        t = "test"
    cases = [("capitalize", "upper-cases the first letter", 'capitalize("héllo")', '"Héllo"'),
             ("truncate", "keeps short strings", 'truncate("abc", 5)', '"abc"'),
             ("truncate", "cuts long ones with an ellipsis", 'truncate("abcdef", 4)', '"abc…"')]
    if with_slugify:
        cases.append(("slugify", "lowercases and joins words with dashes", 'slugify("  Hello, World  ")',
                      '"hello-world"'))
    out = [imp]
    for group in dict.fromkeys(c[0] for c in cases):
        out.append(f'\ndescribe("{group}", () => {{\n')
        for g, name, a, b in cases:
            if g == group:
                out.append(f'  {t}("{name}", () => {{\n    {eq.format(a=a, b=b)}\n  }});\n')
        out.append("});\n")
    if flavor == "node-test":
        out.append(NODE_TEST_EXTRA)
    return "".join(out)


def _count_test(flavor: str) -> str:
    if flavor == "jest":
        return ('const { wordCount } = require("../src/count");\n\n'
                'test.each([["one two  three", 3], ["", 0]])("wordCount(%j) is %i", (s, n) => {\n'
                "  expect(wordCount(s)).toBe(n);\n});\n")
    if flavor == "node-test":
        return ('const { describe, it } = require("node:test");\nconst assert = require("node:assert");\n'
                'const { wordCount } = require("../src/count");\n\n'
                'describe("wordCount", () => {\n  it("counts words", () => {\n'
                '    assert.strictEqual(wordCount("one two  three"), 3);\n  });\n});\n')
    if flavor == "vitest":
        return ('import { test, expect } from "vitest";\nimport { wordCount } from "./count.js";\n\n'
                'test.each([["one two  three", 3], ["", 0]])("wordCount(%j) is %i", (s, n) => {\n'
                "  expect(wordCount(s)).toBe(n);\n});\n")
    return ('const assert = require("assert");\nconst { wordCount } = require("../dist/count.js");\n\n'
            'describe("wordCount", () => {\n  it("counts words", () => {\n'
            '    assert.strictEqual(wordCount("one two  three"), 3);\n  });\n});\n')


def package_json(flavor: str) -> dict:
    pkg = {"name": "textkit", "version": "1.0.0", "description": "String helpers", "private": True,
           "license": "MIT", "engines": {"node": ">=18"}, "scripts": SCRIPTS[flavor],
           "devDependencies": DEV_DEPS[flavor]}
    if flavor == "jest":
        pkg["jest"] = {"testEnvironment": "node"}
    if flavor == "vitest":
        pkg["type"] = "module"
    return pkg


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envgen-tests" / "node"


def node_deps(flavor: str) -> Path:
    """A folder with the flavor's package.json, npm's package-lock.json and node_modules, installed once
    per machine (the registry is npm's configured one)."""
    pkg = package_json(flavor)
    text = json.dumps(pkg, indent=2) + "\n"
    root = cache_root() / f"{flavor}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "node_modules" / ".package-lock.json").is_file():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            (root / "package.json").write_text(text)
            out = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=root,
                                 capture_output=True, text=True, timeout=900)
            if out.returncode != 0:
                raise RuntimeError(f"npm install for the {flavor} fixture failed: {out.stderr[-2000:]}")
    return root


ENV = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com", "GIT_COMMITTER_NAME": "Ada",
       "GIT_COMMITTER_EMAIL": "ada@example.com"}


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, **ENV}
    env.pop("GIT_DIR", None)
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip()


def make_node_repo(path: str | Path, flavor: str = "jest", feature: bool = True) -> dict[str, str]:
    """Build the repository; return {initial, fix, docs, count: commit id} (no ``count`` commit when
    ``feature`` is false: one task less to validate)."""
    if flavor not in DEV_DEPS:
        raise ValueError(f"unknown flavor {flavor!r}; choose from {', '.join(DEV_DEPS)}")
    deps = node_deps(flavor) if DEV_DEPS[flavor] else None
    repo = Path(path)
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "commit.gpgsign", "false")
    ext = ".ts" if flavor == "tsc" else ".js"
    src = {"jest": TEXT_JS, "vitest": _esm(TEXT_JS), "tsc": _ts(TEXT_JS), "node-test": TEXT_JS}[flavor]
    test_path = {"jest": "__tests__/text.test.js", "vitest": "src/text.test.js", "tsc": "test/text.test.js",
                 "node-test": "test/text.js"}[flavor]
    count_test = {"jest": "__tests__/count.test.js", "vitest": "src/count.test.js", "tsc": "test/count.test.js",
                  "node-test": "test/count.js"}[flavor]
    files = {"package.json": json.dumps(package_json(flavor), indent=2) + "\n",
             ".gitignore": "node_modules/\ndist/\n", "README.md": "# textkit\n\nString helpers.\n",
             f"src/text{ext}": src, test_path: _tests(flavor, False)}
    if deps is not None:
        files["package-lock.json"] = (deps / "package-lock.json").read_text()
    if flavor == "node-test":
        files[".nvmrc"] = "lts/jod\n"
    if flavor == "vitest":
        files["vitest.config.js"] = ('import { defineConfig } from "vitest/config";\n\n'
                                     'export default defineConfig({ test: { environment: "node" } });\n')
    if flavor == "tsc":
        files["tsconfig.json"] = json.dumps({"compilerOptions": {
            "target": "ES2020", "module": "commonjs", "outDir": "dist", "rootDir": "src", "strict": True,
            "declaration": False}, "include": ["src"]}, indent=2) + "\n"
        files[".mocharc.json"] = json.dumps({"spec": ["test/*.test.js"], "timeout": 5000}, indent=2) + "\n"
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "textkit: capitalize, slugify, truncate", date="2024-01-01T12:00:00+00:00")
    shas = {"initial": _git(repo, "rev-parse", "HEAD")}

    text_file = repo / f"src/text{ext}"
    text_file.write_text(text_file.read_text().replace(*TEXT_FIX))
    (repo / test_path).write_text(_tests(flavor, True), encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "Fix slugify: lowercase and collapse separators (fixes #3)",
         date="2024-01-02T12:00:00+00:00")
    shas["fix"] = _git(repo, "rev-parse", "HEAD")

    (repo / "README.md").write_text("# textkit\n\nString helpers: capitalize, slugify, truncate.\n")
    _git(repo, "commit", "-q", "-am", "docs: list the helpers the library exports in the README", date="2024-01-03T12:00:00+00:00")
    shas["docs"] = _git(repo, "rev-parse", "HEAD")

    if not feature:
        if deps is not None:
            (repo / "node_modules").symlink_to(deps / "node_modules", target_is_directory=True)
        return shas
    count = {"jest": COUNT_JS, "vitest": _esm(COUNT_JS), "tsc": _ts(COUNT_JS), "node-test": COUNT_JS}[flavor]
    (repo / f"src/count{ext}").write_text(count)
    (repo / count_test).write_text(_count_test(flavor), encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "Add wordCount, which counts the words of a text separated by any whitespace", date="2024-01-04T12:00:00+00:00")
    shas["count"] = _git(repo, "rev-parse", "HEAD")
    if deps is not None:
        (repo / "node_modules").symlink_to(deps / "node_modules", target_is_directory=True)
    return shas
