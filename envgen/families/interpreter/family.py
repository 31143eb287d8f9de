"""``envgen build interpreter``: offline category generators (``envs/interpreter/<category>/``), or the
problem-writer agent for any domain in words (with ``--llm-model`` or ``--llm-config``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ...build.family import BuildOptions, CategoryFamily, CategoryOptions, StagedLLMOptions, Log, Progress
from ...build.report import BuildReport
from ...llm.client import load_llm
from .writer import DEFAULT_PROBLEMS, synthesize_problems


class InterpreterOptions(StagedLLMOptions, CategoryOptions):
    """Options of the interpreter family. With a model, ``category`` is any domain in words (e.g. "number
    theory") and ``tasks`` the number of problems the writer agent writes (default 20); otherwise
    ``category`` names an offline generator."""

    pass_policy: str | None = Field(None, description="LLM pipeline: keep only problems this policy (e.g. "
                                                      "openai:MODEL?base_url=URL) solves at least once in --pass-k "
                                                      "rollouts (default: no pass check).")
    pass_k: int = Field(4, ge=1, description="LLM pipeline: rollouts per problem of the pass check.")


class Interpreter(CategoryFamily):
    """The code-interpreter family: a category generator or the problem-writer agent proposes tasks, the red-team
    gate keeps them."""

    name = "interpreter"
    Options: ClassVar[type[BuildOptions]] = InterpreterOptions

    def progress_total(self, options: BuildOptions) -> tuple[str, int | None]:
        assert isinstance(options, InterpreterOptions)
        if options.uses_llm:
            return f"write {self.category_of(options)} problems", options.tasks or DEFAULT_PROBLEMS
        return super().progress_total(options)

    def build(self, options: BuildOptions, *, progress: Progress | None = None, log: Log | None = None) -> BuildReport:
        assert isinstance(options, InterpreterOptions)
        if not options.uses_llm:
            return super().build(options, progress=progress, log=log)
        pool = load_llm(options.llm_config, base_url=options.llm_base_url, model=options.llm_model,
                        api_key=options.llm_api_key)
        return synthesize_problems(self.category_of(options), options.out, llm=pool,
                                   problems=options.tasks or DEFAULT_PROBLEMS, seed=options.seed,
                                   store_url=options.store, sandbox=options.sandbox, workers=options.workers,
                                   pass_policy=options.pass_policy, pass_k=options.pass_k, progress=progress,
                                   executor=options.executor, ray_address=options.ray_address,
                                   retry_failed=options.retry_failed)


FAMILY = Interpreter()
