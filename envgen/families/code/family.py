"""``envgen build code``: SWE environments from GitHub issue/PR pairs, local git history or SWE-bench files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from ...build.family import BuildOptions, Family, Log, Progress, flag
from ...build.report import BuildReport
from ...errors import InputError
from .pipeline import build_code


class CodeOptions(BuildOptions):
    """Options of the code family. ``out`` is a folder that receives one pack per kept task."""

    source: str | None = Field(None, description="Where the tasks come from: github:OWNER/REPO, git:PATH or "
                                                 "swebench:FILE.", json_schema_extra=flag("--from"))
    repo_path: list[str] = Field(default_factory=list, description="A local clone (PATH, or OWNER/NAME=PATH per "
                                                                   "repository of a SWE-bench file).")
    language: str | None = Field(None, description="The repository's language (default: detected).")
    runs: int = Field(3, ge=1, description="Repetitions of each validation side (flaky-test detection).")
    gate: bool = Field(True, description="Run the red-team gate on validated tasks.")
    limit: int | None = Field(None, ge=1, description="At most this many source instances.")
    cache_dir: Path | None = Field(None, description="GitHub response and clone cache (default: the cache dir).")
    python: str | None = Field(None, pattern=r"^\d+\.\d+$", description="Python version X.Y for every task "
                               "(default: chosen from each repository's metadata among the base images').")


class Code(Family):
    name = "code"
    Options: ClassVar[type[BuildOptions]] = CodeOptions

    def categories(self) -> list:
        return []  # a code build's source is a repository or a SWE-bench file, not a category folder

    def source_of(self, options: CodeOptions) -> str:
        if not options.source:
            raise InputError("envgen build code needs --from github:OWNER/REPO, git:PATH or swebench:FILE")
        return options.source

    def progress_total(self, options: BuildOptions) -> tuple[str, int | None]:
        assert isinstance(options, CodeOptions)
        return f"code {self.source_of(options)}", options.limit

    def build(self, options: BuildOptions, *, progress: Progress | None = None, log: Log | None = None) -> BuildReport:
        assert isinstance(options, CodeOptions)
        source = self.source_of(options)
        paths: Any = None
        if options.repo_path:
            pairs = [p.split("=", 1) for p in options.repo_path]
            paths = dict(pairs) if all(len(p) == 2 for p in pairs) else options.repo_path[0]
        extra: dict[str, Any] = {"log": log} if log is not None else {}
        return build_code(source, options.out, repo_path=paths, language=options.language, runs=options.runs,
                          backend="docker" if options.sandbox in ("docker", "auto") else "local", gate=options.gate,
                          limit=options.limit, cache_dir=options.cache_dir, store=options.store, python=options.python,
                          progress=(lambda task, outcome: progress(1)) if progress else None, **extra)


FAMILY = Code()
