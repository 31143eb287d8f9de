"""``envgen build code``: SWE environments from GitHub issue/PR pairs, local git history or SWE-bench files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from ...build.family import BuildOptions, Family, LLMOptions, Log, Progress, flag
from ...build.report import BuildReport
from ...errors import InputError
from ...llm.client import load_llm
from ...sandbox.engine import docker_available
from ...sandbox.images import stderr_log
from .pipeline import build_code
from .setup_agent import SetupBudgets
from .sources import load_issues


class CodeOptions(LLMOptions, BuildOptions):
    """Options of the code family. ``out`` is a folder that receives one pack per kept task. With --llm-model or
    --llm-config, the set-up agent takes over where the recipe cannot make a task's tests run (and the spec
    judge can score statements)."""

    sandbox: Literal["local", "docker", "auto"] = Field(
        "docker", description="Where validation and the gate run: docker (default: the task image, as episodes "
                              "see it), auto (docker when an engine answers), or local (this machine's Python; "
                              "not what a Docker episode sees).",
        json_schema_extra=flag("--sandbox", envvar="ENVGEN_SANDBOX"))
    source: str | None = Field(None, description="Where the tasks come from: github:OWNER/REPO, git:PATH or "
                                                 "swebench:FILE.", json_schema_extra=flag("--from"))
    repo_path: list[str] = Field(default_factory=list, description="A local clone (PATH, or OWNER/NAME=PATH per "
                                                                   "repository of a SWE-bench file).")
    language: str | None = Field(None, description="The repository's language (default: detected).")
    runs: int = Field(3, ge=1, description="Repetitions of each validation side (flaky-test detection).")
    gate: bool = Field(True, description="Run the red-team gate on validated tasks.")
    limit: int | None = Field(None, ge=1, description="At most this many source instances.")
    cache_dir: Path | None = Field(None, description="GitHub response and clone cache (default: the cache dir).")
    issues: Path | None = Field(None, description="git: sources: issue texts (JSON {number: text or {title, body}}, "
                                                  "or JSONL of {number, title, body}); a commit that closes one of "
                                                  "them gets its text as the problem statement.")
    judge_spec: bool = Field(False, description="Score every validated task's statement against its FAIL_TO_PASS "
                                                "tests with an LLM (well-specified / needs-interpretation / "
                                                "underspecified, in the task's meta.spec); needs --llm-model or "
                                                "--llm-config.")
    min_spec: Literal["well-specified", "needs-interpretation", "underspecified"] | None = Field(
        None, description="Reject tasks the spec judge scores below this level (implies --judge-spec).")

    setup_max_turns: int | None = Field(None, ge=1, description="Set-up agent: model turns per task (default: "
                                                                "agents/env-setup.md's budget).")
    setup_max_tool_calls: int = Field(60, ge=1, description="Set-up agent: tool calls per task.")
    setup_max_tokens: int | None = Field(None, ge=1, description="Set-up agent: prompt + completion tokens per task.")
    setup_max_minutes: float = Field(30.0, gt=0, description="Set-up agent: wall time per task, in minutes.")

    python: str | None = Field(None, pattern=r"^\d+\.\d+$", description="Python version X.Y for every task "
                               "(default: chosen from each repository's metadata among the base images').")


LOCAL_WARNING = ("code: warning: --sandbox local validates on this machine with its own Python and packages, "
                 "not in the task image a Docker episode runs in; its test lists may differ")


def backend_of(sandbox: str) -> str:
    """The validation backend of a ``--sandbox`` value: docker unless local is asked for (auto: docker when
    an engine answers, else local)."""
    if sandbox == "auto":
        return "docker" if docker_available() else "local"
    return "local" if sandbox == "local" else "docker"


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
        backend = backend_of(options.sandbox)
        if backend == "local":
            (log or stderr_log)(LOCAL_WARNING)
        if options.issues is not None:
            extra["issues"] = load_issues(options.issues)
        llm = load_llm(options.llm_config, base_url=options.llm_base_url, model=options.llm_model,
                       api_key=options.llm_api_key) if options.uses_llm else None
        if llm is not None and backend == "docker":  # the set-up agent (setup_agent.py) works in Docker only
            extra["llm"] = llm
            extra["setup_budgets"] = SetupBudgets(max_turns=options.setup_max_turns,
                                                  max_tool_calls=options.setup_max_tool_calls,
                                                  max_tokens=options.setup_max_tokens,
                                                  max_seconds=options.setup_max_minutes * 60)
        if options.judge_spec or options.min_spec:
            if llm is None:
                raise InputError("--judge-spec and --min-spec need a model: pass --llm-model (and --llm-base-url) "
                                 "or --llm-config")
            extra["judge_llm"] = llm
            extra["min_spec"] = options.min_spec
        return build_code(source, options.out, repo_path=paths, language=options.language, runs=options.runs,
                          backend=backend, gate=options.gate,
                          limit=options.limit, cache_dir=options.cache_dir, store=options.store, python=options.python,
                          progress=(lambda task, outcome: progress(1)) if progress else None,
                          executor=options.executor, ray_address=options.ray_address, workers=options.workers,
                          registry=options.registry, **extra)


FAMILY = Code()
