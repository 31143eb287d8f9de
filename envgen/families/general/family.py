"""``envgen build general``: offline category generators, or the LLM agent pipeline for any category."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ...build.family import BuildOptions, CategoryFamily, CategoryOptions, StagedLLMOptions, Log, Progress
from ...build.report import BuildReport
from ...llm.client import load_llm
from .pipeline import stage_count, synthesize


class GeneralOptions(StagedLLMOptions, CategoryOptions):
    """Options of the general family. With --llm-model or --llm-config, ``category`` is any task category in
    words and the agent pipeline builds it; otherwise it names an offline generator."""

    max_levels: int = Field(3, ge=1, description="LLM pipeline: difficulty levels per task chain.")
    chains: int = Field(1, ge=1, description="LLM pipeline: independent task chains per environment.")
    search: Literal["none", "web", "local"] = Field("none", description="LLM pipeline: the builder agent's search "
                                                                        "backend (none, web, local).")
    review: bool = Field(True, description="LLM pipeline: a reviewer agent checks every level.")


class General(CategoryFamily):
    name = "general"
    Options: ClassVar[type[BuildOptions]] = GeneralOptions

    def progress_total(self, options: BuildOptions) -> tuple[str, int | None]:
        assert isinstance(options, GeneralOptions)
        if options.uses_llm:
            return f"synthesize {self.category_of(options)}", stage_count(options.max_levels, options.chains)
        return super().progress_total(options)

    def build(self, options: BuildOptions, *, progress: Progress | None = None, log: Log | None = None) -> BuildReport:
        assert isinstance(options, GeneralOptions)
        if not options.uses_llm:
            return super().build(options, progress=progress, log=log)
        pool = load_llm(options.llm_config, base_url=options.llm_base_url, model=options.llm_model,
                        api_key=options.llm_api_key)
        return synthesize(self.category_of(options), options.out, llm=pool, store_url=options.store,
                          sandbox=options.sandbox, max_levels=options.max_levels, chains=options.chains,
                          seed=options.seed, search=options.search, review=options.review, workers=options.workers,
                          progress=progress, executor=options.executor, ray_address=options.ray_address,
                          retry_failed=options.retry_failed)


FAMILY = General()
