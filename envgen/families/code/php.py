"""PHP projects: Composer manifests, PHPUnit tests (the kit's ``phpunit`` runner).

The toolchain is Debian bookworm's (``TOOLCHAINS["php"]``: PHP 8.2 CLI with its XML and mbstring
extensions, Composer, PHPUnit 9.6). Packagist is not reachable from these machines, so a project's
dependencies come from one of:

- the repository itself: ``vendor/`` committed (with ``vendor/autoload.php``); PHPUnit from
  ``vendor/bin/phpunit`` when vendored, else Debian's;
- nothing to fetch: the manifest requires only PHP, extensions and PHPUnit; the task layer generates
  the autoloader (``composer dump-autoload --dev``, offline) and the tests run with Debian's PHPUnit;
  development tools no test loads (``DEV_TOOLS``: phpstan, php-cs-fixer...) do not count;
- a Composer repository named by ``ENVGEN_COMPOSER_REPO`` (a mirror on an open network): the task
  layer writes it into the Composer configuration it uses (``COMPOSER_HOME=/opt/envgen/composer``,
  the default repository turned off, plain ``http://`` allowed when the URL says so) and runs
  ``composer install``, which fails at once with a line naming the variable when the repository cannot
  be reached; without the variable such a project is rejected with the packages it needs.

Extensions a manifest requires (``ext-intl``) install as Debian packages (``php8.2-intl``) in the
environment layer. A manifest whose PHP constraint excludes 8.2 is rejected with a reason naming the
version it needs. PHPUnit older than 9 (``^4.8.35``, ``^5.7``: Packagist cannot be reached for it) runs on
Debian's 9.6 in the runner's compatibility mode (``options["compat"]``: the ``PHPUnit_Framework_*`` names
aliased to their namespaced classes, fixture methods such as ``setUp()`` given the ``: void`` PHPUnit 8+
declares); tests that use what 9 removed (``setExpectedException``, ``@expectedException``...) fail at both
commits and never become FAIL_TO_PASS. A constraint that only allows PHPUnit 10 or newer is rejected.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import xml.etree.ElementTree as ET

from ...errors import InputError
from ...sandbox.images import DEFAULT_SUITE, VERIFIERS_DIR, WORK_DIR
from .lang import Language, Recipe, RepoView, Step
from .test_layout import TestLayout

REPO_IN_IMAGE = f"{WORK_DIR}/repo"
PHP_VERSION = (8, 2)
"""Debian bookworm's PHP (the ``php`` toolchain layer)."""
PHPUNIT_MAJOR = 9
"""Debian bookworm's PHPUnit (9.6), the major the kit's runner drives."""
OLDEST_PHPUNIT = 4
"""The oldest PHPUnit major whose tests run on 9 in the runner's compatibility mode."""
DEBIAN_PHPUNIT = "/usr/bin/phpunit"
COMPOSER_HOME = "/opt/envgen/composer"
MIRROR_VAR = "ENVGEN_COMPOSER_REPO"
CONFIG_FILES = ("phpunit.xml", "phpunit.xml.dist", "phpunit.dist.xml")
TEST_DIRS = frozenset({"tests", "test", "Tests", "Test"})
BUILTIN_EXTENSIONS = frozenset({
    "calendar", "core", "ctype", "date", "dom", "exif", "ffi", "fileinfo", "filter", "ftp", "gettext", "hash",
    "iconv", "json", "libxml", "mbstring", "openssl", "pcntl", "pcre", "pdo", "phar", "posix", "random",
    "readline", "reflection", "session", "shmop", "simplexml", "sockets", "sodium", "spl", "standard",
    "sysvmsg", "sysvsem", "sysvshm", "tokenizer", "xml", "xmlreader", "xmlwriter", "xsl", "zend-opcache",
    "opcache", "zlib"})
