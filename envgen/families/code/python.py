"""The Python recipe: interpreter from the project's metadata, dependencies and test extras, test runner.

Metadata is read statically at the task's commit (``pyproject.toml``, ``setup.cfg``, literal arguments
of ``setup()`` in ``setup.py``, requirements files), never by executing project code on the host.

- Interpreter: the base image suites give Python 3.9 (bullseye), 3.11 (bookworm) and 3.13 (trixie);
  the recipe keeps those allowed by ``requires-python`` and prefers the newest one the trove
  classifiers name, else bookworm's, else the newest allowed.
- Install (each step an image layer whose exit code is recorded, never masked): a venv that sees
  Debian's pytest, the project's dependencies and test extras from PyPI when it declares any, and the
  package itself in editable form: a ``.pth`` to the working tree at /work/repo (plus its metadata
  when name and version are static, with the entry points it declares statically, as ``pip install
  -e`` registers them: a project's own pytest plugin is then one the environment provides), so the
  agent's edits are what the tests import.
- Tests: pytest when the project uses it (configuration, conftest, dependency, imports) and for plain
  ``unittest`` suites too (pytest runs them and writes JUnit XML); ``unittest`` only for projects
  whose test extras pin a runner other than pytest.
"""

from __future__ import annotations

import ast
import configparser
import json
import re
import shlex

from ...errors import InputError
from ...sandbox.images import SUITES, WORK_DIR
from .lang import Language, Recipe, RepoView, Step

VENV = "/opt/envgen/venv"
VENV_PYTHON = f"{VENV}/bin/python"
REPO_IN_IMAGE = f"{WORK_DIR}/repo"
SUITE_PYTHON = {"bullseye": (3, 9, 2), "bookworm": (3, 11, 2), "trixie": (3, 13, 5)}
"""Exact interpreter versions of the Debian suites (SUITES gives major.minor)."""
DEFAULT_SUITE = "bookworm"
IMAGE_PROVIDES = {"pytest"}
"""Requirements the base image already satisfies when unpinned (Debian's python3-pytest)."""
TEST_EXTRAS = ("test", "tests", "testing")
TEST_REQUIREMENTS = ("requirements-test.txt", "requirements_test.txt", "test-requirements.txt",
                     "test_requirements.txt", "requirements-tests.txt", "requirements/test.txt",
                     "requirements/tests.txt", "requirements/testing.txt", "requirements-dev.txt",
                     "requirements_dev.txt", "dev-requirements.txt", "requirements/dev.txt")
CODE_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi", ".c", ".h", ".cpp", ".rs")
TEST_DIRS = {"tests", "test", "testing"}

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - 3.10 hosts
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None


# ---------------------------------------------------------------- version specifiers


def _release(text: str) -> tuple[int, ...]:
    nums = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        nums.append(int(m.group()))
    return tuple(nums)


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a > b) - (a < b)


def satisfies(version: tuple[int, ...], spec: str) -> bool:
    """Whether a Python release satisfies a PEP 440 specifier set (the subset requires-python uses)."""
    for clause in (c.strip() for c in spec.split(",")):
        if not clause:
            continue
        m = re.match(r"^(~=|===|==|!=|<=|>=|<|>)\s*([\w.*+!-]+)$", clause)
        if not m:
            raise InputError(f"requires-python {spec!r}: cannot read the clause {clause!r}")
        op, ver = m.groups()
        if ver.endswith(".*") and op in ("==", "!="):
            prefix = _release(ver[:-2])
            match = version[:len(prefix)] == prefix
            if match != (op == "=="):
                return False
            continue
        rel = _release(ver)
        c = _cmp(version, rel)
        if op == "~=":
            upper = rel[:-1][:-1] + (rel[:-1][-1] + 1,) if len(rel) > 1 else (rel[0] + 1,)
            ok = c >= 0 and _cmp(version, upper) < 0
        else:
            ok = {"==": c == 0, "===": c == 0, "!=": c != 0, "<=": c <= 0, ">=": c >= 0, "<": c < 0, ">": c > 0}[op]
        if not ok:
            return False
    return True


