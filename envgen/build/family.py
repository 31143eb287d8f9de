"""The ``Family`` interface: what ``envgen build FAMILY`` needs from a family, and the registry that finds them.

A family turns documented options into packs. Each one lives in a folder ``envgen/families/<name>/`` whose
``__init__`` exposes ``FAMILY``, an instance of a ``Family`` subclass; another distribution can add one
through the ``envgen.families`` entry-point group. The CLI lists families without importing them (their
names and docstrings) and imports only the one it builds, so adding a family is a new folder, not a CLI
edit, and ``envgen --help`` stays fast.

Options are pydantic models: every field is documented where it is defined (its ``description`` becomes
the flag's help), validated once, and usable from Python as well as from the CLI.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import InputError
from .offline import build as build_offline
from .report import BuildReport
from .sdk import Category, categories, default_tasks

PACKAGE = "envgen.families"
ENTRY_POINTS = "envgen.families"
Progress = Callable[[int], Any]
Log = Callable[[str], None]


def flag(*names: str, envvar: str | None = None) -> dict[str, Any]:
    """``json_schema_extra`` for a field whose CLI flag is not ``--field-name`` (e.g. ``--from``, ``-o``)."""
    return {"flags": list(names), **({"envvar": envvar} if envvar else {})}


class BuildOptions(BaseModel):
    """Options every family takes."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(description="Directory to write the pack to (replaced atomically; must be empty, absent or "
                                  "an earlier pack).", json_schema_extra=flag("--out", "-o"))
    workers: int = Field(2, ge=1, description="Sandboxes (and agent runs) working in parallel.",
                         json_schema_extra=flag("--workers", "-w", envvar="ENVGEN_WORKERS"))
    sandbox: Literal["local", "docker", "auto"] = Field(
        "local", description="Where tools and verifiers run: local (subprocess), docker, or auto (docker when an "
                             "engine answers).", json_schema_extra=flag("--sandbox", envvar="ENVGEN_SANDBOX"))
    store: str | None = Field(None, description="State store URL or SQLite path; rerunning the same build "
                                                "resumes from it (default: ENVGEN_STORE, else the cache dir).",
                              json_schema_extra=flag("--store", envvar="ENVGEN_STORE"))
    executor: Literal["local", "ray"] = Field(
        "local", description="Where the build's units (candidates, tasks, LLM-agent stages) run: local (this "
                             "machine) or ray (Ray tasks on a cluster; every node needs Docker for --sandbox docker "
                             "and must reach --store, so give a PostgreSQL URL across machines).",
        json_schema_extra=flag("--executor", envvar="ENVGEN_EXECUTOR"))
    ray_address: str | None = Field(None, description="Ray cluster to join with --executor ray (default: "
                                                      "RAY_ADDRESS, else start a local one).",
                                    json_schema_extra=flag("--ray-address", envvar="RAY_ADDRESS"))
    registry: str | None = Field(None, description="Docker registry HOST:PORT that images move through between "
                                                   "nodes: pulled by tag instead of rebuilt, pushed otherwise, "
                                                   "and recorded by digest in the pack.",
                                 json_schema_extra=flag("--registry", envvar="ENVGEN_REGISTRY"))


class LLMOptions(BaseModel):
    """Options of families with an LLM-agent path: without a model they build offline."""

    llm_model: str | None = Field(None, description="Run the LLM agent pipeline with this model (else the offline "
                                                     "generator).",
                                  json_schema_extra=flag("--llm-model", envvar="ENVGEN_LLM_MODEL"))
    llm_base_url: str | None = Field(None, description="OpenAI-compatible endpoint for --llm-model.",
                                     json_schema_extra=flag("--llm-base-url", envvar="OPENAI_BASE_URL"))
    llm_api_key: str | None = Field(None, description="API key (default OPENAI_API_KEY).")
    llm_config: Path | None = Field(None, description="YAML/JSON file naming several models (models: [{name, "
                                                      "base_url, model, ...}], roles: {...}).")

    @property
    def uses_llm(self) -> bool:
        return bool(self.llm_model or self.llm_config)


class StagedLLMOptions(LLMOptions):
    """Options of families whose LLM path is an ``envgen.build.pipeline.LLMPipeline`` (resumable stages)."""

    retry_failed: bool = Field(False, description="Ask the model afresh in the stages that failed in the last run "
                                                  "of this build: their cached model calls are forgotten. Without "
                                                  "it a rerun resumes by replaying every paid call, so a failure the "
                                                  "model caused (no submission, a loop) repeats; with a greedy "
                                                  "model (temperature 0) also change the model.")


@dataclass(frozen=True)
class OptionDoc:
    """One option as the CLI and ``envgen families --json`` show it."""

    name: str
    flags: tuple[str, ...]
    type: str
    default: Any
    required: bool
    description: str
    envvar: str | None = None


