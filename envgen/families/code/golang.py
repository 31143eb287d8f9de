"""The Go recipe: Go modules tested with ``go test -json`` (the kit's ``go`` runner).

Read statically from the repository at the task's commit: the module's ``go.mod`` (the shallowest one
outside ``vendor/`` and ``testdata/``; its directory is the module root), its ``go`` directive, its
``require`` and ``replace`` directives, and whether ``vendor/modules.txt`` is there.

- Toolchain: Debian's ``golang-go`` of a base image suite (``GO_VERSIONS``): the oldest suite whose Go is at
  least the module's ``go`` directive (bookworm's 1.19 by default). A module that needs a newer Go than
  any base layer has is rejected, saying so.
- Dependencies, never fetched at test time (``GOPROXY=off``):
  - vendored (``vendor/modules.txt``): ``-mod=vendor``;
  - none required: nothing to install;
  - a Go module proxy named by ``ENVGEN_GOPROXY`` (read on the host when the recipe is made): the task
    layer runs ``go mod download`` through it into a module cache in the image (``MODCACHE``), which the
    tests read with ``-mod=mod``;
  - otherwise Debian's ``golang-*-dev`` packages: each required module's package by Debian's naming
    (``github.com/google/go-cmp`` -> ``golang-github-google-go-cmp-dev``) is installed in the environment
    layer, and the runner points the module at its sources under ``/usr/share/gocode/src`` through a
    workspace file outside the tree. A module Debian does not package fails the environment build with
    apt's message.
- Tests: the test patch's ``*_test.go`` files inside the module, and the test files of a package whose
  ``testdata/`` the patch changes.
"""

from __future__ import annotations

import os
import re
import shlex

from ...errors import InputError
from ...sandbox.images import WORK_DIR
from .lang import Language, Recipe, RepoView, Step

GO_VERSIONS = {"bookworm": "1.19", "trixie": "1.24"}
"""Debian's golang-go of each base image suite that can run Go modules with workspaces (Go 1.18+)."""
DEBIAN_GOCODE = "/usr/share/gocode/src"
"""Where Debian's golang-*-dev packages install their sources."""
MODCACHE = "/opt/envgen/gomodcache"
"""The module cache a mirror fills at the task image's build (read-only at test time)."""
PROXY_ENV = "ENVGEN_GOPROXY"
NO_GO_DIRECTIVE = (1, 16)
"""The language version the go command assumes for a go.mod without a ``go`` line (Go 1.17 and later)."""
CODE_SUFFIXES = (".go", ".s", ".c", ".h", ".cc", ".cpp")
SKIP_DIRS = ("vendor", "testdata")
REPO_DIR = f"{WORK_DIR}/repo"
"""Where the task layer's steps find the checkout."""


def _version(text: str | None) -> tuple[int, ...]:
    m = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(x) for x in m.groups() if x is not None) if m else ()


def _unquote(s: str) -> str:
    s = s.strip()
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"`" else s


class GoMod:
    """What the recipe needs of a ``go.mod``: module path, go directive, requirements, replacements."""

    def __init__(self, text: str):
        self.module = ""
        self.go = ""
        self.requires: list[tuple[str, str]] = []
        self.replaces: dict[str, str] = {}
        """{module path: replacement} (a module path, or a local directory starting with ./ ../ or /)."""
        block = None
        for raw in text.splitlines():
            line = raw.split("//", 1)[0].strip()
            if not line:
                continue
            if block:
                if line == ")":
                    block = None
                    continue
                self._directive(block, line)
                continue
            m = re.match(r"^(module|go|require|replace|exclude|retract|toolchain|godebug)\s*(.*)$", line)
            if not m:
                continue
            verb, rest = m.groups()
            if rest == "(":
                block = verb
            else:
                self._directive(verb, rest)
        if not self.module:
            raise InputError("go.mod has no module directive")

    def _directive(self, verb: str, rest: str) -> None:
        words = rest.split()
        if verb == "module" and words:
            self.module = _unquote(words[0])
        elif verb == "go" and words:
            self.go = words[0]
        elif verb == "require" and len(words) >= 2:
            self.requires.append((_unquote(words[0]), words[1]))
        elif verb == "replace" and "=>" in rest:
            left, right = rest.split("=>", 1)
            self.replaces[_unquote(left.split()[0])] = _unquote(right.split()[0])


def debian_package(module: str) -> str:
    """Debian's package name for a Go module (its Go team's convention): the host without its top-level
    domain, then the path, joined with ``-`` and lower-cased (``golang.org/x/text`` ->
    ``golang-golang-x-text-dev``, ``gopkg.in/yaml.v3`` -> ``golang-gopkg-yaml.v3-dev``)."""
    host, _, path = module.partition("/")
    host = host.rsplit(".", 1)[0] if "." in host else host
    parts = [host, *[p for p in path.split("/") if p]]
    name = "-".join(parts).lower().replace("_", "-").replace("~", "-")
    return f"golang-{name}-dev"


def _local(target: str) -> bool:
    return target.startswith(("./", "../", "/")) or target in (".", "..")


