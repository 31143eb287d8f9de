"""The search family: corpus and index, search backends with record/replay, the offline build, the LLM
pipeline's keep rule (against the local fake OpenAI server), and the rubric judge (GRM)."""

from __future__ import annotations

import gzip
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.llm.client import LLMConfig
from envgen.build.offline import build, validate_pack
from envgen.retrieval.corpus import (
    Doc,
    build_index,
    detect_text_language,
    entity_spans,
    heuristic_language,
    html_to_text,
    mine_entities,
    read_docs,
    sample_entities,
    shipped_corpus,
)
from envgen.errors import EnvgenError
from envgen.episodes.gym import ENV_ID
from envgen.llm.judge import JudgedSandbox, JudgeError, Rubric, RubricJudge, parse_judgement, JudgeParseError
from envgen.pack import load
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout
from envgen.build.gate import mutate
from envgen.sandbox import open_sandbox
from envgen.retrieval.search import SearchUnavailable, get_backend
from envgen.retrieval.pages import CachedBackend, LocalBackend, SearchCache, WebBackend, agent_tools
from envgen.store import Store
from envgen.families.search.pipeline import SearchSynthConfig, synthesize_search

try:
    from .fake_llm import Fail, FakeLLM, Reply, tool_names
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from fake_llm import Fail, FakeLLM, Reply, tool_names

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import verify as kit_verify  # noqa: E402


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def geo_docs() -> list[Doc]:
    return list(read_docs(shipped_corpus()))


@pytest.fixture(scope="module")
def geo_index(tmp_path_factory, geo_docs) -> Path:
    path = tmp_path_factory.mktemp("index") / "geo.sqlite"
    build_index(geo_docs, path)
    return path


@pytest.fixture(scope="module")
def geo_pack(tmp_path_factory) -> Path:
    """An offline search pack: 24 tasks, three per template, gated in the build."""
    out = tmp_path_factory.mktemp("packs") / "geo"
    report = build("search", "geo-multihop", out, tasks=24, seed=3, workers=2)
    assert report.proposed == 24 and report.kept == 24, report.rejections
    return out


def llm_cfg(fake: FakeLLM, **kw) -> LLMConfig:
    base = dict(name="test", base_url=fake.url, model="fake-model", api_key="sk-test", timeout=10, max_retries=2,
                backoff_base=0.01, backoff_max=0.02)
    return LLMConfig(**{**base, **kw})


# ----------------------------------------------------------------------------- corpus and index


def test_shipped_corpus_is_real_data_with_licence_and_languages(geo_docs):
    assert len(geo_docs) > 3000
    assert (shipped_corpus().parent / "LICENSE.md").is_file()
    langs = {d.lang for d in geo_docs}
    assert {"en", "de", "fr", "es"} <= langs
    andorra = next(d for d in geo_docs if d.id == "country/AD")
    assert "Its capital is Andorra la Vella." in andorra.text and andorra.facts["iso3"] == "AND"
    assert shipped_corpus().stat().st_size < 3_000_000


def test_read_docs_jsonl_folder_html_and_dataset(tmp_path):
    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"id": "a", "title": "Alpha", "text": "Alpha is a town."}) + "\n\n"
                  + json.dumps({"text": "Beta text only.", "url": "https://x.org/b"}) + "\n")
    docs = list(read_docs(jl))
    assert [d.id for d in docs] == ["a", "https://x.org/b"] and docs[1].title == "Beta text only."
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(jl.read_bytes()))
    assert [d.id for d in read_docs(gz)] == ["a", "https://x.org/b"]

    folder = tmp_path / "site"
    (folder / "places").mkdir(parents=True)
    (folder / "places" / "lyon.html").write_text(
        "<html><head><title>Lyon</title><style>p{}</style></head><body><h1>Lyon</h1><p>Lyon lies on the "
        "<a href='rhone.html'>Rhône</a>.</p><script>var x=1;</script></body></html>")
    (folder / "places" / "rhone.html").write_text("<title>Rhône</title><p>A river.</p>")
    (folder / "notes.md").write_text("# Notes\nSome notes about rivers.")
    docs = {d.id: d for d in read_docs(folder)}
    assert set(docs) == {"places/lyon.html", "places/rhone.html", "notes.md"}
    lyon = docs["places/lyon.html"]
    assert lyon.title == "Lyon" and "Lyon lies on the" in lyon.text and "var x" not in lyon.text
    assert lyon.links == ["places/rhone.html"] and lyon.domain == "places"
    assert docs["notes.md"].title == "Notes"

    import datasets

    ds = datasets.Dataset.from_list([{"title": "Gamma", "text": "Gamma is a city."}, {"title": "", "text": "Delta."}])
    got = list(read_docs(ds))
    assert [(d.id, d.title) for d in got] == [("0", "Gamma"), ("1", "Delta.")]
    ds.save_to_disk(str(tmp_path / "ds"))
    assert [d.title for d in read_docs(tmp_path / "ds")] == ["Gamma", "Delta."]

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "text": "ok"}\n{"id": "y"}\n')
    with pytest.raises(EnvgenError, match=r"bad.jsonl:2: field 'text' is missing"):
        list(read_docs(bad))
    with pytest.raises(EnvgenError, match="appears twice"):
        build_index([Doc("x", "X", "one"), Doc("x", "X", "two")], tmp_path / "dup.sqlite")