class Family(ABC):
    """A family of environments: its options, its categories, and a build that returns one ``BuildReport``."""

    name: ClassVar[str]
    """The CLI name (``envgen build NAME``)."""
    Options: ClassVar[type[BuildOptions]] = BuildOptions
    """The options model; its fields become ``envgen build NAME`` flags."""

    @property
    def description(self) -> str:
        """The first line of the family package's docstring (what ``envgen build --help`` lists unimported)."""
        package = sys.modules.get(type(self).__module__.rpartition(".")[0]) or sys.modules[type(self).__module__]
        doc = (package.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def categories(self) -> list[Category]:
        """The categories this family builds offline (folders under ``envs/<name>/``)."""
        return [c for c in categories().values() if c.family == self.name]

    def options(self, **values: Any) -> BuildOptions:
        """Validated options; a bad value is an InputError naming the flag."""
        try:
            return self.Options(**values)
        except ValidationError as e:
            err = e.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else ""
            doc = next((o for o in self.describe_options() if o.name == field), None)
            where = doc.flags[0] if doc else field or "options"
            raise InputError(f"envgen build {self.name}: {where}: {err['msg']}") from None

    def describe_options(self) -> list[OptionDoc]:
        """Every option: name, flags, type, default and description, in definition order."""
        docs = []
        for name, f in self.Options.model_fields.items():
            extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
            flags = tuple(extra.get("flags") or ["--" + name.replace("_", "-")])
            docs.append(OptionDoc(name=name, flags=flags, type=_type_name(f.annotation), default=f.default,
                                  required=f.is_required(), description=f.description or "",
                                  envvar=extra.get("envvar")))
        return docs

    def progress_total(self, options: BuildOptions) -> tuple[str, int | None]:
        """The progress bar's label and total (None: unknown) for ``build``'s ``progress`` calls."""
        return f"build {self.name}", None

    @abstractmethod
    def build(self, options: BuildOptions, *, progress: Progress | None = None, log: Log | None = None) -> BuildReport:
        """Build the pack(s) ``options`` describe; ``progress(n)`` advances the bar, ``log(line)`` reports."""


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    return text.replace("typing.", "").replace("pathlib.", "")


# ----------------------------------------------------------------------------- the registry


def _bundled_names() -> dict[str, str]:
    """Family folder name -> its docstring's first line, read without importing the family."""
    spec = importlib.util.find_spec(PACKAGE)
    out: dict[str, str] = {}
    for base in spec.submodule_search_locations if spec and spec.submodule_search_locations else []:
        for init in sorted(Path(base).glob("*/__init__.py")):
            if init.parent.name.startswith("_"):
                continue
            doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
            out[init.parent.name] = doc.strip().splitlines()[0] if doc.strip() else ""
    return out


def family_names() -> dict[str, str]:
    """Every family's CLI name -> one-line description, without importing any family."""
    names = {name.replace("_", "-"): doc for name, doc in _bundled_names().items()}
    for ep in entry_points(group=ENTRY_POINTS):
        names.setdefault(ep.name, f"(from {ep.value.split(':')[0]})")
    return dict(sorted(names.items()))


def get_family(name: str) -> Family:
    """Import the family called ``name`` (a folder of envgen.families, or an entry point) and return it."""
    key = name.strip().lower()
    if key in _bundled_names() or key.replace("-", "_") in _bundled_names():
        # a family is found by its folder name, not a static import: envgen.families sits above this layer
        module = importlib.import_module(f"{PACKAGE}.{key.replace('-', '_')}")
        family = getattr(module, "FAMILY", None)
    else:
        eps = [ep for ep in entry_points(group=ENTRY_POINTS) if ep.name == key]
        if not eps:
            raise InputError(f"unknown family {name!r}; available: {', '.join(family_names()) or 'none'}")
        family = eps[0].load()
    if not isinstance(family, Family):
        raise InputError(f"family {name!r} does not expose FAMILY, an envgen.build.family.Family instance")
    return family


def families() -> dict[str, Family]:
    """Every family, imported."""
    return {name: get_family(name) for name in family_names()}


# ----------------------------------------------------------------------------- families with offline categories


class CategoryOptions(BuildOptions):
    """Options of a family whose offline path is a category generator (``envs/<family>/<category>/``)."""

    category: str | None = Field(None, description="Category: a folder under envs/<family>/ (see `envgen families`).",
                                 json_schema_extra=flag("--category", "-c"))
    tasks: int | None = Field(None, ge=1, description="Tasks to propose (default: the category's).",
                              json_schema_extra=flag("--tasks", "-n"))
    seed: int = Field(0, description="Seed; the same seed gives the same pack.")


class CategoryFamily(Family):
    """A family built offline by its category generators: generate -> record expectations -> red-team -> save."""

    Options: ClassVar[type[BuildOptions]] = CategoryOptions

    def category_of(self, options: CategoryOptions) -> str:
        if options.category is None:
            raise InputError(f"envgen build {self.name} needs --category (see `envgen families`)")
        return options.category

    def progress_total(self, options: BuildOptions) -> tuple[str, int | None]:
        assert isinstance(options, CategoryOptions)
        category = self.category_of(options)
        return f"red-team {self.name}/{category}", options.tasks or default_tasks(self.name, category)

    def build(self, options: BuildOptions, *, progress: Progress | None = None, log: Log | None = None) -> BuildReport:
        assert isinstance(options, CategoryOptions)
        return build_offline(self.name, self.category_of(options), options.out, tasks=options.tasks, seed=options.seed,
                             workers=options.workers, sandbox=options.sandbox, progress=progress,
                             executor=options.executor, ray_address=options.ray_address, store=options.store)