def _poetry_python(spec: str) -> str:
    """Poetry's caret/tilde constraints as PEP 440 (``^3.8`` -> ``>=3.8,<4``)."""
    out = []
    for part in (p.strip() for p in spec.split(",")):
        if part.startswith("^"):
            rel = _release(part[1:])
            out += [f">={part[1:]}", f"<{rel[0] + 1}" if rel[0] else f"<0.{rel[1] + 1}"]
        elif part.startswith("~") and not part.startswith("~="):
            rel = _release(part[1:])
            out += [f">={part[1:]}", f"<{rel[0]}.{rel[1] + 1}" if len(rel) > 1 else f"<{rel[0] + 1}"]
        elif part and part != "*":
            out.append(part if re.match(r"^[<>=!~]", part) else f"=={part}")
    return ",".join(out)


def _poetry_dep(name: str, spec) -> str | None:
    if name.lower() == "python":
        return None
    version = spec.get("version", "*") if isinstance(spec, dict) else spec
    if not isinstance(version, str):
        return name
    pep = _poetry_python(version)
    return f"{name}{pep}" if pep else name


# ---------------------------------------------------------------- metadata


class _Meta:
    """What the recipe needs from a project's metadata, with a note for every source it read."""

    def __init__(self):
        self.name: str | None = None
        self.version: str | None = None
        self.requires_python: str | None = None
        self.classifier_versions: set[tuple[int, int]] = set()
        self.deps: list[str] = []
        self.test_deps: list[str] = []
        self.src_layout = False
        self.pytest_configured = False
        self.entry_points: dict[str, dict[str, str]] = {}
        """{group: {name: "module:attr"}} declared statically (pyproject, setup.cfg, literal setup())."""
        self.notes: list[str] = []


def _classifier_versions(classifiers) -> set[tuple[int, int]]:
    out = set()
    for c in classifiers or []:
        m = re.match(r"^Programming Language :: Python :: (\d+)\.(\d+)\s*$", str(c))
        if m:
            out.add((int(m.group(1)), int(m.group(2))))
    return out


def _lines(value: str) -> list[str]:
    return [v.strip() for v in re.split(r"[\n;]", value or "") if v.strip() and not v.strip().startswith("#")]


def _read_pyproject(view: RepoView, meta: _Meta) -> None:
    text = view.read("pyproject.toml")
    if text is None:
        return
    if _toml is None:
        raise InputError("reading pyproject.toml on Python 3.10 needs the tomli package: pip install tomli")
    try:
        doc = _toml.loads(text)
    except Exception as e:
        meta.notes.append(f"pyproject.toml is not valid TOML ({e}); ignored")
        return
    proj = doc.get("project") or {}
    dynamic = set(proj.get("dynamic") or [])
    meta.name = meta.name or proj.get("name")
    if isinstance(proj.get("version"), str):
        meta.version = proj["version"]
    if isinstance(proj.get("requires-python"), str):
        meta.requires_python = proj["requires-python"]
    meta.classifier_versions |= _classifier_versions(proj.get("classifiers"))
    meta.deps += [d for d in proj.get("dependencies") or [] if isinstance(d, str)]
    for group, eps in (proj.get("entry-points") or {}).items():
        _add_entry_points(meta, group, eps)
    _add_entry_points(meta, "console_scripts", proj.get("scripts") or {})
    _add_entry_points(meta, "gui_scripts", proj.get("gui-scripts") or {})
    extras = proj.get("optional-dependencies") or {}
    meta.test_deps += _pick_extras(extras, meta)
    if "dependencies" in dynamic:
        meta.notes.append("pyproject.toml declares dependencies dynamic; read from setup files if any")
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
        meta.deps += [d for d in (_poetry_dep(k, v) for k, v in deps.items()) if d]
        groups = dict((poetry.get("group") or {}))
        dev = dict(poetry.get("dev-dependencies") or {})
        for g in ("test", "tests", "dev"):
            dev.update((groups.get(g) or {}).get("dependencies") or {})
        meta.test_deps += [d for d in (_poetry_dep(k, v) for k, v in dev.items()) if d]
        for group, eps in (poetry.get("plugins") or {}).items():
            _add_entry_points(meta, group, eps)
        _add_entry_points(meta, "console_scripts", {k: v for k, v in (poetry.get("scripts") or {}).items()
                                                    if isinstance(v, str)})
        meta.notes.append("read Poetry metadata (caret/tilde constraints converted)")
        if any(isinstance(p, dict) and p.get("from") == "src" for p in poetry.get("packages") or []):
            meta.src_layout = True
    meta.notes.append("read pyproject.toml")