def test_language_detection_and_html():
    assert heuristic_language("Die nächste Stadt in dieser Enzyklopädie ist Graz, und sie liegt in der Zeitzone") == "de"
    assert heuristic_language("La ville la plus proche dans cette encyclopédie est Kara, et elle est dans le") == "fr"
    assert heuristic_language("Это город в России") == "ru"
    assert heuristic_language("東京は日本の首都です。ひらがな") == "ja"
    assert detect_text_language("Según GeoNames tiene 20.430 habitantes y se encuentra en la zona horaria de la") == "es"
    title, text, links = html_to_text("<title>T</title><p>a <b>b</b></p><p>c</p><a href='/x'>x</a>")
    assert (title, text.splitlines(), links) == ("T", ["a b", "c", "x"], ["/x"])


def test_entities_spans_longtail_scores_and_sampling(geo_index):
    assert entity_spans("Its capital is Andorra la Vella. Other names: Baariis, Bahliz. It borders Spain "
                        "and France.") == ["Andorra la Vella", "Baariis", "Bahliz", "Spain", "France"]
    ents = mine_entities(geo_index)
    by = {(e.name, e.kind): e for e in ents}
    france, escaldes = by[("France", "title")], by[("les Escaldes", "title")]
    assert france.df > 30 and france.inlinks > 10 and escaldes.df < 10
    assert escaldes.score > france.score  # the rarely mentioned town is the long tail
    assert any(e.kind == "span" for e in ents)
    picked = sample_entities(ents, 16, seed=1)
    assert len(picked) == 16 and len({e.doc_id for e in picked}) == 16
    buckets = {(e.domain, e.lang) for e in picked}
    # one entity per name: a translated city page shares its title with the English one
    assert buckets == {("city", "en"), ("country", "en"), ("country", "de"), ("country", "fr"), ("country", "es")}
    assert sample_entities(ents, 16, seed=1) == picked and sample_entities(ents, 16, seed=2) != picked
    assert sample_entities(ents, 8, seed=1) == picked[:8]  # a larger build extends a smaller one


# ----------------------------------------------------------------------------- search backends


def test_local_backend_is_the_pack_tool_and_fast_enough(geo_pack):
    pack = load(geo_pack)
    backend = get_backend("local", index=geo_pack / "env" / "state" / "corpus.sqlite")
    assert isinstance(backend, LocalBackend)
    with open_sandbox(pack) as sbx:
        sbx.reset()
        for query in ("Escaldes Andorra", "capitale Uruguay", "population"):
            res = sbx.call("search", {"query": query, "limit": 7})
            assert res.ok and json.loads(res.content) == backend.query(query, 7)
        res = sbx.call("open", {"id_or_url": "https://www.geonames.org/countries/AD/"})
        assert json.loads(res.content) == backend.open("country/AD")
        bad = sbx.call("open", {"id_or_url": "city/0"})
        assert not bad.ok and "no page 'city/0'" in bad.content
    german = backend.query("Andorra", 5, "de")["results"]
    assert german and all(h["lang"] == "de" for h in german)
    assert [r.title for r in backend.search("les Escaldes", 2)][0] == "les Escaldes"
    search, open_ = agent_tools(backend)
    assert (search.__name__, open_.__name__) == ("search", "open")
    with pytest.raises(ValueError, match="no words"):
        backend.query("?!", 5)


