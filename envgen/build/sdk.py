"""Environment families and their categories: discovery, the generator contract, host-side helpers.

A category is a folder ``envs/<family>/<category>/`` laid out like the packs it makes::

    generator.py      runs on the host: builds the state and the tasks
    env/              files for the pack's env/ (tool code, e.g. tools.py)
    hidden/           files for the pack's hidden/ (verifier code, e.g. verify.py)

Files a whole family shares live in ``envs/<family>/env/`` (and ``hidden/``), e.g. ``envs/search/env/tools.py``.
Nothing in envgen names a category: adding one is adding a folder with a ``generator.py``. The generator
module's docstring's first line is the category's description, and the module exposes::

    DEFAULT_TASKS: int                    (optional) tasks a default build proposes
    def generate(workdir: Path, n_tasks: int, seed: int) -> Generated

``generate`` writes ``workdir/env`` (tools.py, state) and ``workdir/hidden`` (verifier files) and
returns exactly ``n_tasks`` tasks; ``fresh_workdir(workdir, HERE)`` starts both from the folders above.
The same seed gives the same files and the same tasks. Generators are imported by file path, so they
work the same from a checkout and from an installed wheel.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import json
import os
import shutil
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

from ..errors import InputError
from ..pack.format import Limits, Task, ToolCall
from ..paths import bundled

GENERATOR = "generator.py"
SANDBOX_DIRS = ("env", "hidden")
"""Folders of ``envs/<family>/`` and ``envs/<family>/<category>/`` whose files go to the pack's env/ and hidden/
(never categories themselves)."""
_NOT_SHIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")
FALLBACK_DEFAULT_TASKS = 120


@dataclass
class Generated:
    """What a category generator hands to the build: the sandbox files, the tasks, and pack metadata."""

    name: str
    """Pack name, e.g. ``general-travel-planning``."""
    description: str
    family: str
    category: str
    env_dir: Path
    """Becomes the pack's env/: tools.py and state (the agent's sandbox)."""
    hidden_dir: Path
    """Becomes the pack's hidden/: what only the verifier sees."""
    tasks: list[Task]
    submit_tool: str | None = None
    instructions: str | None = None
    """The pack's policy document / system prompt (the manifest's ``instructions``), stored once for all tasks."""
    limits: Limits = field(default_factory=Limits)
    generator: str = ""
    """Provenance: which generator (and version) made the pack."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per generator stage (e.g. db, tasks), merged into the build report."""


@dataclass(frozen=True)
class Category:
    family: str
    name: str
    """The CLI spelling: folder name with '-' for '_' (``travel-planning``)."""
    path: Path
    description: str

    @property
    def key(self) -> str:
        return f"{self.family}/{self.name}"


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _describe(gen: Path) -> str:
    """First line of the generator's docstring, read without importing it (listing stays cheap)."""
    try:
        doc = ast.get_docstring(ast.parse(gen.read_text(encoding="utf-8"))) or ""
    except (SyntaxError, OSError, UnicodeDecodeError):
        return ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def categories(root: Path | None = None) -> dict[str, Category]:
    """Every category under ``envs/``: ``{"family/category": Category}``, sorted."""
    root = Path(root) if root is not None else bundled("envs")
    found: dict[str, Category] = {}
    for fam in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        for cat in sorted(p for p in fam.iterdir()
                          if p.is_dir() and not p.name.startswith((".", "_")) and p.name not in SANDBOX_DIRS):
            gen = cat / GENERATOR
            if gen.is_file():
                c = Category(_norm(fam.name), _norm(cat.name), cat, _describe(gen))
                found[c.key] = c
    return found


def get_category(family: str, category: str, root: Path | None = None) -> Category:
    """The category, or an EnvgenError naming the ones that exist."""
    cats = categories(root)
    key = f"{_norm(family)}/{_norm(category)}"
    if key in cats:
        return cats[key]
    fams = sorted({c.family for c in cats.values()})
    if _norm(family) not in fams:
        raise InputError(f"unknown family {family!r}; available: {', '.join(fams) or 'none'}")
    names = [c.name for c in cats.values() if c.family == _norm(family)]
    raise InputError(f"unknown category {category!r} in family {family!r}; available: {', '.join(names)}")


_MODULES: dict[Path, ModuleType] = {}


def fresh_workdir(workdir: Path, category: Path | None = None) -> tuple[Path, Path]:
    """Fresh ``env/`` and ``hidden/`` folders under ``workdir`` for a generator to fill; returns both.

    Empty, or with ``category`` (the generator's own folder, ``envs/<family>/<category>/``) holding its sandbox
    files: the family's shared ``env/`` and ``hidden/``, then the category's own (a category file replaces a
    family file of the same name). Bytecode an import left in those folders is not copied.
    """
    workdir = Path(workdir)
    env, hidden = workdir / "env", workdir / "hidden"
    for d in (env, hidden):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    if category is not None:
        category = Path(category)
        for base in (category.parent, category):
            for name, dest in zip(SANDBOX_DIRS, (env, hidden)):
                if (base / name).is_dir():
                    shutil.copytree(base / name, dest, ignore=_NOT_SHIPPED, dirs_exist_ok=True)
    return env, hidden