def _pick_extras(extras: dict, meta: _Meta) -> list[str]:
    names = [n for n in TEST_EXTRAS if n in extras] or (["dev"] if "dev" in extras else [])
    if names:
        meta.notes.append(f"test extras: {', '.join(names)}")
    out = []
    for n in names:
        vals = extras[n]
        out += _lines(vals) if isinstance(vals, str) else [v for v in vals if isinstance(v, str)]
    return out


def _read_setup_cfg(view: RepoView, meta: _Meta) -> None:
    text = view.read("setup.cfg")
    if text is None:
        return
    cp = configparser.ConfigParser(interpolation=None)
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
        meta.deps += _lines(cp.get("options", "install_requires", fallback=""))
        if "src" in cp.get("options", "package_dir", fallback="").replace(" ", "").split("="):
            meta.src_layout = True
    if cp.has_section("options.entry_points"):
        for group, value in cp.items("options.entry_points"):
            _add_entry_points(meta, group, _entry_lines(value))
    if cp.has_section("options.extras_require"):
        meta.test_deps += _pick_extras(dict(cp.items("options.extras_require")), meta)
    if cp.has_section("tool:pytest"):
        meta.pytest_configured = True
    meta.notes.append("read setup.cfg")


def _entry_lines(text: str) -> dict[str, str]:
    """{name: value} from ``name = module:attr`` lines."""
    out = {}
    for line in _lines(text):
        name, sep, value = line.partition("=")
        if sep and name.strip() and value.strip():
            out[name.strip()] = value.strip()
    return out


def _add_entry_points(meta: _Meta, group, eps) -> None:
    if not isinstance(group, str) or not isinstance(eps, dict):
        return
    for name, value in eps.items():
        if isinstance(name, str) and isinstance(value, str) and re.fullmatch(r"[\w.:\[\], -]+", value) \
                and re.fullmatch(r"[\w.-]+", name) and re.fullmatch(r"[\w.-]+", group):
            meta.entry_points.setdefault(group, {})[name] = value


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


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
        for kw in node.keywords:
            val = _literal(kw.value)
            if kw.arg == "name" and isinstance(val, str):
                meta.name = meta.name or val
            elif kw.arg == "version" and isinstance(val, str):
                meta.version = meta.version or val
            elif kw.arg == "python_requires" and isinstance(val, str):
                meta.requires_python = meta.requires_python or val
            elif kw.arg == "install_requires":
                if isinstance(val, (list, tuple)):
                    meta.deps += [v for v in val if isinstance(v, str)]
                else:
                    meta.notes.append("setup.py computes install_requires; not read")
            elif kw.arg == "extras_require" and isinstance(val, dict):
                meta.test_deps += _pick_extras(val, meta)
            elif kw.arg == "entry_points" and isinstance(val, dict):
                for group, eps in val.items():
                    _add_entry_points(meta, group, _entry_lines(eps) if isinstance(eps, str) else
                                      _entry_lines("\n".join(e for e in eps if isinstance(e, str))))
            elif kw.arg == "tests_require" and isinstance(val, (list, tuple)):
                meta.test_deps += [v for v in val if isinstance(v, str)]
            elif kw.arg == "classifiers" and isinstance(val, (list, tuple)):
                meta.classifier_versions |= _classifier_versions(val)
            elif kw.arg == "package_dir" and isinstance(val, dict) and val.get("") == "src":
                meta.src_layout = True
        meta.notes.append("read setup.py (literal setup() arguments)")
        return