def test_cache_records_and_replays_exactly(tmp_path, geo_index):
    store = Store(tmp_path / "state.sqlite")
    cache = SearchCache(store)
    live = CachedBackend(LocalBackend(geo_index), cache, "auto")
    first = live.query("Kara Togo", 5)
    page = live.open("country/TG")
    with pytest.raises(ValueError, match="no page"):
        live.open("country/XX")
    assert (live.hits, live.misses) == (0, 3)
    assert live.query("Kara Togo", 5) == first and live.hits == 1

    replay = CachedBackend(LocalBackend(geo_index), SearchCache(Store(tmp_path / "state.sqlite")), "replay")
    assert replay.query("Kara Togo", 5) == first and replay.open("country/TG") == page
    with pytest.raises(ValueError, match="no page"):  # the agent's mistake replays as the same error
        replay.open("country/XX")
    with pytest.raises(SearchUnavailable, match="not recorded"):
        replay.query("Kara", 5)
    assert [p["id"] for p in replay.pages()] == ["country/TG"]
    assert cache.count() == 3


class _Site(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/gone":
            self.send_response(404)
            self.end_headers()
            return
        body = (b"<html><head><title>Kara, Togo</title></head><body><p>Kara is a city in Togo.</p>"
                b"<a href='/region'>Kara Region</a></body></html>")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_web_backend_opens_pages_over_http_and_caches_them(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        web = CachedBackend(WebBackend(timeout=5), SearchCache(Store(tmp_path / "s.sqlite")), "auto")
        page = web.open(f"{base}/kara")
        assert page["title"] == "Kara, Togo" and "Kara is a city in Togo." in page["text"]
        assert page["links"] == [{"id": f"{base}/region", "title": ""}]
        with pytest.raises(ValueError, match="HTTP 404"):
            web.open(f"{base}/gone")
        with pytest.raises(ValueError, match="not an http"):
            web.open("file:///etc/passwd")
    finally:
        server.shutdown()
        server.server_close()
    assert web.open(f"{base}/kara") == page  # the server is gone: the cache answers
    assert [p["id"] for p in web.pages()] == [f"{base}/kara"]


# ----------------------------------------------------------------------------- verifiers


def test_answer_kit_extract_accents_and_rubric_kind():
    check = kit_verify
    spec = {"kind": "answer", "args": {"expected": "Bogotá", "extract": "answer-line", "accents": False}}
    assert check(spec, answer="It is the capital.\n**Answer:** Bogota", calls=[], work_dir=".", hidden_dir=None)["reward"] == 1
    assert check(spec, answer="Answer: Bogota\nAnswer: Lima", calls=[], work_dir=".", hidden_dir=None)["reward"] == 0
    num = {"kind": "answer", "args": {"expected": 6258, "mode": "numeric", "extract": "answer-line", "abs_tol": 0.5}}
    assert check(num, answer="A has 10,000 and B 3,742.\nAnswer: 6,258", calls=[], work_dir=".", hidden_dir=None)["reward"] == 1
    rub = {"kind": "rubric", "args": {"criteria": [{"id": "c1", "text": "Names Lima", "weight": 2}],
                                      "answer": {"expected": "Lima", "extract": "answer-line"}}}
    out = check(rub, answer="Answer: Lima", calls=[], work_dir=".", hidden_dir=None)
    assert out["reward"] == 1 and out["details"]["judge"].startswith("pending")
    with pytest.raises(ValueError, match="weight must be a positive number"):
        check({"kind": "rubric", "args": {"criteria": [{"id": "c1", "text": "x", "weight": 0}], "answer": {}}},
              answer="x", calls=[], work_dir=".", hidden_dir=None)
    with pytest.raises(ValueError, match="only be graded by the host"):
        check({"kind": "rubric", "args": {"criteria": [{"id": "c1", "text": "x"}]}}, answer="x", calls=[],
              work_dir=".", hidden_dir=None)


def test_red_team_mutates_the_final_answer_of_final_text_kinds(geo_pack):
    pack = load(geo_pack)
    numeric = next(t for t in pack.tasks if t.verifier.args["answer"]["mode"] == "numeric")
    calls, answer = mutate(numeric, None)
    assert calls == numeric.reference.calls and answer != numeric.reference.answer
    assert answer.splitlines()[-1] != numeric.reference.answer.splitlines()[-1]


# ----------------------------------------------------------------------------- the offline build


def test_offline_build_validates_and_runs_through_gymnasium(geo_pack):
    pack = load(geo_pack)
    assert len(pack.tasks) == 24 and pack.manifest.family == "search"
    assert len({t.meta["template"] for t in pack.tasks}) == 8
    langs = {t.meta["language"] for t in pack.tasks}
    assert "en" in langs and len(langs) >= 2
    assert all(t.verifier.kind == "rubric" and t.difficulty == len(t.reference.calls) >= 3 for t in pack.tasks)
    assert max(t.meta["depth"] for t in pack.tasks) == 3 and max(t.meta["breadth"] for t in pack.tasks) >= 2
    results = validate_pack(geo_pack, workers=2)
    assert all(r.passed for r in results), [r.reason for r in results if not r.passed]
    env = gymnasium.make(ENV_ID, pack=str(geo_pack))
    try:
        for task in pack.tasks:
            good = rollout(env, OraclePolicy(), task_id=task.id)
            assert good.reward == 1.0 and good.tool_calls == len(task.reference.calls), good.reward_details
            assert rollout(env, NullPolicy(), task_id=task.id).reward == 0.0
    finally:
        env.close()
    again = build("search", "geo-multihop", geo_pack.parent / "again", tasks=24, seed=3, workers=1)
    assert load(again.out).manifest.version == pack.manifest.version  # the same seed builds the same pack


# ----------------------------------------------------------------------------- long-tail questions (issue 12, class 10)


def _world_knowledge(geo_docs: list[Doc]):
    """What a model knows without the encyclopedia: every fact of a country, and of a named city its
    country, time zone, and the well-known cities (capitals, each country's five largest) of that country
    and its neighbours. Not the corpus's own GeoNames figures or "nearest city" links."""
    countries = {d.facts["iso2"]: d.facts for d in geo_docs if d.lang == "en" and d.facts.get("kind") == "country"}
    cities = [d.facts for d in geo_docs if d.lang == "en" and d.facts.get("kind") == "city"]
    by_id = {c["geonameid"]: c for c in cities}
    largest: dict[str, list[str]] = {}
    for c in sorted(cities, key=lambda c: -c["population"]):
        largest.setdefault(c["country"], []).append(c["name"])

    def country_facts(iso: str) -> set[str]:
        f = countries[iso]
        out = {f["name"], f["capital"], f["currency"], f["currency_code"], f["demonym"], f["continent"],
               f["subregion"], f["iso2"], f["iso3"], f["tld"], f["phone"], "+" + f["phone"], str(f["population"]),
               str(f["area"]), *f["languages"], *largest.get(iso, [])[:5]}
        if f.get("capital_id") in by_id:
            out.add(by_id[f["capital_id"]]["timezone"])
        return {v for v in out if v}

    def knows(prompt: str) -> set[str]:
        out: set[str] = set()
        for c in cities:
            if re.search(r"(?<!\w)" + re.escape(c["name"]) + r"(?!\w)", prompt):
                out.add(c["timezone"])
                for iso in [c["country"], *countries[c["country"]]["neighbours"]]:
                    out |= country_facts(iso)
        return out

    return knows


def test_geo_questions_need_the_corpus(geo_pack, geo_docs):
    """No question is answered by world knowledge: every value a model knows about the cities a question names
    (their countries' capitals, currencies, calling codes, neighbours, well-known cities...) scores 0, graded
    with the reference's own tool calls, so the evidence check is not what rejects them; the reference scores
    1 with the same calls. A capital question, as the old templates asked, is answered by the same oracle."""
    pack = load(geo_pack)
    knows = _world_knowledge(geo_docs)
    backend = LocalBackend(geo_pack / "env" / "state" / "corpus.sqlite")
    hidden = str(geo_pack / "hidden")

    def calls_of(task):
        out = []
        for c in task.reference.calls:
            res = (backend.query(c.args["query"], c.args.get("limit", 5), c.args.get("lang"))
                   if c.tool == "search" else backend.open(c.args["id_or_url"]))
            out.append({"tool": c.tool, "args": c.args, "ok": True, "content": json.dumps(res, ensure_ascii=False)})
        return out

    def reward(verifier, text, calls, task):
        return kit_verify(verifier, answer=text, calls=calls, work_dir=".", hidden_dir=hidden,
                          prompt=[m.model_dump() for m in task.prompt])["reward"]

    checked = 0
    for task in pack.tasks:
        assert not re.search(r"capital|currency|calling code|Hauptstadt|Währung|monnaie|moneda",
                             task.prompt[0].content, re.I), task.id
        calls = calls_of(task)
        spec = task.verifier.model_dump()
        assert reward(spec, task.reference.answer, calls, task) == 1.0, task.id
        question = task.verifier.args["question"]
        guesses = knows(question)
        assert guesses, f"{task.id}: the oracle knows nothing of {question!r}"
        for guess in guesses:
            assert reward(spec, f"Answer: {guess}", calls, task) == 0.0, (task.id, guess)
            checked += 1
    assert checked > 20 * len(pack.tasks)
    # the positive control: the old "capital of the country of X" question falls to the same oracle
    task = next(t for t in pack.tasks if t.meta["template"] == "nearest-pop")
    start = next(d.facts for d in geo_docs if d.id == task.meta["entity"]["page"])
    capital = next(d.facts["capital"] for d in geo_docs if d.id == f"country/{start['country']}")
    old = {"kind": "answer", "args": {"expected": capital, "mode": "exact", "extract": "answer-line"}}
    assert any(reward(old, f"Answer: {g}", [], task) == 1.0 for g in knows(task.verifier.args["question"]))


def test_geo_name_answers_are_neither_capitals_nor_big_cities(geo_pack, geo_docs):
    """A name answer ("which city ...") is never one a model would guess: a capital or a country's top five."""
    pack = load(geo_pack)
    cities = {d.title: d.facts for d in geo_docs if d.lang == "en" and d.facts.get("kind") == "city"}
    top = set()
    for iso in {c["country"] for c in cities.values()}:
        ranked = sorted((c for c in cities.values() if c["country"] == iso), key=lambda c: -c["population"])
        top.update(c["name"] for c in ranked[:5])
    names = [t for t in pack.tasks if t.verifier.args["answer"]["mode"] == "exact"]
    assert len(names) >= 6
    for t in names:
        gold = cities[t.verifier.args["answer"]["expected"]]
        assert not gold["is_capital"] and gold["name"] not in top, t.id
        assert t.verifier.args["answer"]["candidates"] == "names/city.txt"


# ----------------------------------------------------------------------------- the LLM pipeline


SOUTH_AMERICA = {"UY", "AR", "BR", "PY", "BO", "CL"}


def small_corpus(tmp_path: Path, geo_docs: list[Doc]) -> Path:
    keep = []
    for d in geo_docs:
        f = d.facts or {}
        if d.lang == "en" and (f.get("iso2") in SOUTH_AMERICA or f.get("country") in SOUTH_AMERICA):
            keep.append({"id": d.id, "title": d.title, "text": d.text, "url": d.url, "lang": d.lang,
                         "domain": d.domain, "links": d.links})
    path = tmp_path / "south-america.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in keep))
    return path


class Script:
    """The scripted models of the pipeline: what each role does, per entity scenario."""

    def __init__(self, truth: dict[str, str], scenario: dict[str, str]):
        self.truth, self.scenario = truth, scenario

    def __call__(self, body):
        names = tool_names(body)
        msgs = body["messages"]
        user = next(m["content"] for m in msgs if m["role"] == "user")
        turn = sum(1 for m in msgs if m["role"] == "assistant")
        pages = [json.loads(m["content"]) for m in msgs if m["role"] == "tool" and m["content"].startswith("{")]
        last = pages[-1] if pages else None
        if "submit_question" in names:
            name = re.search(r"Entity: (.+?) \(language", user).group(1)
            page = re.search(r"Its page: (\S+)", user).group(1)
            if turn == 0:
                return Reply(reasoning="Open the entity's page first.", calls=[("open", {"id_or_url": page})])
            if turn == 1:
                country = next(ln["id"] for ln in last["links"] if ln["id"].startswith("country/"))
                return Reply(calls=[("open", {"id_or_url": country})])
            capital = re.search(r"Its capital is (.+?)\. ", last["text"]).group(1)
            if turn == 2:  # first a bad submission: evidence never opened
                return Reply(calls=[("submit_question", {"question": "q", "answer": capital, "evidence": ["city/1"]})])
            return Reply(calls=[("submit_question", {
                "question": f"The city of {name} lies in some country. What is the capital of that country?",
                "answer": capital, "evidence": [page, last["id"]], "path": f"{name} -> {last['title']} -> capital"})])
        name = re.search(r"The city of (.+?) lies", user).group(1)
        truth, scenario = self.truth[name], self.scenario[name]
        if "submit_verdict" in names:
            pass_no = int(re.search(r"verification pass (\d) of", user).group(1))
            ids = re.findall(r"^- (A\d+): (.*)$", user, re.M)
            supported = not (scenario == "unverified" or (scenario == "flaky" and pass_no == 2))
            return Reply(calls=[("submit_verdict", {
                "supported": supported, "unique": True, "notes": f"pass {pass_no}",
                "candidates": [{"id": i, "correct": truth in text and scenario != "lucky"} for i, text in ids]})])
        if "submit_rubric" in names:
            return Reply(calls=[("submit_rubric", {
                "criteria": [{"text": f"Names {truth} as the capital", "weight": 3},
                             {"text": "Identifies the country", "weight": 1}],
                "pitfalls": [{"text": "Gives the capital of a neighbouring country", "penalty": 0.5}]})])
        # answer agents: deep-search finds it for "easy", closed-book guesses it for "lucky"
        deep = "You are the deep searcher." in msgs[0]["content"]
        if scenario == "easy" and deep:
            return Reply(content=f"I looked it up.\nAnswer: {truth}")
        if scenario == "lucky" and not names:
            return Reply(content=f"Answer: {truth}")
        return Reply(content="Answer: Atlantis")


def test_pipeline_keeps_only_verified_questions_every_answer_agent_gets_wrong(tmp_path, geo_docs):
    corpus = small_corpus(tmp_path, geo_docs)
    config = SearchSynthConfig.model_validate({
        "domains": ["city"], "verify_passes": 2,
        "answerers": [{"name": "closed-book", "tools": False, "max_turns": 1},
                      {"name": "quick-search", "max_turns": 4},
                      {"name": "deep-search", "max_turns": 8, "note": "You are the deep searcher."}]})
    # Which entities the build samples is deterministic: learn them the same way to script scenarios.
    index = tmp_path / "probe.sqlite"
    build_index(read_docs(corpus), index)
    ents = sample_entities([e for e in mine_entities(index, spans=False) if e.domain == "city"], 5, seed=7)
    facts = {d.id: d.facts for d in geo_docs}
    truth = {}
    for e in ents:
        country = facts[e.doc_id]["country"]
        truth[e.name] = facts[f"country/{country}"]["capital"]
    names = [e.name for e in ents]
    scenario = dict(zip(names, ["keep", "easy", "unverified", "flaky", "lucky"]))
    with FakeLLM(Script(truth, scenario)) as fake:
        kw = dict(llm=llm_cfg(fake), corpus=corpus, questions=5, seed=7, config=config,
                  store_url=str(tmp_path / "state.sqlite"), workers=1, work_dir=tmp_path / "work")
        report = synthesize_search(tmp_path / "pack", **kw)
        assert not fake.errors
        paid = len(fake.log)
        assert report.details["entities"] == 5 and report.details["constructed"] == 5 and report.kept == 1, report.summary()
        assert report.details["dropped_by_reason"] == {"answered correctly": 2, "verifier: ground truth not supported": 2}
        pack = load(tmp_path / "pack")
        (task,) = pack.tasks
        kept_name = names[0]
        assert task.meta["entity"]["name"] == kept_name and task.meta["constructor"] == "chain"
        assert task.verifier.kind == "rubric" and task.verifier.args["answer"]["expected"] == truth[kept_name]
        assert [c["id"] for c in task.verifier.args["criteria"]] == ["c1", "c2"]
        assert [c.tool for c in task.reference.calls] == ["search", "open", "open"]
        assert {c["agent"] for c in task.meta["candidates"]} == {"closed-book", "quick-search", "deep-search"}
        env = gymnasium.make(ENV_ID, pack=str(tmp_path / "pack"))
        try:
            assert rollout(env, OraclePolicy(), task_id=task.id).reward == 1.0
        finally:
            env.close()

        # the evidence check made the constructor resubmit; the thinking was sent back within the turn
        cons = [r.body for r in fake.log if "submit_question" in tool_names(r.body)]
        assert any("was not opened in this session" in m.get("content", "") for b in cons for m in b["messages"])
        assert any(m.get("reasoning_content") for b in cons for m in b["messages"] if m["role"] == "assistant")

        # resume: every stage is done, nothing is asked again
        again = synthesize_search(tmp_path / "pack2", **kw)
        assert len(fake.log) == paid and again.kept == 1
        assert load(tmp_path / "pack2").tasks[0].id == task.id

        # a looser keep rule (one correct answer allowed) keeps the "easy" question too, replaying paid calls
        loose = config.model_copy(update={"keep": config.keep.model_copy(update={"max_correct": 1})})
        rep = synthesize_search(tmp_path / "pack3", **{**kw, "config": loose})
        assert rep.kept == 3  # keep, easy (one correct) and lucky (one correct)
        assert len(fake.log) == paid + 2  # only the two new rubrics were asked for


# ----------------------------------------------------------------------------- the rubric judge


RUBRIC = Rubric(question="What is the capital of Uruguay?", reference_answer="Montevideo",
                criteria=[{"id": "c1", "text": "Names Montevideo", "weight": 3},
                          {"id": "c2", "text": "Says Uruguay", "weight": 1}],
                pitfalls=[{"id": "p1", "text": "Names Buenos Aires", "penalty": 0.5}])


def judgement(c1, c2, p1, fenced=False) -> str:
    obj = json.dumps({"criteria": {"c1": {"score": c1, "reason": "."}, "c2": {"score": c2, "reason": "."}},
                      "pitfalls": {"p1": {"hit": p1, "reason": "."}}})
    return f"Here is my grade.\n```json\n{obj}\n```" if fenced else f"<think>hmm {{not json}}</think>{obj}"


def test_parse_judgement_is_deterministic_and_strict():
    assert parse_judgement(judgement(1, 0.5, False), RUBRIC) == ({"c1": 1.0, "c2": 0.5}, {"p1": False})
    assert parse_judgement(judgement(True, False, True, fenced=True), RUBRIC) == ({"c1": 1.0, "c2": 0.0}, {"p1": True})
    listed = json.dumps({"criteria": [{"id": "c1", "score": 1}, {"id": "c2", "score": 1}],
                         "pitfalls": [{"id": "p1", "hit": False}]})
    assert parse_judgement("draft {\"criteria\": {}} then " + listed, RUBRIC)[0] == {"c1": 1.0, "c2": 1.0}
    for bad, msg in [("no json here", "no JSON object"), (json.dumps({"criteria": {"c1": 1}}), "missing ids: c2, p1"),
                     (judgement(1.5, 1, False), "score must be a number from 0 to 1"),
                     (judgement(1, 1, "maybe"), "hit must be true or false"),
                     (json.dumps({"criteria": {"c1": 1, "c2": 1, "c9": 1}, "pitfalls": {"p1": False}}), "unknown ids: c9")]:
        with pytest.raises(JudgeParseError, match=msg):
            parse_judgement(bad, RUBRIC)
    assert RUBRIC.score({"c1": 1, "c2": 1}, {"p1": True}) == 0.5
    assert RUBRIC.score({"c1": 0, "c2": 1}, {"p1": True}) == 0.0


def test_judge_aggregates_votes_by_weight(tmp_path):
    with FakeLLM() as fake:
        fake.script(Reply(judgement(1, 1, False)), Reply(judgement(1, 0, False, fenced=True)),
                    Reply(judgement(0, 1, True)))
        judge = RubricJudge(llm_cfg(fake), votes=3, transcript_dir=tmp_path)
        grade = judge.grade(RUBRIC, "Montevideo", key="t1")
        assert [v.score for v in grade.votes] == [1.0, 0.75, 0.0]
        assert grade.score == round((1 + 0.75 + 0) / 3, 6)
        assert grade.criteria == {"c1": round(2 / 3, 6), "c2": round(2 / 3, 6)} and grade.pitfalls == {"p1": round(1 / 3, 6)}
        assert grade.details()["spread"] == 1.0
        fake.script(Reply(judgement(1, 1, False)), Reply(judgement(1, 0, False)), Reply(judgement(0, 1, True)))
        median = RubricJudge(llm_cfg(fake), votes=3, aggregate="median").grade(RUBRIC, "Montevideo", key="t2")
        assert median.score == 0.75
        assert (tmp_path / "grm-t1.jsonl").is_file()


def test_judge_retries_malformed_output_and_never_scores_silently(tmp_path):
    with FakeLLM() as fake:
        fake.script(Reply("The answer is right, full marks!"), Reply(judgement(1, 1, False)))
        grade = RubricJudge(llm_cfg(fake), votes=1).grade(RUBRIC, "Montevideo", key="retry")
        assert grade.score == 1.0 and grade.votes[0].attempts == 2
        retry = fake.log[-1].body["messages"]
        assert retry[-2]["content"] == "The answer is right, full marks!"
        assert "could not be used: no JSON object" in retry[-1]["content"]

        fake.script(Reply("10/10"), Reply(json.dumps({"criteria": {"c1": 1}})), Reply("{\"criteria\": 7}"))
        with pytest.raises(JudgeError, match=r"vote 1 gave no usable judgement in 3 replies .*not scoring it"):
            RubricJudge(llm_cfg(fake), votes=1, max_attempts=3).grade(RUBRIC, "Montevideo", key="bad")

        fake.script(Fail(500), Fail(500), Fail(500))
        with pytest.raises(JudgeError, match="the model failed"):
            RubricJudge(llm_cfg(fake, max_retries=2), votes=1).grade(RUBRIC, "Montevideo", key="down")


def test_judged_sandbox_grades_rubric_tasks_on_the_host(geo_pack):
    pack = load(geo_pack)
    task = pack.tasks[0]
    with FakeLLM() as fake:
        ids = [c["id"] for c in task.verifier.args["criteria"]]
        pits = [p["id"] for p in task.verifier.args["pitfalls"]]
        reply = json.dumps({"criteria": {i: {"score": 1 if i == "c1" else 0} for i in ids},
                            "pitfalls": {p: {"hit": False} for p in pits}})
        fake.responder = lambda body: Reply(reply)
        judge = RubricJudge(llm_cfg(fake), votes=2)
        with open_sandbox(pack) as inner:
            sbx = JudgedSandbox(inner, judge)
            from envgen.episodes.episode import replay

            ep = replay(sbx, task, task.reference.calls, task.reference.answer)
        weights = {c["id"]: c["weight"] for c in task.verifier.args["criteria"]}
        assert ep.verdict.reward == round(weights["c1"] / sum(weights.values()), 6)
        assert ep.verdict.details["answer_reward"] == 1.0 and len(ep.verdict.details["judge"]["votes"]) == 2
        judged = fake.log[0].body["messages"][1]["content"]
        assert task.verifier.args["question"] in judged and task.reference.answer in judged


class _Wiki(BaseHTTPRequestHandler):
    PAGES = {
        "/kara": ("Kara (Togo)", "<p>Kara is a city in northern <a href='/togo'>Togo</a>.</p>"),
        "/togo": ("Togo", "<p>Togo is a country in West Africa. Its capital is Lomé.</p>"),
    }

    def log_message(self, *a):
        pass

    def do_GET(self):
        title, body = self.PAGES.get(self.path, ("Missing", "<p>none</p>"))
        data = f"<html><head><title>{title}</title></head><body>{body}</body></html>".encode()
        self.send_response(200 if self.path in self.PAGES else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_web_pipeline_freezes_the_pages_it_read_into_the_pack(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Wiki)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    corpus = tmp_path / "seeds.jsonl"
    corpus.write_text(json.dumps({"id": "kara", "title": "Kara", "text": "Kara is a city.", "domain": "city",
                                  "lang": "en"}) + "\n")

    def script(body):
        names, msgs = tool_names(body), body["messages"]
        turn = sum(1 for m in msgs if m["role"] == "assistant")
        if "submit_question" in names:
            if turn < 2:
                return Reply(calls=[("open", {"id_or_url": f"{base}/{['kara', 'togo'][turn]}"})])
            return Reply(calls=[("submit_question", {
                "question": "The city of Kara lies in some country. What is the capital of that country?",
                "answer": "Lomé", "aliases": ["Lome"], "evidence": [f"{base}/kara", f"{base}/togo"]})])
        if "submit_verdict" in names:
            return Reply(calls=[("submit_verdict", {"supported": True, "unique": True,
                                                    "candidates": [{"id": "A1", "correct": False}]})])
        if "submit_rubric" in names:
            return Reply(calls=[("submit_rubric", {"criteria": [{"text": "Names Lomé", "weight": 1}]})])
        return Reply(content="Answer: Kara")

    config = SearchSynthConfig.model_validate({"verify_passes": 1, "answerers": [{"name": "closed-book",
                                                                                  "tools": False}]})
    try:
        with FakeLLM(script) as fake:
            report = synthesize_search(tmp_path / "pack", llm=llm_cfg(fake), corpus=corpus, questions=1,
                                       search=WebBackend(timeout=5), config=config, workers=1,
                                       store_url=str(tmp_path / "state.sqlite"), work_dir=tmp_path / "work")
    finally:
        server.shutdown()
        server.server_close()
    assert report.kept == 1 and report.details["search"]["backend"] == "web"
    pack = load(tmp_path / "pack")
    (task,) = pack.tasks
    assert [c.args for c in task.reference.calls][1:] == [{"id_or_url": f"{base}/kara"}, {"id_or_url": f"{base}/togo"}]
    assert task.verifier.args["answer"] == {"expected": "Lomé", "aliases": ["Lome"], "mode": "exact",
                                            "extract": "answer-line", "accents": False}
    env = gymnasium.make(ENV_ID, pack=str(tmp_path / "pack"))  # the site is gone: the pack has the pages
    try:
        t = rollout(env, OraclePolicy(), task_id=task.id)
        assert t.reward == 1.0 and "Its capital is Lomé." in t.messages[-2]["content"]
    finally:
        env.close()
