"""The Python a code task's tests run in: its interpreter, its environment, what it provides (stdlib only).

Shared by the test verifier (``tests``) and the install check (``install``), which both run the task's
interpreter exactly as the tests will.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile


PROBE = r"""
import json, os, pkgutil, sys
tree = os.path.realpath(sys.argv[1])
def inside(p):
    p = os.path.realpath(p or os.getcwd())
    return p == tree or p.startswith(tree + os.sep)
path = [p for p in sys.path if p and not inside(p)]
mods = {m.name for m in pkgutil.iter_modules(path)} | set(sys.builtin_module_names)
mods |= set(getattr(sys, "stdlib_module_names", ()))
plugins = set()
try:
    import importlib.metadata as md
    for d in md.distributions(path=path):
        for ep in d.entry_points:
            if ep.group == "pytest11":
                plugins.add((ep.name, ep.value))
except ImportError:
    pass
print(json.dumps({"modules": sorted(mods), "plugins": [{"name": n, "value": v} for n, v in sorted(plugins)]}))
"""
"""Run by the task's interpreter with the tree off sys.path: the top-level modules and the pytest11
entry points the environment itself provides (what plugin autoload would load)."""


def probe_environment(python: str | None, tree: str) -> dict:
    """{"modules": [top-level module names], "plugins": [{"name", "value"}]} of the test interpreter."""
    py = resolve_python(python)
    tmp = tempfile.mkdtemp(prefix="envgen-probe-")
    try:
        out = subprocess.run([py, "-I", "-c", PROBE, tree], cwd=tmp, stdin=subprocess.DEVNULL, capture_output=True,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "LC_ALL": "C.UTF-8",
                                  "PYTHONNOUSERSITE": "1"}, timeout=120)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if out.returncode != 0:
        raise RuntimeError(f"probing the test interpreter {py} failed: {out.stderr.decode(errors='replace')[-500:]}")
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def resolve_python(python: str | None) -> str:
    """The task's interpreter when it exists here (the image's venv), else this one (a local sandbox)."""
    return python if python and os.path.exists(python) else sys.executable


def test_env(tree: str, python: str, pythonpath: list[str] = (), home: str | None = None) -> dict:
    """The environment tests run in, built from nothing: fixed time zone and hash seed, the task's
    interpreter first on PATH, plugin autoload off, no user site-packages, a private HOME."""
    tmp = tempfile.gettempdir()
    path = os.pathsep.join([os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"])
    env = {"PATH": path, "HOME": home or tmp, "TMPDIR": tmp, "TZ": "UTC", "PYTHONHASHSEED": "0", "LANG": "C.UTF-8",
           "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONNOUSERSITE": "1"}
    roots = [os.path.join(tree, p) if p not in ("", ".") else tree for p in pythonpath]
    if roots:
        env["PYTHONPATH"] = os.pathsep.join(roots)
    return env