def _read_requirements(view: RepoView, path: str, seen: set[str]) -> list[str]:
    if path in seen:
        return []
    seen.add(path)
    text = view.read(path)
    if text is None:
        return []
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            inc = line.split(None, 1)[1].strip()
            base = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
            out += _read_requirements(view, base + inc, seen)
        elif line.startswith("-") or line in (".", "-e .") or line.startswith(("./", "file:")):
            continue
        else:
            out.append(line)
    return out


def _req_name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def read_metadata(view: RepoView) -> _Meta:
    meta = _Meta()
    _read_pyproject(view, meta)
    _read_setup_cfg(view, meta)
    _read_setup_py(view, meta)
    seen: set[str] = set()
    if not meta.deps:
        meta.deps += _read_requirements(view, "requirements.txt", seen)
    for path in TEST_REQUIREMENTS:
        if view.exists(path):
            meta.test_deps += _read_requirements(view, path, seen)
            meta.notes.append(f"read {path}")
            break
    if not meta.src_layout and any(re.match(r"^src/[^/]+/__init__\.py$", f) for f in view.files):
        meta.src_layout = True
    if not meta.pytest_configured:
        ini = view.read("tox.ini") or ""
        meta.pytest_configured = (view.exists("pytest.ini") or "[pytest]" in ini
                                  or any(f.rsplit("/", 1)[-1] == "conftest.py" for f in view.files))
    return meta


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

    def detect(self, view: RepoView) -> bool:
        return any(view.exists(f) for f in ("pyproject.toml", "setup.py", "setup.cfg")) or \
            any(f.endswith(".py") for f in view.files)

    def runnable_tests(self, paths: list[str], view_after: set[str]) -> list[str]:
        out = []
        for p in paths:
            name = p.rsplit("/", 1)[-1]
            if p in view_after and p.endswith(".py") and name not in ("conftest.py", "__init__.py") and \
                    (name.startswith("test") or name.endswith("_test.py")):
                out.append(p)
        return out

    def choose_suite(self, meta: _Meta) -> tuple[str, str]:
        """(suite, why) for the project's requires-python and classifiers."""
        allowed = [s for s in sorted(SUITE_PYTHON, key=lambda s: SUITE_PYTHON[s], reverse=True)
                   if s in SUITES and (not meta.requires_python or satisfies(SUITE_PYTHON[s], meta.requires_python))]
        have = ", ".join(SUITES[s].python for s in SUITE_PYTHON if s in SUITES)
        if not allowed:
            raise InputError(f"requires-python {meta.requires_python!r}: no base image has a matching Python "
                              f"(available: {have})")
        req = f"requires-python {meta.requires_python!r}" if meta.requires_python else "no requires-python"
        named = [s for s in allowed if SUITE_PYTHON[s][:2] in meta.classifier_versions]
        if named:
            return named[0], f"Python {SUITES[named[0]].python}: newest allowed by {req} that the classifiers name"
        if meta.classifier_versions:
            top = max(meta.classifier_versions)
            below = [s for s in allowed if SUITE_PYTHON[s][:2] <= top]
            pick = below[0] if below else allowed[-1]
            return pick, f"Python {SUITES[pick].python}: closest to the classifiers' newest {top[0]}.{top[1]} ({req})"
        pick = DEFAULT_SUITE if DEFAULT_SUITE in allowed else allowed[0]
        return pick, f"Python {SUITES[pick].python}: default choice allowed by {req}"

    def recipe(self, view: RepoView) -> Recipe:
        meta = read_metadata(view)
        suite, why = self.choose_suite(meta)
        notes = [why, *meta.notes]
        own = (meta.name or "").lower().replace("_", "-")
        reqs: list[str] = []
        for r in meta.deps + meta.test_deps:
            name = _req_name(r)
            if not name or name == own or r in reqs:
                continue
            if name in IMAGE_PROVIDES and re.fullmatch(r"[\w.-]+", r.strip()):
                continue  # unpinned and already in the image
            reqs.append(r.strip())
        steps = [Step("venv", f"python3 -m venv --system-site-packages {'--without-pip ' if not reqs else ''}{VENV}")]
        if reqs:
            steps.append(Step("dependencies", f"{VENV_PYTHON} -m pip install --no-cache-dir --disable-pip-version-check "
                                              f"--progress-bar off " + " ".join(shlex.quote(r) for r in sorted(reqs))))
            notes.append(f"{len(reqs)} requirement(s) from PyPI")
        else:
            notes.append("no dependencies to install")
        root = "src" if meta.src_layout else ""
        steps.append(Step("package", _package_step(root, meta.name, meta.version, meta.entry_points)))
        if meta.entry_points.get("pytest11"):
            notes.append(f"registers its own pytest plugin(s): {', '.join(sorted(meta.entry_points['pytest11']))}")
        framework = "pytest"
        test_names = {_req_name(r) for r in meta.test_deps}
        if not meta.pytest_configured and "pytest" not in test_names and test_names & {"nose2", "green", "unittest2"}:
            framework = "unittest"
        notes.append(f"tests run with {framework}" + (" (configured)" if meta.pytest_configured else ""))
        check = "-m pytest --version" if framework == "pytest" else "-m unittest --help"
        # autoload off, as the tests run: the project's own plugin imports from /work/repo, absent at build time
        steps.append(Step("check", f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {VENV_PYTHON} {check} >/dev/null"))
        return Recipe(language=self.name, suite=suite, toolchains=("python",), steps=steps, framework=framework,
                      python=VENV_PYTHON, pythonpath=[root or "."], notes=notes)


def _package_step(root: str, name: str | None, version: str | None,
                  entry_points: dict[str, dict[str, str]] | None = None) -> str:
    """The editable install: a .pth to the working tree, and the distribution's metadata (with its entry
    points) when it is static."""
    q = json.dumps  # double-quoted literals, so the shell's single quotes need no escaping
    target = f"{REPO_IN_IMAGE}/{root}".rstrip("/")
    code = ["import os, sysconfig", "site = sysconfig.get_paths()[\"purelib\"]",
            f"open(os.path.join(site, \"envgen-repo.pth\"), \"w\").write({q(target + chr(10))})"]
    if name and version and re.fullmatch(r"[\w.+!-]+", version) and re.fullmatch(r"[\w.-]+", name):
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        code += [f"d = os.path.join(site, {q(re.sub(r'[-_.]+', '_', name) + '-' + version + '.dist-info')})",
                 "os.makedirs(d, exist_ok=True)",
                 f"open(os.path.join(d, \"METADATA\"), \"w\").write({q(meta)})",
                 f"open(os.path.join(d, \"INSTALLER\"), \"w\").write({q('envgen' + chr(10))})",
                 "open(os.path.join(d, \"RECORD\"), \"w\").write(\"\")"]
        if entry_points:
            text = "".join(f"[{g}]\n" + "".join(f"{n} = {v}\n" for n, v in sorted(eps.items())) + "\n"
                           for g, eps in sorted(entry_points.items()))
            code.append(f"open(os.path.join(d, \"entry_points.txt\"), \"w\").write({q(text)})")
    return f"{VENV_PYTHON} -c {shlex.quote('; '.join(code))}"