def module_root(view: RepoView) -> str | None:
    """The directory of the repository's main ``go.mod`` (``""`` at the root), None without one."""
    mods = [f for f in view.files if f.rsplit("/", 1)[-1] == "go.mod"
            and not any(p in SKIP_DIRS for p in f.split("/")[:-1])]
    if not mods:
        return None
    best = min(mods, key=lambda f: (f.count("/"), f))
    return best.rsplit("/", 1)[0] if "/" in best else ""


class Go(Language):
    name = "go"

    def is_test_path(self, path: str) -> bool:
        parts = path.split("/")
        return parts[-1].endswith("_test.go") or "testdata" in parts[:-1]

    def is_code_path(self, path: str) -> bool:
        parts = path.split("/")
        return path.endswith(CODE_SUFFIXES) and not self.is_test_path(path) and "vendor" not in parts[:-1]

    def detect(self, view: RepoView) -> bool:
        return module_root(view) is not None

    def runnable_tests(self, paths: list[str], view_after: set[str], view: RepoView | None = None) -> list[str]:
        root = module_root(view) if view is not None else ""
        root = root or ""

        def inside(p: str) -> bool:
            return not root or p.startswith(root + "/")

        out: list[str] = []
        for p in paths:
            if p in view_after and p.endswith("_test.go") and inside(p) and "vendor" not in p.split("/")[:-1]:
                out.append(p)
        for p in paths:  # changed test data: the test files of the package that reads it
            parts = p.split("/")
            if "testdata" in parts[:-1] and inside(p):
                pkg = "/".join(parts[:parts.index("testdata")])
                out += [f for f in sorted(view_after) if f.endswith("_test.go") and
                        (f.rsplit("/", 1)[0] if "/" in f else "") == pkg and f not in out]
        return out

    def recipe(self, view: RepoView, *, python: str | None = None) -> Recipe:
        root = module_root(view)
        if root is None:
            raise InputError("no go.mod: only Go modules are supported (GOPATH projects are not)")
        path = f"{root}/go.mod" if root else "go.mod"
        mod = GoMod(view.read(path) or "")
        notes = [f"Go module {mod.module} ({path})"]
        want = _version(mod.go) or NO_GO_DIRECTIVE
        fits = [s for s, v in GO_VERSIONS.items() if _version(v) >= want[:2]]
        if not fits:
            have = ", ".join(f"Go {v} ({s})" for s, v in GO_VERSIONS.items())
            raise InputError(f"go.mod says go {mod.go}: no base image has that Go (available: {have})")
        suite = min(fits, key=lambda s: _version(GO_VERSIONS[s]))
        if mod.go:
            notes.append(f"Go {GO_VERSIONS[suite]} ({suite}'s golang-go): the oldest base layer with go >= {mod.go}")
        else:
            assumed = ".".join(map(str, NO_GO_DIRECTIVE))
            notes.append(f"Go {GO_VERSIONS[suite]} ({suite}'s golang-go): {path} has no go directive, so go "
                         f"{assumed} is assumed (the go command's rule for such a module)")
        options: dict = {"root": root or ".", "module": mod.module, "go": mod.go, "flags": []}
        steps: list[Step] = []
        task_steps: list[Step] = []
        vendored = view.exists(f"{root}/vendor/modules.txt" if root else "vendor/modules.txt")
        needed = [m for m, _ in mod.requires if not _local(mod.replaces.get(m, ""))]
        proxy = os.environ.get(PROXY_ENV, "").strip()
        if vendored:
            options["flags"] = ["-mod=vendor"]
            notes.append("dependencies vendored: -mod=vendor")
        elif not needed:
            notes.append("no dependencies outside the standard library" if not mod.requires
                         else "every dependency is replaced by a directory of the repository")
        elif proxy:
            where = shlex.quote(REPO_DIR + (f"/{root}" if root else ""))
            task_steps.append(Step("modules", f"cd {where} && GOPROXY={shlex.quote(proxy)} GOFLAGS=-mod=mod "
                                              f"GONOSUMDB='*' GOSUMDB=off GOTOOLCHAIN=local GOMODCACHE={MODCACHE} "
                                              f"go mod download && chmod -R a+rX {MODCACHE}"))
            options.update(flags=["-mod=mod"], modcache=MODCACHE)
            notes.append(f"{len(needed)} module(s) downloaded through {PROXY_ENV} at the task image's build")
        else:
            targets = {m: mod.replaces.get(m) or m for m in needed}
            pkgs = sorted({debian_package(t) for t in targets.values()})
            steps.append(Step("debian-go-packages",
                              "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                              "--no-install-recommends " + " ".join(pkgs) + " && rm -rf /var/lib/apt/lists/*"))
            options["replace"] = {m: f"{DEBIAN_GOCODE}/{t}" for m, t in sorted(targets.items())}
            notes.append(f"{len(needed)} module(s) from Debian's packages ({', '.join(pkgs)}), read from "
                         f"{DEBIAN_GOCODE} through a workspace file")
        notes.append("tests run with go test -json (the kit's go runner)")
        return Recipe(language=self.name, suite=suite, toolchains=("go",), steps=steps, framework="go",
                      options=options, notes=notes, task_steps=task_steps)
