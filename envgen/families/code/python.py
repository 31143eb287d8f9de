"""The Python recipe: interpreter, dependencies, the project's own install, its check, the test runner.

Metadata is read statically at the task's commit (``pyproject.toml`` with PEP 735 dependency groups,
``setup.cfg``, literal arguments of ``setup()`` in ``setup.py``, requirements files, tox's
``[testenv]``), never by executing project code on the host.

- Interpreter: one of the base image suites (``envgen.sandbox.images.SUITES``), those allowed by
  ``requires-python``; the newest one the trove classifiers name, else the default suite's, else the
  newest allowed. ``python="X.Y"`` (``--python``) overrides the choice.
- Requirements: every one parsed with ``packaging`` and its environment marker evaluated for that
  interpreter (CPython on Linux, this machine's architecture, ``extra`` set when read from an extra);
  the ones that do not apply, and lines that cannot be read, are dropped with a note. References to the
  project's own extras (``.[test]``, ``name[test]``) bring in those extras.
- Environment layer (``steps``, shared by every task that installs alike): a venv that sees Debian's
  pytest, and the dependencies and test dependencies (extras, groups, requirements files, tox deps).
- Task layer (``task_steps``, run in the task image's build with the checkout at /work/repo): the project
  installed the way its build backend intends (``pip install -e`` with build isolation, PEP 660), so
  setuptools_scm's version file, backend-computed entry points and dependencies computed in ``setup.py``
  are what they are in a developer's checkout; setuptools_scm gets the version ``git describe`` gives at
  the task's commit (the snapshot has no history). When the editable install fails, a regular install,
  and the tests import the checkout first (``pythonpath``). Files the install generated in the tree are
  kept and laid over it at every reset (``envgen_verifiers.install``). Then the check: the project's
  top-level names import and its pytest plugins load, as the tests will run; a failing check fails
  the build with its output.
- Tests: pytest when the project uses it (configuration, conftest, dependency, imports) and for plain
  ``unittest`` suites too (pytest runs them and writes JUnit XML); ``unittest`` only for projects
  whose test extras pin a runner other than pytest. The test files to run are those pytest's
  ``python_files`` / ``testpaths`` settings (from the file pytest itself would read) make tests.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import json
import os
import platform
import re
import shlex
import subprocess
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ...errors import InputError
from ...sandbox.images import DEFAULT_SUITE, SUITES, VERIFIERS_DIR, WORK_DIR
from .lang import Language, Recipe, RepoView, Step
from .test_layout import TestLayout

VENV = "/opt/envgen/venv"
VENV_PYTHON = f"{VENV}/bin/python"
REPO_IN_IMAGE = f"{WORK_DIR}/repo"
PIP = f"{VENV_PYTHON} -m pip install --no-cache-dir --disable-pip-version-check --progress-bar off"
MIN_PIP = "pip>=21.3"
"""PEP 660 editable installs need pip 21.3 (older suites' venvs start with an older pip)."""
IMAGE_PROVIDES = {"pytest"}
"""Requirements the base image already satisfies when unpinned (Debian's python3-pytest)."""
TEST_EXTRAS = ("test", "tests", "testing")
"""Names of extras and dependency groups that hold test dependencies (else ``dev``)."""
TEST_REQUIREMENTS = ("requirements-test.txt", "requirements_test.txt", "test-requirements.txt",
                     "test_requirements.txt", "requirements-tests.txt", "requirements/test.txt",
                     "requirements/tests.txt", "requirements/testing.txt", "requirements-dev.txt",
                     "requirements_dev.txt", "dev-requirements.txt", "requirements/dev.txt")
CODE_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi", ".c", ".h", ".cpp", ".rs")
TEST_DIRS = {"tests", "test", "testing"}
DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
FALLBACK_VERSION = "0.1.dev0"
"""setuptools_scm's version when the clone has no tag to describe the commit with (and none is static)."""

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - 3.10 hosts
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None


# ---------------------------------------------------------------- interpreters and markers


def interpreters() -> dict[str, str]:
    """{suite: "X.Y"} of every base image suite (``envgen.sandbox.images.SUITES``)."""
    return {name: s.python for name, s in SUITES.items()}


def buildable(suite: str) -> bool:
    """Whether this machine can build the suite's base image: a suite moved to Debian's archive needs
    ENVGEN_DEBIAN_ARCHIVE_MIRROR (the regular mirrors no longer carry it)."""
    return not SUITES[suite].archived or bool(os.environ.get("ENVGEN_DEBIAN_ARCHIVE_MIRROR"))


def python_suite(python: str) -> str:
    """The suite whose interpreter is Python ``X.Y`` (``--python``); InputError listing what exists."""
    table = interpreters()
    want = ".".join(str(python).strip().split(".")[:2])
    pick = next((s for s, v in table.items() if v == want), None)
    if pick is None:
        have = ", ".join(f"{v} ({s})" for s, v in sorted(table.items(), key=lambda kv: Version(kv[1])))
        raise InputError(f"--python {python}: no base image has Python {want}; available: {have}")
    return pick


def _full_version(suite: str) -> str:
    """The suite's interpreter as X.Y.Z (a suite that records only X.Y counts as X.Y.0)."""
    s = SUITES[suite]
    full = getattr(s, "python_full", None) or s.python
    return full if full.count(".") >= 2 else f"{full}.0"


def marker_environment(suite: str) -> dict[str, str]:
    """PEP 508 marker values for the suite's interpreter in the image: CPython on Linux, this machine's
    architecture (images are built for the host)."""
    full = _full_version(suite)
    return {"implementation_name": "cpython", "implementation_version": full, "os_name": "posix",
            "platform_machine": platform.machine() or "x86_64", "platform_python_implementation": "CPython",
            "platform_release": "", "platform_system": "Linux", "platform_version": "",
            "python_full_version": full, "python_version": ".".join(full.split(".")[:2]), "sys_platform": "linux",
            "extra": ""}


def specifier(spec: str, what: str = "requires-python") -> SpecifierSet:
    """A PEP 440 specifier set; clauses old tools accepted (``>=3.6.*``) are read as their release."""
    try:
        return SpecifierSet(spec)
    except InvalidSpecifier:
        loose = re.sub(r"(~=|>=|<=|>|<)\s*([\d.]+)\.\*", r"\1\2", spec)
        try:
            return SpecifierSet(loose)
        except InvalidSpecifier:
            raise InputError(f"{what} {spec!r}: not a PEP 440 version specifier") from None


def satisfies(version: str, spec: str) -> bool:
    """Whether a Python release (``3.11.2``) satisfies a requires-python specifier set."""
    return specifier(spec).contains(version, prereleases=True)


def _poetry_python(spec: str) -> str:
    """Poetry's caret/tilde constraints as PEP 440 (``^3.8`` -> ``>=3.8,<4``)."""
    out = []
    for part in (p.strip() for p in spec.split(",")):
        rel = [int(x) for x in re.findall(r"\d+", part)]
        if part.startswith("^") and rel:
            out += [f">={part[1:]}", f"<{rel[0] + 1}" if rel[0] or len(rel) < 2 else f"<0.{rel[1] + 1}"]
        elif part.startswith("~") and not part.startswith("~=") and rel:
            out += [f">={part[1:]}", f"<{rel[0]}.{rel[1] + 1}" if len(rel) > 1 else f"<{rel[0] + 1}"]
        elif part and part != "*":
            out.append(part if re.match(r"^[<>=!~]", part) else f"=={part}")
    return ",".join(out)


def _poetry_dep(name: str, spec) -> str | None:
    if name.lower() == "python":
        return None
    version = spec.get("version", "*") if isinstance(spec, dict) else spec
    marker = spec.get("markers") if isinstance(spec, dict) else None
    pep = _poetry_python(version) if isinstance(version, str) else ""
    return f"{name}{pep}" + (f"; {marker}" if isinstance(marker, str) and marker else "")


# ---------------------------------------------------------------- metadata


@dataclass
class Dep:
    """One requirement as written, where it was read, and the extra it belongs to (for ``extra`` markers)."""

    text: str
    source: str
    extra: str = ""
    group: str = ""
    """The requirement source it belongs to (``requirements_test.txt``, ``tox.ini [testenv]``, the
    metadata's test extras): test sources are tried together, then one at a time."""


class _Meta:
    """What the recipe needs from a project's metadata, with a note for every source it read."""

    def __init__(self):
        self.name: str | None = None
        self.version: str | None = None
        self.requires_python: str | None = None
        self.classifier_versions: set[tuple[int, int]] = set()
        self.deps: list[Dep] = []
        self.test_deps: list[Dep] = []
        self.constraints: list[Dep] = []
        self.extras: dict[str, list[Dep]] = {}
        """Every extra the project declares statically: {normalized name: requirements}."""
        self.install_extras: list[str] = []
        """Extras installed with the project (the test extras, and own extras the test sources name)."""
        self.src_layout = False
        self.pytest_configured = False
        self.notes: list[str] = []


def _classifier_versions(classifiers) -> set[tuple[int, int]]:
    out = set()
    for c in classifiers or []:
        m = re.match(r"^Programming Language :: Python :: (\d+)\.(\d+)\s*$", str(c))
        if m:
            out.add((int(m.group(1)), int(m.group(2))))
    return out


def _lines(value: str) -> list[str]:
    """The non-empty, non-comment lines of a multi-line setup.cfg / tox value (markers stay on their line)."""
    return [v.strip() for v in (value or "").splitlines() if v.strip() and not v.strip().startswith("#")]


def _add_extras(meta: _Meta, extras: dict, source: str) -> None:
    """Record the project's extras and pick the test ones (``test``/``tests``/``testing``, else ``dev``)."""
    for name, vals in extras.items():
        items = _lines(vals) if isinstance(vals, str) else [v for v in vals or [] if isinstance(v, str)]
        key = canonicalize_name(str(name))
        meta.extras[key] = [Dep(v, f"{source} extra {name}", key) for v in items]
    names = [n for n in TEST_EXTRAS if n in meta.extras] or (["dev"] if "dev" in meta.extras else [])
    for n in names:
        if n not in meta.install_extras:
            meta.install_extras.append(n)
            meta.test_deps += meta.extras[n]
    if names:
        meta.notes.append(f"test extras: {', '.join(names)}")


def _read_pyproject(view: RepoView, meta: _Meta) -> dict:
    text = view.read("pyproject.toml")
    if text is None:
        return {}
    if _toml is None:
        raise InputError("reading pyproject.toml on Python 3.10 needs the tomli package: pip install tomli")
    try:
        doc = _toml.loads(text)
    except Exception as e:
        meta.notes.append(f"pyproject.toml is not valid TOML ({e}); ignored")
        return {}
    proj = doc.get("project") or {}
    dynamic = set(proj.get("dynamic") or [])
    meta.name = meta.name or proj.get("name")
    if isinstance(proj.get("version"), str):
        meta.version = proj["version"]
    if isinstance(proj.get("requires-python"), str):
        meta.requires_python = proj["requires-python"]
    meta.classifier_versions |= _classifier_versions(proj.get("classifiers"))
    meta.deps += [Dep(d, "pyproject.toml dependencies") for d in proj.get("dependencies") or [] if isinstance(d, str)]
    _add_extras(meta, proj.get("optional-dependencies") or {}, "pyproject.toml")
    if "dependencies" in dynamic:
        meta.notes.append("pyproject.toml declares dependencies dynamic: the build backend resolves them at install")
    _read_groups(doc.get("dependency-groups") or {}, meta)
    tool = doc.get("tool") or {}
    if "ini_options" in (tool.get("pytest") or {}):
        meta.pytest_configured = True
    where = (((tool.get("setuptools") or {}).get("packages") or {}) or {})
    if isinstance(where, dict) and "src" in ((where.get("find") or {}).get("where") or []):
        meta.src_layout = True
    poetry = tool.get("poetry") or {}
    if poetry:
        meta.name = meta.name or poetry.get("name")
        meta.version = meta.version or (poetry.get("version") if isinstance(poetry.get("version"), str) else None)
        deps = dict(poetry.get("dependencies") or {})
        if isinstance(deps.get("python"), str) and not meta.requires_python:
            meta.requires_python = _poetry_python(deps["python"])
        meta.deps += [Dep(d, "poetry dependencies") for d in (_poetry_dep(k, v) for k, v in deps.items()) if d]
        groups = dict((poetry.get("group") or {}))
        dev = dict(poetry.get("dev-dependencies") or {})
        for g in ("test", "tests", "dev"):
            dev.update((groups.get(g) or {}).get("dependencies") or {})
        meta.test_deps += [Dep(d, "poetry dev dependencies") for d in (_poetry_dep(k, v) for k, v in dev.items())
                           if d]
        meta.notes.append("read Poetry metadata (caret/tilde constraints converted)")
        if any(isinstance(p, dict) and p.get("from") == "src" for p in poetry.get("packages") or []):
            meta.src_layout = True
    meta.notes.append("read pyproject.toml")
    return doc


def _read_groups(groups: dict, meta: _Meta) -> None:
    """PEP 735 ``[dependency-groups]``: the test groups (else ``dev``), ``{include-group = ...}`` followed."""
    if not isinstance(groups, dict) or not groups:
        return
    table = {canonicalize_name(str(k)): v for k, v in groups.items()}
    names = [n for n in TEST_EXTRAS if n in table] or (["dev"] if "dev" in table else [])

    def expand(name: str, seen: tuple[str, ...]) -> list[Dep]:
        if name in seen:
            meta.notes.append(f"dependency group {name!r} includes itself; cycle ignored")
            return []
        if name not in table:
            meta.notes.append(f"dependency group {name!r} is included but not defined; ignored")
            return []
        out: list[Dep] = []
        for item in table[name] or []:
            if isinstance(item, str):
                out.append(Dep(item, f"[dependency-groups] {name}"))
            elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
                out += expand(canonicalize_name(item["include-group"]), (*seen, name))
        return out

    for n in names:
        meta.test_deps += expand(n, ())
    if names:
        meta.notes.append(f"dependency groups: {', '.join(names)}")


def _read_setup_cfg(view: RepoView, meta: _Meta) -> None:
    text = view.read("setup.cfg")
    if text is None:
        return
    cp = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        cp.read_string(text)
    except configparser.Error as e:
        meta.notes.append(f"setup.cfg does not parse ({type(e).__name__}); ignored")
        return
    if cp.has_section("metadata"):
        meta.name = meta.name or cp.get("metadata", "name", fallback=None)
        v = cp.get("metadata", "version", fallback=None)
        if v and not v.startswith(("attr:", "file:")):
            meta.version = meta.version or v
        meta.classifier_versions |= _classifier_versions(_lines(cp.get("metadata", "classifiers", fallback="")))
    if cp.has_section("options"):
        meta.requires_python = meta.requires_python or cp.get("options", "python_requires", fallback=None)
        meta.deps += [Dep(d, "setup.cfg install_requires") for d in
                      _lines(cp.get("options", "install_requires", fallback=""))]
        if "src" in cp.get("options", "package_dir", fallback="").replace(" ", "").split("="):
            meta.src_layout = True
        meta.test_deps += [Dep(d, "setup.cfg tests_require") for d in
                           _lines(cp.get("options", "tests_require", fallback=""))]
    if cp.has_section("options.extras_require"):
        _add_extras(meta, dict(cp.items("options.extras_require")), "setup.cfg")
    if cp.has_section("tool:pytest"):
        meta.pytest_configured = True
    meta.notes.append("read setup.cfg")


class _Unknown(Exception):
    """A ``setup.py`` expression whose value depends on running code."""


UNKNOWN = object()
"""A dict entry whose value depends on running code (the dict's other entries still count)."""


def _entry(node, names: dict):
    try:
        return _value(node, names)
    except _Unknown:
        return UNKNOWN


def _value(node, names: dict):
    """The value of a ``setup.py`` expression from literals and the module-level names assigned before it.
    Written by hand because no library evaluates ``setup.py`` without running it and ``ast.literal_eval``
    resolves no names: literals, names, ``dict(...)`` calls, ``{**a, "k": v}`` and ``+`` of lists/strings;
    anything else raises _Unknown (a dict entry that cannot be computed is UNKNOWN)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in names:
            return names[node.id]
        raise _Unknown(node.id)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_value(e, names) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                sub = _value(v, names)
                if not isinstance(sub, dict):
                    raise _Unknown("**")
                out.update(sub)
            else:
                out[_value(k, names)] = _entry(v, names)
        return out
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and len(node.args) <= 1:
        out = dict(_value(node.args[0], names)) if node.args else {}
        for kw in node.keywords:
            sub = _value(kw.value, names) if kw.arg is None else _entry(kw.value, names)
            if kw.arg is None:
                if not isinstance(sub, dict):
                    raise _Unknown("**")
                out.update(sub)
            else:
                out[kw.arg] = sub
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, names), _value(node.right, names)
        if type(left) is type(right) and isinstance(left, (list, tuple, str)):
            return left + right
    raise _Unknown(type(node).__name__)


def _module_names(tree: ast.Module, until: ast.AST) -> dict:
    """Names bound at module level (``if``/``try`` bodies included, in order) before ``until``, with the
    values _value can compute; a name later bound to something it cannot compute is forgotten."""
    names: dict = {}

    def walk(body) -> bool:
        for stmt in body:
            if stmt is until or any(n is until for n in ast.walk(stmt)):
                if isinstance(stmt, (ast.If, ast.Try)):
                    walk(getattr(stmt, "body", []))
                return True
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                try:
                    names[stmt.targets[0].id] = _value(stmt.value, names)
                except _Unknown:
                    names.pop(stmt.targets[0].id, None)
            elif isinstance(stmt, (ast.If, ast.Try)):
                for part in (stmt.body, getattr(stmt, "orelse", []), *(h.body for h in getattr(stmt, "handlers", []))):
                    if walk(part):
                        return True
        return False

    walk(tree.body)
    return names


def _setup_kwargs(tree: ast.Module, call: ast.Call, meta: _Meta) -> dict:
    """``setup()``'s keyword arguments that can be read statically: literals, names assigned earlier,
    ``**opts`` / ``**metadata`` dicts built with ``dict(...)`` or a literal."""
    names = _module_names(tree, call)
    out: dict = {}
    for kw in call.keywords:
        try:
            val = _value(kw.value, names)
        except _Unknown:
            if kw.arg is None:
                meta.notes.append("setup.py: a **dict of setup() arguments is computed; not read")
            elif kw.arg == "install_requires":
                meta.notes.append("setup.py computes install_requires: the build backend resolves them at install")
            continue
        if kw.arg is None:
            if isinstance(val, dict):
                out.update({k: v for k, v in val.items() if isinstance(k, str)})
        else:
            out[kw.arg] = val
    if out.get("install_requires") is UNKNOWN:
        meta.notes.append("setup.py computes install_requires: the build backend resolves them at install")
    return out


def _read_setup_py(view: RepoView, meta: _Meta) -> None:
    text = view.read("setup.py")
    if text is None:
        return
    try:
        tree = ast.parse(text)
    except SyntaxError:
        meta.notes.append("setup.py does not parse; ignored")
        return
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "setup"):
            continue
        for key, val in _setup_kwargs(tree, node, meta).items():
            if key == "name" and isinstance(val, str):
                meta.name = meta.name or val
            elif key == "version" and isinstance(val, str):
                meta.version = meta.version or val
            elif key == "python_requires" and isinstance(val, str):
                meta.requires_python = meta.requires_python or val
            elif key == "install_requires":
                if isinstance(val, (list, tuple)):
                    meta.deps += [Dep(v, "setup.py install_requires") for v in val if isinstance(v, str)]
                elif isinstance(val, str):
                    meta.deps += [Dep(v, "setup.py install_requires") for v in _lines(val)]
            elif key == "extras_require" and isinstance(val, dict):
                _add_extras(meta, val, "setup.py")
            elif key == "tests_require" and isinstance(val, (list, tuple)):
                meta.test_deps += [Dep(v, "setup.py tests_require") for v in val if isinstance(v, str)]
            elif key == "classifiers" and isinstance(val, (list, tuple)):
                meta.classifier_versions |= _classifier_versions(val)
            elif key == "package_dir" and isinstance(val, dict) and val.get("") == "src":
                meta.src_layout = True
        meta.notes.append("read setup.py (setup() arguments from literals, earlier assignments and **dicts)")
        return


_IGNORED_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--pre", "--no-binary",
                    "--only-binary", "--prefer-binary", "--trusted-host", "--require-hashes", "--use-feature",
                    "--no-index", "--no-deps")


def _requirement_lines(text: str) -> list[str]:
    """Logical lines of a requirements file: continuations joined, comments and ``--hash`` options cut."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        line = (cur + line).strip()
        cur = ""
        line = re.split(r"\s--hash[=\s]", " " + line, maxsplit=1)[0].strip()
        if line:
            out.append(line)
    return out


def _own_extras(line: str) -> list[str] | None:
    """The extras of a reference to the project itself (``.``, ``.[test]``, ``-e .[a,b]``), else None."""
    m = re.fullmatch(r"(?:-e\s+|--editable[=\s]+)?(?:\.|\./|file:\.?/?)(?:\[([^\]]*)\])?", line.strip())
    if not m:
        return None
    return [canonicalize_name(x) for x in (m.group(1) or "").split(",") if x.strip()]


def _include_or_own(view: RepoView, line: str, base: str, where: str, seen: set[str], meta: _Meta) -> list[Dep] | None:
    """A requirements line that is not a requirement: ``-r FILE`` (its requirements returned), ``-c FILE``
    (its pins become constraints) or a reference to the project's own extras; None for any other line."""
    m = re.match(r"^(-r|--requirement|-c|--constraint)(?:\s*=\s*|\s+|(?=[^\s-]))(.+)$", line)
    if m:
        inc = m.group(2).strip()
        deps = _read_requirements(view, inc if inc.startswith("/") else _normpath(base + inc), seen, meta)
        if m.group(1) in ("-c", "--constraint"):
            meta.constraints += deps
            return []
        return deps
    own = _own_extras(line)
    if own is not None:
        _use_own_extras(meta, own, f"{where}: {line}")
        return []
    return None


def _read_requirements(view: RepoView, path: str, seen: set[str], meta: _Meta) -> list[Dep]:
    """Requirements of a requirements file, ``-r`` includes followed, ``-c`` constraints collected, the
    project's own extras (``.[test]``) noted, options that pick an index or a format noted and ignored."""
    if path in seen:
        return []
    seen.add(path)
    text = view.read(path)
    if text is None:
        meta.notes.append(f"{path}: referenced but missing; ignored")
        return []
    base = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
    out: list[Dep] = []
    for line in _requirement_lines(text):
        included = _include_or_own(view, line, base, path, seen, meta)
        if included is not None:
            out += included
            continue
        if line.startswith("-"):
            opt = re.split(r"[\s=]", line, maxsplit=1)[0]
            if opt in _IGNORED_OPTIONS:
                meta.notes.append(f"{path}: {opt} ignored (packages come from the registry envgen is configured with)")
            elif opt in ("-e", "--editable"):
                meta.notes.append(f"{path}: editable requirement {line[:80]!r} dropped (not from the registry)")
            else:
                meta.notes.append(f"{path}: option {line[:80]!r} ignored")
            continue
        out.append(Dep(line, path))
    return out


def _normpath(path: str) -> str:
    parts: list[str] = []
    for p in path.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            if parts:
                parts.pop()
            continue
        parts.append(p)
    return "/".join(parts)


def _use_own_extras(meta: _Meta, extras: list[str], where: str) -> None:
    for x in extras:
        if x not in meta.install_extras:
            meta.install_extras.append(x)
            meta.test_deps += meta.extras.get(x, [])
    meta.notes.append(f"{where}: the project itself" + (f" with extras {', '.join(extras)}" if extras else ""))


def _read_tox(view: RepoView, meta: _Meta, doc: dict) -> None:
    """tox's ``[testenv]``: ``deps`` (``-r`` files and ``{[section]key}`` references followed; lines for
    some factors only dropped) and ``extras``."""
    text = view.read("tox.ini")
    where = "tox.ini"
    if text is None:
        legacy = ((doc.get("tool") or {}).get("tox") or {}).get("legacy_tox_ini")
        text, where = (legacy, "pyproject.toml legacy_tox_ini") if isinstance(legacy, str) else (None, "")
    if not text:
        return
    cp = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        cp.read_string(text)
    except configparser.Error as e:
        meta.notes.append(f"{where} does not parse ({type(e).__name__}); ignored")
        return
    if not cp.has_section("testenv"):
        return

    def subst(value: str, depth: int = 0) -> str:
        def ref(m):
            sec, key = m.group(1), m.group(2)
            if depth > 5 or not cp.has_option(sec, key):
                return m.group(0)
            return subst(cp.get(sec, key), depth + 1)
        value = re.sub(r"\{\[([^\]]+)\]([^}]+)\}", ref, value)
        return value.replace("{toxinidir}/", "").replace("{toxinidir}", ".")

    deps: list[Dep] = []
    for line in _lines(subst(cp.get("testenv", "deps", fallback=""))):
        if re.match(r"^!?[\w.-]+(?:\s*,\s*!?[\w.-]+)*\s*:\s*\S", line) and "://" not in line.split(":", 1)[0]:
            meta.notes.append(f"{where}: factor-conditional dep {line[:80]!r} dropped")
            continue
        if "{" in line:
            meta.notes.append(f"{where}: dep {line[:80]!r} uses a tox substitution envgen does not expand; dropped")
            continue
        included = _include_or_own(view, line, "", where, set(), meta)
        if included is not None:
            deps += included
            continue
        deps.append(Dep(line, f"{where} [testenv] deps"))
    meta.test_deps += deps
    extras = [canonicalize_name(x) for x in re.split(r"[\s,]+", cp.get("testenv", "extras", fallback="")) if x]
    if extras:
        _use_own_extras(meta, extras, f"{where} [testenv] extras")
    meta.notes.append(f"read {where} [testenv] ({len(deps)} dep line(s))")


def read_metadata(view: RepoView) -> _Meta:
    meta = _Meta()

    def tag(group: str) -> None:
        for d in meta.test_deps:
            d.group = d.group or group

    doc = _read_pyproject(view, meta)
    _read_setup_cfg(view, meta)
    _read_setup_py(view, meta)
    tag("the metadata's test extras")
    seen: set[str] = set()
    if not meta.deps and view.exists("requirements.txt"):
        meta.deps += _read_requirements(view, "requirements.txt", seen, meta)
    for path in TEST_REQUIREMENTS:
        if view.exists(path):
            meta.test_deps += _read_requirements(view, path, seen, meta)
            meta.notes.append(f"read {path}")
            tag(path)
            break
    _read_tox(view, meta, doc)
    tag("tox.ini [testenv]")
    if not meta.src_layout and any(re.match(r"^src/[^/]+/__init__\.py$", f) for f in view.files):
        meta.src_layout = True
    if not meta.pytest_configured:
        meta.pytest_configured = pytest_settings(view)["source"] is not None or \
            any(f.rsplit("/", 1)[-1] == "conftest.py" for f in view.files)
    return meta


# ---------------------------------------------------------------- requirements for the target interpreter


def resolve_requirements(meta: _Meta, env: dict[str, str], groups=None) -> tuple[list[str], list[str], list[str]]:
    """(requirements, constraints, notes) for the interpreter ``env`` describes: markers evaluated, the
    project's own extras expanded, URL requirements taken from the registry by name. ``groups``: the test
    requirement sources to take (None: all)."""
    own = canonicalize_name(meta.name) if meta.name else None
    notes: list[str] = []
    out: list[str] = []
    expanded: set[str] = set()

    def one(dep: Dep, sink: list[str]) -> None:
        try:
            req = Requirement(dep.text)
        except InvalidRequirement as e:
            notes.append(f"{dep.source}: cannot read {dep.text[:80]!r} ({str(e).splitlines()[0][:120]}); skipped")
            return
        if req.marker is not None:
            try:
                applies = req.marker.evaluate({**env, "extra": dep.extra})
            except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName) as e:
                notes.append(f"{dep.source}: marker of {dep.text[:80]!r} cannot be evaluated ({e}); skipped")
                return
            if not applies:
                notes.append(f"{dep.source}: {dep.text} does not apply to Python {env['python_full_version']}; "
                             "skipped")
                return
        name = canonicalize_name(req.name)
        if own and name == own:
            for x in sorted(req.extras):
                key = canonicalize_name(x)
                if key in expanded:
                    continue
                expanded.add(key)
                if key not in meta.install_extras:
                    meta.install_extras.append(key)
                for d in meta.extras.get(key, []):
                    one(d, sink)
            return
        if req.url:
            if req.url.startswith("file:") or "+" in req.url.split(":", 1)[0]:
                notes.append(f"{dep.source}: {req.name} @ {req.url[:80]} is not on the registry; installed by name")
            else:
                notes.append(f"{dep.source}: {req.name} @ URL installed from the registry by name")
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        text = f"{req.name}{extras}{req.specifier}"
        if name in IMAGE_PROVIDES and not req.specifier and not req.extras and sink is out:
            return  # unpinned and already in the image
        if text not in sink:
            sink.append(text)

    for dep in meta.deps + [d for d in meta.test_deps if groups is None or d.group in groups]:
        one(dep, out)
    constraints: list[str] = []
    for dep in meta.constraints:
        one(dep, constraints)
    return out, constraints, notes


