"""What a code task's install leaves in the repository, and the install check (stdlib only).

The project is installed the way its build backend intends (``pip install -e``) in the task image's
build, with the checkout at /work/repo. That install can generate files in the tree: setuptools_scm's
version file, extensions built in place. The checkout is not kept in the image (episodes and
validation materialise their own from the snapshot, and every reset removes untracked files), so
``capture`` copies the generated files to ``GENERATED_DIR`` (relative paths kept) and ``overlay`` lays
them over the tree after every materialisation, reset and staging. They are infrastructure: a
submission cannot change them, the verifier restores them to exactly what the install generated.

``check`` is the install check (a build step after the install): the project's top-level import names
import, and the pytest plugins it registers load, in the environment the tests run in.

    python3 -m envgen_verifiers.install capture TREE
    python3 -m envgen_verifiers.install check TREE --python PY [--framework pytest] [--pythonpath ROOT ...]
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
if not tops:
    for root in sys.argv[2:]:
        base = os.path.join(tree, root) if root not in ("", ".") else tree
        for n in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            if os.path.isfile(os.path.join(base, n, "__init__.py")) and n.isidentifier() \
                    and n not in ("tests", "test", "testing", "docs"):
                tops.append(n)
import importlib
done = []
for n in tops:
    m = importlib.import_module(n)
    done.append([n, getattr(m, "__file__", None) or ""])
loaded = []
for n, v in plugins:
    mod, _, attr = v.partition(":")
    obj = importlib.import_module(mod.strip())
    for a in filter(None, attr.strip().split(".")):
        obj = getattr(obj, a)
    loaded.append([n, v])
print(json.dumps({"dist": dist, "imported": done, "plugins": loaded}))
"""
"""Run by the task's interpreter in the tests' environment: find the distribution pip installed from
the tree (its direct_url.json), import its top-level names (top_level.txt, else RECORD, else the
packages at the import roots) and load its pytest11 entry points."""


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
    a = ap.parse_args(argv)
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
    for name, where in res["imported"]:
        print(f"  import {name}: {where}")
    for name, value in res["plugins"]:
        print(f"  pytest plugin {name} = {value}: loads")
    if "pytest" in res:
        print(res["pytest"])
    if not res["imported"]:
        print("  (no top-level import names found)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
