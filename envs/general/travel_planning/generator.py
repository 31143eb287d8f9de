"""Travel planning: plan trips over a seeded database of cities, hotels, restaurants, attractions and transport.

Runs on the host. ``generate`` builds the world with SQLAlchemy into ``env/state/travel.db`` (30
European cities, ~5,000 rows; the same seed gives the same file), copies the sandbox tools and the
verifier, and proposes tasks that cycle through ten levels of rising difficulty:

    1      a lookup answered in text (one search)
    2-5    plans of 1-4 items (hotel nights, meals, visits, journeys) with filters and optimal picks,
           some under a budget where any plan within it is valid
    6-7    conditional rules ("if the day-2 hotel costs >= 800 a night, lunch and dinner together must
           cost < 350 per person"; "if the hotel is rated below 4.0, dinner must be rated >= 4.5")
    8-10   two- and three-city trips, rules, and a budget fallback ("take the cheapest train, but if
           the trip would then cost more than 1,500, take the cheapest bus")

A task's spec (its slots, rules and budget) is the verifier's ``params``; its reference solution is
``solve(spec, tools)``, which reaches the world only through the tools (recorded by ToolRecorder on a
scratch copy of the database), so the recorded calls are a trajectory an agent could make.
"""

from __future__ import annotations

import math
import random
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from sqlalchemy import Boolean, Float, ForeignKey, Integer, String, Text, create_engine, insert, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from envgen.build.sdk import Generated, ReferenceFailed, ToolRecorder, create_schema, fresh_workdir, load_module
from envgen.pack import Limits, Task

HERE = Path(__file__).resolve().parent
FAMILY, CATEGORY = "general", "travel-planning"
VERSION = 1
DEFAULT_TASKS = 120
LEVELS = tuple(range(1, 11))
MAX_ATTEMPTS = 60

# ---------------------------------------------------------------------------------------------- the world

CITIES = [  # name, country, lat, lon, price level
    ("Paris", "France", 48.86, 2.35, 1.35), ("Lyon", "France", 45.76, 4.84, 1.0),
    ("Marseille", "France", 43.30, 5.37, 0.95), ("Nice", "France", 43.70, 7.27, 1.15),
    ("Bordeaux", "France", 44.84, -0.58, 1.0), ("Madrid", "Spain", 40.42, -3.70, 1.0),
    ("Barcelona", "Spain", 41.39, 2.17, 1.1), ("Seville", "Spain", 37.39, -5.98, 0.85),
    ("Valencia", "Spain", 39.47, -0.38, 0.85), ("Lisbon", "Portugal", 38.72, -9.14, 0.9),
    ("Porto", "Portugal", 41.15, -8.61, 0.8), ("Rome", "Italy", 41.90, 12.50, 1.15),
    ("Milan", "Italy", 45.46, 9.19, 1.2), ("Florence", "Italy", 43.77, 11.26, 1.1),
    ("Venice", "Italy", 45.44, 12.32, 1.3), ("Naples", "Italy", 40.85, 14.27, 0.85),
    ("Berlin", "Germany", 52.52, 13.40, 1.05), ("Munich", "Germany", 48.14, 11.58, 1.2),
    ("Hamburg", "Germany", 53.55, 9.99, 1.1), ("Vienna", "Austria", 48.21, 16.37, 1.15),
    ("Salzburg", "Austria", 47.81, 13.04, 1.1), ("Zurich", "Switzerland", 47.37, 8.54, 1.6),
    ("Geneva", "Switzerland", 46.20, 6.14, 1.55), ("Amsterdam", "Netherlands", 52.37, 4.90, 1.3),
    ("Brussels", "Belgium", 50.85, 4.35, 1.05), ("Prague", "Czechia", 50.08, 14.44, 0.75),
    ("Budapest", "Hungary", 47.50, 19.04, 0.7), ("Copenhagen", "Denmark", 55.68, 12.57, 1.4),
    ("Stockholm", "Sweden", 59.33, 18.07, 1.3), ("Edinburgh", "United Kingdom", 55.95, -3.19, 1.2),
]
NATIVE = {"France": "French", "Spain": "Spanish", "Portugal": "Portuguese", "Italy": "Italian",
          "Germany": "German", "Austria": "German"}
CUISINES = ["French", "Italian", "Spanish", "Portuguese", "German", "Japanese", "Chinese", "Indian", "Thai",
            "Mexican", "Greek", "Lebanese", "Vegetarian", "Seafood", "Steakhouse"]
AMENITIES = ["wifi", "breakfast", "parking", "gym", "pool", "spa", "pet-friendly", "airport-shuttle"]
FILTER_AMENITIES = ["breakfast", "parking", "gym", "pool", "spa"]
AMENITY_TEXT = {"breakfast": "breakfast included", "parking": "parking", "gym": "a gym", "pool": "a pool",
                "spa": "a spa"}
NEIGHBORHOODS = ["Old Town", "City Centre", "Riverside", "Station District", "University Quarter", "Harbour",
                 "Museum Quarter", "Business District", "Hillside", "Market Square"]
HOTEL_A = ["Grand", "Royal", "Park", "City", "Riverside", "Central", "Garden", "Harbour", "Station", "Plaza",
           "Opera", "Bellevue", "Astoria", "Metropole", "Linden", "Aurora", "Crown", "Meridian", "Lakeview", "Old Mill"]
HOTEL_B = ["Hotel", "Inn", "Suites", "Residence", "Lodge", "House", "Palace", "Boutique Hotel", "Guesthouse",
           "Apartments"]
FOOD_A = ["Golden", "Blue", "Little", "Old", "Red", "Green", "Silver", "Happy", "Royal", "Hidden", "Corner",
          "Market", "Harbour", "Garden", "Sunny", "Copper"]
FOOD_B = ["Table", "Spoon", "Fork", "Lantern", "Kitchen", "Pot", "Oven", "Terrace", "Bistro", "Cellar", "Leaf",
          "Olive", "Pepper", "Grill", "Dumpling", "Noodle"]
