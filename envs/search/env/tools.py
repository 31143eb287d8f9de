"""Search tools: full-text search over an offline encyclopedia, and reading its pages.

Runs inside the sandbox (stdlib only, Python 3.8+, SQLite with FTS5) with the episode's work dir as the
current directory; the index is ``state/corpus.sqlite``, built on the host by ``envgen.retrieval.corpus``. The host
loads this same file for its ``local`` search backend, so generator agents and a pack's agents see the
same results for the same query.
"""

import json
import re
import sqlite3

DB = "state/corpus.sqlite"  # the database the tools use, relative to the work dir; ToolRecorder(tools, db=...) points it elsewhere
_CON = None
_CON_PATH = None
MAX_LIMIT = 20
_WORD = re.compile(r"\w+", re.UNICODE)


def _connect():
    """One read-only connection per process and index file (the index never changes during an episode)."""
    global _CON, _CON_PATH
    if _CON is None or _CON_PATH != DB:
        con = sqlite3.connect("file:" + DB + "?mode=ro&immutable=1", uri=True, check_same_thread=False)
        con.row_factory = sqlite3.Row
        _CON, _CON_PATH = con, DB
    return _CON


_COMMON = {}


def _common(con):
    """Terms in many pages (``common_terms``, written by the index build); the any-word pass skips them.
    Cached per index file (connections cannot be weakly referenced, and ids are reused)."""
    key = con.execute("PRAGMA database_list").fetchone()[2]
    if key not in _COMMON:
        try:
            _COMMON[key] = {r[0] for r in con.execute("SELECT term FROM common_terms")}
        except sqlite3.OperationalError:
            _COMMON[key] = set()
    return _COMMON[key]


def _fts_query(words, op):
    return (" " + op + " ").join('"' + w.replace('"', '""') + '"' for w in words)


def _search(con, query, limit=5, lang=None):
    """Ranked hits: every query word first (BM25, titles weighted 8x), then any rare word to fill the page."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError("limit must be a whole number from 1 to %d" % MAX_LIMIT)
    words = [w.lower() for w in _WORD.findall(query)][:32]
    if not words:
        raise ValueError("the query has no words to search for")
    where, params = "", []
    if lang:
        where, params = " AND d.lang = ?", [str(lang).strip().lower()]
    sql = ("SELECT d.id, d.title, d.url, d.lang, snippet(docs_fts, 1, '', '', ' ... ', 18) AS snippet "
           "FROM docs_fts JOIN docs d ON d.rowid = docs_fts.rowid WHERE docs_fts MATCH ?" + where +
           " ORDER BY bm25(docs_fts, 8.0, 1.0), d.rowid LIMIT ?")
    hits, seen = [], set()
    common = _common(con)
    rare = [w for w in words if w not in common] or words
    for op, terms in (("AND", words), ("OR", rare)):
        if len(hits) >= limit or (op == "OR" and len(terms) == 1 and terms == words):
            break
        for row in con.execute(sql, [_fts_query(terms, op)] + params + [limit]):
            if row["id"] not in seen and len(hits) < limit:
                seen.add(row["id"])
                hit = {"id": row["id"], "title": row["title"], "snippet": row["snippet"], "lang": row["lang"]}
                if row["url"]:
                    hit["url"] = row["url"]
                hits.append(hit)
    return {"query": query, "results": hits}


def _open(con, id_or_url):
    """A page by id (as search returns it) or by URL, with the ids and titles of the pages it links to."""
    if not isinstance(id_or_url, str) or not id_or_url.strip():
        raise ValueError("give a page id from the search results, or a page URL")
    ref = id_or_url.strip()
    row = con.execute("SELECT * FROM docs WHERE id = ?", (ref,)).fetchone()
    if row is None:
        row = con.execute("SELECT * FROM docs WHERE url = ?", (ref,)).fetchone()
    if row is None:
        raise ValueError("no page %r; use an id from the search results" % ref)
    links = []
    for target in json.loads(row["links"] or "[]"):
        hit = con.execute("SELECT id, title FROM docs WHERE id = ? OR url = ?", (target, target)).fetchone()
        if hit is not None:
            links.append({"id": hit["id"], "title": hit["title"]})
    page = {"id": row["id"], "title": row["title"], "lang": row["lang"], "text": row["text"], "links": links}
    if row["url"]:
        page["url"] = row["url"]
    return page


def search(query: str, limit: int = 5, lang: str = "") -> dict:
    """Search the encyclopedia. Returns the best-matching pages: id, title and a snippet of the text.

    Args:
        query: words to look for, e.g. a name and a detail ("Escaldes Andorra population")
        limit: how many results to return (1-20)
        lang: only pages in this language ("en", "de", "fr", "es", ...); empty for all languages
    """
    return _search(_connect(), query, limit, lang or None)


def open(id_or_url: str) -> dict:
    """Read one page of the encyclopedia in full, with the pages it links to.

    Args:
        id_or_url: the page id from the search results (e.g. "city/3040051"), or the page's URL
    """
    return _open(_connect(), id_or_url)
