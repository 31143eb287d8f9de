"""Corpora for the search family: ingest, the SQLite FTS5 index, long-tail entity mining and sampling.

A corpus is a stream of ``Doc`` (id, title, text, url, lang, domain, links) read from a JSONL file
(optionally gzipped), a folder of text/Markdown/HTML files, or a Hugging Face ``datasets`` dataset
(an object, a ``save_to_disk`` folder, or ``hf:NAME``). ``build_index`` writes it into one SQLite file
with an external-content FTS5 table; the search tools read that file in the sandbox with the stdlib
alone (``envs/search/env/tools.py``), so a pack carries its index in ``env/state/corpus.sqlite``.

Entities are what questions start from: page titles and named-entity spans (capitalised runs) in the
text. Each gets a long-tail score from how many documents mention it and how many pages link to it:
the rarer, the closer to 1. ``sample_entities`` draws across (domain, language) buckets so a build is
not all one kind of page. Languages come from the documents when they say, else from ``langdetect``
(extra ``search``) when installed, else from a small stdlib detector (scripts + stopwords).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import random
import re
import sqlite3
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import InputError
from ..paths import bundled

INDEX_SCHEMA = 1
TOKENIZER = "unicode61 remove_diacritics 2"
TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}


def shipped_corpus() -> Path:
    """The corpus that ships with envgen: pages rendered from GeoNames, countryinfo and pycountry data."""
    return bundled("data") / "corpus" / "geo.jsonl.gz"


@dataclass
class Doc:
    """One page of a corpus. ``facts`` is structured data a page was rendered from (offline generators only)."""

    id: str
    title: str
    text: str
    url: str | None = None
    lang: str | None = None
    domain: str | None = None
    links: list[str] = field(default_factory=list)
    facts: dict[str, Any] | None = None

    @classmethod
    def from_record(cls, rec: dict[str, Any], where: str, *, id_field: str = "id", title_field: str = "title",
                    text_field: str = "text") -> Doc:
        text = rec.get(text_field)
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: field {text_field!r} is missing or empty (the page text)")
        title = rec.get(title_field)
        if not isinstance(title, str) or not title.strip():
            title = text.strip().splitlines()[0][:120]
        ident = rec.get(id_field)
        if ident is None or str(ident).strip() == "":
            ident = rec.get("url") or "doc-" + hashlib.sha1(text.encode()).hexdigest()[:16]
        links = rec.get("links") or []
        if not isinstance(links, list):
            raise InputError(f"{where}: field 'links' must be a list of page ids or URLs")
        return cls(id=str(ident).strip(), title=title.strip(), text=text.strip(), url=rec.get("url") or None,
                   lang=rec.get("lang") or None, domain=rec.get("domain") or None,
                   links=[str(x) for x in links], facts=rec.get("facts"))


# ----------------------------------------------------------------------------- HTML and language


class _TextExtractor(HTMLParser):
    """Visible text, the <title> and <a href> targets of an HTML page (stdlib only)."""

    SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    BLOCK = {"p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table", "section",
             "article", "header", "footer", "blockquote", "pre", "dd", "dt"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self.links: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag == "title":
            self._in_title = True
        elif tag in self.SKIP:
            self._skip += 1
        elif tag == "a":
            href = dict(attrs).get("href")
            if href and not href.startswith(("#", "javascript:", "mailto:")):
                self.links.append(href)
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag in self.SKIP and self._skip:
            self._skip -= 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self._in_title:
            self.title_parts.append(data)
        elif not self._skip:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str, str, list[str]]:
    """(title, text, links) of an HTML page: visible text with paragraphs kept, whitespace squeezed."""
    p = _TextExtractor()
    p.feed(html)
    p.close()
    lines = [" ".join(line.split()) for line in "".join(p.parts).splitlines()]
    text = "\n".join(line for line in lines if line)
    return " ".join("".join(p.title_parts).split()), text, p.links


_STOPWORDS = {
    "en": "the of and to in is it that was for on are with as his they at be this from have or by one had not but "
          "what all were when we there can an which their its has",
    "de": "der die und in den von zu das mit sich des auf für ist im dem nicht ein eine als auch es an werden aus er "
          "hat dass sie nach wird bei einer um am sind noch wie einem über",
    "fr": "le la les de des et à un une du en est que qui dans pour pas sur au avec par son il elle sont se ne ce "
          "plus ses aux",
    "es": "el la de que y en los del se las por un para con no una su al es lo como más pero sus le ya o este "
          "entre",
    "it": "il di che e la per un in una è del non sono da della con si le gli al anche nel questo alla",
    "pt": "o de a e que do da em um para com não uma os no se na por mais as dos como mas ao ele das",
    "nl": "de het een en van ik te dat die in is niet op zijn met voor hij aan er maar om ook als bij",
    "sv": "och i att det som en på är av för med till den har de inte om ett var han men",
    "pl": "i w na z się nie do to że jest o jak po co ale od za przez są",
    "tr": "ve bir bu da de için ile olarak çok daha gibi olan en ne ama kadar sonra",
}
_STOP = {lang: set(words.split()) for lang, words in _STOPWORDS.items()}
_SCRIPTS = [("HIRAGANA", "ja"), ("KATAKANA", "ja"), ("HANGUL", "ko"), ("CJK", "zh"), ("CYRILLIC", "ru"),
            ("ARABIC", "ar"), ("GREEK", "el"), ("HEBREW", "he"), ("DEVANAGARI", "hi"), ("THAI", "th")]
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def heuristic_language(text: str) -> str | None:
    """A stdlib guess: the dominant non-Latin script, else the Latin language with most stopword hits."""
    counts: Counter = Counter()
    latin = 0
    for ch in text[:4000]:
        if not ch.isalpha():
            continue
        name = unicodedata.name(ch, "")
        if "LATIN" in name:
            latin += 1
            continue
        for key, lang in _SCRIPTS:
            if key in name:
                counts[lang] += 1
                break
    if counts and counts.most_common(1)[0][1] > latin:
        script = counts.most_common(1)[0][0]
        return "ja" if script == "zh" and (counts["ja"] > 0) else script
    words = [w.lower() for w in _WORD.findall(text[:4000])]
    if not words:
        return None
    score = {lang: sum(w in stop for w in words) for lang, stop in _STOP.items()}
    best = max(sorted(score), key=lambda lang: score[lang])
    return best if score[best] >= 2 else None


_LANGDETECT: Any = None


def detect_text_language(text: str) -> str | None:
    """ISO 639-1 code of ``text``: langdetect (seeded, so repeatable) when installed, else the stdlib heuristic."""
    global _LANGDETECT
    if _LANGDETECT is None:
        try:
            from langdetect import DetectorFactory, detect

            DetectorFactory.seed = 0
            _LANGDETECT = detect
        except ImportError:
            _LANGDETECT = False
    if _LANGDETECT:
        try:
            return _LANGDETECT(text[:4000]).split("-")[0]
        except Exception:  # langdetect raises on text without features (numbers only)
            return heuristic_language(text)
    return heuristic_language(text)


def language_detector() -> str:
    detect_text_language("")
    return "langdetect" if _LANGDETECT else "heuristic"


# ----------------------------------------------------------------------------- reading corpora


def _read_jsonl(path: Path, **fields: str) -> Iterator[Doc]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
            if not isinstance(rec, dict):
                raise InputError(f"{path}:{lineno}: each line must be a JSON object")
            yield Doc.from_record(rec, f"{path}:{lineno}", **fields)


def _read_folder(root: Path) -> Iterator[Doc]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES | HTML_SUFFIXES)
    if not files:
        raise InputError(f"{root}: no .txt, .md or .html files to read")
    for p in files:
        rel = p.relative_to(root).as_posix()
        raw = p.read_text(encoding="utf-8", errors="replace")
        links: list[str] = []
        if p.suffix.lower() in HTML_SUFFIXES:
            title, text, hrefs = html_to_text(raw)
            for href in hrefs:
                target = href.split("#", 1)[0]
                if target and "://" not in target:
                    target = os.path.normpath(os.path.join(os.path.dirname(rel), target)).replace(os.sep, "/")
                if target:
                    links.append(target)
        else:
            text = raw.strip()
            first = text.splitlines()[0] if text else ""
            title = first.lstrip("# ").strip() if first.startswith("#") or len(first) < 120 else ""
        if not text.strip():
            continue
        yield Doc(id=rel, title=title or p.stem.replace("_", " "), text=text, links=links,
                  domain=rel.split("/", 1)[0] if "/" in rel else None)


def _read_dataset(ds: Any, **fields: str) -> Iterator[Doc]:
    for i, rec in enumerate(ds):
        rec = dict(rec)
        rec.setdefault(fields.get("id_field", "id"), str(i))
        yield Doc.from_record(rec, f"dataset row {i}", **fields)


def read_docs(source: Any, *, split: str = "train", id_field: str = "id", title_field: str = "title",
              text_field: str = "text", limit: int | None = None) -> Iterator[Doc]:
    """Documents from a JSONL(.gz) file, a folder of text/HTML, a ``datasets`` dataset object, a
    ``save_to_disk`` folder, or ``hf:NAME[:CONFIG]`` (loaded with ``datasets.load_dataset``)."""
    fields = {"id_field": id_field, "title_field": title_field, "text_field": text_field}
    if not isinstance(source, (str, os.PathLike)):
        it = _read_dataset(source, **fields)
    elif str(source).startswith("hf:"):
        import datasets

        name, _, config = str(source)[3:].partition(":")
        try:
            ds = datasets.load_dataset(name, config or None, split=split)
        except Exception as e:
            raise InputError(f"{source}: cannot load the dataset ({type(e).__name__}: {e})") from None
        it = _read_dataset(ds, **fields)
    else:
        path = Path(source)
        if not path.exists():
            raise InputError(f"{path}: no such corpus (give a .jsonl file, a folder of text/HTML, or hf:NAME)")
        if path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "state.json").is_file()
                              or (path / "dataset_dict.json").is_file()):
            import datasets

            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise InputError(f"{path}: no split {split!r}; it has {', '.join(ds)}")
                ds = ds[split]
            it = _read_dataset(ds, **fields)
        elif path.is_dir():
            it = _read_folder(path)
        elif path.name.endswith((".jsonl", ".jsonl.gz", ".json", ".ndjson")):
            it = _read_jsonl(path, **fields)
        else:
            raise InputError(f"{path}: unknown corpus format (use .jsonl, .jsonl.gz, a folder, or hf:NAME)")
    for n, doc in enumerate(it):
        if limit is not None and n >= limit:
            return
        yield doc


# ----------------------------------------------------------------------------- the index


@dataclass
class IndexStats:
    path: Path
    docs: int
    languages: dict[str, int]
    domains: dict[str, int]
    bytes: int
    seconds: float
    detector: str


_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE docs (rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT NOT NULL, url TEXT UNIQUE,
                   lang TEXT, domain TEXT, text TEXT NOT NULL, links TEXT NOT NULL DEFAULT '[]');
CREATE VIRTUAL TABLE docs_fts USING fts5(title, text, content='docs', content_rowid='rowid',
                                         tokenize='{TOKENIZER}');
CREATE TABLE common_terms (term TEXT PRIMARY KEY) WITHOUT ROWID;
"""
COMMON_SHARE = 0.15
"""Terms in more than this share of pages are 'common': the search tools' any-word pass skips them, since
ranking every page that says "population" costs milliseconds and finds nothing the rare words do not."""


