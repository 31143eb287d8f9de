"""Page backends for the search family: ``local`` (the SQLite FTS5 index), ``web`` pages, and record/replay.

``envgen.retrieval.search`` gives generator agents a ``search`` tool over a named backend. The search family also
needs to *read* what it finds, and to give a pack's agent exactly the tools its generator agents had, so
its backends are ``PageBackend``: ``query(query, limit, lang)`` and ``open(id_or_url)`` return the same
JSON the pack's ``env/tools.py`` returns in the sandbox (for ``local`` they run that very file).

``CachedBackend`` records every answer in the build store (table ``search_calls``) keyed by backend
identity and arguments, then replays it: a resumed build, a re-run episode or an RL loop sees the same
results and never asks a search engine twice. ``mode="replay"`` refuses anything not recorded, so a
replay is provably exact. Importing this module registers ``local`` with ``envgen.retrieval.search``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal
from urllib.parse import urljoin, urlparse

from sqlalchemy import JSON, DateTime, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from .corpus import html_to_text, open_index
from ..errors import InputError, SearchUnavailable
from ..build.sdk import load_module
from ..paths import bundled
from .search import SearchBackend, SearchResult, WebSearch, register_backend
from ..store import Base, Store, dialect_insert

CacheMode = Literal["auto", "record", "replay"]


def search_tools_module():
    """``envs/search/env/tools.py``: the pack's search tools, loaded on the host for the local backend."""
    return load_module(bundled("envs") / "search" / "env" / "tools.py", "envgen_search_tools")


