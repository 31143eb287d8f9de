"""Geo multi-hop: long-tail questions over a shipped encyclopedia of GeoNames cities and countries.

Runs on the host, offline, with no model: the search family's path for a fresh machine. ``generate``
indexes the shipped corpus (``data/corpus/geo.jsonl.gz``, pages rendered from GeoNames, countryinfo and
pycountry data) into ``env/state/corpus.sqlite``, copies the search tools, and composes questions from
the facts behind the pages, starting from long-tail cities (rarely mentioned names; see
``envgen.retrieval.corpus.mine_entities``).

Every answer depends on a fact only this corpus has: GeoNames populations and the "nearest city in this
encyclopedia" links (computed over the ~2,100 cities it holds, so they differ from the real map). No
question asks for a fact of a country (capital, currency, calling code, neighbours: world knowledge
answers those from the city's name alone). Templates vary depth (hops from page to linked page) and
breadth (pages compared side by side); one asks in German, French or Spanish over the translated pages:

    nearest-pop     city -> nearest city -> its population                          depth 2
    second-nearest  city -> nearest city -> that city's nearest (a name)            depth 2
    pop-difference  two cities -> difference of populations                         breadth 2
    hop-pop         city -> nearest -> its nearest -> population                    depth 3
    nearest-gap     city and its nearest city -> difference of populations          depth 2, breadth 2
    bigger-of-two   nearest and its nearest -> the more populous (a name)           depth 3, breadth 2
    trip-km         city -> nearest -> its nearest: the two distances summed        depth 2, breadth 2
    translated      (de/fr/es) city -> nearest city -> its population               depth 2

Each reference is found the way an agent would find it: a recorded search for the start entity (which
must come up in the first results), then ``open`` on the links the pages show, and the answer must be
on the last page opened. Every task carries a rubric (criteria and pitfalls from the same facts) and a
deterministic answer check, as a ``rubric`` verifier: one answer only (numbers exact; names with the
aliases GeoNames gives, any other city name of ``hidden/names/city.txt`` in the answer scores 0), and
the facts it rests on must have come back from a tool call of the episode (``evidence``).
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path
from typing import Any, Callable

from envgen.retrieval.corpus import build_index, mine_entities, read_docs, shipped_corpus
from envgen.build.sdk import Generated, ReferenceFailed, ToolRecorder, fresh_workdir, load_module
from envgen.pack import Limits, Task
from envgen.paths import bundled

HERE = Path(__file__).resolve().parent
FAMILY, CATEGORY = "search", "geo-multihop"
VERSION = 2
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
PROMINENT = 5
"""A name answer is never a capital or one of its country's this many largest cities (the ones its page lists):
world knowledge guesses those ("the bigger city near X" is often the well-known one)."""
CITY_NAMES = "names/city.txt"
"""In hidden/: the names of every city (titles and usable alternate names), the candidates of name answers."""
KIT = load_module(bundled("verifiers") / "envgen_verifiers" / "answer.py", "envgen_kit_answer")
QUESTION_WORDS = ["answer", "city", "cities", "nearest", "inhabitants", "population", "encyclopedia", "trip",
                  "according", "km", "more", "which", "this", "that", "own", "page", "start", "capital", "country"]
"""Words an answer's own sentence may use: never read as a city's name (the pages' own words are added)."""


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
        self._names(docs)
        by_country: dict[str, list[dict]] = {}
        for c in self.cities.values():
            by_country.setdefault(c["country"], []).append(c)
        self.prominent = {c["geonameid"] for c in self.cities.values() if c["is_capital"]}
        for cs in by_country.values():
            self.prominent.update(c["geonameid"] for c in sorted(cs, key=lambda c: -c["population"])[:PROMINENT])
        ents = mine_entities(index, spans=False)
        score = {e.doc_id: e.score for e in ents}
        self.longtail = sorted((c for c in self.cities.values() if self.titles[c["name"]] == 1),
                               key=lambda c: (-score.get(c["id"], 0.0), c["geonameid"]))
        self.score = score
        self.weights = [score.get(c["id"], 0.0) ** 2 for c in self.longtail]

    def _names(self, docs: list) -> None:
        """Every city's names as answers match them: the title, and the alternate names GeoNames gives that
        are names (not airport codes, not words the pages use, not a country's name), once each."""
        template_words = set()
        for d in docs:
            if d.lang == "en":
                text = re.sub(r"Other names: [^\n]*?\.(?= |$)", " ", d.text)
                template_words.update(w for w in re.findall(r"[^\W\d_]+", text) if w.islower())
        template_words.update(w.casefold() for w in re.findall(r"[^\W\d_]+", " ".join(QUESTION_WORDS)))
        countries = {KIT.name_key(c["name"], False) for c in self.countries.values()}

        def usable(name: str) -> bool:
            key = KIT.name_key(name, False)
            return (len(name) >= 4 and not name.isupper() and bool(key) and key not in countries
                    and not set(key) <= template_words)

        self.names: dict[int, list[str]] = {}
        owners: dict[tuple, set] = {}
        for gid, c in self.cities.items():
            names = [c["name"]] + [a for a in c["alt_names"] if usable(a)]
            self.names[gid] = names
            for n in names:
                owners.setdefault(KIT.name_key(n, False), set()).add(gid)
        self._owners = owners

    def aliases(self, city: dict) -> list[str]:
        """The city's other names that name no other city (an ambiguous name earns no credit)."""
        own = KIT.name_key(city["name"], False)
        return [n for n in self.names[city["geonameid"]][1:]
                if KIT.name_key(n, False) != own and self._owners[KIT.name_key(n, False)] == {city["geonameid"]}]

    def name_list(self) -> str:
        """hidden/names/city.txt: every city name an answer is checked against, one a line."""
        return "".join(n + "\n" for n in sorted({n for ns in self.names.values() for n in ns}))

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


def _fmt(n: int) -> str:
    return f"{n:,}"


Spec = dict[str, Any]


def _shown(page: dict, n: int) -> str:
    """``n`` as the page writes it ("31,097", "31.097", "31 097"): the answer's evidence. The answer must be on
    the last page opened."""
    for m in re.finditer(r"\d{1,3}(?:[,.\u00a0\u202f ]\d{3})+|\d+", page["text"]):
        if int(re.sub(r"\D", "", m.group())) == n:
            return m.group()
    raise ReferenceFailed(f"{n} is not on the last page opened ({page['id']})")


def _hop(w: World, nav: Nav, page: dict, city: dict) -> tuple[dict, dict]:
    """From an open city page to its nearest city's page, as the page links it."""
    near = w.cities[city["nearest"]]
    nxt = nav.follow(page, "city/")
    if nxt["id"] != near["id"]:
        raise ReferenceFailed(f"{page['id']} links {nxt['id']} first, not its nearest city {near['id']}")
    return near, nxt


def _onward(w: World, c: dict) -> tuple[dict, dict]:
    """The city nearest to ``c`` and that city's own nearest, which must lead on (not back to ``c``)."""
    near = w.cities[c["nearest"]]
    far = w.cities[near["nearest"]]
    if far["geonameid"] == c["geonameid"]:
        raise Infeasible("the nearest city's nearest city is the start again")
    return near, far


def t_nearest_pop(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    page = nav.find(c["name"], c["id"])
    near, np_ = _hop(w, nav, page, c)
    shown = _shown(np_, near["population"])
    return dict(template="nearest-pop", depth=2, breadth=1, start=c, numeric=True, evidence=[shown],
                question=f"According to GeoNames, how many inhabitants does the city nearest to {c['name']} have "
                         f"(the nearest among the cities of this encyclopedia)?",
                explanation=f"The city nearest to {c['name']} is {near['name']}.", answer=str(near["population"]),
                aliases=[],
                criteria=[(f"Gives the population {_fmt(near['population'])}", 3.0),
                          (f"Identifies {near['name']} as the city nearest to {c['name']}", 1.0)],
                pitfalls=[f"Gives the population of {c['name']} itself ({_fmt(c['population'])})"])


def t_pop_difference(w: World, rng: random.Random, nav: Nav) -> Spec:
    a, b = w.start(rng), w.start(rng)
    if a["geonameid"] == b["geonameid"] or a["population"] == b["population"]:
        raise Infeasible("same city or same population")
    if a["population"] < b["population"]:
        a, b = b, a
    ea = _shown(nav.find(a["name"], a["id"]), a["population"])
    eb = _shown(nav.find(b["name"], b["id"]), b["population"])
    diff = a["population"] - b["population"]
    return dict(template="pop-difference", depth=1, breadth=2, start=a, numeric=True, evidence=[ea, eb],
                question=f"According to GeoNames, how many more inhabitants does {a['name']} have than "
                         f"{b['name']}?",
                explanation=f"{a['name']} has {_fmt(a['population'])} inhabitants and {b['name']} "
                            f"{_fmt(b['population'])}.", answer=str(diff), aliases=[],
                criteria=[(f"Gives the difference {_fmt(diff)}", 3.0),
                          (f"Uses {_fmt(a['population'])} for {a['name']}", 1.0),
                          (f"Uses {_fmt(b['population'])} for {b['name']}", 1.0)],
                pitfalls=["Gives one of the two populations instead of their difference"])


def t_nearest_gap(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    page = nav.find(c["name"], c["id"])
    own = _shown(page, c["population"])
    near, np_ = _hop(w, nav, page, c)
    if near["population"] == c["population"]:
        raise Infeasible("same population")
    diff = abs(near["population"] - c["population"])
    return dict(template="nearest-gap", depth=2, breadth=2, start=c, numeric=True,
                evidence=[own, _shown(np_, near["population"])],
                question=f"According to GeoNames, what is the difference between the population of {c['name']} "
                         f"and that of the city nearest to it in this encyclopedia? Give it as a positive number.",
                explanation=f"{c['name']} has {_fmt(c['population'])} inhabitants; the city nearest to it, "
                            f"{near['name']}, has {_fmt(near['population'])}.", answer=str(diff), aliases=[],
                criteria=[(f"Gives the difference {_fmt(diff)}", 3.0),
                          (f"Identifies {near['name']} as the city nearest to {c['name']}", 1.0),
                          (f"Uses {_fmt(near['population'])} for {near['name']}", 1.0)],
                pitfalls=[f"Gives the population of {near['name']} or of {c['name']} instead of the difference"])


def t_second_nearest(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    near, far = _onward(w, c)
    if w.titles.get(far["name"], 0) != 1 or far["geonameid"] in w.prominent:
        raise Infeasible("ambiguous or well-known answer")
    page = nav.find(c["name"], c["id"])
    near, np_ = _hop(w, nav, page, c)
    if far["name"] not in np_["text"]:
        raise ReferenceFailed(f"{far['name']!r} is not on the last page opened")
    return dict(template="second-nearest", depth=2, breadth=1, start=c, evidence=[far["name"]],
                question=f"In this encyclopedia, find the city nearest to {c['name']}. Which city does that city's "
                         f"own page give as its nearest city?",
                explanation=f"The city nearest to {c['name']} is {near['name']}, and the city nearest to "
                            f"{near['name']} is {far['name']}.",
                answer=far["name"], aliases=w.aliases(far), candidates=CITY_NAMES,
                criteria=[(f"Names {far['name']}", 3.0),
                          (f"Identifies {near['name']} as the city nearest to {c['name']}", 1.0)],
                pitfalls=[f"Names {near['name']}, the city nearest to {c['name']} itself"])


def t_hop_pop(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    near, far = _onward(w, c)
    page = nav.find(c["name"], c["id"])
    near, np_ = _hop(w, nav, page, c)
    far, fp = _hop(w, nav, np_, near)
    return dict(template="hop-pop", depth=3, breadth=1, start=c, numeric=True,
                evidence=[_shown(fp, far["population"])],
                question=f"Start at {c['name']} in this encyclopedia, go to the city nearest to it, then to the city "
                         f"nearest to that one. According to GeoNames, how many inhabitants does this last city have?",
                explanation=f"{c['name']} -> {near['name']} -> {far['name']}.", answer=str(far["population"]),
                aliases=[],
                criteria=[(f"Gives the population {_fmt(far['population'])}", 3.0),
                          (f"Identifies {near['name']} and then {far['name']} as the nearest cities", 1.0)],
                pitfalls=[f"Gives the population of {near['name']} ({_fmt(near['population'])}), one hop short"])


def t_trip_km(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    near, far = _onward(w, c)
    page = nav.find(c["name"], c["id"])
    near, np_ = _hop(w, nav, page, c)
    legs = []
    for p, city, to in ((page, c, near), (np_, near, far)):
        shown = f"about {city['nearest_km']} km"
        if shown not in p["text"] or to["name"] not in p["text"]:
            raise ReferenceFailed(f"{p['id']} does not give the distance to {to['name']}")
        legs.append(shown)
    total = c["nearest_km"] + near["nearest_km"]
    return dict(template="trip-km", depth=2, breadth=2, start=c, numeric=True, evidence=legs,
                question=f"Go from {c['name']} to the city nearest to it in this encyclopedia, and from there on to "
                         f"that city's own nearest city. Using the distances the encyclopedia gives (in km), how "
                         f"long is the whole trip?",
                explanation=f"{c['name']} -> {near['name']} ({c['nearest_km']} km) -> {far['name']} "
                            f"({near['nearest_km']} km).", answer=str(total), aliases=[],
                criteria=[(f"Gives {total} km", 3.0),
                          (f"Uses {c['nearest_km']} km to {near['name']} and {near['nearest_km']} km on to "
                           f"{far['name']}", 1.0)],
                pitfalls=["Gives only one leg of the trip"])


def t_bigger_of_two(w: World, rng: random.Random, nav: Nav) -> Spec:
    c = w.start(rng)
    near, far = _onward(w, c)
    if near["population"] == far["population"]:
        raise Infeasible("tie")
    big, small = (near, far) if near["population"] > far["population"] else (far, near)
    if w.titles.get(big["name"], 0) != 1 or big["geonameid"] in w.prominent:
        raise Infeasible("ambiguous or well-known answer")
    page = nav.find(c["name"], c["id"])
    near, np_ = _hop(w, nav, page, c)
    far, fp = _hop(w, nav, np_, near)
    evidence = [_shown(np_, near["population"]), _shown(fp, far["population"])]
    return dict(template="bigger-of-two", depth=3, breadth=2, start=c, evidence=evidence,
                question=f"Take the city nearest to {c['name']} in this encyclopedia, and that city's own nearest "
                         f"city. Which of these two cities has more inhabitants according to GeoNames?",
                explanation=f"{near['name']} has {_fmt(near['population'])} inhabitants and {far['name']} "
                            f"{_fmt(far['population'])}.",
                answer=big["name"], aliases=w.aliases(big), candidates=CITY_NAMES,
                criteria=[(f"Names {big['name']}", 3.0),
                          (f"Compares {_fmt(near['population'])} ({near['name']}) with {_fmt(far['population'])} "
                           f"({far['name']})", 1.0)],
                pitfalls=[f"Names {small['name']}, the smaller of the two", f"Names {c['name']} itself"])


LANG_Q = {
    "de": "Wie viele Einwohner hat laut GeoNames die Stadt dieser Enzyklopädie, die {city} am nächsten liegt?",
    "fr": "Selon GeoNames, combien d'habitants compte la ville de cette encyclopédie la plus proche de {city} ?",
    "es": "Según GeoNames, ¿cuántos habitantes tiene la ciudad de esta enciclopedia más cercana a {city}?",
}


def t_translated(w: World, rng: random.Random, nav: Nav) -> Spec:
    lang = rng.choice(sorted(LANG_Q))
    pages = w.translated[lang]
    city_ids = sorted(i for i, f in pages.items() if i.startswith("city/"))
    pid = rng.choices(city_ids, weights=[w.score.get(i.split("@")[0], 0.0) ** 2 for i in city_ids], k=1)[0]
    c = w.cities[pages[pid]["geonameid"]]
    if w.titles.get(c["name"], 0) != 1:
        raise Infeasible("ambiguous name")
    near = w.cities[c["nearest"]]
    page = nav.find(c["name"], pid, lang=lang)
    np_ = nav.follow(page, "city/")
    if np_["id"].split("@")[0] != near["id"]:
        raise ReferenceFailed(f"{pid} links {np_['id']} first, not its nearest city {near['id']}")
    shown = _shown(np_, near["population"])
    return dict(template="translated", depth=2, breadth=1, start=c, lang=lang, numeric=True, evidence=[shown],
                question=LANG_Q[lang].format(city=c["name"]),
                explanation=f"{c['name']} -> {near['name']}.", answer=str(near["population"]), aliases=[],
                criteria=[(f"Gives the population {_fmt(near['population'])}", 3.0),
                          (f"Identifies {near['name']} as the city nearest to {c['name']}", 1.0)],
                pitfalls=[f"Gives the population of {c['name']} itself ({_fmt(c['population'])})"])


TEMPLATES: list[Callable[[World, random.Random, Nav], Spec]] = [
    t_nearest_pop, t_second_nearest, t_pop_difference, t_hop_pop, t_nearest_gap, t_bigger_of_two, t_trip_km,
    t_translated]


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
        check.update(accents=False, candidates=spec["candidates"])
    check["evidence"] = spec["evidence"]
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
    env, hidden = fresh_workdir(workdir, HERE)  # tools.py: the family's envs/search/env/tools.py
    t0 = time.perf_counter()
    docs = list(read_docs(shipped_corpus()))
    index = env / "state" / "corpus.sqlite"
    build_index(docs, index)
    (hidden / CITY_NAMES).parent.mkdir(parents=True, exist_ok=True)
    t_index = time.perf_counter() - t0
    world = World(docs, index)
    (hidden / CITY_NAMES).write_text(world.name_list(), encoding="utf-8")
    t_entities = time.perf_counter() - t0 - t_index

    tools = load_module(HERE.parent / "env" / "tools.py", "envgen_categories.search.geo_multihop_tools")
    tasks: list[Task] = []
    seen: set[tuple] = set()
    for i in range(n_tasks):
        template = TEMPLATES[i % len(TEMPLATES)]
        for attempt in range(MAX_ATTEMPTS):
            rng = random.Random(f"search-geo:{seed}:{i}:{attempt}")
            tb = ToolRecorder(tools, db=index)
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
    return Generated(
        name="search-geo-multihop",
        description="Long-tail multi-hop questions over an offline encyclopedia of GeoNames cities and countries "
                    "(English, German, French, Spanish), answered with search and open tools.",
        family=FAMILY, category=CATEGORY, env_dir=env, hidden_dir=hidden, tasks=tasks,
        limits=Limits(max_turns=24, step_timeout_s=10.0, episode_timeout_s=600.0),
        generator=f"envs/search/geo_multihop v{VERSION}",
        timings={"index": t_index, "entities": t_entities, "tasks": time.perf_counter() - t0 - t_index - t_entities})