# ---------------------------------------------------------------- which requirements, as of when


TOOLS = frozenset({
    "mypy", "black", "flake8", "pylint", "isort", "pre-commit", "twine", "sphinx", "ruff", "bandit", "pycodestyle",
    "pydocstyle", "pyflakes", "autopep8", "yapf", "doc8", "codecov", "coveralls", "tox", "nox", "tbump",
    "bump2version", "bumpversion", "check-manifest", "readme-renderer", "towncrier", "pip-tools", "yamllint",
    "pyupgrade", "blacken-docs", "restructuredtext-lint", "diff-cover", "pyroma", "commitizen", "pyright",
    "pytype", "pylint-plugin-utils", "pre-commit-hooks", "safety", "vulture", "darglint", "mkdocs", "flit",
})
TOOL_PREFIXES = ("types-", "flake8-", "sphinx-", "sphinxcontrib-", "mkdocs-", "pylint-", "mypy-")
"""Lint, format, type-stub, documentation and release tools: dropped from the dependencies unless the tests
show they use them (an import, or the tool's name as a string, e.g. a subprocess command)."""


def _is_tool(name: str) -> bool:
    n = canonicalize_name(name)
    return n in TOOLS or n.startswith(TOOL_PREFIXES) or n.endswith("-stubs")