class PageBackend(SearchBackend):
    """A backend that can also open what it finds. ``query``/``open`` raise ValueError for the agent's
    mistakes (no such page, empty query) and SearchUnavailable when the backend itself cannot answer."""

    name = "abstract-pages"

    @property
    def identity(self) -> str:
        """What the cache keys on: results from two backends with the same identity are interchangeable."""
        return self.name

    def query(self, query: str, limit: int = 5, lang: str | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def open(self, id_or_url: str) -> dict[str, Any]:
        raise NotImplementedError

    def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        hits = self.query(query, max(1, min(int(max_results), 20)))["results"]
        return [SearchResult(h["title"], h.get("url") or h["id"], h.get("snippet", "")) for h in hits]


class LocalBackend(PageBackend):
    """The FTS5 index built by ``envgen.retrieval.corpus.build_index``, queried by the pack's own tool code."""

    name = "local"

    def __init__(self, index: str | os.PathLike | None = None):
        if index is None:
            raise InputError("the local search backend needs an index: build one with `envgen index CORPUS --out "
                              "FILE` and pass it (--index FILE)")
        self.path = Path(index).resolve()
        open_index(self.path).close()  # validates: exists, is an index of this schema
        self._tools = search_tools_module()
        self._local = threading.local()
        h = hashlib.sha256()
        with self.path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        self._identity = f"local:{h.hexdigest()[:16]}"

    @property
    def identity(self) -> str:
        return self._identity

    def _con(self):
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = open_index(self.path)
        return con

    def query(self, query: str, limit: int = 5, lang: str | None = None) -> dict[str, Any]:
        return self._tools._search(self._con(), query, limit, lang or None)

    def open(self, id_or_url: str) -> dict[str, Any]:
        return self._tools._open(self._con(), id_or_url)


class WebBackend(PageBackend):
    """DuckDuckGo results through ``envgen.retrieval.search.WebSearch`` (extra ``search``); pages fetched with httpx
    and reduced to text by the stdlib HTML parser. Result ids are URLs."""

    name = "web"

    def __init__(self, region: str = "wt-wt", timeout: float = 20.0, max_chars: int = 20_000,
                 max_bytes: int = 4 << 20, client: Any = None):
        self.web = WebSearch(region=region, timeout=int(timeout))
        self.timeout, self.max_chars, self.max_bytes = timeout, max_chars, max_bytes
        self._client = client

    @property
    def identity(self) -> str:
        return f"web:{self.web.region}"

    def query(self, query: str, limit: int = 5, lang: str | None = None) -> dict[str, Any]:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        hits = self.web.search(query.strip(), max(1, min(int(limit), 20)))
        return {"query": query, "results": [{"id": h.url, "title": h.title, "snippet": h.snippet, "url": h.url}
                                            for h in hits]}

    def open(self, id_or_url: str) -> dict[str, Any]:
        import httpx

        url = str(id_or_url).strip()
        if urlparse(url).scheme not in ("http", "https"):
            raise ValueError(f"{url!r} is not an http(s) URL; open a URL from the search results")
        client = self._client or httpx.Client(follow_redirects=True, timeout=self.timeout,
                                              headers={"User-Agent": "envgen-search/1 (+research; respects robots)"})
        try:
            with client.stream("GET", url) as resp:
                if resp.status_code >= 400:
                    raise ValueError(f"{url}: HTTP {resp.status_code}")
                body = bytearray()
                for chunk in resp.iter_bytes():
                    body += chunk
                    if len(body) > self.max_bytes:
                        break
                ctype = resp.headers.get("content-type", "")
                final = str(resp.url)
                encoding = resp.encoding or "utf-8"
        except httpx.HTTPError as e:
            raise SearchUnavailable(f"cannot fetch {url}: {type(e).__name__}: {e}") from None
        finally:
            if self._client is None:
                client.close()
        raw = bytes(body).decode(encoding, errors="replace")
        if "html" in ctype or raw.lstrip()[:1] == "<":
            title, text, hrefs = html_to_text(raw)
        else:
            title, text, hrefs = "", raw, []
        links = []
        for href in hrefs:
            target = urljoin(final, href)
            if urlparse(target).scheme in ("http", "https") and target not in links:
                links.append(target)
        page = {"id": url, "title": title or url, "url": final, "text": text[: self.max_chars],
                "links": [{"id": t, "title": ""} for t in links[:50]]}
        if len(text) > self.max_chars:
            page["truncated"] = len(text) - self.max_chars
        return page


# ----------------------------------------------------------------------------- record / replay


def _now() -> datetime:
    return datetime.now(timezone.utc)


class SearchCall(Base):
    """One recorded search-backend answer (or the agent-facing error it gave)."""

    __tablename__ = "search_calls"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(80), unique=True)
    backend: Mapped[str] = mapped_column(String(255), index=True)
    op: Mapped[str] = mapped_column(String(16))
    args: Mapped[dict] = mapped_column(JSON)
    result: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class SearchCache:
    """Recorded answers in the store, with an in-process LRU in front (replays in RL loops hit memory)."""

    def __init__(self, store: Store | str | os.PathLike | None = None, memory: int = 4096):
        self.store = store if isinstance(store, Store) else Store(store)
        self.store.ensure_tables()  # search_calls, if this store was opened before this module was imported
        self._mem: OrderedDict[str, tuple[dict | None, str | None]] = OrderedDict()
        self._cap = memory
        self._lock = threading.Lock()

    @staticmethod
    def key(identity: str, op: str, args: dict[str, Any]) -> str:
        canon = json.dumps({"backend": identity, "op": op, "args": args}, sort_keys=True, ensure_ascii=False,
                           separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()

    def get(self, key: str) -> tuple[dict | None, str | None] | None:
        with self._lock:
            hit = self._mem.get(key)
            if hit is not None:
                self._mem.move_to_end(key)
                return hit
        with Session(self.store.engine) as s:
            row = s.scalar(select(SearchCall).where(SearchCall.key == key))
            if row is None:
                return None
            hit = (row.result, row.error)
        self._remember(key, hit)
        return hit

    def put(self, key: str, identity: str, op: str, args: dict[str, Any], result: dict | None, error: str | None,
            replace: bool = False) -> None:
        # one upsert, so two workers recording the same call store it once (the first copy, unless replace)
        ins = dialect_insert(self.store.engine, SearchCall).values(key=key, backend=identity, op=op, args=args,
                                                                  result=result, error=error, created_at=_now())
        if replace:
            ins = ins.on_conflict_do_update(index_elements=[SearchCall.key], set_={
                "result": ins.excluded.result, "error": ins.excluded.error, "created_at": ins.excluded.created_at})
        else:
            ins = ins.on_conflict_do_nothing(index_elements=[SearchCall.key])
        self.store.write(lambda s: s.execute(ins), "recording a search call")
        self._remember(key, (result, error))

    def _remember(self, key: str, hit: tuple[dict | None, str | None]) -> None:
        with self._lock:
            self._mem[key] = hit
            self._mem.move_to_end(key)
            while len(self._mem) > self._cap:
                self._mem.popitem(last=False)

    def pages(self, identity: str) -> list[dict[str, Any]]:
        """Every page recorded as opened through ``identity`` (what a web-built pack's index is made of)."""
        with Session(self.store.engine) as s:
            rows = s.scalars(select(SearchCall).where(SearchCall.backend == identity, SearchCall.op == "open",
                                                      SearchCall.error.is_(None)).order_by(SearchCall.id))
            return [r.result for r in rows if r.result is not None]

    def count(self, identity: str | None = None) -> int:
        with Session(self.store.engine) as s:
            q = select(SearchCall.id)
            if identity is not None:
                q = q.where(SearchCall.backend == identity)
            return len(s.scalars(q).all())


class CachedBackend(PageBackend):
    """``inner`` behind a SearchCache. Modes: ``auto`` answers from the cache and records misses; ``record``
    always asks ``inner`` and overwrites; ``replay`` answers only from the cache (a miss is an error).

    Agent mistakes (ValueError: no such page) are recorded and replayed as the same error; outages
    (SearchUnavailable) are not recorded, so a later run can still get the real answer.
    """

    name = "cached"

    def __init__(self, inner: PageBackend, cache: SearchCache, mode: CacheMode = "auto"):
        if mode not in ("auto", "record", "replay"):
            raise InputError(f"unknown search cache mode {mode!r}; use auto, record or replay")
        self.inner, self.cache, self.mode = inner, cache, mode
        self.hits = self.misses = 0

    @property
    def identity(self) -> str:
        return self.inner.identity

    def _call(self, op: str, args: dict[str, Any], fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        key = SearchCache.key(self.identity, op, args)
        if self.mode != "record":
            hit = self.cache.get(key)
            if hit is not None:
                self.hits += 1
                result, error = hit
                if error is not None:
                    raise ValueError(error)
                return result
            if self.mode == "replay":
                raise SearchUnavailable(f"{op}({json.dumps(args, ensure_ascii=False)}) was not recorded; replay mode "
                                        "answers only recorded calls (run in auto mode once to record it)")
        self.misses += 1
        try:
            result = fn()
        except ValueError as e:
            self.cache.put(key, self.identity, op, args, None, str(e), replace=self.mode == "record")
            raise
        self.cache.put(key, self.identity, op, args, result, None, replace=self.mode == "record")
        return result

    def query(self, query: str, limit: int = 5, lang: str | None = None) -> dict[str, Any]:
        args = {"query": query, "limit": limit, "lang": lang or ""}
        return self._call("search", args, lambda: self.inner.query(query, limit, lang))

    def open(self, id_or_url: str) -> dict[str, Any]:
        return self._call("open", {"id_or_url": id_or_url}, lambda: self.inner.open(id_or_url))

    def pages(self) -> list[dict[str, Any]]:
        return self.cache.pages(self.identity)


def page_backend(kind: str = "local", *, index: str | os.PathLike | None = None, cache: SearchCache | None = None,
                 cache_mode: CacheMode = "auto", **options: Any) -> PageBackend:
    """A page backend by name (``local`` needs ``index``), behind ``cache`` when one is given."""
    if kind == "local":
        backend: PageBackend = LocalBackend(index)
    elif kind == "web":
        backend = WebBackend(**options)
    else:
        raise InputError(f"unknown page backend {kind!r}; the search family reads pages from 'local' or 'web'")
    return CachedBackend(backend, cache, cache_mode) if cache is not None else backend


def agent_tools(backend: PageBackend) -> list[Callable[..., Any]]:
    """``search`` and ``open`` as host functions with the pack tools' signatures and docstrings, so a
    generator agent is offered exactly the schemas a pack's agent will see."""
    mod = search_tools_module()

    def search(query: str, limit: int = 5, lang: str = "") -> dict:
        return backend.query(query, limit, lang or None)

    def open(id_or_url: str) -> dict:  # noqa: A001 (the tool's name)
        return backend.open(id_or_url)

    search.__doc__, open.__doc__ = mod.search.__doc__, mod.open.__doc__
    return [search, open]


register_backend("local", LocalBackend)