"""Extensions of the toolchain layer (php-cli, php-xml, php-mbstring and what php8.2-common holds)."""
EXTENSION_PACKAGES = {
    "intl": "php8.2-intl", "curl": "php8.2-curl", "gd": "php8.2-gd", "zip": "php8.2-zip", "bcmath": "php8.2-bcmath",
    "gmp": "php8.2-gmp", "soap": "php8.2-soap", "sqlite3": "php8.2-sqlite3", "pdo_sqlite": "php8.2-sqlite3",
    "pdo-sqlite": "php8.2-sqlite3", "mysqli": "php8.2-mysql", "pdo_mysql": "php8.2-mysql",
    "pdo-mysql": "php8.2-mysql", "pgsql": "php8.2-pgsql", "pdo_pgsql": "php8.2-pgsql", "pdo-pgsql": "php8.2-pgsql",
    "ldap": "php8.2-ldap", "bz2": "php8.2-bz2", "tidy": "php8.2-tidy", "apcu": "php-apcu", "yaml": "php-yaml",
    "redis": "php-redis", "imagick": "php-imagick", "memcached": "php-memcached", "mongodb": "php-mongodb",
    "msgpack": "php-msgpack", "igbinary": "php-igbinary", "ast": "php-ast", "uuid": "php-uuid",
    "xdebug": "php-xdebug", "pcov": "php-pcov", "ds": "php-ds", "amqp": "php-amqp"}
"""Extensions a manifest may require, by the Debian bookworm package that provides them."""


# ---------------------------------------------------------------- version constraints


def _version(text: str) -> tuple[int, ...]:
    nums = re.findall(r"\d+", text.split("-", 1)[0].split("@", 1)[0])
    return tuple(int(n) for n in nums[:3])


def _term_allows(term: str, have: tuple[int, int]) -> bool:
    """Whether one Composer constraint term admits the major.minor line ``have`` (any patch of it)."""
    term = term.strip().lstrip("v")
    if term in ("", "*", "x"):
        return True
    m = re.match(r"^(\^|~|>=|<=|>|<|!=|==|=)?\s*v?([\d.*x]+)", term)
    if not m:
        raise ValueError(term)
    op, ver = m.group(1) or "", m.group(2)
    if "*" in ver or ver.endswith(".x"):  # 8.*, 8.1.*
        fixed = _version(ver.replace("*", "").replace("x", ""))
        return have[:len(fixed)] == fixed[:2]
    v = _version(ver)
    if not v:
        raise ValueError(term)
    lo, hi = (have[0], have[1], 0), (have[0], have[1], 10 ** 6)  # the lowest and highest patch of the line
    full = v + (0,) * (3 - len(v))
    if op == "^":
        upper = (v[0] + 1, 0, 0) if v[0] > 0 else (0, v[1] + 1 if len(v) > 1 else 1, 0)
        return hi >= full and lo < upper
    if op == "~":
        upper = (v[0] + 1, 0, 0) if len(v) <= 2 else (v[0], v[1] + 1, 0)
        return hi >= full and lo < upper
    if op == ">=":
        return hi >= full
    if op == ">":
        return hi > full
    if op == "<=":
        return lo <= full
    if op == "<":
        return lo < full
    if op == "!=":
        return True
    # an exact version (8.2, 8.2.1): the same line
    return have[:len(v)] == v[:2] if len(v) <= 2 else have == v[:2]


def allows(constraint: str, have: tuple[int, int]) -> bool:
    """Whether a Composer version constraint (``^7.4 || ^8.0``, ``>=8.1 <8.4``, ``8.2.*``) admits
    ``have`` (a major.minor line); raises ValueError for a constraint it cannot read."""
    for alt in re.split(r"\s*\|\|?\s*", constraint.strip()):
        alt = re.sub(r"\s+-\s+", " - ", alt)
        if " - " in alt:  # a hyphen range
            a, b = alt.split(" - ", 1)
            terms = [">=" + a.strip(), "<=" + b.strip()]
        else:
            terms = [t for t in re.split(r"[\s,]+", re.sub(r"(>=|<=|!=|>|<|=|\^|~)\s+", r"\1", alt)) if t]
        if all(_term_allows(t, have) for t in terms or ["*"]):
            return True
    return False