def _read_many(view, paths: list[str]) -> dict[str, str]:
    """Texts of many files at the view's commit: one ``git cat-file --batch`` for a real clone (a
    ``git show`` per file is slow on repositories with thousands of tests), ``view.read`` otherwise."""
    if not isinstance(view, RepoView) or not paths:
        return {p: t for p in paths if (t := view.read(p)) is not None}
    spec = "".join(f"{view.commit}:{p}\n" for p in paths).encode()
    out = subprocess.run(["git", "-C", str(view.repo), "cat-file", "--batch"], input=spec, capture_output=True,
                         timeout=300, check=False)
    data, texts, i = out.stdout, {}, 0
    for p in paths:
        nl = data.find(b"\n", i)
        if nl < 0:
            break
        head = data[i:nl].split()
        i = nl + 1
        if len(head) < 3 or head[1] != b"blob":
            continue
        size = int(head[2])
        texts[p] = data[i:i + size].decode("utf-8", "replace")
        i += size + 1
    return texts


def test_evidence(view: RepoView, lang: Language) -> set[str]:
    """What the test files and conftest.py files use: top-level names they import, and the first word of
    every string constant (a command such as ``"mypy"`` run in a subprocess)."""
    paths = [f for f in view.files if f.endswith(".py") and lang.is_test_path(f)]
    used: set[str] = set()
    for text in _read_many(view, paths).values():
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            used |= set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", text, re.MULTILINE))
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                used.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                used.add(node.module.split(".")[0])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip():
                used.add(node.value.split()[0])
    return used


