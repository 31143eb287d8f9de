"""Search-family latencies on the shipped corpus: index build, local search, the sandbox round trip,
and the record/replay cache (miss = search + record; hit from memory; hit from the store).

Queries are the names of long-tail entities mined from the corpus, alone and with a second word, as
generator and pack agents write them. Prints p50/p95 of each path side by side; `--write` records them
in bench/RESULTS.md under "## Search". Target: local search p50 <= 5 ms.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_section  # noqa: E402

from envgen.build.offline import build  # noqa: E402
from envgen.retrieval.corpus import build_index, mine_entities, read_docs, shipped_corpus  # noqa: E402
from envgen.pack import load  # noqa: E402
from envgen.sandbox import open_sandbox  # noqa: E402
from envgen.retrieval.pages import CachedBackend, LocalBackend, SearchCache  # noqa: E402
from envgen.store import Store  # noqa: E402

TARGET_MS = 5.0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def timed(fn, items) -> list[float]:
    out = []
    for it in items:
        t = time.perf_counter()
        fn(it)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000, help="queries per path")
    ap.add_argument("--write", action="store_true", help="record the results in bench/RESULTS.md")
    a = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="envgen-bench-search-") as tmp:
        tmp = Path(tmp)
        docs = list(read_docs(shipped_corpus()))
        t = time.perf_counter()
        stats = build_index(docs, tmp / "corpus.sqlite")
        t_index = time.perf_counter() - t
        t = time.perf_counter()
        ents = mine_entities(stats.path)
        t_mine = time.perf_counter() - t
        extra = ["population", "capital", "city", "country", "currency", "time zone", "nearest"]
        names = [e.name for e in ents]
        queries = [rng.choice(names) + ("" if rng.random() < 0.5 else " " + rng.choice(extra)) for _ in range(a.n)]

        local = LocalBackend(stats.path)
        for q in queries[:200]:
            local.query(q, 5)
        direct = timed(lambda q: local.query(q, 5), queries)
        pages = [h["id"] for q in queries[:500] for h in local.query(q, 3)["results"]][: a.n]
        opens = timed(local.open, pages)

        report = build("search", "geo-multihop", tmp / "pack", tasks=9, seed=0, workers=1)
        with open_sandbox(load(report.out)) as sbx:
            sbx.reset()
            for q in queries[:100]:
                sbx.call("search", {"query": q, "limit": 5})
            sandboxed = timed(lambda q: sbx.call("search", {"query": q, "limit": 5}), queries)

        cache = SearchCache(Store(tmp / "state.sqlite"))
        rec = CachedBackend(LocalBackend(stats.path), cache, "auto")
        uniq = list(dict.fromkeys(queries))
        miss = timed(lambda q: rec.query(q, 5), uniq)
        hit_mem = timed(lambda q: rec.query(q, 5), uniq)
        cold = CachedBackend(LocalBackend(stats.path), SearchCache(Store(tmp / "state.sqlite")), "replay")
        hit_store = timed(lambda q: cold.query(q, 5), uniq)
        assert all(cold.query(q, 5) == local.query(q, 5) for q in uniq[:200])  # replay is exact

    rows = [("local search (FTS5, in process)", direct), ("local open", opens),
            ("search through the sandbox (agent's view)", sandboxed), ("cache miss (search + record)", miss),
            ("cache hit, replay from memory", hit_mem), ("cache hit, replay from the store", hit_store)]
    p50 = pct(direct, 0.5)
    lines = [f"`python bench/bench_search.py --write` on {platform.node() or 'host'} "
             f"({platform.python_version()}, {date.today().isoformat()}). Shipped corpus: {stats.docs} pages "
             f"({', '.join(f'{k} {v}' for k, v in stats.languages.items())}), index {stats.bytes / 1e6:.1f} MB "
             f"built in {t_index:.2f} s; {len(ents)} entities mined in {t_mine:.2f} s. Queries: long-tail entity "
             f"names, half with a second word ({len(uniq)} distinct).", "",
             "| path | calls | p50 ms | p95 ms |", "|---|---|---|---|"]
    for name, xs in rows:
        lines.append(f"| {name} | {len(xs)} | {pct(xs, 0.5):.3f} | {pct(xs, 0.95):.3f} |")
    lines += ["", f"cache miss / memory hit (p50): **{pct(miss, 0.5) / max(pct(hit_mem, 0.5), 1e-9):.0f}x**; "
              f"store hit / memory hit: {pct(hit_store, 0.5) / max(pct(hit_mem, 0.5), 1e-9):.0f}x. "
              f"Target local search p50 <= {TARGET_MS:g} ms: {'met' if p50 <= TARGET_MS else 'NOT met'} "
              f"({p50:.3f} ms)."]
    text = "\n".join(lines)
    print(text)
    print(json.dumps({name: {"p50_ms": round(pct(xs, 0.5), 4), "p95_ms": round(pct(xs, 0.95), 4)}
                      for name, xs in rows}))
    if a.write:
        write_section("Search", text)


if __name__ == "__main__":
    main()
