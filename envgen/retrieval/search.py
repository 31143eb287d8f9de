"""Search backends for generator agents: one small interface, chosen by name.

- ``none``: offline; every search answers that search is off, so the agent generates its data itself
  and says so in its sources;
- ``web``: DuckDuckGo through ``ddgs`` (the ``search`` extra), imported only when used.

Other backends (a local full-text index, a record/replay cache) register themselves with
``register_backend`` and are then available by name everywhere a backend name is accepted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, Callable

from ..errors import InputError, SearchUnavailable


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class SearchBackend(ABC):
    name = "abstract"

    @abstractmethod
    def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        """Up to ``max_results`` results for ``query``; raises SearchUnavailable when it cannot answer."""


class NoSearch(SearchBackend):
    name = "none"

    def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        raise SearchUnavailable("web search is off in this build (offline); create realistic data yourself and "
                                "record it in sources.json as {\"source\": \"synthetic\", \"note\": \"...\"}")


class WebSearch(SearchBackend):
    """DuckDuckGo text search via the ``ddgs`` package."""

    name = "web"

    def __init__(self, region: str = "wt-wt", timeout: int = 20):
        self.region, self.timeout = region, timeout

    def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        try:
            from ddgs import DDGS  # type: ignore
        except ImportError:
            raise SearchUnavailable("the web search backend needs the 'search' extra: pip install 'envgen[search]'") \
                from None
        try:
            hits = DDGS(timeout=self.timeout).text(query, region=self.region, max_results=max_results) or []
        except Exception as e:  # ddgs raises its own exception types for rate limits and timeouts
            raise SearchUnavailable(f"web search failed: {type(e).__name__}: {e}") from None
        return [SearchResult(h.get("title", ""), h.get("href") or h.get("url", ""), h.get("body", "")) for h in hits]


_BACKENDS: dict[str, Callable[..., SearchBackend]] = {"none": NoSearch, "web": WebSearch}


def register_backend(name: str, factory: Callable[..., SearchBackend]) -> None:
    """Make ``factory(**options)`` available as backend ``name``."""
    _BACKENDS[name] = factory


def backends() -> list[str]:
    return sorted(_BACKENDS)


def get_backend(backend: str | SearchBackend, **options: Any) -> SearchBackend:
    """A backend instance by name (or the instance itself); unknown names list the known ones.

    ``local`` (the search family's FTS5 index) is registered by ``envgen.retrieval.pages`` when imported."""
    if isinstance(backend, SearchBackend):
        return backend
    try:
        factory = _BACKENDS[backend]
    except KeyError:
        raise InputError(f"unknown search backend {backend!r}; available: {', '.join(backends())}") from None
    return factory(**options)


class SearchTool:
    """The ``search`` tool an agent calls, over a backend; remembers every URL it showed (for provenance)."""

    def __init__(self, backend: SearchBackend, max_results: int = 8):
        self.backend = backend
        self.max_results = max_results
        self.seen: list[str] = []

    def __call__(self, query: str, max_results: int = 5) -> list[dict[str, str]]:
        """Search the web; returns results with title, url and snippet.

        Args:
            query: what to search for
            max_results: how many results (at most 8)
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        n = max(1, min(int(max_results), self.max_results))
        results = self.backend.search(query.strip(), n)
        for r in results:
            if r.url and r.url not in self.seen:
                self.seen.append(r.url)
        return [r.to_dict() for r in results]

    def as_function(self) -> Callable[..., list[dict[str, str]]]:
        """A plain function named ``search`` (tools are offered under their function's name)."""

        def search(query: str, max_results: int = 5) -> list:
            return self(query, max_results)

        search.__doc__ = SearchTool.__call__.__doc__
        return search
