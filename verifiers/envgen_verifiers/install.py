"""What a code task's install leaves in the repository, and the install check (stdlib only).

The project is installed the way its build backend intends (``pip install -e``) in the task image's
build, with the checkout at /work/repo. That install can generate files in the tree: setuptools_scm's
version file, extensions built in place. The checkout is not kept in the image (episodes and
validation materialise their own from the snapshot, and every reset removes untracked files), so
``capture`` copies the generated files to ``GENERATED_DIR`` (relative paths kept) and ``overlay`` lays
them over the tree after every materialisation, reset and staging. They are infrastructure: a
submission cannot change them, the verifier restores them to exactly what the install generated.

``check`` is the install check (a build step after the install): the project's own top-level modules that
the tests import (test files and conftest, read with ``ast``) import, and the pytest plugins it registers
load, in the environment the tests run in. The same names are checked whatever the install left (metadata
or not, editable or not), so a module the project ships to fail on import (a deprecation shim) is never
imported unless a test imports it.

``deps`` installs the environment's dependencies (the repository environment's build step): a list of
requirement sets tried in order (the first that pip installs wins), each resolved as of a cut-off date
(the task's commit): pip's ``--uploaded-prior-to`` where the venv's pip has it and the index serves upload
times (PEP 700), else every named requirement capped at its newest release uploaded before the cut-off,
read from the index's JSON simple API.

    python3 -m envgen_verifiers.install capture TREE
    python3 -m envgen_verifiers.install check TREE --python PY [--framework pytest] [--pythonpath ROOT ...]
    python3 -m envgen_verifiers.install deps --python PY --plan JSON
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

from .pyenv import probe_environment, test_env

GENERATED_DIR = "/opt/envgen/generated"
"""Where the task image keeps the files its install generated in the tree (root-owned, read-only)."""
SKIP_PARTS = frozenset({"__pycache__", ".pytest_cache", ".tox", ".nox", ".eggs", ".mypy_cache", ".git", ".venv"})
SKIP_TOP = frozenset({"build", "dist"})
"""Build byproducts: caches, the backend's build and dist folders (never imported from the tree)."""
SKIP_SUFFIXES = (".pyc", ".pyo", ".pth", ".egg-link")
SKIP_DIR_SUFFIXES = (".egg-info", ".dist-info")
"""Metadata the install writes in the tree: the installed distribution's own metadata is what counts,
and the verifier treats metadata in the tree as test infrastructure (entry points)."""
SKIP_NAMES = frozenset({"conftest.py", "sitecustomize.py", "usercustomize.py"})


def _kept(rel: str) -> bool:
    parts = rel.split("/")
    if parts[0] in SKIP_TOP or any(p in SKIP_PARTS or p.endswith(SKIP_DIR_SUFFIXES) for p in parts):
        return False
    return not (parts[-1].endswith(SKIP_SUFFIXES) or parts[-1] in SKIP_NAMES)


