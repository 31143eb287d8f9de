"""The language interface of the code family: everything that differs between Python, Node, Go, ... repos.

A language answers four questions about a repository at a commit, and nothing else in the pipeline
knows which language it handles:

- which paths are tests and which are code (splitting a diff into gold and test patch, filtering);
- how to set the repository up (a ``Recipe``: base image suite and toolchains, install steps run as
  image layers, the test framework and interpreter);
- which of a test patch's files the test runner should run.

Adding a language is one module with a ``Language`` subclass registered in ``LANGUAGES``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Protocol

from ...errors import InputError


@dataclass(frozen=True)
class Step:
    """One install step: a shell command run as root while building the repository environment image."""

    name: str
    run: str


@dataclass
class Recipe:
    """How to set a repository up; its install steps (with suite and toolchains) key the environment image."""

    language: str
    suite: str
    toolchains: tuple[str, ...]
    steps: list[Step]
    """Environment layer: run as root without the repository (shared by every task that installs alike)."""
    framework: str
    """Test runner the kit drives: ``pytest`` or ``unittest`` for Python, else a runner of
    ``envgen_verifiers.runners`` (``go``, ``maven``, ``jest``, ...)."""
    python: str | None = None
    """Interpreter inside the image that runs the tests (None: the image's default)."""
    pythonpath: list[str] = field(default_factory=list)
    """Repository-relative import roots (``src`` layouts), put on PYTHONPATH for tools and tests."""
    options: dict = field(default_factory=dict)
    """The runner's settings (JSON): build directory, package paths, reporter; passed to the verifier as
    its ``options``."""
    notes: list[str] = field(default_factory=list)
    """Why each choice was made (interpreter, test runner, dependencies), for the build report."""
    task_steps: list[Step] = field(default_factory=list)
    """Task layer: run as root in the task image's build, in the task's checkout at ``/work/repo`` (the
    project's own install: build backend, generated files, entry points). The registry is reachable there,
    never at validation or episode time. Not part of ``key``: they depend on the commit, not the version."""

    @property
    def key(self) -> str:
        """Content hash of what the environment image is built from; equal keys share one image."""
        doc = {"language": self.language, "suite": self.suite, "toolchains": list(self.toolchains),
               "steps": [asdict(s) for s in self.steps]}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def image_base(self) -> str:
        """The pack manifest's ``image.base`` spelling (``debian:bookworm+python``)."""
        return "debian:" + "+".join((self.suite, *self.toolchains))

    def to_dict(self) -> dict:
        out = asdict(self)
        out["toolchains"] = list(self.toolchains)
        out["key"] = self.key
        return out


class RepoView:
    """Read-only access to a repository at one commit, without a checkout (``git show`` / ``ls-tree``)."""

    def __init__(self, repo: Path, commit: str):
        self.repo, self.commit = Path(repo), commit

    @cached_property
    def files(self) -> list[str]:
        out = subprocess.run(["git", "-C", str(self.repo), "ls-tree", "-r", "--name-only", "-z", self.commit],
                             capture_output=True)
        if out.returncode != 0:
            raise InputError(f"{self.repo}: commit {self.commit[:12]} is not in this repository "
                              f"({out.stderr.decode(errors='replace').strip()[-200:]})")
        return [p for p in out.stdout.decode("utf-8", errors="replace").split("\0") if p]

    def exists(self, path: str) -> bool:
        return path in self._set

    @cached_property
    def sizes(self) -> dict[str, int]:
        """Bytes of every file at the commit (``ls-tree -l``; submodules, which have no size, are left out)."""
        out = subprocess.run(["git", "-C", str(self.repo), "ls-tree", "-r", "-l", "-z", self.commit],
                             capture_output=True, check=False)
        sizes = {}
        for entry in out.stdout.decode("utf-8", errors="replace").split("\0"):
            meta, _, path = entry.partition("\t")
            size = meta.split()[-1] if meta.split() else "-"
            if path and size.isdigit():
                sizes[path] = int(size)
        return sizes

    @cached_property
    def _set(self) -> set[str]:
        return set(self.files)

    def read(self, path: str) -> str | None:
        """The file's text at the commit, or None when it does not exist there."""
        if path not in self._set:
            return None
        out = subprocess.run(["git", "-C", str(self.repo), "show", f"{self.commit}:{path}"], capture_output=True)
        return out.stdout.decode("utf-8", errors="replace") if out.returncode == 0 else None


class TestPaths(Protocol):
    """Test files a project's settings name (``test_layout.TestLayout``)."""

    __test__ = False  # not a pytest test class, whatever its name says

    def matches(self, path: str) -> bool: ...


class Language(ABC):
    name: str = ""

    @abstractmethod
    def is_test_path(self, path: str) -> bool:
        """True for files that belong in the test patch (tests, their fixtures and configuration)."""

    def configured_tests(self, view: RepoView) -> TestPaths | None:
        """Test files the project's own settings at this commit name beyond the conventions of
        ``is_test_path`` (pytest ``python_files``, jest ``testMatch``, Maven ``testSourceDirectory`` ...);
        None when it configures nothing more."""
        return None

    def test_matcher(self, view: RepoView | None) -> Callable[[str], bool]:
        """``is_test_path`` widened by ``configured_tests(view)``: what splits a commit into gold and test
        patch (a file is a test by the conventions or by the project's own settings)."""
        layout = self.configured_tests(view) if view is not None else None
        if layout is None:
            return self.is_test_path
        return lambda path: self.is_test_path(path) or layout.matches(path)

    @abstractmethod
    def is_code_path(self, path: str) -> bool:
        """True for source files whose change counts as a code change."""

    @abstractmethod
    def detect(self, view: RepoView) -> bool:
        """Whether the repository at this commit is a project of this language."""

    @abstractmethod
    def recipe(self, view: RepoView, *, python: str | None = None) -> Recipe:
        """How to set the repository at this commit up; raises InputError when it cannot be set up.
        ``python``: the interpreter version asked for (``--python X.Y``), None to choose from metadata."""

    @abstractmethod
    def runnable_tests(self, paths: list[str], view_after: set[str], view: RepoView | None = None) -> list[str]:
        """Of the paths a test patch touches, the test files to run (``view_after``: files after it applies;
        ``view``: the repository at the base commit, for the test runner's collection settings)."""
