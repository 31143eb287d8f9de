"""The Node runners' report parsers on real reports, their infrastructure and canaries, and the JavaScript /
TypeScript recipes read from real repositories.

The samples under fixtures/reports/node/ were written by jest 29.7, vitest 1.6 and mocha 10.4 (with the
kit's reporter) running a file with passing, failing, skipped, todo, parameterised and non-ASCII-named
tests, and a file that does not load, through the runners' own commands (``envgen-tree.json`` is the
tree the commands were run in).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envgen.errors import InputError
from envgen.families.code.lang import RepoView
from envgen.families.code.languages import detect_language
from envgen.families.code.node import CHUNK, JavaScript, TypeScript, npmrc_settings, satisfies, script_env
from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import runners  # noqa: E402
from envgen_verifiers.runners.node import parse_jest_verbose, parse_vitest_verbose  # noqa: E402

REPORTS = Path(__file__).parent / "fixtures" / "reports" / "node"
UNI = "ünïcödé — 日本語 ✓"


def _expected(prefix: str, skipped: list[str]) -> dict:
    out = {f"{prefix}/math.test.js > math > adds": "passed",
           f"{prefix}/math.test.js > math > fails": "failed",
           f"{prefix}/math.test.js > math > nested > add(1, 1) = 2": "passed",
           f"{prefix}/math.test.js > math > nested > add(2, 3) = 5": "passed",
           f"{prefix}/math.test.js > {UNI}": "failed",
           f"{prefix}/math.test.js > top level passes": "passed"}
    out.update({f"{prefix}/math.test.js > math > {s}": "skipped" for s in skipped})
    return out


def test_jest_json_report():
    r = runners.get("jest")
    outcomes, messages, source = r.parse(str(REPORTS / "jest"), "", ["jest/math.test.js", "jest/broken.test.js"], {})
    assert source == "jest-json"
    assert outcomes == {**_expected("jest", ["skipped one", "to do later"]), "jest/broken.test.js": "error"}
    assert "Expected: \"e\"" in messages[f"jest/math.test.js > {UNI}"]
    assert "Cannot find module './does-not-exist'" in messages["jest/broken.test.js"]


def test_vitest_json_report():
    r = runners.get("vitest")
    outcomes, messages, source = r.parse(str(REPORTS / "vitest"), "", ["vitest/math.test.js"], {})
    assert source == "vitest-json"
    assert outcomes == {**_expected("vitest", ["skipped one", "to do later"]), "vitest/broken.test.js": "error"}
    assert messages["vitest/math.test.js > math > fails"] == "expected 3 to be 4 // Object.is equality"
    assert "does-not-exist" in messages["vitest/broken.test.js"]


def test_mocha_reports_from_the_kits_reporter():
    r = runners.get("mocha")
    outcomes, messages, source = r.parse(str(REPORTS / "mocha"), "", ["mocha/math.test.js", "mocha/broken.test.js"], {})
    assert source == "mocha-json"
    hook = 'mocha/math.test.js > math > hooks > "before all" hook for "under a failing hook"'
    assert outcomes == {**_expected("mocha", ["skipped one", "pending without body"]), hook: "error",
                        "mocha/broken.test.js": "error"}
    assert messages[hook] == "hook blew up"
    assert "'é' !== 'e'" in messages[f"mocha/math.test.js > {UNI}"]
    assert "Cannot find module './does-not-exist'" in messages["mocha/broken.test.js"]


def test_console_fallbacks_read_the_same_ids():
    jest = parse_jest_verbose((REPORTS / "jest" / "console.txt").read_text(encoding="utf-8"))
    assert jest == _expected("jest", ["skipped one", "to do later"])
    vitest = parse_vitest_verbose((REPORTS / "vitest" / "console.txt").read_text(encoding="utf-8"))
    assert vitest == _expected("vitest", [])
    r = runners.get("jest")  # no JSON report (a killed run): the console is read
    assert r.parse(str(REPORTS / "mocha"), (REPORTS / "jest" / "console.txt").read_text(encoding="utf-8"),
                   [], {})[2] == "jest-verbose"


def test_a_canary_copy_reported_passing_wins_over_failing_copies(tmp_path):
    line = {"reporter": "envgen-mocha", "tests": [{"file": "/t/test/envgen_canary_ab12_x.test.cjs",
                                                    "titles": ["envgen canary ab12"], "state": "failed"}]}
    (tmp_path / "envgen-tree.json").write_text(json.dumps(["/t"]))
    (tmp_path / "mocha-0000.json").write_text(json.dumps(line) + "\n")
    line["tests"][0]["state"] = "passed"
    (tmp_path / "mocha-0001.json").write_text(json.dumps(line) + "\n")
    outcomes, _, _ = runners.get("mocha").parse(str(tmp_path), "", [], {})
    assert outcomes == {"test/envgen_canary_ab12_x.test.cjs > envgen canary ab12": "passed"}


@pytest.mark.parametrize("path,infra", [
    ("package.json", True), ("sub/package.json", True), ("package-lock.json", True), ("yarn.lock", True),
    ("pnpm-lock.yaml", True), ("jest.config.js", True), ("jest.config.ts", True), ("vitest.config.mts", True),
    ("vite.config.js", True), (".mocharc.yml", True), (".mocharc.json", True), ("tsconfig.json", True),
    ("tsconfig.build.json", True), ("babel.config.cjs", True), (".babelrc", True), ("src/setupTests.ts", True),
    ("jest.setup.js", True), ("node_modules/jest/bin/jest.js", True), ("src/node_modules/x.js", True),
    ("src/__tests__/a.js", True), ("src/__mocks__/fs.js", True), ("src/a.test.ts", True), ("src/a.spec.jsx", True),
    ("test/helpers/setup.js", True), ("src/index.js", False), ("src/test-utils.js", False), ("README.md", False),
    ("lib/jest.js", False), ("src/setup.ts", False)])
def test_infrastructure(path, infra):
    opts = {"protect": ["test/helpers"]}
    assert runners.get("jest").infrastructure(path, opts) is infra


def test_canaries_match_the_run_files_patterns():
    jest, vitest, mocha = (runners.get(n) for n in ("jest", "vitest", "mocha"))
    assert jest.canary("/t", ["src/a.spec.ts"], "ab12", {})[0] == "src/envgen_canary_ab12_a.spec.ts"
    assert jest.canary("/t", ["src/__tests__/util.js"], "ab12", {})[0] == "src/__tests__/envgen_canary_ab12_util.js"
    path, text = vitest.canary("/t", ["a.test.mjs"], "ab12", {})
    assert path == "envgen_canary_ab12_a.test.mjs" and text.startswith('import { test } from "vitest";')
    path, text = mocha.canary("/t", ["test/x.test.js"], "ab12", {})
    assert path == "test/envgen_canary_ab12.test.cjs" and 'it("envgen canary ab12"' in text


@pytest.mark.parametrize("version,spec,ok", [
    ("18.19.0", ">=18", True), ("18.19.0", ">=20", False), ("20.19.2", "^18 || ^20", True), ("18.19.0", "18.x", True),
    ("18.19.0", "~18.17", False), ("18.19.0", "~18", True), ("18.19.0", ">=16 <18", False),
    ("18.19.0", "16 - 18", True), ("20.19.2", "16 - 18", False), ("18.19.0", "*", True), ("18.19.0", ">= 18.0.0", True),
    ("18.19.0", ">17", True), ("18.19.0", "<=18", True), ("18.19.0", "^0.1", False), ("12.22.12", ">=14.15.0", False)])
def test_npm_semver_ranges(version, spec, ok):
    assert satisfies(version, spec) is ok


@pytest.mark.parametrize("script,framework,env", [
    ("NODE_OPTIONS=--experimental-vm-modules jest", "jest", {"NODE_OPTIONS": "--experimental-vm-modules"}),
    ("cross-env TZ=UTC FOO='a b' jest --coverage", "jest", {"TZ": "UTC", "FOO": "a b"}),
    ("node --experimental-vm-modules node_modules/jest/bin/jest.js", "jest",
     {"NODE_OPTIONS": "--experimental-vm-modules"}),
    ("eslint . && mocha", "mocha", {}), ("vitest run", "vitest", {})])
def test_the_test_scripts_environment_is_kept(script, framework, env):
    assert script_env({"scripts": {"test": script}}, framework) == env


def test_runner_environment_adds_the_scripts_variables_but_not_path_or_home():
    env = runners.get("jest").env({"PATH": "/bin", "HOME": "/h"}, "/t", {"env": {"NODE_OPTIONS": "--x", "PATH": "/evil"}})
    assert env["NODE_OPTIONS"] == "--x" and env["PATH"] == "/bin" and env["CI"] == "true"


# ---------------------------------------------------------------- recipes from real repositories


def _repo(tmp_path: Path, files: dict[str, str]) -> RepoView:
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env, capture_output=True)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return RepoView(repo, sha)


LOCK = json.dumps({"name": "p", "lockfileVersion": 3, "requires": True, "packages": {}})


def _pkg(**kw) -> str:
    return json.dumps({"name": "p", "version": "1.0.0", "devDependencies": {"jest": "29.7.0"}, **kw})


def test_recipe_installs_from_the_lockfile_without_the_projects_scripts(tmp_path):
    view = _repo(tmp_path, {"package.json": _pkg(scripts={"test": "jest", "prepare": "husky install"},
                                                 jest={"setupFilesAfterEach": ["<rootDir>/test/setup-env.js"]}),
                            "package-lock.json": LOCK, "src/a.js": "", "test/setup-env.js": "",
                            "src/a.test.js": "", ".npmrc": "legacy-peer-deps=true\n//reg.example/:_authToken=x\n"
                                                           "@acme:registry=https://reg.example/\n"})
    lang = detect_language(view)
    assert isinstance(lang, JavaScript) and lang.name == "javascript"
    r = lang.recipe(view)
    assert (r.suite, r.toolchains, r.framework) == ("bookworm", ("node",), "jest")
    assert [s.name for s in r.steps] == ["package.json", "package-lock.json", ".npmrc", "install", "link", "check"]
    assert any(".npmrc settings kept: legacy-peer-deps" == n for n in r.notes)
    assert npmrc_settings(view.read(".npmrc")) == "legacy-peer-deps=true\n"  # no registry, no token
    assert "PUPPETEER_SKIP_DOWNLOAD=1" in r.steps[3].run and "CYPRESS_INSTALL_BINARY=0" in r.steps[3].run
    assert "npm ci" in r.steps[3].run and "husky" not in " ".join(s.run for s in r.steps)
    assert r.options["protect"] == ["test/setup-env.js"] and r.options["modules"][0] == "/opt/envgen/node/node_modules"
    assert lang.runnable_tests(["src/a.test.js", "src/a.js", "test/setup-env.js"], {"src/a.test.js", "src/a.js",
                                                                                  "test/setup-env.js"}, view) \
        == ["src/a.test.js"]


def test_typescript_with_a_tsc_build_in_the_test_script(tmp_path):
    pkg = _pkg(scripts={"pretest": "tsc -p tsconfig.build.json", "test": "mocha"},
               devDependencies={"mocha": "10.4.0", "typescript": "5.4.5"})
    view = _repo(tmp_path, {"package.json": pkg, "package-lock.json": LOCK, "tsconfig.json": "{}",
                            "src/a.ts": "", "src/b.ts": "", "test/a.test.js": ""})
    lang = detect_language(view)
    assert isinstance(lang, TypeScript)
    r = lang.recipe(view)
    assert r.framework == "mocha" and r.options["build"] == ["-p", "tsconfig.build.json"]
    assert lang.runnable_tests(["test/a.test.js", "test/fixtures/x.js"], {"test/a.test.js", "test/fixtures/x.js"},
                               view) == ["test/a.test.js"]


@pytest.mark.parametrize("files,why", [
    ({"package.json": _pkg(engines={"node": ">=26"}), "package-lock.json": LOCK},
     "engines.node '>=26': no Node here matches (Node versions there are: 12.22.12 (bullseye's nodejs), "
     "18.20.4 (bookworm's nodejs), 20.19.2 (trixie's nodejs), 22.23.3 (from the npm registry), "
     "24.21.0 (from the npm registry))"),
    ({"package.json": _pkg(workspaces=["packages/*"]), "package-lock.json": LOCK}, "workspaces"),
    ({"package.json": _pkg()}, "no lockfile"),
    ({"package.json": _pkg(), "yarn.lock": "__metadata:\n  version: 6\n"}, "Yarn 2+"),
    ({"package.json": json.dumps({"name": "p", "devDependencies": {"ava": "6"}}), "package-lock.json": LOCK},
     "no supported test runner"),
    ({"package.json": "{not json"}, "package.json: not JSON"),
])
def test_recipes_say_why_they_cannot_set_a_repository_up(tmp_path, files, why):
    with pytest.raises(InputError, match=None) as e:
        JavaScript().recipe(_repo(tmp_path, files))
    assert why in str(e.value)


def test_node_20_projects_get_trixie_and_pnpm_and_yarn_lockfiles_install_with_their_managers(tmp_path):
    view = _repo(tmp_path, {"package.json": _pkg(engines={"node": "^20.11"}, packageManager="pnpm@8.15.4"),
                            "pnpm-lock.yaml": "lockfileVersion: '6.0'\n"})
    r = JavaScript().recipe(view)
    assert r.suite == "trixie" and "npm install -g pnpm@8.15.4" in r.steps[-3].run
    assert "pnpm install --frozen-lockfile" in r.steps[-3].run
    view = _repo(tmp_path / "y", {"package.json": _pkg(), "yarn.lock": "# yarn lockfile v1\n\n"})
    assert "yarn install --frozen-lockfile" in JavaScript().recipe(view).steps[-3].run


def test_a_big_lockfile_is_written_in_chunks_a_shell_argument_holds(tmp_path):
    big = json.dumps({"packages": {f"node_modules/p{i}": {"version": os.urandom(24).hex()} for i in range(6000)}})
    view = _repo(tmp_path, {"package.json": _pkg(), "package-lock.json": big})
    steps = JavaScript().recipe(view).steps
    chunks = [s for s in steps if s.name.startswith("package-lock.json")]
    assert len(chunks) > 1 and all(len(s.run) < CHUNK + 200 for s in chunks)
    for s in chunks:  # each step is one shell argument in the image build, as here
        subprocess.run(["sh", "-c", s.run.replace("/opt/envgen/node", str(tmp_path / "out"))], check=True)
    assert (tmp_path / "out" / "package-lock.json").read_text() == big


def test_node_major_from_engines_nvmrc_and_dependencies(tmp_path):
    """Node 22 where the project asks for it (engines, .nvmrc, a direct dependency's engines in the lockfile),
    as a first step that takes the release binary from the registry; the default suite's Node otherwise."""
    from envgen.families.code.node import JavaScript, node_for, node_test_args, nvmrc_major

    lock = json.dumps({"lockfileVersion": 3, "packages": {"": {}, "node_modules/jest": {"engines": {
        "node": ">=22.1"}}, "node_modules/old": {"engines": {"node": "0.10.x"}}}})
    assert node_for(json.loads(_pkg()))[:2] == ("bookworm", None)
    assert node_for(json.loads(_pkg(engines={"node": ">=22"})))[:2] == ("bookworm", 22)
    assert node_for(json.loads(_pkg(engines={"node": ">=20 <21"})))[:2] == ("trixie", None)
    view = _repo(tmp_path, {"package.json": _pkg(devDependencies={"jest": "30", "old": "1"}),
                            "package-lock.json": lock})
    suite, major, why = node_for(json.loads(_pkg(devDependencies={"jest": "30", "old": "1"})), view, "package-lock.json")
    assert (suite, major) == ("bookworm", 22) and "jest's engines.node" in why and "old" not in why
    assert [nvmrc_major(t) for t in ("22\n", "v20.11.1", "lts/jod", "lts/*", "node")] == [22, 20, 22, None, None]
    recipe = JavaScript().recipe(_repo(tmp_path / "nt", {"package.json": _pkg(
        scripts={"test": "node --import tsx --test --test-reporter=spec test/"}, devDependencies={}), ".nvmrc": "22\n"}))
    assert recipe.framework == "node-test" and recipe.options["node_args"] == ["--import", "tsx"]
    assert recipe.steps[0].name == "node22" and "node-linux-$arch@22." in recipe.steps[0].run
    assert recipe.options["node_path"] == "/opt/envgen/node-22/bin"
    assert node_test_args(json.loads(_pkg(scripts={"test": "c8 node --test --experimental-test-coverage"}))) == []