def _git(tree: str, *args: str) -> bytes:
    env = {"PATH": os.environ.get("PATH") or "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "LC_ALL": "C.UTF-8"}
    out = subprocess.run(["git", "-c", "safe.directory=*", "-C", tree, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"git {args[0]} in {tree} failed: {out.stderr.decode(errors='replace').strip()[-300:]}")
    return out.stdout


def untracked(tree: str) -> list[str]:
    """Files in the tree git does not track (ignored ones included), minus build byproducts."""
    out = _git(tree, "ls-files", "--others", "-z").decode("utf-8", "surrogateescape")
    return sorted(p for p in out.split("\0") if p and _kept(p) and os.path.isfile(os.path.join(tree, p))
                  and not os.path.islink(os.path.join(tree, p)))


def generated_files(src: str | None = None) -> list[str]:
    """The relative paths held in ``src`` (default GENERATED_DIR); empty when there is none."""
    src = src or GENERATED_DIR
    out = []
    for root, _dirs, names in os.walk(src):
        rel = os.path.relpath(root, src)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        out += [prefix + n for n in names if os.path.isfile(os.path.join(root, n))]
    return sorted(out)


def capture(tree: str, dest: str | None = None) -> list[str]:
    """Copy the tree's generated files to ``dest``, then clean the tree and lay them back: the tree is
    then exactly what an episode starts from. Returns the captured paths."""
    dest = dest or GENERATED_DIR
    files = untracked(tree)
    os.makedirs(dest, exist_ok=True)
    for rel in files:
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(tree, rel), target)
        mode = stat.S_IMODE(os.stat(os.path.join(tree, rel)).st_mode)
        os.chmod(target, (mode | 0o444) & ~0o222)
    for root, dirs, _ in os.walk(dest):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
    _git(tree, "clean", "-ffdxq")
    overlay(tree, dest)
    return files


def _make_parents(tree: str, rel: str) -> None:
    """Create the directories above ``rel`` inside the tree, replacing a file or symlink in their way."""
    path = tree
    for part in rel.split("/")[:-1]:
        path = os.path.join(path, part)
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            os.unlink(path)
        if not os.path.isdir(path):
            os.mkdir(path)


def overlay(tree: str, src: str | None = None) -> list[str]:
    """Lay the generated files over the tree, each made exactly the captured file (content and mode);
    returns the paths that were missing or differed."""
    src = src or GENERATED_DIR
    if not os.path.isdir(src) or not os.path.isdir(tree):
        return []
    changed = []
    for rel in generated_files(src):
        have, dst = os.path.join(src, rel), os.path.join(tree, rel)
        _make_parents(tree, rel)
        with open(have, "rb") as f:
            want = f.read()
        mode = stat.S_IMODE(os.stat(have).st_mode) | 0o200  # writable by the tree's owner, as the checkout is
        if os.path.islink(dst) or os.path.isdir(dst):
            shutil.rmtree(dst) if not os.path.islink(dst) else os.unlink(dst)
        elif os.path.isfile(dst):
            with open(dst, "rb") as f:
                same = f.read() == want
            if same and stat.S_IMODE(os.stat(dst).st_mode) == mode:
                continue
        tmp = dst + ".envgen-tmp"
        with open(tmp, "wb") as f:
            f.write(want)
        os.chmod(tmp, mode)
        os.replace(tmp, dst)
        changed.append(rel)
    return changed


def shadows(tree: str, src: str | None = None, keep=()) -> list[str]:
    """Paths that would be imported instead of a generated module: ``pkg/_version/`` (a package) or a
    compiled ``pkg/_version.*.so`` next to a generated ``pkg/_version.py``; ``keep`` (the base commit's
    paths) are the project's own."""
    keep = set(keep)
    out = []
    for rel in generated_files(src):
        if not rel.endswith(".py"):
            continue
        stem = os.path.join(tree, rel[:-3])
        folder = os.path.dirname(stem)
        if os.path.isdir(stem) and not os.path.islink(stem) and not any(k.startswith(rel[:-3] + "/") for k in keep):
            out.append(rel[:-3])
        base = os.path.basename(stem)
        for name in (os.listdir(folder) if os.path.isdir(folder) else []):
            other = os.path.join(os.path.dirname(rel), name).lstrip("/").replace(os.sep, "/")
            if name.startswith(base + ".") and name.endswith((".so", ".pyd")) and other not in keep:
                out.append(other)
    return out


# ---------------------------------------------------------------- the install check


CHECK = r"""
import json, os, sys
tree = os.path.realpath(sys.argv[1])
def inside(p):
    p = os.path.realpath(p or os.getcwd())
    return p == tree or p.startswith(tree + os.sep)
found = None
for entry in sys.path:
    if not entry or inside(entry) or not os.path.isdir(entry):
        continue
    for name in sorted(os.listdir(entry)):
        d = os.path.join(entry, name)
        url = os.path.join(d, "direct_url.json")
        if name.endswith(".dist-info") and os.path.isfile(url):
            with open(url) as f:
                info = json.load(f)
            u = info.get("url", "")
            if u.startswith("file://") and os.path.realpath(u[7:]) == tree:
                found = (d, info)
                break
    if found:
        break
tops, plugins, dist = [], [], None
if found:
    d, info = found
    dist = {"dist_info": d, "editable": bool((info.get("dir_info") or {}).get("editable"))}
    def read(n):
        p = os.path.join(d, n)
        return open(p, encoding="utf-8").read() if os.path.isfile(p) else ""
    tops = [t.strip() for t in read("top_level.txt").split() if t.strip()]
    if not tops:
        for line in read("RECORD").splitlines():
            first = line.split(",", 1)[0].split("/", 1)
            n = first[0]
            if len(first) == 1 and n.endswith(".py"):
                n = n[:-3]
            elif len(first) == 1 or n.endswith((".dist-info", ".data")) or n in ("..", "bin"):
                continue
            if n.isidentifier() and not n.startswith("__editable__") and n not in tops:
                tops.append(n)
    group = None
    for line in read("entry_points.txt").splitlines():
        line = line.strip()
        if line.startswith("["):
            group = line.strip("[]").strip()
        elif group == "pytest11" and "=" in line:
            n, v = line.split("=", 1)
            plugins.append((n.strip(), v.strip()))
roots = [os.path.join(tree, r) if r not in ("", ".") else tree for r in sys.argv[2:]]
own, packages = list(tops), []
for base in roots:
    for n in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        name = n[:-3] if n.endswith(".py") and os.path.isfile(os.path.join(base, n)) else n
        if not name.isidentifier() or name in own or name in ("setup", "conftest", "noxfile", "tasks"):
            continue
        if name == n and not os.path.isfile(os.path.join(base, n, "__init__.py")):
            continue
        own.append(name)
        if name == n:
            packages.append(name)
import ast
SKIP = {".git", ".tox", ".nox", ".venv", "venv", "node_modules", "build", "dist", "__pycache__", ".eggs"}
TEST_DIRS = {"tests", "test", "testing"}
imported = set()
for root, dirs, files in os.walk(tree):
    dirs[:] = [d for d in dirs if d not in SKIP and not d.endswith(".egg-info")]
    in_tests = bool(TEST_DIRS & set(os.path.relpath(root, tree).split(os.sep)))
    for f in files:
        if not f.endswith(".py") or not (in_tests or f.startswith("test_") or f.endswith("_test.py")
                                         or f in ("conftest.py", "tests.py", "test.py")):
            continue
        try:
            with open(os.path.join(root, f), "rb") as fh:
                mod = ast.parse(fh.read())
        except (SyntaxError, ValueError, OSError):
            continue
        for node in ast.walk(mod):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                imported.add(node.module.split(".")[0])
wanted = [n for n in own if n in imported and n not in ("tests", "test", "testing")]
basis = "the tests import"
if not wanted:
    wanted = tops or [n for n in packages if n not in ("tests", "test", "testing", "docs")]
    basis = "no test imports the project: its top-level names"
import importlib
done = []
for n in wanted:
    m = importlib.import_module(n)
    done.append([n, getattr(m, "__file__", None) or ""])
loaded = []
for n, v in plugins:
    mod, _, attr = v.partition(":")
    obj = importlib.import_module(mod.strip())
    for a in filter(None, attr.strip().split(".")):
        obj = getattr(obj, a)
    loaded.append([n, v])
print(json.dumps({"dist": dist, "imported": done, "plugins": loaded, "basis": basis,
                  "skipped": [n for n in own if n not in wanted]}))
"""
"""Run by the task's interpreter in the tests' environment: find the distribution pip installed from
the tree (its direct_url.json); the project's own top-level names are its names (top_level.txt, else
RECORD) and the packages and modules at the import roots, whatever the install left; import those the
tests import (a module no test imports, such as a shim that raises ImportError on purpose, is never
imported; without any, the distribution's names or the packages at the roots) and load its pytest11
entry points."""


def check(tree: str, python: str, framework: str = "pytest", pythonpath=(".",)) -> dict:
    """Import the project and load its pytest plugins as the tests will; raises RuntimeError with the
    output when that fails."""

    env = test_env(tree, python, list(pythonpath))
    out = subprocess.run([python, "-c", CHECK, tree, *pythonpath], cwd=tree, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    text = out.stdout.decode("utf-8", "replace")
    if out.returncode != 0:
        raise RuntimeError(f"importing the project failed:\n{text.strip()[-2500:]}")
    result = json.loads(text.strip().splitlines()[-1])
    if framework == "pytest":
        names = [p["name"] for p in probe_environment(python, tree)["plugins"]]
        cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", *(a for n in names for a in ("-p", n)),
               "--version", "--version"]
        run = subprocess.run(cmd, cwd=tree, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=600)
        shown = run.stdout.decode("utf-8", "replace")
        if run.returncode != 0:
            raise RuntimeError(f"pytest could not load the environment's plugins ({', '.join(names) or 'none'}):\n"
                               f"{shown.strip()[-2500:]}")
        result["pytest"] = shown.strip()
        result["pytest_plugins"] = names
    return result


# ---------------------------------------------------------------- dependencies as of a date

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
NO_UPLOAD_TIMES = "does not provide upload-time metadata"
"""pip's message when --uploaded-prior-to meets an index without PEP 700 upload times."""


def _pip(python: str, *args: str, run=subprocess.run):
    return run([python, "-m", "pip", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
               stderr=subprocess.STDOUT)


def pip_dates(python: str, run=subprocess.run) -> bool:
    """Whether the venv's pip has ``--uploaded-prior-to`` (pip 26; the newest pip an old Python gets lacks it)."""
    out = _pip(python, "install", "--help", run=run)
    return out.returncode == 0 and b"--uploaded-prior-to" in out.stdout


def index_urls(python: str, run=subprocess.run) -> list[str]:
    """The simple indexes the venv's pip reads: its configuration (PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, pip
    config), else pip's own default index (asked of pip, so no registry name is written here)."""
    urls: list[str] = []
    out = _pip(python, "config", "list", run=run)
    conf = out.stdout.decode("utf-8", "replace") if out.returncode == 0 else ""
    for key in ("index-url", "extra-index-url"):
        env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        values = env.split() if env else []
        if not values:
            for line in conf.splitlines():
                name, _, value = line.partition("=")
                if name.split(".")[-1] == key:
                    values += value.strip().strip("'\"").split()
        if key == "index-url" and not values:
            got = run([python, "-c", "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"],
                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            values = [got.stdout.decode().strip()] if got.returncode == 0 and got.stdout.strip() else []
        urls += [v for v in values if v not in urls]
    return urls


def _normalize(name: str) -> str:
    import re
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_key(v: str):
    """A sort key for release strings, hand-written because the kit is stdlib only (Debian's python3 runs
    it, without ``packaging``): numeric release parts, then pre-/dev-releases before the final release,
    post-releases after it."""
    import re
    m = re.match(r"^v?(\d+(?:\.\d+)*)(.*)$", v.strip().lower())
    if not m:
        return ((), 0, v)
    pre = bool(re.search(r"(a|b|c|rc|alpha|beta|pre|preview|dev)\d*", m.group(2)))
    return (tuple(int(x) for x in m.group(1).split(".")), 0 if pre else 1, m.group(2))


def _file_version(filename: str, project: str) -> str | None:
    """The release a distribution file belongs to, from its name (wheel: ``name-ver-...whl``; sdist:
    ``name-ver.tar.gz`` / ``.zip``); None for another project's file or a name that says none."""
    base = filename
    if base.endswith(".whl"):
        parts = base[:-4].split("-")
        return parts[1] if len(parts) >= 5 and _normalize(parts[0]) == project else None
    for ext in (".tar.gz", ".zip", ".tar.bz2", ".tgz"):
        if base.endswith(ext):
            stem = base[:-len(ext)]
            for i in range(len(stem) - 1, 0, -1):
                if stem[i] == "-" and _normalize(stem[:i]) == project:
                    return stem[i + 1:]
    return None


def newest_before(name: str, before: str, indexes: list[str], fetch=None) -> tuple[str | None, str]:
    """(newest version with a file uploaded before ``before``, why) from the indexes' JSON simple API
    (PEP 691/700); (None, why) when no index serves upload times for the project or none is that old.
    Releases whose files are all yanked are skipped, as pip skips them."""
    import urllib.request

    def default_fetch(url: str) -> dict:
        req = urllib.request.Request(url, headers={"Accept": JSON_ACCEPT})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read().decode("utf-8"))

    fetch = fetch or default_fetch
    project = _normalize(name)
    versions: dict[str, bool] = {}
    timed = False
    misses: list[str] = []
    for index in indexes:
        try:
            doc = fetch(index.rstrip("/") + "/" + project + "/")
        except (OSError, ValueError) as e:  # an index without the project, or without the JSON API
            misses.append(f"{index}: {type(e).__name__}")
            continue
        for f in doc.get("files") or []:
            when = f.get("upload-time")
            version = _file_version(str(f.get("filename", "")), project)
            if not when or not version:
                continue
            timed = True
            if when < before:
                versions[version] = versions.get(version, False) or not f.get("yanked")
    if not timed:
        return None, f"{name}: no index serves upload times ({', '.join(misses) or 'none in its files'}); newest release"
    usable = [v for v, ok in versions.items() if ok and _version_key(v)[1] == 1] or \
        [v for v, ok in versions.items() if ok]
    if not usable:
        return None, f"{name}: no release uploaded before {before}; newest release"
    best = max(usable, key=_version_key)
    return best, f"{name}<={best}"


def _names(requirements: list[str]) -> list[str]:
    import re
    out = []
    for r in requirements:
        m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", r)
        if m and m.group(1) not in out:
            out.append(m.group(1))
    return out


def install_deps(plan: dict, python: str, run=subprocess.run, fetch=None, log=print) -> dict:
    """Install the first of ``plan["alternatives"]`` (each ``{"label", "requirements"}``) that pip installs,
    as of ``plan["before"]`` (ISO 8601, UTC; None: today's releases). Returns {"used": label or None,
    "dating": how the cut-off was applied, "tried": [{"label", "rc", "tail"}]}."""
    before = plan.get("before")
    constraints = list(plan.get("constraints") or [])
    pip_args = list(plan.get("pip") or [])
    dating = "none" if not before else ("pip --uploaded-prior-to" if pip_dates(python, run) else "index JSON caps")
    tried = []
    indexes: list[str] | None = None
    for alt in plan.get("alternatives") or []:
        label, reqs = alt["label"], list(alt["requirements"])
        mode = dating
        while True:
            caps: list[str] = []
            extra: list[str] = []
            if mode == "pip --uploaded-prior-to":
                extra = ["--uploaded-prior-to", before]
            elif mode == "index JSON caps":
                indexes = indexes if indexes is not None else index_urls(python, run)
                for n in _names(reqs):
                    best, why = newest_before(n, before, indexes, fetch)
                    log(f"envgen: dependencies as of {before}: {why}")
                    if best:
                        caps.append(f"{n}<={best}")
            cons_file = None
            if constraints or caps:
                import tempfile
                fd, cons_file = tempfile.mkstemp(prefix="envgen-constraints-", suffix=".txt")
                with os.fdopen(fd, "w") as f:
                    f.write("\n".join(constraints + caps) + "\n")
            cmd = ["install", *pip_args, *extra, *(["-c", cons_file] if cons_file else []), *reqs]
            log(f"envgen: dependencies, alternative {label!r} ({len(reqs)} requirement(s), as of "
                f"{before or 'today'}: {mode})")
            out = _pip(python, *cmd, run=run)
            text = out.stdout.decode("utf-8", "replace")
            if cons_file:
                os.unlink(cons_file)
            log(text.rstrip()[-6000:])
            if out.returncode != 0 and mode == "pip --uploaded-prior-to" and NO_UPLOAD_TIMES in text:
                log("envgen: the index serves no upload times to pip; capping each requirement by the index's JSON")
                mode = dating = "index JSON caps"
                continue
            break
        tail = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or [""]
        tried.append({"label": label, "rc": out.returncode, "tail": tail[0][:300]})
        if out.returncode == 0:
            log(f"envgen: dependencies installed from alternative {label!r} (as of {before or 'today'}: {mode})")
            return {"used": label, "dating": mode, "tried": tried}
        log(f"envgen: alternative {label!r} failed (pip exit {out.returncode})")
    return {"used": None, "dating": dating, "tried": tried}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python3 -m envgen_verifiers.install")
    sub = ap.add_subparsers(dest="cmd", required=True)
    cap = sub.add_parser("capture", help="keep the files the install generated in the tree")
    cap.add_argument("tree")
    cap.add_argument("--dest", default=GENERATED_DIR)
    chk = sub.add_parser("check", help="import the project and load its pytest plugins as the tests will")
    chk.add_argument("tree")
    chk.add_argument("--python", required=True)
    chk.add_argument("--framework", default="pytest")
    chk.add_argument("--pythonpath", action="append", default=[])
    dep = sub.add_parser("deps", help="install the first requirement set pip installs, as of a date")
    dep.add_argument("--python", required=True)
    dep.add_argument("--plan", required=True, help='JSON: {"before", "constraints", "alternatives": [{"label", '
                     '"requirements"}]}')
    a = ap.parse_args(argv)
    if a.cmd == "deps":
        res = install_deps(json.loads(a.plan), a.python)
        if res["used"] is None:
            print("envgen: no requirement set installed: " + "; ".join(f"{t['label']}: {t['tail']}"
                                                                       for t in res["tried"]))
            return 1
        return 0
    if a.cmd == "capture":
        files = capture(a.tree, a.dest)
        print(f"envgen: {len(files)} generated file(s) kept: {', '.join(files[:50]) or 'none'}")
        return 0
    try:
        res = check(a.tree, a.python, a.framework, a.pythonpath or ["."])
    except RuntimeError as e:
        print(str(e))
        print(f"envgen install check failed: {str(e).splitlines()[0]} {str(e).strip().splitlines()[-1][:300]}")
        return 1
    dist = res["dist"]
    print("envgen install check: " + ("installed from the tree" + (" (editable)" if dist["editable"] else "")
                                      if dist else "no distribution installed from the tree"))
    print(f"  checked: {res.get('basis', '')}")
    for name, where in res["imported"]:
        print(f"  import {name}: {where}")
    if res.get("skipped"):
        print(f"  not imported (no test imports them): {', '.join(res['skipped'])}")
    for name, value in res["plugins"]:
        print(f"  pytest plugin {name} = {value}: loads")
    if "pytest" in res:
        print(res["pytest"])
    if not res["imported"]:
        print("  (no top-level import names found)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