def create_schema(metadata: Any, engine: Any) -> None:
    """``metadata.create_all`` in a fixed order: tables by dependency, then indexes by name.

    SQLAlchemy keeps a table's indexes in a set, so create_all's index order (and with it the database
    file's bytes, and the pack's content hash) would change with Python's hash seed.
    """
    from sqlalchemy.schema import CreateIndex, CreateTable

    with engine.begin() as con:
        for table in metadata.sorted_tables:
            con.execute(CreateTable(table))
        for index in sorted((i for t in metadata.sorted_tables for i in t.indexes), key=lambda i: i.name):
            con.execute(CreateIndex(index))


def load_module(path: Path, name: str) -> ModuleType:
    """Import a Python file by path under a private module name (cached per path)."""
    path = Path(path).resolve()
    if path in _MODULES:
        return _MODULES[path]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    for stale in [k for k in sys.modules if k.startswith(name + ".")]:
        del sys.modules[stale]  # a package loaded afresh imports its submodules afresh, so it has them as attributes
    sys.modules[name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _MODULES[path] = module
    return module


def load_generator(cat: Category) -> ModuleType:
    module = load_module(cat.path / GENERATOR, f"envgen_categories.{cat.family.replace('-', '_')}."
                                               f"{cat.path.name}")
    if not callable(getattr(module, "generate", None)):
        raise InputError(f"{cat.path / GENERATOR}: has no generate(workdir, n_tasks, seed) function")
    return module


def default_tasks(family: str, category: str) -> int:
    """How many tasks a build proposes when none is asked for (the category's DEFAULT_TASKS)."""
    return int(getattr(load_generator(get_category(family, category)), "DEFAULT_TASKS", FALLBACK_DEFAULT_TASKS))


# ------------------------------------------------------------------ helpers for generators


def db_changes(db: str, ignore: Sequence[str] = ()) -> dict[str, Any]:
    """The ``changes`` entry of a verifier's args: judge the whole end database at ``db`` (relative to the
    work dir) against the pristine one with the reference replayed, so a write the task did not ask for
    scores 0. The build records the expected change set by replaying the reference; ``ignore`` lists
    volatile columns as fnmatch patterns over "table.column" (e.g. "audit_log.*", "*.updated_at")."""
    return {"db": db, **({"ignore": list(ignore)} if ignore else {})}


class ReferenceFailed(Exception):
    """Internal signal, not a user error: a reference solution's tool call failed, so the generator skips
    the candidate."""


class ToolRecorder:
    """Calls a category's tools in-process on the host, as the runtime would, and records each call.

    Reference solutions reach the world only through this, so ``calls`` is exactly the trajectory an
    agent would replay, and each result comes back as the agent reads it (JSON text, decoded).
    ``recorder.search_hotels(city="Lyon")`` and ``recorder("search_hotels", city="Lyon")`` are the same.
    ``db`` runs the calls against that database instead of the module's ``DB`` (its public setting, a path
    relative to the work dir), e.g. a scratch copy or the index a generator just built.
    """

    def __init__(self, tools: ModuleType, db: str | os.PathLike | None = None):
        self._tools = tools
        self._db = None if db is None else os.fspath(db)
        if self._db is not None and not isinstance(getattr(tools, "DB", None), str):
            raise TypeError(f"{tools.__name__} has no DB setting to point at {self._db}")
        self.calls: list[ToolCall] = []

    def __call__(self, tool: str, **args: Any) -> Any:
        fn = getattr(self._tools, tool, None)
        if tool.startswith("_") or not callable(fn):
            raise ReferenceFailed(f"reference called an unknown tool {tool!r}")
        args = json.loads(json.dumps(args))  # what crosses the protocol is JSON
        saved = getattr(self._tools, "DB", None)
        try:
            if self._db is not None:
                self._tools.DB = self._db
            result = fn(**args)
        except Exception as e:
            raise ReferenceFailed(f"reference call {tool}({args}) failed: {type(e).__name__}: {e}") from e
        finally:
            if self._db is not None:
                self._tools.DB = saved
        self.calls.append(ToolCall(tool=tool, args=args))
        if result is None or isinstance(result, str):
            return result or ""
        return json.loads(json.dumps(result, ensure_ascii=False, default=str))

    def __getattr__(self, tool: str) -> Callable[..., Any]:
        if tool.startswith("_"):
            raise AttributeError(tool)
        return lambda **args: self(tool, **args)


def repl_display(cells: Sequence[str], cwd: Path | None = None) -> str:
    """What a REPL shows for the last of ``cells`` run in order in one fresh namespace (the ``repr`` of a final
    expression; "" when it has none), in ``cwd`` when given. Interpreter-family generators check with it, in
    process, that reference code computes the stated answer before the gate replays it in a sandbox."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    shown = ""
    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        for cell in cells:
            body, last = ast.parse(cell).body, None
            if body and isinstance(body[-1], ast.Expr):
                body, last = body[:-1], body[-1]
            exec(compile(ast.Module(body=body, type_ignores=[]), "<ref>", "exec"), ns)
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                if last is not None:
                    value = eval(compile(ast.Expression(last.value), "<ref>", "eval"), ns)
                    if value is not None:
                        print(repr(value))
            shown = buf.getvalue().strip()
    finally:
        for value in ns.values():
            if isinstance(value, sqlite3.Connection):
                value.close()
        os.chdir(here)
    return shown