def check_fts5() -> None:
    """Raise a clear error when this Python's SQLite lacks FTS5 (the index needs it)."""
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    except sqlite3.OperationalError:
        raise InputError(f"this Python's SQLite ({sqlite3.sqlite_version}) has no FTS5; the search index needs "
                          "it (use a Python built against a SQLite with FTS5, as the python.org and distro "
                          "builds are)") from None


def build_index(docs: Iterable[Doc], path: str | os.PathLike, *, detect: bool = True) -> IndexStats:
    """Write ``docs`` to a fresh FTS5 index at ``path`` (atomically: a temp file renamed into place).

    Pages without a language get one from ``detect_text_language`` when ``detect``; duplicate ids are an error
    (they would make ``open`` ambiguous), duplicate URLs keep the first page's.
    """
    check_fts5()
    t0 = time.perf_counter()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)
    langs: Counter = Counter()
    domains: Counter = Counter()
    seen: set[str] = set()
    urls: set[str] = set()
    n = 0
    try:
        con = sqlite3.connect(tmp)
        con.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA page_size=4096;" + _SCHEMA)
        rows = []
        for doc in docs:
            if doc.id in seen:
                raise InputError(f"corpus: page id {doc.id!r} appears twice; ids must be unique")
            seen.add(doc.id)
            lang = doc.lang or (detect_text_language(doc.title + "\n" + doc.text) if detect else None)
            url = doc.url if doc.url and doc.url not in urls else None
            if url:
                urls.add(url)
            langs[lang or "unknown"] += 1
            domains[doc.domain or "unknown"] += 1
            n += 1
            links = json.dumps(doc.links, ensure_ascii=False)
            rows.append((n, doc.id, doc.title, url, lang, doc.domain, doc.text, links))
            if len(rows) >= 2000:
                con.executemany("INSERT INTO docs VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
                rows.clear()
        if rows:
            con.executemany("INSERT INTO docs VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        if n == 0:
            raise InputError("corpus: no documents to index")
        con.execute("INSERT INTO docs_fts(docs_fts) VALUES ('rebuild')")
        con.execute("INSERT INTO docs_fts(docs_fts) VALUES ('optimize')")
        con.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, docs_fts, row)")
        con.execute("INSERT INTO common_terms SELECT term FROM temp.vocab WHERE doc > ?",
                    (max(50, int(n * COMMON_SHARE)),))
        con.execute("DROP TABLE temp.vocab")
        detector = language_detector() if detect else "none"
        meta = {"schema": str(INDEX_SCHEMA), "tokenizer": TOKENIZER, "docs": str(n), "detector": detector}
        con.executemany("INSERT INTO meta VALUES (?, ?)", sorted(meta.items()))
        con.commit()
        con.execute("VACUUM")
        con.close()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return IndexStats(path=path, docs=n, languages=dict(langs.most_common()), domains=dict(domains.most_common()),
                      bytes=path.stat().st_size, seconds=time.perf_counter() - t0, detector=detector)


def open_index(path: str | os.PathLike) -> sqlite3.Connection:
    """A read-only connection to an index built by ``build_index``; a clear error for anything else."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no search index (build one with `envgen index CORPUS --out {p}`)")
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True, check_same_thread=False)
    con.row_factory = sqlite3.Row
    try:
        schema = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.DatabaseError:
        con.close()
        raise InputError(f"{p}: not a search index (no meta table)") from None
    if schema is None or int(schema[0]) != INDEX_SCHEMA:
        con.close()
        raise InputError(f"{p}: index schema {schema and schema[0]} is not {INDEX_SCHEMA}; rebuild it")
    return con


def index_corpus(source: Any, out: str | os.PathLike, **read_options: Any) -> IndexStats:
    """``read_docs(source)`` into ``build_index(out)``: the `envgen index` command."""
    return build_index(read_docs(source, **read_options), out)


# ----------------------------------------------------------------------------- entities


@dataclass
class Entity:
    """A candidate question seed: a name, where it comes from, and how long-tail it is."""

    name: str
    kind: str
    """``title`` (a page is about it) or ``span`` (a capitalised run in some page's text)."""
    doc_id: str
    """Its own page for titles; the first page mentioning it for spans."""
    lang: str | None
    domain: str | None
    df: int
    """Documents whose text or title mentions the name (its own page included)."""
    inlinks: int
    """Pages linking to its page (titles only)."""
    score: float
    """Long-tail score in (0, 1]: 1 / (1 + ln(df) + ln(1 + inlinks)); rarer names score higher."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_CONNECT = {"de", "del", "della", "di", "da", "do", "dos", "das", "du", "des", "la", "le", "les", "el", "al", "van",
            "von", "der", "den", "of", "the", "upon", "on", "am", "an", "im", "sur", "en"}
_OPENERS = {"The", "It", "Its", "In", "A", "An", "This", "That", "These", "Those", "He", "She", "They", "Their",
            "There", "According", "Other", "Le", "La", "Les", "Der", "Die", "Das", "El", "Los", "Las", "Un",
            "Une", "Ein", "Eine", "Sie", "Es", "Er", "Il", "Elle", "Se", "Ses", "Sus", "Su", "Seine", "Laut",
            "Selon", "Según", "Land", "Pays", "Languages", "Largest", "Andere", "Autres", "Otros", "Nearest"}
_TOKEN = re.compile(r"[^\W\d_][\w'’.-]*", re.UNICODE)


def entity_spans(text: str, max_words: int = 6) -> list[str]:
    """Named-entity spans: runs of capitalised words, allowing lowercase connectors inside ("Sant Julià de
    Lòria"), skipping a lone capitalised word that merely opens a sentence."""
    out: list[str] = []
    for sentence in re.split(r"(?<=[.!?;:])\s+|\n+", text):
        toks = list(_TOKEN.finditer(sentence))
        i = 0
        while i < len(toks):
            w = toks[i].group().rstrip(".")
            if not (w[:1].isupper() and not w.isupper() or (w.isupper() and len(w) > 1 and w.isalpha())):
                i += 1
                continue
            if w.isupper() and len(w) <= 3:  # codes (ISO, IATA) are not names
                i += 1
                continue
            j, words = i + 1, [w]
            while j < len(toks) and len(words) < max_words:
                if sentence[toks[j - 1].end():toks[j].start()].strip():  # a comma or bracket ends the run
                    break
                nxt = toks[j].group().rstrip(".")
                if nxt[:1].isupper():
                    words.append(nxt)
                    j += 1
                elif nxt in _CONNECT and j + 1 < len(toks) and toks[j + 1].group()[:1].isupper():
                    words.append(nxt)
                    j += 1
                else:
                    break
            while words and words[-1] in _CONNECT:
                words.pop()
            if i == 0 and len(words) == 1 and words[0] in _OPENERS:
                i = j
                continue
            if words and words[0] in _OPENERS and len(words) > 1 and i == 0:
                words = words[1:]
            name = " ".join(words)
            if len(name) >= 3 and name not in _OPENERS:
                out.append(name)
            i = j
    return out


def mine_entities(index: str | os.PathLike, *, spans: bool = True, max_spans: int = 20000) -> list[Entity]:
    """Every page title, and (``spans``) the most frequent named-entity spans that are not titles, each
    scored by document frequency (an FTS5 phrase count) and in-links. Sorted most long-tail first."""
    con = open_index(index)
    try:
        rows = con.execute("SELECT rowid, id, title, url, lang, domain, text, links FROM docs "
                           "ORDER BY rowid").fetchall()
        inlinks: Counter = Counter()
        url_to_id = {r["url"]: r["id"] for r in rows if r["url"]}
        for r in rows:
            for target in set(json.loads(r["links"])):
                inlinks[url_to_id.get(target, target)] += 1
        cands: dict[str, tuple[str, str, str | None, str | None]] = {}
        for r in rows:
            if r["title"] not in cands:
                cands[r["title"]] = ("title", r["id"], r["lang"], r["domain"])
        if spans:
            counts: Counter = Counter()
            first: dict[str, Any] = {}
            for r in rows:
                for name in set(entity_spans(r["text"])):
                    if name not in cands:
                        counts[name] += 1
                        first.setdefault(name, r)
            for name, _ in counts.most_common(max_spans):
                r = first[name]
                cands[name] = ("span", r["id"], r["lang"], r["domain"])
        out = []
        for name, (kind, doc_id, lang, domain) in cands.items():
            df = _df(con, name)
            links = inlinks.get(doc_id, 0) if kind == "title" else 0
            score = 1.0 / (1.0 + math.log(max(df, 1)) + math.log1p(links))
            out.append(Entity(name, kind, doc_id, lang, domain, df, links, round(score, 6)))
    finally:
        con.close()
    out.sort(key=lambda e: (-e.score, e.name, e.doc_id))
    return out


def _df(con: sqlite3.Connection, name: str) -> int:
    words = re.findall(r"\w+", name.lower())
    if not words:
        return 1
    phrase = '"' + " ".join(words).replace('"', '""') + '"'
    try:
        return int(con.execute("SELECT count(*) FROM docs_fts WHERE docs_fts MATCH ?", (phrase,)).fetchone()[0])
    except sqlite3.OperationalError:
        return 1


def sample_entities(entities: list[Entity], n: int, seed: int = 0, *, min_score: float = 0.0,
                    kinds: tuple[str, ...] = ("title",), by: tuple[str, ...] = ("domain", "lang")) -> list[Entity]:
    """``n`` entities, round-robin over (domain, language) buckets so each kind of page gets its share;
    within a bucket a seeded draw weighted by long-tail score (rarer first, but not always the same)."""
    pool = [e for e in entities if e.score >= min_score and e.kind in kinds]
    buckets: dict[tuple, list[Entity]] = defaultdict(list)
    for e in pool:
        buckets[tuple(getattr(e, k) or "unknown" for k in by)].append(e)
    rng = random.Random(f"entities:{seed}")
    order: dict[tuple, list[Entity]] = {}
    for key in sorted(buckets):
        items = sorted(buckets[key], key=lambda e: (e.name, e.doc_id))
        # Efraimidis-Spirakis: key u^(1/w) gives a weighted sample without replacement, in order.
        order[key] = sorted(items, key=lambda e: -(rng.random() ** (1.0 / max(e.score, 1e-6))))
    out: list[Entity] = []
    keys = sorted(order)
    while len(out) < n and any(order[k] for k in keys):
        for k in keys:
            if order[k] and len(out) < n:
                out.append(order[k].pop(0))
    return out
