"""Geo multi-hop: long-tail questions over a shipped encyclopedia of GeoNames cities and countries.

Runs on the host, offline, with no model: the search family's path for a fresh machine. ``generate``
indexes the shipped corpus (``data/corpus/geo.jsonl.gz``, pages rendered from GeoNames, countryinfo and
pycountry data) into ``env/state/corpus.sqlite``, copies the search tools, and composes questions from
the facts behind the pages, starting from long-tail cities (rarely mentioned names; see
``envgen.corpus.mine_entities``). Templates vary depth (hops from page to linked page) and breadth
(pages compared side by side); one asks in German, French or Spanish over the translated pages:

    capital         city -> its country -> capital                                  depth 2
    calling-code    city -> its country -> calling code                             depth 2
    currency        city -> its country -> currency                                 depth 2
    nearest-pop     city -> nearest city -> population (a number)                   depth 2
    nearest-capital city -> nearest city -> its country -> capital                  depth 3
    pop-difference  two cities -> difference of populations                         breadth 2
    neighbour       city -> country -> every neighbour -> the most populous         depth 2, breadth 2-6
    capital-tz      city -> country -> capital city -> time zone                    depth 3
    translated      (de/fr/es) city -> country -> currency, in that language        depth 2

Each reference is found the way an agent would find it: a recorded search for the start entity (which
must come up in the first results), then ``open`` on the links the pages show, and the answer must be
on the last page opened. Every task carries a rubric (criteria and pitfalls from the same facts) and a
deterministic answer check (aliases, accents ignored, numbers exact), as a ``rubric`` verifier.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from envgen.corpus import build_index, mine_entities, read_docs, shipped_corpus
from envgen.families import Generated, ReferenceFailed, ToolRecorder, fresh_workdir, load_module
from envgen.pack import Limits, Task

HERE = Path(__file__).resolve().parent
FAMILY, CATEGORY = "search", "geo-multihop"
VERSION = 1
DEFAULT_TASKS = 120
MAX_ATTEMPTS = 200
SEARCH_DEPTH = 5
"""A start entity must be among this many results of a search for its name."""
INSTRUCTION = {
    "en": "Use the search and open tools to look this up in the offline encyclopedia. End your reply with a line "
          "of the form 'Answer: <your answer>'.",
    "de": "Nutze die Werkzeuge search und open, um in der Offline-Enzyklopädie nachzuschlagen. Beende deine "
          "Antwort mit einer Zeile der Form 'Answer: <deine Antwort>'.",
    "fr": "Utilise les outils search et open pour chercher dans l'encyclopédie hors ligne. Termine ta réponse "
          "par une ligne de la forme 'Answer: <ta réponse>'.",
    "es": "Usa las herramientas search y open para buscar en la enciclopedia sin conexión. Termina tu respuesta "
          "con una línea de la forma 'Answer: <tu respuesta>'.",
}


class Infeasible(Exception):
    """This draw makes no good task (ambiguous, unfindable, trivial): draw again."""


class World:
    """The facts behind the pages, and the long-tail start entities."""

    def __init__(self, docs: list, index: Path):
        self.cities: dict[int, dict] = {}
        self.countries: dict[str, dict] = {}
        self.translated: dict[str, dict[str, dict]] = {"de": {}, "fr": {}, "es": {}}
        self.titles: dict[str, int] = {}
        for d in docs:
            f = d.facts or {}
            if d.lang == "en":
                self.titles[d.title] = self.titles.get(d.title, 0) + 1
                if f.get("kind") == "city":
                    self.cities[f["geonameid"]] = {**f, "id": d.id}
                elif f.get("kind") == "country":
                    self.countries[f["iso2"]] = {**f, "id": d.id}
            elif d.lang in self.translated:
                self.translated[d.lang][d.id] = {**f, "title": d.title}
        ents = mine_entities(index, spans=False)
        score = {e.doc_id: e.score for e in ents}
        self.longtail = sorted((c for c in self.cities.values() if self.titles[c["name"]] == 1),
                               key=lambda c: (-score.get(c["id"], 0.0), c["geonameid"]))
        self.score = score
        self.weights = [score.get(c["id"], 0.0) ** 2 for c in self.longtail]

    def start(self, rng: random.Random) -> dict:
        """A long-tail city, drawn with weight score^2 (rarely mentioned names first)."""
        return rng.choices(self.longtail, weights=self.weights, k=1)[0]


class Nav:
    """Reference navigation through the recorded tools, as an agent reads pages."""

    def __init__(self, tb: ToolRecorder):
        self.tb = tb

    def find(self, name: str, page_id: str, lang: str = "") -> dict:
        args = {"query": name, "limit": SEARCH_DEPTH}
        if lang:
            args["lang"] = lang
        hits = self.tb.search(**args)["results"]
        if not any(h["id"] == page_id for h in hits):
            raise Infeasible(f"{name!r} does not find {page_id} in the first {SEARCH_DEPTH} results")
        return self.tb.open(id_or_url=page_id)

    def follow(self, page: dict, prefix: str) -> dict:
        links = [ln for ln in page["links"] if ln["id"].startswith(prefix)]
        if not links:
            raise ReferenceFailed(f"{page['id']} has no link to a {prefix} page")
        return self.tb.open(id_or_url=links[0]["id"])

    def open(self, page_id: str) -> dict:
        return self.tb.open(id_or_url=page_id)


def _needs(text: str, value: str) -> None:
    if value not in text:
        raise ReferenceFailed(f"the answer {value!r} is not on the last page opened")


def _fmt(n: int) -> str:
    return f"{n:,}"


Spec = dict[str, Any]


def t_capital(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    country = w.countries[c["country"]]
    if c["is_capital"] or not country["capital"]:
        raise Infeasible("trivial")
    page = nav.find(c["name"], c["id"])
    cp = nav.follow(page, "country/")
    _needs(cp["text"], f"Its capital is {country['capital']}.")
    wrong = [w.countries[n]["capital"] for n in country["neighbours"] if w.countries[n]["capital"]]
    return dict(template="capital", depth=2, breadth=1, start=c,
                question=f"In this encyclopedia, the city of {c['name']} lies in some country. What is the capital "
                         f"of that country?",
                explanation=f"{c['name']} lies in {country['name']}, whose capital is {country['capital']}.",
                answer=country["capital"], aliases=[],
                criteria=[("Names " + country["capital"] + " as the capital", 3.0),
                          (f"Identifies that {c['name']} lies in {country['name']}", 1.0)],
                pitfalls=[f"Gives the capital of a neighbouring country (e.g. {wrong[0]})"] if wrong else [])


def t_calling_code(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    country = w.countries[c["country"]]
    code = country["phone"]
    if not code.isdigit():
        raise Infeasible("compound calling code")
    page = nav.find(c["name"], c["id"])
    cp = nav.follow(page, "country/")
    _needs(cp["text"], f"+{code}")
    return dict(template="calling-code", depth=2, breadth=1, start=c,
                question=f"What is the international calling code of the country in which the city of {c['name']} "
                         f"lies? Give the digits.",
                explanation=f"{c['name']} lies in {country['name']}.", answer=code, aliases=[f"+{code}"],
                criteria=[(f"Gives the calling code {code} (with or without a leading +)", 3.0),
                          (f"Identifies that {c['name']} lies in {country['name']}", 1.0)],
                pitfalls=["Gives a telephone area code or a postal code instead of the country calling code"])


def t_currency(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    country = w.countries[c["country"]]
    if not country["currency_code"]:
        raise Infeasible("no currency")
    page = nav.find(c["name"], c["id"])
    cp = nav.follow(page, "country/")
    _needs(cp["text"], f"{country['currency']} ({country['currency_code']})")
    return dict(template="currency", depth=2, breadth=1, start=c,
                question=f"Which currency is used in the country where the city of {c['name']} is located? "
                         f"Give the currency's name.",
                explanation=f"{c['name']} lies in {country['name']}, which uses the {country['currency']} "
                            f"({country['currency_code']}).",
                answer=country["currency"], aliases=[country["currency_code"]],
                criteria=[(f"Names the {country['currency']} ({country['currency_code']})", 3.0),
                          (f"Identifies that {c['name']} lies in {country['name']}", 1.0)],
                pitfalls=["Names the currency of a different country"])


def t_nearest_pop(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    near = w.cities[c["nearest"]]
    page = nav.find(c["name"], c["id"])
    np_ = nav.follow(page, "city/")
    _needs(np_["text"], f"population of {_fmt(near['population'])}")
    return dict(template="nearest-pop", depth=2, breadth=1, start=c, numeric=True,
                question=f"According to GeoNames, how many inhabitants does the city nearest to {c['name']} have "
                         f"(the nearest among the cities of this encyclopedia)?",
                explanation=f"The city nearest to {c['name']} is {near['name']}.", answer=str(near["population"]),
                aliases=[],
                criteria=[(f"Gives the population {_fmt(near['population'])}", 3.0),
                          (f"Identifies {near['name']} as the city nearest to {c['name']}", 1.0)],
                pitfalls=[f"Gives the population of {c['name']} itself ({_fmt(c['population'])})"])


def t_nearest_capital(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    near = w.cities[c["nearest"]]
    country = w.countries[near["country"]]
    if not country["capital"] or near["is_capital"]:
        raise Infeasible("trivial")
    page = nav.find(c["name"], c["id"])
    np_ = nav.follow(page, "city/")
    cp = nav.follow(np_, "country/")
    _needs(cp["text"], f"Its capital is {country['capital']}.")
    cross = near["country"] != c["country"]
    return dict(template="nearest-capital", depth=3, breadth=1, start=c,
                question=f"Find the city nearest to {c['name']} in this encyclopedia. What is the capital of the "
                         f"country that this nearest city lies in?",
                explanation=f"The city nearest to {c['name']} is {near['name']}, in {country['name']}, whose capital "
                            f"is {country['capital']}.",
                answer=country["capital"], aliases=[],
                criteria=[(f"Names {country['capital']} as the capital", 3.0),
                          (f"Identifies {near['name']} as the nearest city", 1.0),
                          (f"Identifies that {near['name']} lies in {country['name']}", 1.0)],
                pitfalls=([f"Gives the capital of {w.countries[c['country']]['name']}, the country of "
                           f"{c['name']} itself"] if cross else []))


def t_pop_difference(w: World, rng: random.Random, nav: Nav) -> Spec:
    a, b = w.start(rng), w.start(rng)
    if a["geonameid"] == b["geonameid"] or a["population"] == b["population"]:
        raise Infeasible("same city or same population")
    if a["population"] < b["population"]:
        a, b = b, a
    pa = nav.find(a["name"], a["id"])
    _needs(pa["text"], f"population of {_fmt(a['population'])}")
    pb = nav.find(b["name"], b["id"])
    _needs(pb["text"], f"population of {_fmt(b['population'])}")
    diff = a["population"] - b["population"]
    return dict(template="pop-difference", depth=1, breadth=2, start=a, numeric=True,
                question=f"According to GeoNames, how many more inhabitants does {a['name']} have than "
                         f"{b['name']}?",
                explanation=f"{a['name']} has {_fmt(a['population'])} inhabitants and {b['name']} "
                            f"{_fmt(b['population'])}.", answer=str(diff), aliases=[],
                criteria=[(f"Gives the difference {_fmt(diff)}", 3.0),
                          (f"Uses {_fmt(a['population'])} for {a['name']}", 1.0),
                          (f"Uses {_fmt(b['population'])} for {b['name']}", 1.0)],
                pitfalls=["Gives one of the two populations instead of their difference"])


def t_neighbour(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    country = w.countries[c["country"]]
    ns = [w.countries[n] for n in country["neighbours"]]
    if not 2 <= len(ns) <= 6:
        raise Infeasible("too few or too many neighbours")
    ranked = sorted(ns, key=lambda n: -n["population"])
    if ranked[0]["population"] == ranked[1]["population"]:
        raise Infeasible("tie")
    page = nav.find(c["name"], c["id"])
    cp = nav.follow(page, "country/")
    opened = {}
    for ln in cp["links"]:
        if ln["id"].startswith("country/"):
            opened[ln["id"]] = nav.open(ln["id"])
    best = ranked[0]
    _needs(opened[best["id"]]["text"], f"population of {_fmt(best['population'])}")
    return dict(template="neighbour", depth=2, breadth=len(ns), start=c,
                question=f"Among the countries that share a land border with the country where {c['name']} lies, "
                         f"which has the largest population according to GeoNames?",
                explanation=f"{c['name']} lies in {country['name']}; of its neighbours, {best['name']} has the most "
                            f"inhabitants.", answer=best["name"], aliases=[best["iso3"]],
                criteria=[(f"Names {best['name']}", 3.0),
                          (f"Identifies that {c['name']} lies in {country['name']}", 1.0),
                          (f"Considers all {len(ns)} neighbours of {country['name']}", 1.0)],
                pitfalls=[f"Names {country['name']} itself", f"Names {ranked[1]['name']}, the second most populous "
                          "neighbour"])


def t_capital_tz(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    country = w.countries[c["country"]]
    cap_id = country.get("capital_id")
    if not cap_id or c["is_capital"] or cap_id not in w.cities:
        raise Infeasible("capital has no page")
    cap = w.cities[cap_id]
    if cap["timezone"] == c["timezone"] and rng.random() < 0.5:
        raise Infeasible("same zone; draw again half the time so answers differ from the start city's")
    page = nav.find(c["name"], c["id"])
    cp = nav.follow(page, "country/")
    capp = nav.open(cap["id"])
    if not any(ln["id"] == cap["id"] for ln in cp["links"]):
        raise Infeasible("the country page does not link its capital")
    _needs(capp["text"], f"in the {cap['timezone']} time zone")
    return dict(template="capital-tz", depth=3, breadth=1, start=c,
                question=f"In which time zone (give its IANA name, like Europe/Paris) is the capital of the country "
                         f"where {c['name']} lies?",
                explanation=f"{c['name']} lies in {country['name']}, whose capital {cap['name']} is in the "
                            f"{cap['timezone']} zone.", answer=cap["timezone"], aliases=[],
                criteria=[(f"Gives {cap['timezone']}", 3.0), (f"Identifies {cap['name']} as the capital", 1.0)],
                pitfalls=([f"Gives the time zone of {c['name']} itself ({c['timezone']})"]
                          if c["timezone"] != cap["timezone"] else []))


LANG_Q = {
    "de": "In welchem Land liegt die Stadt {city}? Wie heißt die Währung dieses Landes?",
    "fr": "Dans quel pays se trouve la ville de {city} ? Quelle est la monnaie de ce pays ?",
    "es": "¿En qué país se encuentra la ciudad de {city}? ¿Cuál es la moneda de ese país?",
}


def t_translated(w: World, rng: random.Random, nav: Nav) -> Spec:
    lang = rng.choice(sorted(LANG_Q))
    pages = w.translated[lang]
    city_ids = sorted(i for i, f in pages.items() if i.startswith("city/"))
    pid = rng.choices(city_ids, weights=[w.score.get(i.split("@")[0], 0.0) ** 2 for i in city_ids], k=1)[0]
    gid = pages[pid]["geonameid"]
    c = w.cities[gid]
    if w.titles.get(c["name"], 0) != 1:
        raise Infeasible("ambiguous name")
    cc = c["country"]
    cpage = pages.get(f"country/{cc}@{lang}")
    if cpage is None or not w.countries[cc]["currency_code"]:
        raise Infeasible("no translated country page")
    page = nav.find(c["name"], pid, lang=lang)
    cp = nav.follow(page, "country/")
    cur = cpage["currency"]
    _needs(cp["text"], cur)
    en = w.countries[cc]
    aliases = sorted({en["currency_code"], en["currency"]} - {cur})
    return dict(template="translated", depth=2, breadth=1, start=c, lang=lang,
                question=LANG_Q[lang].format(city=c["name"]),
                explanation=f"{c['name']}: {cpage['title']}.", answer=cur, aliases=aliases,
                criteria=[(f"Names the currency {cur} ({en['currency_code']})", 3.0),
                          (f"Identifies the country as {cpage['title']}", 1.0)],
                pitfalls=["Answers in a language other than the question's while naming a different currency"])


TEMPLATES: list[Callable[[World, random.Random, Nav], Spec]] = [
    t_capital, t_nearest_pop, t_neighbour, t_calling_code, t_nearest_capital, t_pop_difference, t_currency,
    t_capital_tz, t_translated]


def _task(spec: Spec, calls: list, seed: int, i: int) -> Task:
    lang = spec.get("lang", "en")
    question = spec["question"]
    reference = f"{spec['explanation']}\nAnswer: {spec['answer']}"
    numeric = spec.get("numeric", False)
    check = {"expected": int(spec["answer"]) if numeric else spec["answer"], "aliases": spec["aliases"],
             "mode": "numeric" if numeric else "exact", "extract": "answer-line"}
    if numeric:
        check.update(rel_tol=0.0, abs_tol=0.5)
    else:
        check["accents"] = False
    start = spec["start"]
    return Task(
        id=f"search-geo-s{seed}-{i:04d}",
        prompt=[{"role": "user", "content": f"{question}\n\n{INSTRUCTION[lang]}"}],
        verifier={"kind": "rubric", "args": {
            "question": question, "reference_answer": str(spec["answer"]),
            "criteria": [{"id": f"c{k + 1}", "text": t, "weight": wt} for k, (t, wt) in enumerate(spec["criteria"])],
            "pitfalls": [{"id": f"p{k + 1}", "text": t, "penalty": 1.0} for k, t in enumerate(spec["pitfalls"])],
            "answer": check}},
        reference={"calls": [c.model_dump() for c in calls], "answer": reference},
        difficulty=len(calls),
        meta={"source": "procedural", "family": FAMILY, "category": CATEGORY, "template": spec["template"],
              "depth": spec["depth"], "breadth": spec["breadth"], "language": lang, "seed": seed,
              "entity": {"name": start["name"], "page": start["id"], "population": start["population"]}})


def generate(workdir: Path, n_tasks: int, seed: int) -> Generated:
    """Index the shipped corpus and compose ``n_tasks`` questions for ``seed`` (task i depends on seed and i)."""
    env, hidden = fresh_workdir(workdir)
    t0 = time.perf_counter()
    docs = list(read_docs(shipped_corpus()))
    index = env / "state" / "corpus.sqlite"
    build_index(docs, index)
    shutil.copy2(HERE.parent / "tools.py", env / "tools.py")
    t_index = time.perf_counter() - t0
    world = World(docs, index)
    t_entities = time.perf_counter() - t0 - t_index

    tools = load_module(HERE.parent / "tools.py", "envgen_categories.search.geo_multihop_tools")
    saved = tools._DB
    tools._DB = str(index)
    tasks: list[Task] = []
    seen: set[tuple] = set()
    try:
        for i in range(n_tasks):
            template = TEMPLATES[i % len(TEMPLATES)]
            for attempt in range(MAX_ATTEMPTS):
                rng = random.Random(f"search-geo:{seed}:{i}:{attempt}")
                tb = ToolRecorder(tools)
                try:
                    spec = template(world, rng, Nav(tb))
                except (Infeasible, ReferenceFailed):
                    continue
                key = (spec["template"], spec["start"]["geonameid"], spec["answer"])
                if key in seen:
                    continue
                seen.add(key)
                break
            else:
                raise RuntimeError(f"geo-multihop: template {template.__name__} found no task in {MAX_ATTEMPTS} draws")
            tasks.append(_task(spec, tb.calls, seed, i))
    finally:
        tools._DB = saved
    return Generated(
        name="search-geo-multihop",
        description="Long-tail multi-hop questions over an offline encyclopedia of GeoNames cities and countries "
                    "(English, German, French, Spanish), answered with search and open tools.",
        family=FAMILY, category=CATEGORY, env_dir=env, hidden_dir=hidden, tasks=tasks,
        limits=Limits(max_turns=24, step_timeout_s=10.0, episode_timeout_s=600.0),
        generator=f"envs/search/geo_multihop v{VERSION}",
        timings={"index": t_index, "entities": t_entities, "tasks": time.perf_counter() - t0 - t_index - t_entities})