def drop_tools(reqs: list[str], used: set[str]) -> tuple[list[str], list[str]]:
    """(kept, dropped): lint/format/type-stub/release tools no test uses are dropped."""
    kept, dropped = [], []
    for r in reqs:
        name = re.split(r"[\s\[<>=!~;@]", r, maxsplit=1)[0]
        forms = {name, name.lower(), canonicalize_name(name), canonicalize_name(name).replace("-", "_")}
        (dropped if _is_tool(name) and not forms & used else kept).append(r)
    return kept, dropped


def cutoff(repo, commit: str) -> str | None:
    """The dependency cut-off for a commit: the start of the UTC day after its committer date (ISO 8601),
    so commits of one day share an environment; None when git cannot say."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "show", "-s", "--format=%ct", commit], capture_output=True,
                             text=True, timeout=60, check=False)
        when = datetime.fromtimestamp(int(out.stdout.strip()), tz=timezone.utc)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    day = datetime(when.year, when.month, when.day, tzinfo=timezone.utc) + timedelta(days=1)
    return day.strftime("%Y-%m-%dT%H:%M:%SZ")


def dependency_plan(meta: _Meta, env: dict[str, str], used: set[str] | None, before: str | None
                    ) -> tuple[dict, list[str]]:
    """(plan for ``envgen_verifiers.install deps``, notes): the requirement sets to try in order (every
    test source together, each alone, none), tools no test uses dropped, identical sets tried once."""
    order: list[str] = []
    for d in meta.test_deps:
        if d.group not in order:
            order.append(d.group)
    singles = sorted(order, key=lambda g: (g == "the metadata's test extras", g.startswith("tox")))
    choices: list[tuple[str, set[str] | None]] = [(" + ".join(order) if order else "runtime requirements", None)]
    if len(order) > 1:
        choices += [(g, {g}) for g in singles]
    if order:
        choices.append(("runtime requirements only", set()))
    notes: list[str] = []
    alternatives: list[dict] = []
    constraints: list[str] = []
    dropped_all: list[str] = []
    for label, groups in choices:
        reqs, cons, req_notes = resolve_requirements(meta, env, groups)
        if groups is None:
            notes += req_notes
            constraints = cons
        if used is not None:
            reqs, dropped = drop_tools(reqs, used)
            dropped_all += [d for d in dropped if d not in dropped_all]
        reqs = sorted(reqs)
        if reqs and all(a["requirements"] != reqs for a in alternatives):
            alternatives.append({"label": label, "requirements": reqs})
    if dropped_all:
        notes.append(f"dropped {len(dropped_all)} lint/type-stub/release tool(s) no test imports: "
                     + ", ".join(dropped_all))
    if alternatives:
        notes.append("requirement sets, tried in order until one installs: " + "; ".join(
            f"{i}. {a['label']} ({len(a['requirements'])})" for i, a in enumerate(alternatives, 1)))
        notes.append("dependencies as of " + (f"{before} (the day after the commit's committer date): pip "
                     "--uploaded-prior-to, else each requirement capped at its newest release before then "
                     "(the index's upload times)" if before else "today (the commit's date is unknown)"))
    if constraints:
        notes.append(f"{len(constraints)} constraint(s) applied")
    plan = {"before": before, "constraints": constraints, "alternatives": alternatives,
            "pip": ["--no-cache-dir", "--disable-pip-version-check", "--progress-bar", "off"]}
    return plan, notes


# ---------------------------------------------------------------- pytest's collection settings


def _ini_list(value) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError:
            return value.split()
    return []


def pytest_settings(view: RepoView) -> dict:
    """pytest's ``python_files`` and ``testpaths`` from the configuration file pytest would read at the
    repository root: pytest.ini / .pytest.ini (even without a [pytest] section), pyproject.toml with
    [tool.pytest.ini_options], tox.ini with [pytest], setup.cfg with [tool:pytest]. ``source`` is that
    file (None: pytest's defaults)."""
    out = {"python_files": [], "testpaths": [], "source": None}

    def from_ini(path: str, section: str, required: bool) -> bool:
        text = view.read(path)
        if text is None:
            return False
        cp = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            cp.read_string(text)
        except configparser.Error:
            return False
        if not cp.has_section(section):
            if required:
                return False
            out["source"] = path
            return True
        out.update(python_files=_ini_list(cp.get(section, "python_files", fallback="")),
                   testpaths=_ini_list(cp.get(section, "testpaths", fallback="")), source=path)
        return True

    if from_ini("pytest.ini", "pytest", False) or from_ini(".pytest.ini", "pytest", False):
        return out
    text = view.read("pyproject.toml")
    if text is not None and _toml is not None:
        try:
            ini = ((_toml.loads(text).get("tool") or {}).get("pytest") or {}).get("ini_options")
        except Exception:
            ini = None
        if isinstance(ini, dict):
            out.update(python_files=_ini_list(ini.get("python_files")), testpaths=_ini_list(ini.get("testpaths")),
                       source="pyproject.toml")
            return out
    if from_ini("tox.ini", "pytest", True) or from_ini("setup.cfg", "tool:pytest", True):
        return out
    return out


def matches_python_files(path: str, patterns) -> bool:
    """pytest's ``fnmatch_ex``: a pattern without ``/`` matches the file name, one with ``/`` the path
    (pytest matches absolute paths, so the pattern may match any trailing part)."""
    name = path.rsplit("/", 1)[-1]
    for pat in patterns:
        if "/" not in pat:
            if fnmatch.fnmatch(name, pat):
                return True
        elif fnmatch.fnmatch("/" + path, pat if pat.startswith("/") else "*/" + pat):
            return True
    return False


# ---------------------------------------------------------------- the project's version for setuptools_scm


def describe_version(repo, commit: str) -> str | None:
    """The version setuptools_scm would give the commit in the real clone: the nearest tag's, with the
    next release's ``.devN`` when the commit is N commits past it; None without a usable tag."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "describe", "--tags", "--long", "--match", "*[0-9]*", commit],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.match(r"^(.*)-(\d+)-g[0-9a-f]+$", out.stdout.strip()) if out.returncode == 0 else None
    if not m:
        return None
    tag, distance = m.group(1), int(m.group(2))
    found = re.search(r"\d+(?:\.\d+)*(?:[.-]?(?:a|b|rc|alpha|beta|post|dev)\.?\d*)*", tag)
    try:
        v = Version(found.group(0)) if found else None
    except InvalidVersion:
        v = None
    if v is None:
        return None
    if distance == 0:
        return str(v)
    release = list(v.release)
    release[-1] += 1
    return ".".join(map(str, release)) + f".dev{distance}"


def scm_env(name: str | None, version: str) -> dict[str, str]:
    """setuptools_scm's pretend version for the project (by name when known: a dependency built from source
    during the install keeps its own version), else for every setuptools_scm use of the install."""
    if name:
        return {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_" + canonicalize_name(name).replace("-", "_").upper(): version}
    return {"SETUPTOOLS_SCM_PRETEND_VERSION": version}


# ---------------------------------------------------------------- the language


class Python(Language):
    name = "python"

    def is_test_path(self, path: str) -> bool:
        parts = path.split("/")
        name = parts[-1]
        if any(p in TEST_DIRS for p in parts[:-1]):
            return True
        return (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py") \
            or name in ("conftest.py", "tests.py", "test.py")

    def is_code_path(self, path: str) -> bool:
        return path.endswith(CODE_SUFFIXES) and not self.is_test_path(path)

    def configured_tests(self, view: RepoView) -> TestLayout | None:
        """pytest's ``python_files`` (within ``testpaths`` when set) and the conftest.py files there."""
        s = pytest_settings(view)
        if not s["python_files"] and not s["testpaths"]:
            return None
        roots = tuple(r for r in (_normpath(t) for t in s["testpaths"]) if r not in ("", "."))
        return TestLayout(s["source"], globs=(*(s["python_files"] or DEFAULT_PYTHON_FILES), "conftest.py"),
                          roots=roots)

    def detect(self, view: RepoView) -> bool:
        return any(view.exists(f) for f in ("pyproject.toml", "setup.py", "setup.cfg")) or \
            any(f.endswith(".py") for f in view.files)

    def runnable_tests(self, paths: list[str], view_after: set[str], view: RepoView | None = None) -> list[str]:
        """The test patch's files pytest would collect by the project's ``python_files`` and ``testpaths``
        (read from ``view``; pytest's defaults without one)."""
        settings = pytest_settings(view) if view is not None else {"python_files": [], "testpaths": []}
        patterns = settings["python_files"] or list(DEFAULT_PYTHON_FILES)
        roots = [_normpath(t) for t in settings["testpaths"]]
        out = []
        for p in paths:
            name = p.rsplit("/", 1)[-1]
            if p not in view_after or not p.endswith(".py") or name in ("conftest.py", "__init__.py"):
                continue
            if roots and not any(p == r or p.startswith(r + "/") or fnmatch.fnmatch(p, r + "/*") for r in roots):
                continue
            if matches_python_files(p, patterns):
                out.append(p)
        return out

    def choose_suite(self, meta: _Meta, python: str | None = None) -> tuple[str, str]:
        """(suite, why) for the project's requires-python and classifiers, or the ``python`` asked for.
        Only suites this machine can build count (``buildable``); when the version the metadata names
        lives only in one it cannot, the nearest buildable one is taken and the note says so."""
        table = interpreters()
        have = ", ".join(f"{v} ({s})" for s, v in sorted(table.items(), key=lambda kv: Version(kv[1])))
        if python:
            pick = python_suite(python)
            why = f"Python {table[pick]}: asked for"
            if meta.requires_python and not satisfies(_full_version(pick), meta.requires_python):
                why += f" (outside the project's requires-python {meta.requires_python!r})"
            return pick, why
        by_new = sorted(table, key=lambda s: Version(_full_version(s)), reverse=True)
        can = [s for s in by_new if buildable(s)]
        if not can:
            raise InputError(f"no base image suite can be built here (available: {have}): configure a Debian mirror")

        def xy(s: str) -> tuple[int, ...]:
            return Version(_full_version(s)).release[:2]

        allowed = [s for s in by_new if not meta.requires_python or satisfies(_full_version(s), meta.requires_python)]
        if not allowed:
            raise InputError(f"requires-python {meta.requires_python!r}: no base image has a matching Python "
                              f"(available: {have}); pass --python X.Y to use one anyway")
        req = f"requires-python {meta.requires_python!r}" if meta.requires_python else "no requires-python"
        named = [s for s in allowed if xy(s) in meta.classifier_versions]
        if named:
            pick, why = named[0], f"newest allowed by {req} that the classifiers name"
        elif meta.classifier_versions:
            top = max(meta.classifier_versions)
            below = [s for s in allowed if xy(s) <= top]
            pick = below[0] if below else allowed[-1]
            why = f"closest to the classifiers' newest {top[0]}.{top[1]} ({req})"
        else:
            pick = DEFAULT_SUITE if DEFAULT_SUITE in allowed else allowed[0]
            why = f"default choice allowed by {req}"
        if pick in can:
            return pick, f"Python {table[pick]}: {why}"
        # the choice lives in a suite this machine cannot build: the nearest one it can (ties: the newer),
        # preferring those requires-python allows
        want = xy(pick)
        pool = [s for s in can if s in allowed] or can
        near = min(pool, key=lambda s: (abs((xy(s)[0] - want[0]) * 100 + xy(s)[1] - want[1]), -xy(s)[1]))
        outside = "" if near in allowed else f", outside {req}"
        return near, (f"Python {table[near]}: the nearest this machine can build to Python {table[pick]} ({why}; "
                      f"Python {table[pick]} needs archived Debian {pick}: set ENVGEN_DEBIAN_ARCHIVE_MIRROR to "
                      f"build it{outside})")

    def recipe(self, view: RepoView, *, python: str | None = None) -> Recipe:
        meta = read_metadata(view)
        suite, why = self.choose_suite(meta, python)
        notes = [why, *meta.notes]
        before = cutoff(view.repo, view.commit)
        used = test_evidence(view, self) if any(_is_tool(re.split(r"[\s\[<>=!~;@]", d.text.strip(), maxsplit=1)[0])
                                                for d in meta.test_deps + meta.deps if d.text.strip()) else None
        plan, plan_notes = dependency_plan(meta, marker_environment(suite), used, before)
        notes += plan_notes
        steps = [Step("venv", f"python3 -m venv --system-site-packages {VENV} && {PIP} {shlex.quote(MIN_PIP)}")]
        if plan["alternatives"]:
            kit = f"PYTHONPATH={VERIFIERS_DIR} python3 -m envgen_verifiers.install"
            steps.append(Step("dependencies", f"{kit} deps --python {VENV_PYTHON} --plan "
                                              + shlex.quote(json.dumps(plan, separators=(",", ":")))))
        else:
            notes.append("no dependencies to install")
        root = "src" if meta.src_layout else ""
        framework = "pytest"
        test_names = {canonicalize_name(re.split(r"[\s\[<>=!~;@]", d.text.strip(), maxsplit=1)[0])
                      for d in meta.test_deps if d.text.strip()}
        if not meta.pytest_configured and "pytest" not in test_names and test_names & {"nose2", "green", "unittest2"}:
            framework = "unittest"
        notes.append(f"tests run with {framework}" + (" (configured)" if meta.pytest_configured else ""))
        task_steps = self._task_steps(view, meta, root, framework, notes)
        return Recipe(language=self.name, suite=suite, toolchains=("python",), steps=steps, framework=framework,
                      python=VENV_PYTHON, pythonpath=[root or "."], notes=notes, task_steps=task_steps)

    def _task_steps(self, view: RepoView, meta: _Meta, root: str, framework: str, notes: list[str]) -> list[Step]:
        """Install the project as its build backend intends, keep what that generates, check it imports."""
        version = describe_version(view.repo, view.commit)
        if version:
            notes.append(f"setuptools_scm version {version} (git describe at the commit)")
        else:
            version = meta.version or FALLBACK_VERSION
            notes.append(f"setuptools_scm version {version} (no tag describes the commit)")
        env = " ".join(f"{k}={v}" for k, v in scm_env(meta.name, version).items())
        extras = [x for x in meta.install_extras if re.fullmatch(r"[a-z0-9-]+", x)]
        target = shlex.quote(REPO_IN_IMAGE + (f"[{','.join(extras)}]" if extras else ""))
        install = (f"export {env} && {{ {PIP} -e {target} || {{ echo 'envgen: the editable install failed; "
                   f"installing the project as a regular package (the tests import the checkout first)'; "
                   f"{PIP} {target}; }}; }}")
        kit = f"PYTHONPATH={VERIFIERS_DIR} python3 -m envgen_verifiers.install"
        check = (f"{kit} check {REPO_IN_IMAGE} --python {VENV_PYTHON} --framework {framework} "
                 f"--pythonpath {shlex.quote(root or '.')}")
        notes.append("the project installed by its build backend (pip install -e" +
                     (f", extras {', '.join(extras)}" if extras else "") + "), then imported as the tests will")
        return [Step("install", install), Step("generated", f"{kit} capture {REPO_IN_IMAGE}"), Step("check", check)]