# ---------------------------------------------------------------- the project's configuration


def read_manifest(view: RepoView) -> dict:
    text = view.read("composer.json")
    if text is None:
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"composer.json at {view.commit[:12]} is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(f"composer.json at {view.commit[:12]} is not a JSON object")
    return doc


def phpunit_config(view: RepoView) -> tuple[str | None, dict]:
    """(the configuration file PHPUnit would use, {bootstrap, dirs, files, suffixes}) read from it."""
    name = next((n for n in CONFIG_FILES if view.exists(n)), None)
    info: dict = {"bootstrap": None, "dirs": [], "files": [], "suffixes": []}
    if name is None:
        return None, info
    try:
        root = ET.fromstring(view.read(name) or "")
    except ET.ParseError as e:
        raise InputError(f"{name} at {view.commit[:12]} is not valid XML: {e}") from None
    if root.tag != "phpunit":
        raise InputError(f"{name} at {view.commit[:12]} is not a PHPUnit configuration (root <{root.tag}>)")
    if root.get("bootstrap"):
        info["bootstrap"] = _norm(root.get("bootstrap"))
    for suite in root.iter("testsuite"):
        for d in suite.iter("directory"):
            if (d.text or "").strip():
                info["dirs"].append(_norm(d.text))
                info["suffixes"].append(d.get("suffix") or "Test.php")
        for f in suite.iter("file"):
            if (f.text or "").strip():
                info["files"].append(_norm(f.text))
    return name, info


def _norm(path: str) -> str:
    return os.path.normpath(path.strip()).replace(os.sep, "/").removeprefix("./")


def autoload_dev_dirs(manifest: dict) -> list[str]:
    """The directories ``autoload-dev`` maps (psr-4, psr-0, classmap): the tests' own."""
    out: list[str] = []
    dev = manifest.get("autoload-dev") or {}
    for kind in ("psr-4", "psr-0"):
        for paths in (dev.get(kind) or {}).values():
            for p in [paths] if isinstance(paths, str) else paths or []:
                if p.strip() and _norm(p) not in (".", ""):
                    out.append(_norm(p))
    out += [_norm(p) for p in dev.get("classmap") or [] if _norm(p) not in (".", "")]
    return sorted(set(out))


def _packages(reqs: dict) -> dict:
    return {k: v for k, v in (reqs or {}).items() if not re.match(r"^(php|php-64bit|ext-.+|lib-.+|composer-.+)$", k)}


DEV_TOOLS = re.compile(
    r"^(phpstan/.+|vimeo/psalm|psalm/.+|friendsofphp/php-cs-fixer|squizlabs/php_codesniffer|phpmd/phpmd|"
    r"rector/rector|infection/infection|php-parallel-lint/.+|jakub-onderka/php-parallel-lint|"
    r"roave/security-advisories|roave/backward-compatibility-check|ergebnis/composer-normalize|"
    r"bamarni/composer-bin-plugin|dealerdirect/phpcodesniffer-composer-installer|phpcompatibility/.+|"
    r"[\w.-]+/(?:[\w.-]+-)?coding-standard|php-coveralls/php-coveralls|satooshi/php-coveralls|scrutinizer/ocular|"
    r"phpro/grumphp|maglnet/composer-require-checker|icanhazstring/composer-unused|sebastian/phpcpd|"
    r"phploc/phploc|phpbench/phpbench|captainhook/.+)$")