SIGHTS = {
    "museum": ["Museum of Fine Arts", "Museum of Modern Art", "History Museum", "Science Museum",
               "Natural History Museum", "Design Museum", "Photography Museum", "Archaeology Museum",
               "Maritime Museum", "Music Museum"],
    "gallery": ["North Gallery", "Riverside Gallery", "Crown Gallery", "Harbour Gallery", "Linden Gallery"],
    "park": ["Central Park", "Royal Park", "River Park", "Sunset Park", "Victoria Park"],
    "landmark": ["Old Town Hall", "Clock Tower", "Grand Bridge", "City Gate", "Opera House"],
    "church": ["St. Mary's Cathedral", "St. Peter's Church", "Old Chapel", "Abbey Church"],
    "castle": ["Castle on the Hill", "Old Fortress", "Royal Palace", "Citadel"],
    "market": ["Central Market", "Flower Market", "Harbour Market", "Old Market Hall"],
    "garden": ["Botanical Garden", "Rose Garden", "Palace Gardens"],
    "viewpoint": ["Panorama Terrace", "Hilltop Lookout", "Tower Viewpoint"],
    "zoo": ["City Zoo", "Aquarium"],
}
FREE_OFTEN = {"park", "garden", "viewpoint", "market", "church"}
OPERATORS = {"flight": ["Aerolina", "SkyBridge", "Nordair"], "train": ["RailEuro", "TransAlpine", "InterCity"],
             "bus": ["CoachLine", "GreenCoach", "RoadStar"]}


class Base(DeclarativeBase):
    pass


class City(Base):
    __tablename__ = "cities"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(40), unique=True)
    country: Mapped[str] = mapped_column(String(40))
    latitude: Mapped[float] = mapped_column(Float)
    longitude: Mapped[float] = mapped_column(Float)


class Hotel(Base):
    __tablename__ = "hotels"
    id: Mapped[str] = mapped_column(String(8), primary_key=True)
    city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    name: Mapped[str] = mapped_column(String(60))
    stars: Mapped[int] = mapped_column(Integer)
    rating: Mapped[float] = mapped_column(Float)
    price_per_night: Mapped[int] = mapped_column(Integer)
    neighborhood: Mapped[str] = mapped_column(String(40))
    address: Mapped[str] = mapped_column(String(80))
    amenities: Mapped[str] = mapped_column(String(120))
    check_in: Mapped[str] = mapped_column(String(5))


class Restaurant(Base):
    __tablename__ = "restaurants"
    id: Mapped[str] = mapped_column(String(8), primary_key=True)
    city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    name: Mapped[str] = mapped_column(String(60))
    cuisine: Mapped[str] = mapped_column(String(30))
    rating: Mapped[float] = mapped_column(Float)
    price_per_person: Mapped[int] = mapped_column(Integer)
    serves_lunch: Mapped[bool] = mapped_column(Boolean)
    serves_dinner: Mapped[bool] = mapped_column(Boolean)
    opens: Mapped[str] = mapped_column(String(5))
    closes: Mapped[str] = mapped_column(String(5))
    vegetarian_options: Mapped[bool] = mapped_column(Boolean)


class Attraction(Base):
    __tablename__ = "attractions"
    id: Mapped[str] = mapped_column(String(8), primary_key=True)
    city_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    name: Mapped[str] = mapped_column(String(60))
    category: Mapped[str] = mapped_column(String(20))
    rating: Mapped[float] = mapped_column(Float)
    entry_fee: Mapped[int] = mapped_column(Integer)
    opens: Mapped[str] = mapped_column(String(5))
    closes: Mapped[str] = mapped_column(String(5))
    visit_minutes: Mapped[int] = mapped_column(Integer)


class Transport(Base):
    __tablename__ = "transport"
    id: Mapped[str] = mapped_column(String(8), primary_key=True)
    origin_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    destination_id: Mapped[int] = mapped_column(ForeignKey("cities.id"), index=True)
    mode: Mapped[str] = mapped_column(String(10))
    operator: Mapped[str] = mapped_column(String(20))
    departs: Mapped[str] = mapped_column(String(5))
    arrives: Mapped[str] = mapped_column(String(5))
    duration_min: Mapped[int] = mapped_column(Integer)
    price: Mapped[int] = mapped_column(Integer)


class Submission(Base):
    """Plans handed in through submit_result (empty in the pristine database)."""

    __tablename__ = "submissions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan: Mapped[str] = mapped_column(Text)
    total_cost: Mapped[float] = mapped_column(Float)


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _km(a, b) -> float:
    (la1, lo1), (la2, lo2) = (math.radians(a[2]), math.radians(a[3])), (math.radians(b[2]), math.radians(b[3]))
    h = math.sin((la2 - la1) / 2) ** 2 + math.cos(la1) * math.cos(la2) * math.sin((lo2 - lo1) / 2) ** 2
    return 6371 * 2 * math.asin(math.sqrt(h))


