"""``envgen build search``: offline categories, or long-tail questions built by LLM agents over a corpus."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from ...build.family import BuildOptions, CategoryFamily, CategoryOptions, StagedLLMOptions, Log, Progress
from ...build.report import BuildReport
from ...errors import InputError
from ...llm.client import load_llm
from .pipeline import synthesize_search

DEFAULT_QUESTIONS = 20


class SearchOptions(StagedLLMOptions, CategoryOptions):
    """Options of the search family. With a model, ``category`` names the pack and ``tasks`` is the number of
    entities to build questions from (default 20); otherwise ``category`` names an offline generator."""

    corpus: str | None = Field(None, description="LLM pipeline: corpus to mine entities from (JSONL, folder of "
                                                 "text/HTML, hf:NAME).")
    index: Path | None = Field(None, description="LLM pipeline: a built index (envgen corpus index).")
    search_config: Path | None = Field(None, description="LLM pipeline: YAML/JSON naming the question/answer agent "
                                                         "configurations and the keep rule.")
    search: Literal["local", "web"] = Field("local", description="LLM pipeline: the agents' search backend (local: "
                                                                 "the index; web: pages recorded into the pack).")


class Search(CategoryFamily):
    name = "search"
    Options: ClassVar[type[BuildOptions]] = SearchOptions

    def progress_total(self, options: BuildOptions) -> tuple[str, int | None]:
        assert isinstance(options, SearchOptions)
        if options.uses_llm:
            return "search questions", options.tasks or DEFAULT_QUESTIONS
        return super().progress_total(options)

    def build(self, options: BuildOptions, *, progress: Progress | None = None, log: Log | None = None) -> BuildReport:
        assert isinstance(options, SearchOptions)
        if not options.uses_llm:
            return super().build(options, progress=progress, log=log)
        if options.corpus is None and options.index is None:
            raise InputError("envgen build search with a model needs --corpus or --index to mine entities from")
        pool = load_llm(options.llm_config, base_url=options.llm_base_url, model=options.llm_model,
                        api_key=options.llm_api_key)
        return synthesize_search(options.out, llm=pool, corpus=options.corpus, index=options.index,
                                 questions=options.tasks or DEFAULT_QUESTIONS, seed=options.seed,
                                 search=options.search, config=options.search_config, store_url=options.store,
                                 workers=options.workers, sandbox=options.sandbox, progress=progress,
                                 name=options.category, executor=options.executor,
                                 ray_address=options.ray_address, retry_failed=options.retry_failed)


FAMILY = Search()