"""``require-dev`` packages that analyse, format, lint, benchmark or report on the code but that no PHPUnit
test loads: static analysers, code-style fixers and their rule sets, mutation testing, coverage uploaders,
Composer plugins for them. The recipe leaves them out (with a note) rather than reject a project for want
of a Composer repository serving them."""
TEST_ADDONS = {"phpspec/prophecy": ("prophesize", "Prophecy\\"), "phpspec/prophecy-phpunit": ("prophesize", "Prophecy\\")}
"""Test libraries PHPUnit 9 only integrates (``$this->prophesize()``), by the words a test file that uses
them must contain: pinned in ``require-dev`` for PHP 8 support (php-markdown pins ``phpspec/prophecy``
and never calls it), they are left out when no test file says either word."""


class PHP(Language):
    name = "php"

    def is_test_path(self, path: str) -> bool:
        parts = path.split("/")
        if parts[0] == "vendor":
            return False
        name = parts[-1]
        return any(p in TEST_DIRS for p in parts[:-1]) or name.endswith(("Test.php", ".phpt")) \
            or name in CONFIG_FILES or name == ".phpunit.result.cache"

    def is_code_path(self, path: str) -> bool:
        return path.endswith(".php") and path.split("/")[0] != "vendor" and not self.is_test_path(path)

    def detect(self, view: RepoView) -> bool:
        marker = view.exists("composer.json") or any(view.exists(n) for n in CONFIG_FILES)
        return marker and any(self.is_code_path(f) for f in view.files)

    def configured_tests(self, view: RepoView) -> TestLayout | None:
        """The directories (with their suffixes) and files of the PHPUnit configuration's test suites."""
        try:
            config, info = phpunit_config(view)
        except InputError:
            return None
        if config is None or not (info["dirs"] or info["files"]):
            return None
        return TestLayout(config, dirs=tuple((d, (s,)) for d, s in zip(info["dirs"], info["suffixes"])),
                          globs=tuple(info["files"]))

    def runnable_tests(self, paths: list[str], view_after: set[str], view: RepoView | None = None) -> list[str]:
        """The test patch's PHPUnit test case files (``*Test.php``, or the suffixes the configuration's
        test suites name) that exist after it."""
        suffixes = {"Test.php"}
        if view is not None:
            suffixes |= set(phpunit_config(view)[1]["suffixes"])
        is_test = self.test_matcher(view)
        return [p for p in paths if p in view_after and p.split("/")[0] != "vendor"
                and p.endswith(tuple(suffixes)) and is_test(p)]

    def recipe(self, view: RepoView, *, python: str | None = None) -> Recipe:
        manifest = read_manifest(view)
        config, info = phpunit_config(view)
        notes: list[str] = []
        require, dev = manifest.get("require") or {}, manifest.get("require-dev") or {}
        if not isinstance(require, dict) or not isinstance(dev, dict):
            raise InputError("composer.json: require and require-dev must be objects")
        want_php = require.get("php")
        if want_php:
            try:
                ok = allows(str(want_php), PHP_VERSION)
            except ValueError:
                raise InputError(f"composer.json requires PHP {want_php!r}, a constraint envgen cannot read") from None
            if not ok:
                raise InputError(f"composer.json requires PHP {want_php}; the base image has PHP "
                                 f"{'.'.join(map(str, PHP_VERSION))} (Debian {DEFAULT_SUITE}) and no other")
            notes.append(f"PHP {'.'.join(map(str, PHP_VERSION))} satisfies {want_php}")
        steps, packages = [], []
        for key in sorted({*require, *dev}):
            if not key.startswith("ext-"):
                continue
            ext = key[4:].lower()
            if ext in BUILTIN_EXTENSIONS:
                continue
            if ext not in EXTENSION_PACKAGES:
                raise InputError(f"composer.json requires the PHP extension {ext!r}, which no Debian "
                                 f"{DEFAULT_SUITE} package envgen knows provides")
            packages.append(EXTENSION_PACKAGES[ext])
        if packages:
            pk = " ".join(sorted(set(packages)))
            steps.append(Step("extensions", f"apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install "
                                            f"-y -qq --no-install-recommends {pk} && rm -rf /var/lib/apt/lists/*"))
            notes.append(f"extensions from Debian: {pk}")
        vendored = view.exists("vendor/autoload.php")
        phpunit = DEBIAN_PHPUNIT
        compat = None
        task_steps: list[Step] = []
        if vendored:
            notes.append("dependencies vendored (vendor/autoload.php committed)")
            if view.exists("vendor/bin/phpunit"):
                major = self._vendored_phpunit(view)
                if major is not None and major != PHPUNIT_MAJOR:
                    raise InputError(f"the repository vendors PHPUnit {major}; envgen's runner drives PHPUnit "
                                     f"{PHPUNIT_MAJOR} (Debian {DEFAULT_SUITE}'s)")
                phpunit = "vendor/bin/phpunit"
                notes.append("PHPUnit vendored (vendor/bin/phpunit)")
            else:
                compat = self._check_phpunit(*self._phpunit_constraint(view, require, dev, notes))
        else:
            compat = self._check_phpunit(*self._phpunit_constraint(view, require, dev, notes))
            tools = sorted(k for k in _packages(dev) if k not in require and DEV_TOOLS.match(k))
            addons = [k for k in _packages(dev) if k not in require and k in TEST_ADDONS]
            if addons:
                texts = [view.read(f) or "" for f in view.files if f.endswith(".php") and self.is_test_path(f)]
                tools += [k for k in addons if not any(w in t for t in texts for w in TEST_ADDONS[k])]
                tools.sort()
            if tools:
                notes.append(f"{len(tools)} development tool(s) no test loads left out: {', '.join(tools)}")
            fetch = sorted(k for k in {*_packages(require), *_packages(dev)}
                           if k != "phpunit/phpunit" and k not in tools)
            kit = f"PYTHONPATH={VERIFIERS_DIR} python3 -m envgen_verifiers.install"
            env = f"export COMPOSER_HOME={COMPOSER_HOME} COMPOSER_ALLOW_SUPERUSER=1 COMPOSER_NO_INTERACTION=1"
            if fetch:
                mirror = os.environ.get(MIRROR_VAR, "").strip()
                if not mirror:
                    raise InputError(f"composer.json needs {len(fetch)} package(s) from a Composer repository "
                                     f"({', '.join(fetch[:5])}{', ...' if len(fetch) > 5 else ''}); vendor them "
                                     f"(commit vendor/) or set {MIRROR_VAR} to a Composer repository URL")
                q = shlex.quote(mirror)
                plain = "composer config --global secure-http false && " if mirror.startswith("http://") else ""
                install = (f"{env} && composer config --global repositories.envgen composer {q} && "
                           f"composer config --global repo.packagist false && {plain}"
                           "{ timeout 1200 composer install --no-interaction --no-progress --no-scripts || "
                           f"{{ rc=$?; echo \"envgen: composer install failed (exit $rc): the packages come from "
                           f"{MIRROR_VAR}={mirror}; check that it is reachable and serves them\"; exit $rc; }}; }}")
                task_steps.append(Step("install", install))
                notes.append(f"{len(fetch)} package(s) from the Composer repository {MIRROR_VAR} names")
                if "phpunit/phpunit" in dev or "phpunit/phpunit" in require:
                    phpunit = "vendor/bin/phpunit"
            else:
                # --dev: without an install to take the mode from, Composer 2 leaves autoload-dev out, and the
                # tests' own classes (parsedown's TestParsedown) are not found
                task_steps.append(Step("autoload", f"{env} && composer dump-autoload --dev --no-interaction"))
                notes.append("no packages to fetch: the autoloader generated offline (composer dump-autoload)")
            task_steps.append(Step("generated", f"{kit} capture {REPO_IN_IMAGE}"))
        if phpunit == DEBIAN_PHPUNIT:
            notes.append(f"tests run with Debian's PHPUnit {PHPUNIT_MAJOR}")
        test_dirs = sorted({*info["dirs"], *autoload_dev_dirs(manifest)} - {"", "."})
        test_dirs = [d for d in test_dirs if not d.startswith("..")]
        if config:
            notes.append(f"PHPUnit configured by {config}")
        options = {"phpunit": phpunit, "php": "php", "config": config, "bootstrap": info["bootstrap"],
                   "test_dirs": test_dirs}
        if compat is not None and phpunit == DEBIAN_PHPUNIT:
            options["compat"] = compat
            notes.append(f"the project asks for PHPUnit {compat}: run on PHPUnit {PHPUNIT_MAJOR}.6 in compatibility "
                         "mode (PHPUnit_* class names aliased, fixture methods declared ': void')")
        return Recipe(language=self.name, suite=DEFAULT_SUITE, toolchains=("php",), steps=steps, framework="phpunit",
                      options=options, notes=notes, task_steps=task_steps)

    @staticmethod
    def _phpunit_constraint(view: RepoView, require: dict, dev: dict, notes: list[str]):
        """The PHPUnit constraint of the root manifest, else of a tools manifest that installs PHPUnit apart
        (``tools/phpunit/composer.json``, bamarni's ``vendor-bin/phpunit/composer.json``): webmozart/assert
        pins ``^8.5`` there, later ``^11.0``, and its root manifest names no PHPUnit at all."""
        own = dev.get("phpunit/phpunit") or require.get("phpunit/phpunit")
        if own:
            return own, "composer.json"
        for path in ("tools/phpunit/composer.json", "vendor-bin/phpunit/composer.json"):
            text = view.read(path)
            if text is None:
                continue
            try:
                doc = json.loads(text)
            except json.JSONDecodeError:
                raise InputError(f"{path} at {view.commit[:12]} is not valid JSON") from None
            found = [(d or {}).get("phpunit/phpunit") for d in (doc.get("require-dev"), doc.get("require"))
                     if isinstance(doc, dict) and isinstance(d, dict)] if isinstance(doc, dict) else []
            constraint = next((c for c in found if c), None)
            if constraint:
                notes.append(f"PHPUnit {constraint} from {path}")
                return constraint, path
        return None, "composer.json"

    @staticmethod
    def _check_phpunit(constraint, source: str = "composer.json") -> int | None:
        """None when Debian's PHPUnit 9.6 satisfies ``constraint``; the newest older major it allows (4-8),
        whose tests run on 9 in the runner's compatibility mode; else a rejection."""
        if not constraint:
            return None
        try:
            if allows(str(constraint), (PHPUNIT_MAJOR, 6)):
                return None
            older = [m for m in range(PHPUNIT_MAJOR - 1, OLDEST_PHPUNIT - 1, -1)
                     if any(allows(str(constraint), (m, minor)) for minor in range(10))]
        except ValueError:
            raise InputError(f"{source} requires phpunit/phpunit {constraint!r}, a constraint envgen "
                             "cannot read") from None
        if older:
            return older[0]
        raise InputError(f"{source} requires phpunit/phpunit {constraint}; the base image has Debian "
                         f"{DEFAULT_SUITE}'s PHPUnit {PHPUNIT_MAJOR}.6 and the runner drives PHPUnit "
                         f"{PHPUNIT_MAJOR} (older majors in compatibility mode, never newer ones)")

    @staticmethod
    def _vendored_phpunit(view: RepoView) -> int | None:
        text = view.read("vendor/composer/installed.json")
        try:
            doc = json.loads(text) if text else None
        except json.JSONDecodeError:
            return None
        pkgs = doc.get("packages", []) if isinstance(doc, dict) else doc or []
        for p in pkgs:
            if isinstance(p, dict) and p.get("name") == "phpunit/phpunit":
                v = _version(str(p.get("version_normalized") or p.get("version") or ""))
                return v[0] if v else None
        return None