def build_db(path: Path, seed: int) -> dict[str, int]:
    """Write the world for ``seed`` to ``path`` (a fresh SQLite file); return row counts per table."""
    rng = random.Random(f"travel-db:{seed}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    rows: dict[type, list[dict]] = {City: [], Hotel: [], Restaurant: [], Attraction: [], Transport: []}
    for cid, (name, country, lat, lon, _) in enumerate(CITIES, 1):
        rows[City].append(dict(id=cid, name=name, country=country, latitude=lat, longitude=lon))
    hid = rid = aid = 0
    for cid, (city, country, _, _, level) in enumerate(CITIES, 1):
        names = rng.sample([f"{a} {b}" for a in HOTEL_A for b in HOTEL_B], rng.randint(28, 40))
        for name in names:
            hid += 1
            stars = rng.choices([1, 2, 3, 4, 5], [8, 17, 35, 28, 12])[0]
            base = {1: 55, 2: 85, 3: 135, 4: 240, 5: 560}[stars]
            amen = [a for a, p in zip(AMENITIES, [0.95, 0.3 + 0.1 * stars, 0.5, max(0.0, 0.2 * stars - 0.4),
                                                  0.12 * stars, 0.0 if stars < 4 else 0.3 * stars - 0.8, 0.25, 0.15])
                    if rng.random() < p]
            rows[Hotel].append(dict(
                id=f"H-{hid:04d}", city_id=cid, name=name, stars=stars,
                rating=round(min(5.0, max(2.0, rng.gauss(2.4 + 0.45 * stars, 0.35))), 1),
                price_per_night=int(round(base * level * rng.uniform(0.8, 1.25))),
                neighborhood=rng.choice(NEIGHBORHOODS),
                address=f"{rng.randint(1, 180)} {rng.choice(FOOD_A + HOTEL_A)} Street, {city}",
                amenities=",".join(amen), check_in=rng.choice(["14:00", "15:00", "16:00"])))
        weights = [6 if NATIVE.get(country) == c else 2 for c in CUISINES]
        for name in rng.sample([f"{a} {b}" for a in FOOD_A for b in FOOD_B], rng.randint(40, 55)):
            rid += 1
            tier = rng.choices([0, 1, 2, 3], [30, 40, 22, 8])[0]
            low, high = [(12, 25), (25, 55), (55, 110), (110, 190)][tier]
            serves = rng.choices(["both", "lunch", "dinner"], [70, 15, 15])[0]
            opens, closes = {"both": ("11:30", "23:00"), "lunch": ("11:00", "15:30"), "dinner": ("18:00", "23:30")}[serves]
            rows[Restaurant].append(dict(
                id=f"R-{rid:04d}", city_id=cid, name=name, cuisine=rng.choices(CUISINES, weights)[0],
                rating=round(min(5.0, max(2.0, rng.gauss(3.5 + 0.3 * tier, 0.45))), 1),
                price_per_person=int(round(rng.uniform(low, high) * level)),
                serves_lunch=serves != "dinner", serves_dinner=serves != "lunch", opens=opens, closes=closes,
                vegetarian_options=rng.random() < 0.6))
        cats = rng.sample(sorted(SIGHTS), rng.randint(7, 10))
        for cat in cats:
            for name in rng.sample(SIGHTS[cat], min(len(SIGHTS[cat]), rng.randint(1, 3))):
                aid += 1
                free = cat in FREE_OFTEN and rng.random() < 0.6
                opens = 6 * 60 if cat in ("park", "garden", "viewpoint") else rng.choice([8, 9, 10]) * 60
                closes = rng.choice([16, 17, 18, 19, 20, 22]) * 60
                rows[Attraction].append(dict(
                    id=f"A-{aid:04d}", city_id=cid, name=f"{city} {name}", category=cat,
                    rating=round(min(5.0, max(2.5, rng.gauss(4.1, 0.45))), 1),
                    entry_fee=0 if free else int(round(rng.uniform(5, 32) * level)),
                    opens=_hhmm(opens), closes=_hhmm(closes), visit_minutes=rng.choice([45, 60, 90, 120, 180, 240])))
    # each city connects to its 8 nearest, both ways; modes by distance, several departures a day
    pairs = set()
    for i, a in enumerate(CITIES):
        near = sorted((j for j in range(len(CITIES)) if j != i), key=lambda j: _km(a, CITIES[j]))[:8]
        pairs |= {(i, j) for j in near} | {(j, i) for j in near}
    tid = 0
    for i, j in sorted(pairs):
        km = _km(CITIES[i], CITIES[j])
        speeds = {"flight": (75 + km / 13, 40 + km * 0.09), "train": (km / 1.9, 15 + km * 0.11),
                  "bus": (km / 1.2, 8 + km * 0.05)}
        for mode in ("flight", "train", "bus"):
            if (mode == "flight" and km < 250) or (mode == "train" and km > 1300) or (mode == "bus" and km > 1100):
                continue
            minutes, fare = speeds[mode]
            for _ in range(rng.randint(1, 4)):
                dur = int(round(minutes * rng.uniform(0.9, 1.15) / 5)) * 5
                latest = 23 * 60 + 30 - dur
                if latest < 6 * 60:
                    continue
                dep = rng.randrange(6 * 60, latest + 1, 5)
                tid += 1
                rows[Transport].append(dict(
                    id=f"T-{tid:04d}", origin_id=i + 1, destination_id=j + 1, mode=mode,
                    operator=rng.choice(OPERATORS[mode]), departs=_hhmm(dep), arrives=_hhmm(dep + dur),
                    duration_min=dur, price=int(round(fare * rng.uniform(0.75, 1.4)))))
    engine = create_engine(f"sqlite:///{path}")
    create_schema(Base.metadata, engine)
    with Session(engine) as s:
        for model, data in rows.items():
            s.execute(insert(model), data)
        s.commit()
    engine.dispose()
    with sqlite3.connect(path) as con:  # compact and canonical: the same seed gives the same bytes
        con.execute("VACUUM")
    con.close()
    return {model.__tablename__: len(data) for model, data in rows.items()}


class World:
    """What the task templates sample from: names read through SQLAlchemy, candidates through the verifier."""

    def __init__(self, db: Path, verifier):
        self.v = verifier
        self.con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        self.con.row_factory = sqlite3.Row
        engine = create_engine(f"sqlite:///{db}")
        with Session(engine) as s:
            names = {c.id: c.name for c in s.scalars(select(City).order_by(City.id))}
            self.cities = list(names.values())
            self.cuisines: dict[tuple[str, str | None], list[str]] = {}
            for city_id, cuisine, lunch, dinner in s.execute(
                    select(Restaurant.city_id, Restaurant.cuisine, Restaurant.serves_lunch, Restaurant.serves_dinner)):
                for meal, served in ((None, True), ("lunch", lunch), ("dinner", dinner)):
                    if served:
                        self.cuisines.setdefault((names[city_id], meal), [])
                        if cuisine not in self.cuisines[(names[city_id], meal)]:
                            self.cuisines[(names[city_id], meal)].append(cuisine)
            self.categories: dict[str, list[str]] = {}
            for city_id, cat in s.execute(select(Attraction.city_id, Attraction.category).distinct()):
                self.categories.setdefault(names[city_id], []).append(cat)
            self.routes: dict[tuple[str, str], list[str]] = {}
            for o, d, mode in s.execute(select(Transport.origin_id, Transport.destination_id, Transport.mode).distinct()):
                self.routes.setdefault((names[o], names[d]), []).append(mode)
        engine.dispose()
        for table in (self.cuisines, self.categories, self.routes):
            for k in table:
                table[k].sort()
        self.neighbors = {c: sorted(b for (a, b) in self.routes if a == c) for c in self.cities}

    def candidates(self, kind: str, place: dict, filters: dict, meal: str | None = None) -> list:
        return self.v.candidates(self.con, kind, place, filters, meal)

    def close(self) -> None:
        self.con.close()


class Infeasible(Exception):
    """This draw of a template has no valid plan (or an uninteresting one): draw again."""


# ---------------------------------------------------------------------------------------------- slots


def _hotel(w: World, rng: random.Random, key: str, city: str, nights: list[int], pick: str | None,
           lookup: bool = False) -> dict:
    for _ in range(30):
        options = ["min_rating", "amenity"] if lookup else ["min_rating", "min_stars", "amenity", "max_price"]
        filters = {}
        for name in sorted(rng.sample(options, rng.choice([1, 1, 2]))):
            filters[name] = {"min_rating": lambda: rng.choice([3.5, 4.0, 4.5]),
                             "min_stars": lambda: rng.choice([3, 4, 5]),
                             "amenity": lambda: rng.choice(FILTER_AMENITIES),
                             "max_price": lambda: rng.choice([120, 150, 200, 250, 300, 400])}[name]()
        if len(w.candidates("hotel", {"city": city}, filters)) >= 2:
            return {"key": key, "type": "hotel", "city": city, "nights": nights, "filters": filters, "pick": pick}
    raise Infeasible(f"no hotel filters with two options in {city}")


def _restaurant(w: World, rng: random.Random, key: str, city: str, day: int | None, meal: str | None,
                pick: str | None, avoid: set[str] = frozenset(), lookup: bool = False) -> dict:
    choices = [c for c in w.cuisines.get((city, meal), []) if c not in avoid]
    for _ in range(30):
        if not choices:
            break
        filters = {"cuisine": rng.choice(choices)}
        extra = rng.random()
        if extra < 0.3:
            filters["min_rating"] = rng.choice([3.5, 4.0])
        elif extra < 0.5 and not lookup:
            filters["max_price"] = rng.choice([30, 40, 60, 80])
        if len(w.candidates("restaurant", {"city": city}, filters, meal)) >= 2:
            slot = {"key": key, "type": "restaurant", "city": city, "day": day, "meal": meal, "filters": filters,
                    "pick": pick}
            return slot
    raise Infeasible(f"no restaurant filters with two options in {city}")


def _attraction(w: World, rng: random.Random, key: str, city: str, day: int | None, pick: str | None,
                lookup: bool = False) -> dict:
    for _ in range(30):
        filters = {"category": rng.choice(w.categories[city])}
        extra = rng.random()
        if extra < 0.35:
            filters["open_at"] = rng.choice(["09:00", "10:00", "14:00", "17:00"])
        elif extra < 0.55 and not lookup and pick != "cheapest":
            filters["max_fee"] = rng.choice([10, 15, 20, 30])
        if len(w.candidates("attraction", {"city": city}, filters)) >= 2:
            return {"key": key, "type": "attraction", "city": city, "day": day, "filters": filters, "pick": pick}
    raise Infeasible(f"no attraction filters with two options in {city}")


def _transport(w: World, rng: random.Random, key: str, a: str, b: str, day: int | None, pick: str | None,
               mode: str | None = None, lookup: bool = False) -> dict:
    modes = w.routes.get((a, b), [])
    for _ in range(30):
        filters = {}
        if mode:
            filters["mode"] = mode
        elif len(modes) > 1 and rng.random() < 0.4:
            filters["mode"] = rng.choice(modes)
        extra = rng.random()
        if extra < 0.35:
            filters["depart_after"] = rng.choice(["07:00", "08:00", "09:00", "10:00", "12:00"])
        elif extra < 0.55:
            filters["arrive_before"] = rng.choice(["14:00", "16:00", "18:00", "20:00"])
        elif extra < 0.7 and not lookup:
            filters["max_price"] = rng.choice([60, 90, 120, 180])
        if len(w.candidates("transport", {"from": a, "to": b}, filters)) >= (1 if mode else 2):
            return {"key": key, "type": "transport", "from": a, "to": b, "day": day, "filters": filters, "pick": pick}
    raise Infeasible(f"no transport filters with options from {a} to {b}")


def _pick(rng: random.Random, kind: str) -> str:
    return rng.choice(["cheapest", "fastest", "earliest"] if kind == "transport" else ["cheapest", "best_rated"])


def _route(w: World, rng: random.Random, hops: int) -> list[str]:
    path = [rng.choice(w.cities)]
    while len(path) <= hops:
        options = [c for c in w.neighbors[path[-1]] if c not in path]
        if not options:
            raise Infeasible("dead end")
        path.append(rng.choice(options))
    return path


def _travelers(rng: random.Random) -> int:
    return rng.choice([1, 2, 2, 2, 3, 4])


def _spec(rng: random.Random, slots: list[dict], rules: list | None = None, budget: int | None = None,
          calculator: bool = False) -> dict:
    days = max(max(s.get("nights") or [s.get("day") or 1]) for s in slots)
    return {"mode": "plan", "travelers": _travelers(rng), "days": days, "slots": slots, "rules": rules or [],
            "budget": budget, "calculator": calculator}


# ---------------------------------------------------------------------------------------------- templates
# Each takes (world, rng, dry) and returns a spec; dry(spec) -> the reference's total, for rules that
# need one to place a threshold. The number of tool calls the reference needs is noted per level.


def level1(w, rng, dry):
    """One search, answered in text."""
    kind = rng.choice(["hotel", "restaurant", "attraction", "transport"])
    city = rng.choice(w.cities)
    if kind == "hotel":
        slot = _hotel(w, rng, "x", city, [], _pick(rng, kind), lookup=True)
    elif kind == "restaurant":
        slot = _restaurant(w, rng, "x", city, None, None, _pick(rng, kind), lookup=True)
    elif kind == "attraction":
        slot = _attraction(w, rng, "x", city, None, _pick(rng, kind), lookup=True)
    else:
        a, b = _route(w, rng, 1)
        slot = _transport(w, rng, "x", a, b, None, _pick(rng, kind), lookup=True)
    place = {"from": slot["from"], "to": slot["to"]} if kind == "transport" else {"city": slot["city"]}
    return {"mode": "lookup", "kind": kind, "place": place, "filters": slot["filters"], "pick": slot["pick"]}


def level2(w, rng, dry):
    """One plan item (2 calls)."""
    kind = rng.choice(["hotel", "restaurant", "attraction", "transport"])
    city = rng.choice(w.cities)
    if kind == "hotel":
        slot = _hotel(w, rng, "h1", city, [1], _pick(rng, kind))
    elif kind == "restaurant":
        slot = _restaurant(w, rng, "m1", city, 1, rng.choice(["lunch", "dinner"]), _pick(rng, kind))
    elif kind == "attraction":
        slot = _attraction(w, rng, "a1", city, 1, _pick(rng, kind))
    else:
        a, b = _route(w, rng, 1)
        slot = _transport(w, rng, "t1", a, b, 1, _pick(rng, kind))
    return _spec(rng, [slot])


def level3(w, rng, dry):
    """Two plan items (3 calls)."""
    variant = rng.randrange(3)
    city = rng.choice(w.cities)
    if variant == 0:
        slots = [_hotel(w, rng, "h1", city, [1, 2], _pick(rng, "hotel")),
                 _restaurant(w, rng, "d1", city, 1, "dinner", _pick(rng, "restaurant"))]
    elif variant == 1:
        slots = [_attraction(w, rng, "a1", city, 1, _pick(rng, "attraction")),
                 _restaurant(w, rng, "l1", city, 1, "lunch", _pick(rng, "restaurant"))]
    else:
        a, b = _route(w, rng, 1)
        slots = [_transport(w, rng, "t1", a, b, 1, _pick(rng, "transport")),
                 _hotel(w, rng, "h1", b, [1], _pick(rng, "hotel"))]
    return _spec(rng, slots)


def _arrival(w, rng, nights, pick=True):
    a, b = _route(w, rng, 1)
    p = (lambda k: _pick(rng, k)) if pick else (lambda k: None)
    return b, [_transport(w, rng, "t1", a, b, 1, p("transport")), _hotel(w, rng, "h1", b, nights, p("hotel")),
               _restaurant(w, rng, "d1", b, 1, "dinner", p("restaurant"))]


def _budgeted(rng, slots, dry) -> dict:
    """Any option meeting the filters will do, within a budget a little above the cheapest plan."""
    spec = _spec(rng, slots, calculator=True)
    cheapest = dry(spec)
    spec["budget"] = int(math.ceil(cheapest * rng.uniform(1.15, 1.4) / 10.0)) * 10
    return spec


def level4(w, rng, dry):
    """Three plan items, or two under a budget with the price calculator (4 calls)."""
    variant = rng.randrange(3)
    if variant == 0:
        return _spec(rng, _arrival(w, rng, [1, 2])[1])
    city = rng.choice(w.cities)
    if variant == 1:
        return _spec(rng, [_hotel(w, rng, "h1", city, [1, 2], _pick(rng, "hotel")),
                           _attraction(w, rng, "a2", city, 2, _pick(rng, "attraction")),
                           _restaurant(w, rng, "l2", city, 2, "lunch", _pick(rng, "restaurant"))])
    return _budgeted(rng, [_hotel(w, rng, "h1", city, [1, 2], None),
                           _restaurant(w, rng, "d1", city, 1, "dinner", None)], dry)


def level5(w, rng, dry):
    """Four plan items, or three under a budget with the calculator (5 calls)."""
    if rng.random() < 0.5:
        b, slots = _arrival(w, rng, [1, 2])
        return _spec(rng, slots + [_attraction(w, rng, "a2", b, 2, _pick(rng, "attraction"))])
    return _budgeted(rng, _arrival(w, rng, [1, 2], pick=False)[1], dry)


def _price_switch(w, rng, hotel_key, city, nights, day, lunch_key, dinner_key):
    """A best-rated hotel for ``nights``, and lunch + dinner on ``day`` whose pick depends on the hotel's
    price (the issue's "if the day-2 hotel costs >= 800, lunch and dinner together must cost < 350")."""
    hotel = _hotel(w, rng, hotel_key, city, nights, "best_rated")
    hotel["filters"].pop("max_price", None)  # a price cap would make the condition moot
    if rng.random() < 0.5:
        hotel["filters"] = {"min_stars": rng.choice([4, 5])}
        if len(w.candidates("hotel", {"city": city}, hotel["filters"])) < 2:
            raise Infeasible("too few upscale hotels")
    rows = w.candidates("hotel", {"city": city}, hotel["filters"])
    top = w.v.best("hotel", rows, "best_rated")
    price = min(r["price_per_night"] for r in rows if r["rating"] == top)
    lunch = _restaurant(w, rng, lunch_key, city, day, "lunch", "best_rated")
    dinner = _restaurant(w, rng, dinner_key, city, day, "dinner", "best_rated", avoid={lunch["filters"]["cuisine"]})
    cheap = sum(w.v.best("restaurant", w.candidates("restaurant", {"city": city}, s["filters"], s["meal"]), "cheapest")
                for s in (lunch, dinner))
    if rng.random() < 0.5:  # the condition holds for the reference's hotel
        at_least = max(50, (price - rng.randint(0, 100)) // 50 * 50)
    else:
        at_least = (price // 50 + 1) * 50 + rng.choice([0, 50, 100])
    cap = (cheap // 10 + rng.randint(1, 6)) * 10
    rule = {"kind": "price_switch", "if_slot": hotel_key, "at_least": at_least, "slots": [lunch_key, dinner_key],
            "cap_per_person": cap, "then_pick": "cheapest"}
    return [hotel, lunch, dinner], rule


def _rating_switch(w, rng, hotel_key, city, nights, dinner_key, day):
    hotel = _hotel(w, rng, hotel_key, city, nights, "cheapest")
    rows = w.candidates("hotel", {"city": city}, hotel["filters"])
    low = w.v.best("hotel", rows, "cheapest")
    rating = max(r["rating"] for r in rows if r["price_per_night"] == low)
    dinner = _restaurant(w, rng, dinner_key, city, day, "dinner", "cheapest")
    need = rng.choice([4.0, 4.5])
    if not w.candidates("restaurant", {"city": city}, {**dinner["filters"], "min_rating": need}, "dinner"):
        raise Infeasible("no well-rated dinner option")
    steps = [3.0, 3.5, 4.0, 4.5, 5.0]
    above = [s for s in steps if s > rating]
    below = [s for s in steps if s <= rating]
    if above and (not below or rng.random() < 0.5):
        threshold = above[0]
    else:
        threshold = below[-1]
    rule = {"kind": "rating_switch", "if_slot": hotel_key, "below": threshold, "slot": dinner_key,
            "then_filters": {"min_rating": need}}
    return [hotel, dinner], rule


def level6(w, rng, dry):
    """A conditional rule, with the calculator (6 calls)."""
    if rng.random() < 0.5:
        a, b = _route(w, rng, 1)
        switch, rule = _price_switch(w, rng, "h1", b, [1, 2], 2, "l2", "d2")
        slots = [_transport(w, rng, "t1", a, b, 1, _pick(rng, "transport"))] + switch
        return _spec(rng, slots, [rule], calculator=True)
    city = rng.choice(w.cities)
    pair, rule = _rating_switch(w, rng, "h1", city, [1, 2], "d1", 1)
    slots = pair + [_attraction(w, rng, "a2", city, 2, _pick(rng, "attraction")),
                    _restaurant(w, rng, "l2", city, 2, "lunch", _pick(rng, "restaurant"))]
    return _spec(rng, slots, [rule], calculator=True)


def level7(w, rng, dry):
    """Two cities over three days, or a price rule with a visit (7 calls)."""
    if rng.random() < 0.5:
        a, b = _route(w, rng, 1)
        lunch = _restaurant(w, rng, "l3", b, 3, "lunch", _pick(rng, "restaurant"))
        slots = [_hotel(w, rng, "h1", a, [1], _pick(rng, "hotel")),
                 _transport(w, rng, "t2", a, b, 2, _pick(rng, "transport")),
                 _hotel(w, rng, "h2", b, [2, 3], _pick(rng, "hotel")),
                 _restaurant(w, rng, "d2", b, 2, "dinner", _pick(rng, "restaurant"), avoid={lunch["filters"]["cuisine"]}),
                 _attraction(w, rng, "a3", b, 3, _pick(rng, "attraction")), lunch]
        return _spec(rng, slots)
    a, b = _route(w, rng, 1)
    switch, rule = _price_switch(w, rng, "h1", b, [1, 2], 2, "l2", "d2")
    slots = [_transport(w, rng, "t1", a, b, 1, _pick(rng, "transport"))] + switch[:1] + \
        [_attraction(w, rng, "a2", b, 2, _pick(rng, "attraction"))] + switch[1:]
    return _spec(rng, slots, [rule], calculator=True)


def level8(w, rng, dry):
    """Three cities, or two cities with a rating rule and the calculator (8 calls)."""
    if rng.random() < 0.5:
        a, b, c = _route(w, rng, 2)
        slots = [_hotel(w, rng, "h1", a, [1], _pick(rng, "hotel")),
                 _transport(w, rng, "t2", a, b, 2, _pick(rng, "transport")),
                 _hotel(w, rng, "h2", b, [2], _pick(rng, "hotel")),
                 _restaurant(w, rng, "d2", b, 2, "dinner", _pick(rng, "restaurant")),
                 _transport(w, rng, "t3", b, c, 3, _pick(rng, "transport")),
                 _hotel(w, rng, "h3", c, [3, 4], _pick(rng, "hotel")),
                 _attraction(w, rng, "a4", c, 4, _pick(rng, "attraction"))]
        return _spec(rng, slots)
    a, b = _route(w, rng, 1)
    pair, rule = _rating_switch(w, rng, "h1", a, [1], "d1", 1)
    lunch = _restaurant(w, rng, "l3", b, 3, "lunch", _pick(rng, "restaurant"))
    slots = pair + [_transport(w, rng, "t2", a, b, 2, _pick(rng, "transport")),
                    _hotel(w, rng, "h2", b, [2, 3], _pick(rng, "hotel")),
                    _attraction(w, rng, "a3", b, 3, _pick(rng, "attraction")), lunch]
    return _spec(rng, slots, [rule], calculator=True)


def level9(w, rng, dry):
    """Three cities with a price rule and the calculator (9 calls)."""
    a, b, c = _route(w, rng, 2)
    switch, rule = _price_switch(w, rng, "h2", b, [2, 3], 3, "l3", "d3")
    slots = [_hotel(w, rng, "h1", a, [1], _pick(rng, "hotel")),
             _transport(w, rng, "t2", a, b, 2, _pick(rng, "transport"))] + switch + \
        [_transport(w, rng, "t4", b, c, 4, _pick(rng, "transport")), _hotel(w, rng, "h4", c, [4], _pick(rng, "hotel"))]
    return _spec(rng, slots, [rule], calculator=True)


def level10(w, rng, dry):
    """Two cities with a budget fallback on the journey (8 calls, or 10 when the fallback applies)."""
    pairs = [(a, b) for (a, b), modes in sorted(w.routes.items()) if "bus" in modes and len(modes) > 1]
    a, b = rng.choice(pairs)
    base_mode = rng.choice([m for m in w.routes[(a, b)] if m != "bus"])
    journey = _transport(w, rng, "t2", a, b, 2, "cheapest", mode=base_mode)
    journey["filters"] = {"mode": base_mode}
    if not w.candidates("transport", {"from": a, "to": b}, {"mode": "bus"}):
        raise Infeasible("no bus")
    lunch = _restaurant(w, rng, "l3", b, 3, "lunch", _pick(rng, "restaurant"))
    slots = [_hotel(w, rng, "h1", a, [1], _pick(rng, "hotel")),
             _restaurant(w, rng, "d1", a, 1, "dinner", _pick(rng, "restaurant")), journey,
             _hotel(w, rng, "h2", b, [2, 3], _pick(rng, "hotel")),
             _attraction(w, rng, "a3", b, 3, _pick(rng, "attraction")), lunch]
    rule = {"kind": "budget_fallback", "slot": "t2", "budget": 10 ** 9, "fallback": {"mode": "bus"}}
    spec = _spec(rng, slots, [rule], calculator=True)
    total = dry(spec)
    if rng.random() < 0.5:
        rule["budget"] = max(10, (total // 10 - rng.randint(1, 15)) * 10)
    else:
        rule["budget"] = (total // 10 + rng.randint(0, 15)) * 10
    return spec


TEMPLATES = {1: level1, 2: level2, 3: level3, 4: level4, 5: level5, 6: level6, 7: level7, 8: level8, 9: level9,
             10: level10}

# ---------------------------------------------------------------------------------------------- prompts

PICK_WORD = {"cheapest": "the cheapest", "best_rated": "the best-rated", "fastest": "the fastest",
             "earliest": "the earliest", None: "any"}
MEAL_WORD = {"lunch": "Lunch", "dinner": "Dinner"}
NUMBER_WORD = {1: "one", 2: "two", 3: "three", 4: "four"}


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _conds(kind: str, f: dict) -> str:
    out = []
    if "meal" in f:
        out.append(f"that is open for {f['meal']}")
    if "min_stars" in f:
        out.append(f"with at least {f['min_stars']} stars")
    if "min_rating" in f:
        out.append(f"rated at least {f['min_rating']}")
    if "amenity" in f:
        out.append(f"with {AMENITY_TEXT[f['amenity']]}")
    if "max_price" in f:
        unit = {"hotel": "a night", "restaurant": "per person", "transport": "per person"}[kind]
        out.append(f"costing at most {f['max_price']} EUR {unit}")
    if "max_fee" in f:
        out.append(f"with an entry fee of at most {f['max_fee']} EUR")
    if "open_at" in f:
        out.append(f"that is open at {f['open_at']}")
    if "depart_after" in f:
        out.append(f"leaving at {f['depart_after']} or later")
    if "arrive_before" in f:
        out.append(f"arriving by {f['arrive_before']}")
    return (" " + _and(out)) if out else ""


def _noun(slot: dict) -> str:
    kind, f, pick = slot["type"], slot["filters"], slot["pick"]
    if kind == "hotel":
        return f"{PICK_WORD[pick]} hotel in {slot['city']}{_conds(kind, f)}"
    if kind == "restaurant":
        rest = {k: v for k, v in f.items() if k != "cuisine"}
        if slot.get("meal"):
            rest["meal"] = slot["meal"]
        return f"{PICK_WORD[pick]} {f['cuisine']} restaurant in {slot['city']}{_conds(kind, rest)}"
    if kind == "attraction":
        rest = {k: v for k, v in f.items() if k != "category"}
        if pick == "cheapest":
            return f"the {f['category']} in {slot['city']} with the lowest entry fee{_conds(kind, rest)}"
        return f"{PICK_WORD[pick]} {f['category']} in {slot['city']}{_conds(kind, rest)}"
    what = f.get("mode", "connection")
    rest = {k: v for k, v in f.items() if k != "mode"}
    return f"{PICK_WORD[pick]} {what} from {slot['from']} to {slot['to']}{_conds(kind, rest)}"


def _nights(nights: list[int]) -> str:
    if len(nights) == 1:
        return f"the night of day {nights[0]}"
    return f"the nights of days {_and([str(n) for n in nights])}"


def _line(slot: dict, spec: dict) -> str:
    kind = slot["type"]
    if kind == "hotel":
        text = f"For {_nights(slot['nights'])}: {_noun(slot)}"
    elif kind == "restaurant":
        text = f"{MEAL_WORD[slot['meal']]} on day {slot['day']}: {_noun(slot)}"
    elif kind == "attraction":
        text = f"A visit on day {slot['day']}: {_noun(slot)}"
    else:
        text = f"Travel on day {slot['day']}: {_noun(slot)}"
    for rule in spec["rules"]:
        if rule["kind"] == "budget_fallback" and rule["slot"] == slot["key"]:
            text += (f"; but if that would bring the whole trip above {rule['budget']} EUR, take the cheapest "
                     f"{rule['fallback']['mode']} instead")
    return text + "."


def _describe_slot(slot: dict) -> str:
    if slot["type"] == "hotel":
        return f"the {slot['city']} hotel"
    if slot["type"] == "restaurant":
        return f"{slot['meal']} on day {slot['day']}"
    return f"the day-{slot['day']} {slot['type']}"


def _rule_line(rule: dict, slots: dict) -> str | None:
    if rule["kind"] == "price_switch":
        a, b = (slots[k] for k in rule["slots"])
        return (f"If {_describe_slot(slots[rule['if_slot']])} costs {rule['at_least']} EUR or more per night, "
                f"{a['meal']} and {b['meal']} on day {a['day']} together must come to less than "
                f"{rule['cap_per_person']} EUR per person, so choose the cheapest options for both instead.")
    if rule["kind"] == "rating_switch":
        return (f"If {_describe_slot(slots[rule['if_slot']])} is rated below {rule['below']}, the place for "
                f"{_describe_slot(slots[rule['slot']])} must be rated at least {rule['then_filters']['min_rating']}.")
    return None


def prompt(spec: dict, rng: random.Random) -> str:
    """The user's request: every constraint of the spec, in words."""
    if spec["mode"] == "lookup":
        return _lookup_prompt(spec, rng)
    n, days = spec["travelers"], spec["days"]
    overnight = any(s["type"] == "hotel" for s in spec["slots"])
    length = f"a {days}-day trip" if days > 1 else ("a one-night trip" if overnight else "a day out")
    intro = rng.choice([f"I'm planning {length} on my own.", f"I'm travelling solo and planning {length}."]) if n == 1 \
        else rng.choice([f"I'm planning {length} for {NUMBER_WORD[n]} people.",
                         f"We are {NUMBER_WORD[n]} travellers planning {length}."])
    slots = {s["key"]: s for s in spec["slots"]}
    order = {"transport": 0, "attraction": 2, "hotel": 4}
    lines = sorted(spec["slots"], key=lambda s: (min(s.get("nights") or [s.get("day")]),
                                                 order.get(s["type"], 1 if s.get("meal") == "lunch" else 3)))
    body = "\n".join(f"- {_line(s, spec)}" for s in lines)
    rules = [t for t in (_rule_line(r, slots) for r in spec["rules"]) if t]
    if any(s["pick"] is None for s in spec["slots"]):
        rules.append("Where I say \"any\", every option meeting the conditions is fine.")
    if spec.get("budget") is not None:
        rules.append(f"The whole trip must cost at most {spec['budget']} EUR in total.")
    group = {1: "me", 2: "both of us"}.get(n, f"all {NUMBER_WORD[n]} of us")
    close = (f"Please put the plan together and submit it: one item per hotel night, meal, visit and journey, "
             f"with the total cost for {group}.")
    return "\n".join([intro, "Here is what I need:", body] + rules + [close])


def _lookup_prompt(spec: dict, rng: random.Random) -> str:
    kind, f, pick = spec["kind"], spec["filters"], spec["pick"]
    slot = {"type": kind, "filters": f, "pick": pick, **spec["place"]}
    if kind == "hotel":
        ask = f"What is {_noun(slot)}? Tell me its id and its price per night."
    elif kind == "restaurant":
        ask = f"Which is {_noun(slot)}? I need its id and the price per person."
    elif kind == "attraction":
        ask = f"Which is {_noun(slot)}? Give me its id and the entry fee."
    else:
        ask = f"What is {_noun(slot)}? Give me its id and the ticket price per person."
    lead = rng.choice(["", "Quick question: ", "I'm looking into options. "])
    return lead + ask[0].upper() + ask[1:] if not lead else lead + ask


# ---------------------------------------------------------------------------------------------- reference

SORT = {"hotel": {"cheapest": "price", "best_rated": "rating", None: "price"},
        "restaurant": {"cheapest": "price", "best_rated": "rating", None: "price"},
        "attraction": {"cheapest": "fee", "best_rated": "rating", None: "fee"},
        "transport": {"cheapest": "price", "fastest": "duration", "earliest": "departure", None: "price"}}
PRICE = {"hotel": "price_per_night", "restaurant": "price_per_person", "attraction": "entry_fee", "transport": "price"}


def _search(tb: ToolRecorder, kind: str, place: dict, filters: dict, pick: str | None, meal: str | None = None) -> list:
    sort = SORT[kind][pick]
    if kind == "hotel":
        out = tb.search_hotels(city=place["city"], **filters, sort_by=sort)
    elif kind == "restaurant":
        out = tb.search_restaurants(city=place["city"], **filters, **({"meal": meal} if meal else {}), sort_by=sort)
    elif kind == "attraction":
        out = tb.search_attractions(city=place["city"], **filters, sort_by=sort)
    else:
        out = tb.search_transport(from_city=place["from"], to_city=place["to"], **filters, sort_by=sort)
    if not out["results"]:
        raise Infeasible(f"no {kind} for {place} {filters}")
    return out["results"]


def _items(spec: dict, chosen: dict) -> list[dict]:
    rank = {"transport": 0, "attraction": 2, "hotel": 4}
    items = []
    for slot in spec["slots"]:
        row = chosen[slot["key"]]
        if slot["type"] == "hotel":
            items += [{"day": n, "type": "hotel", "id": row["id"]} for n in slot["nights"]]
        elif slot["type"] == "restaurant":
            items.append({"day": slot["day"], "type": "restaurant", "id": row["id"], "meal": slot["meal"]})
        else:
            items.append({"day": slot["day"], "type": slot["type"], "id": row["id"]})
    return sorted(items, key=lambda i: (i["day"], rank.get(i["type"], 1 if i.get("meal") == "lunch" else 3)))


def _unit(kind: str, row: dict, travelers: int) -> int:
    return row[PRICE[kind]] * ((travelers + 1) // 2 if kind == "hotel" else travelers)


def solve(spec: dict, tb: ToolRecorder) -> tuple[str, int | None]:
    """The reference solution: tool calls only. Returns (final answer text, total cost or None)."""
    if spec["mode"] == "lookup":
        kind = spec["kind"]
        top = _search(tb, kind, spec["place"], spec["filters"], spec["pick"])[0]
        unit = {"hotel": "per night", "restaurant": "per person", "attraction": "entry fee per person",
                "transport": "per person"}[kind]
        label = top.get("name") or f"{top['mode']} by {top['operator']} at {top['departs']}"
        return f"{label} ({top['id']}): {top[PRICE[kind]]} EUR {unit}.", None
    slots = {s["key"]: s for s in spec["slots"]}
    n = spec["travelers"]
    chosen: dict[str, dict] = {}
    for slot in spec["slots"]:
        filters, pick = dict(slot["filters"]), slot["pick"]
        for rule in spec["rules"]:
            if rule["kind"] == "price_switch" and slot["key"] in rule["slots"]:
                if chosen[rule["if_slot"]][PRICE[slots[rule["if_slot"]]["type"]]] >= rule["at_least"]:
                    pick = rule["then_pick"]
            if rule["kind"] == "rating_switch" and rule["slot"] == slot["key"]:
                if chosen[rule["if_slot"]]["rating"] < rule["below"]:
                    filters.update(rule["then_filters"])
        place = {"from": slot["from"], "to": slot["to"]} if slot["type"] == "transport" else {"city": slot["city"]}
        chosen[slot["key"]] = _search(tb, slot["type"], place, filters, pick, slot.get("meal"))[0]
    for rule in spec["rules"]:
        if rule["kind"] == "price_switch":
            if chosen[rule["if_slot"]][PRICE["hotel"]] >= rule["at_least"]:
                if sum(chosen[k][PRICE["restaurant"]] for k in rule["slots"]) >= rule["cap_per_person"]:
                    raise Infeasible("the cheapest meals break the cap")
    total = None
    for rule in spec["rules"]:
        if rule["kind"] == "budget_fallback":
            total = tb.calculate_cost(items=_items(spec, chosen), travelers=n)["total"]
            if total > rule["budget"]:
                slot = slots[rule["slot"]]
                chosen[slot["key"]] = _search(tb, "transport", {"from": slot["from"], "to": slot["to"]},
                                              {**slot["filters"], **rule["fallback"]}, slot["pick"])[0]
                total = None
    items = _items(spec, chosen)
    if total is None and spec.get("calculator"):
        total = tb.calculate_cost(items=items, travelers=n)["total"]
    if total is None:
        total = sum(_unit(s["type"], chosen[s["key"]], n) * len(s.get("nights") or [1]) for s in spec["slots"])
    if spec.get("budget") is not None and total > spec["budget"]:
        raise Infeasible("over budget")
    tb.submit_result(plan=items, total_cost=total)
    parts = [f"day {i['day']} {i.get('meal') or i['type']} {i['id']}" for i in items]
    who = {1: "me", 2: "both of us"}.get(n, f"the {NUMBER_WORD[n]} of us")
    return f"I submitted the plan: {'; '.join(parts)}. Total for {who}: {total} EUR.", total


# ---------------------------------------------------------------------------------------------- generate


def generate(workdir: Path, n_tasks: int, seed: int) -> Generated:
    """Build the world and ``n_tasks`` tasks for ``seed`` under ``workdir`` (task i depends on seed and i only)."""
    env, hidden = fresh_workdir(workdir, HERE)
    t0 = time.perf_counter()
    db = env / "state" / "travel.db"
    build_db(db, seed)
    t_db = time.perf_counter() - t0

    verifier = load_module(HERE / "hidden" / "verify.py", "envgen_categories.general.travel_planning_verify")
    tools = load_module(HERE / "env" / "tools.py", "envgen_categories.general.travel_planning_tools")
    world = World(db, verifier)
    scratch = Path(tempfile.mkdtemp(prefix="envgen-travel-ref-"))
    try:
        def run(spec: dict) -> tuple[ToolRecorder, str, int | None]:
            copy = scratch / "travel.db"
            shutil.copyfile(db, copy)
            tb = ToolRecorder(tools, db=copy)
            answer, total = solve(spec, tb)
            return tb, answer, total

        def dry(spec: dict) -> int:
            return run(spec)[2]

        tasks = []
        for i in range(n_tasks):
            level = LEVELS[i % len(LEVELS)]
            for attempt in range(MAX_ATTEMPTS):
                rng = random.Random(f"travel-task:{seed}:{i}:{attempt}")
                try:
                    spec = TEMPLATES[level](world, rng, dry)
                    tb, answer, _ = run(spec)
                except (Infeasible, ReferenceFailed):
                    continue
                break
            else:
                raise RuntimeError(f"travel-planning: level {level} found no feasible task in {MAX_ATTEMPTS} draws")
            tasks.append(Task(
                id=f"travel-s{seed}-{i:04d}",
                prompt=[{"role": "user", "content": prompt(spec, rng)}],
                verifier={"kind": "program", "args": {"file": "verify.py", "function": "verify", "params": spec}},
                reference={"calls": [c.model_dump() for c in tb.calls], "answer": answer},
                difficulty=len(tb.calls),
                meta={"source": "procedural", "family": FAMILY, "category": CATEGORY, "level": level,
                      "template": TEMPLATES[level].__name__, "seed": seed},
            ))
    finally:
        world.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return Generated(
        name="general-travel-planning",
        description=("Plan trips over a database of 30 European cities: hotels, restaurants, attractions and "
                     "transport; lookups, multi-city itineraries, budgets and conditional constraints."),
        family=FAMILY, category=CATEGORY, env_dir=env, hidden_dir=hidden, tasks=tasks, submit_tool="submit_result",
        limits=Limits(max_turns=40, step_timeout_s=10.0, episode_timeout_s=600.0),
        generator=f"envs/general/travel_planning v{VERSION}",
        timings={"db": t_db, "tasks": time.perf_counter() - t0 - t_db},
    )
