"""Travel-planning tools: search a travel database of cities, hotels, restaurants, attractions and
transport, price a plan, and submit it.

Runs inside the sandbox (stdlib only, Python 3.8+), with the episode's work dir as the current
directory, so the database is opened by relative path. Prices are whole euros. Every tool checks its
arguments and raises a ValueError that tells the agent how to fix the call.
"""

import json
import sqlite3
from contextlib import closing
from typing import List, Literal, Optional

DB = "state/travel.db"  # the database the tools use, relative to the work dir; ToolRecorder(tools, db=...) points it elsewhere
_KINDS = {"hotel": ("hotels", "H-"), "restaurant": ("restaurants", "R-"),
          "attraction": ("attractions", "A-"), "transport": ("transport", "T-")}
_MAX_LIMIT = 50
_AMENITIES = ("wifi", "breakfast", "parking", "gym", "pool", "spa", "pet-friendly", "airport-shuttle")


def _connect() -> sqlite3.Connection:
    con = sqlite3.connect(DB)
    con.row_factory = sqlite3.Row
    return con


def _city(con: sqlite3.Connection, name: str) -> sqlite3.Row:
    if not isinstance(name, str) or not name.strip():
        raise ValueError("city must be a non-empty city name, e.g. 'Lyon'")
    row = con.execute("SELECT * FROM cities WHERE lower(name) = lower(?)", (name.strip(),)).fetchone()
    if row is None:
        raise ValueError(f"unknown city {name!r}; call list_cities to see the cities in the database")
    return row


def _number(name: str, value, low: float, high: float):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low:g} and {high:g}, got {value!r}")
    return value


def _time(name: str, value):
    if value is None:
        return None
    ok = isinstance(value, str) and len(value) == 5 and value[2] == ":" and value[:2].isdigit() \
        and value[3:].isdigit() and int(value[:2]) < 24 and int(value[3:]) < 60
    if not ok:
        raise ValueError(f"{name} must be a time written HH:MM (24-hour), got {value!r}")
    return value


def _choice(name: str, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _limit(limit) -> int:
    _number("limit", limit, 1, _MAX_LIMIT)
    if not isinstance(limit, int):
        raise ValueError("limit must be a whole number")
    return limit


def _values(con: sqlite3.Connection, column: str, table: str, city_id: int) -> List[str]:
    return [r[0] for r in con.execute(f"SELECT DISTINCT {column} FROM {table} WHERE city_id = ? ORDER BY 1",
                                      (city_id,))]


def _page(rows: list, limit: int) -> dict:
    return {"matches": len(rows), "results": rows[:limit]}


def list_cities(country: Optional[str] = None) -> list:
    """List the cities in the travel database with their country.

    Args:
        country: only list cities in this country, e.g. "France"
    """
    with closing(_connect()) as con:
        rows = con.execute("SELECT name, country FROM cities ORDER BY name").fetchall()
    out = [dict(r) for r in rows if country is None or r["country"].lower() == str(country).strip().lower()]
    if country is not None and not out:
        countries = sorted({r["country"] for r in rows})
        raise ValueError(f"no cities in {country!r}; countries: {', '.join(countries)}")
    return out


def get_city(city: str) -> dict:
    """Overview of one city: its country, how many hotels, restaurants and attractions it has, the
    cuisines and attraction categories found there, and the cities reachable by direct transport.

    Args:
        city: city name, e.g. "Lyon"
    """
    with closing(_connect()) as con:
        c = _city(con, city)
        count = lambda table: con.execute(f"SELECT count(*) FROM {table} WHERE city_id = ?", (c["id"],)).fetchone()[0]
        routes = con.execute(
            "SELECT DISTINCT d.name FROM transport t JOIN cities d ON d.id = t.destination_id "
            "WHERE t.origin_id = ? ORDER BY d.name", (c["id"],)).fetchall()
        return {"city": c["name"], "country": c["country"], "hotels": count("hotels"),
                "restaurants": count("restaurants"), "attractions": count("attractions"),
                "cuisines": _values(con, "cuisine", "restaurants", c["id"]),
                "attraction_categories": _values(con, "category", "attractions", c["id"]),
                "direct_connections": [r[0] for r in routes]}


def search_hotels(city: str, min_rating: Optional[float] = None, min_stars: Optional[int] = None,
                  max_price: Optional[int] = None, amenity: Optional[str] = None,
                  sort_by: Literal["price", "rating", "stars"] = "price", limit: int = 10) -> dict:
    """Search the hotels of a city. Prices are per room per night (a room sleeps two).

    Args:
        city: city name, e.g. "Lyon"
        min_rating: lowest guest rating to include (0-5)
        min_stars: lowest star category to include (1-5)
        max_price: highest nightly room price to include, in EUR
        amenity: only hotels offering this amenity: "wifi", "breakfast", "parking", "gym", "pool", "spa",
            "pet-friendly" or "airport-shuttle"
        sort_by: "price" (cheapest first), "rating" (best-rated first) or "stars" (most stars first)
        limit: how many results to return (1-50)
    """
    _number("min_rating", min_rating, 0, 5)
    _number("min_stars", min_stars, 1, 5)
    _number("max_price", max_price, 0, 100000)
    _choice("sort_by", sort_by, ("price", "rating", "stars"))
    limit = _limit(limit)
    order = {"price": "price_per_night, rating DESC, id", "rating": "rating DESC, price_per_night, id",
             "stars": "stars DESC, rating DESC, price_per_night, id"}[sort_by]
    with closing(_connect()) as con:
        c = _city(con, city)
        sql, params = "SELECT * FROM hotels WHERE city_id = ?", [c["id"]]
        if min_rating is not None:
            sql, params = sql + " AND rating >= ?", params + [min_rating]
        if min_stars is not None:
            sql, params = sql + " AND stars >= ?", params + [min_stars]
        if max_price is not None:
            sql, params = sql + " AND price_per_night <= ?", params + [max_price]
        rows = con.execute(f"{sql} ORDER BY {order}", params).fetchall()
    if amenity is not None:
        wanted = str(amenity).strip().lower()
        if wanted not in _AMENITIES:
            raise ValueError(f"unknown amenity {amenity!r}; amenities: {', '.join(_AMENITIES)}")
        rows = [r for r in rows if wanted in r["amenities"].split(",")]
    return _page([{"id": r["id"], "name": r["name"], "stars": r["stars"], "rating": r["rating"],
                   "price_per_night": r["price_per_night"], "neighborhood": r["neighborhood"]} for r in rows], limit)


def get_hotel(hotel_id: str) -> dict:
    """Full details of one hotel: address, amenities, star category, rating and nightly room price.

    Args:
        hotel_id: the hotel's id, e.g. "H-0042"
    """
    return _details("hotel", hotel_id)


def search_restaurants(city: str, cuisine: Optional[str] = None, meal: Optional[Literal["lunch", "dinner"]] = None,
                       min_rating: Optional[float] = None, max_price: Optional[int] = None,
                       sort_by: Literal["price", "rating"] = "price", limit: int = 10) -> dict:
    """Search the restaurants of a city. Prices are the average meal price per person.

    Args:
        city: city name, e.g. "Lyon"
        cuisine: only this cuisine, e.g. "Italian" (get_city lists a city's cuisines)
        meal: only restaurants open for this meal: "lunch" or "dinner"
        min_rating: lowest guest rating to include (0-5)
        max_price: highest price per person to include, in EUR
        sort_by: "price" (cheapest first) or "rating" (best-rated first)
        limit: how many results to return (1-50)
    """
    _number("min_rating", min_rating, 0, 5)
    _number("max_price", max_price, 0, 100000)
    if meal is not None:
        _choice("meal", meal, ("lunch", "dinner"))
    _choice("sort_by", sort_by, ("price", "rating"))
    limit = _limit(limit)
    order = {"price": "price_per_person, rating DESC, id", "rating": "rating DESC, price_per_person, id"}[sort_by]
    with closing(_connect()) as con:
        c = _city(con, city)
        sql, params = "SELECT * FROM restaurants WHERE city_id = ?", [c["id"]]
        if cuisine is not None:
            known = _values(con, "cuisine", "restaurants", c["id"])
            if str(cuisine).strip().lower() not in [k.lower() for k in known]:
                raise ValueError(f"no {cuisine!r} restaurants in {c['name']}; cuisines there: {', '.join(known)}")
            sql, params = sql + " AND lower(cuisine) = lower(?)", params + [str(cuisine).strip()]
        if meal is not None:
            sql += f" AND serves_{meal} = 1"
        if min_rating is not None:
            sql, params = sql + " AND rating >= ?", params + [min_rating]
        if max_price is not None:
            sql, params = sql + " AND price_per_person <= ?", params + [max_price]
        rows = con.execute(f"{sql} ORDER BY {order}", params).fetchall()
    return _page([{"id": r["id"], "name": r["name"], "cuisine": r["cuisine"], "rating": r["rating"],
                   "price_per_person": r["price_per_person"],
                   "meals": [m for m in ("lunch", "dinner") if r["serves_" + m]]} for r in rows], limit)


def get_restaurant(restaurant_id: str) -> dict:
    """Full details of one restaurant: cuisine, opening hours, meals served, rating and price per person.

    Args:
        restaurant_id: the restaurant's id, e.g. "R-0107"
    """
    return _details("restaurant", restaurant_id)


def search_attractions(city: str, category: Optional[str] = None, max_fee: Optional[int] = None,
                       min_rating: Optional[float] = None, open_at: Optional[str] = None,
                       sort_by: Literal["rating", "fee"] = "rating", limit: int = 10) -> dict:
    """Search the attractions of a city (museums, parks, landmarks...). Fees are per person.

    Args:
        city: city name, e.g. "Lyon"
        category: only this category, e.g. "museum" (get_city lists a city's categories)
        max_fee: highest entry fee per person to include, in EUR
        min_rating: lowest visitor rating to include (0-5)
        open_at: only attractions open at this time of day, written HH:MM
        sort_by: "rating" (best-rated first) or "fee" (cheapest first)
        limit: how many results to return (1-50)
    """
    _number("max_fee", max_fee, 0, 100000)
    _number("min_rating", min_rating, 0, 5)
    _time("open_at", open_at)
    _choice("sort_by", sort_by, ("rating", "fee"))
    limit = _limit(limit)
    order = {"rating": "rating DESC, entry_fee, id", "fee": "entry_fee, rating DESC, id"}[sort_by]
    with closing(_connect()) as con:
        c = _city(con, city)
        sql, params = "SELECT * FROM attractions WHERE city_id = ?", [c["id"]]
        if category is not None:
            known = _values(con, "category", "attractions", c["id"])
            if str(category).strip().lower() not in [k.lower() for k in known]:
                raise ValueError(f"no {category!r} attractions in {c['name']}; categories there: {', '.join(known)}")
            sql, params = sql + " AND lower(category) = lower(?)", params + [str(category).strip()]
        if max_fee is not None:
            sql, params = sql + " AND entry_fee <= ?", params + [max_fee]
        if min_rating is not None:
            sql, params = sql + " AND rating >= ?", params + [min_rating]
        if open_at is not None:
            sql, params = sql + " AND opens <= ? AND closes > ?", params + [open_at, open_at]
        rows = con.execute(f"{sql} ORDER BY {order}", params).fetchall()
    return _page([{"id": r["id"], "name": r["name"], "category": r["category"], "rating": r["rating"],
                   "entry_fee": r["entry_fee"], "opens": r["opens"], "closes": r["closes"]} for r in rows], limit)


def get_attraction(attraction_id: str) -> dict:
    """Full details of one attraction: category, opening hours, typical visit length, rating and fee.

    Args:
        attraction_id: the attraction's id, e.g. "A-0310"
    """
    return _details("attraction", attraction_id)


def search_transport(from_city: str, to_city: str, mode: Optional[Literal["flight", "train", "bus"]] = None,
                     depart_after: Optional[str] = None, arrive_before: Optional[str] = None,
                     max_price: Optional[int] = None, sort_by: Literal["price", "duration", "departure"] = "price",
                     limit: int = 10) -> dict:
    """Search direct same-day connections between two cities. Prices are per person.

    Args:
        from_city: departure city
        to_city: arrival city
        mode: only this mode of transport: "flight", "train" or "bus"
        depart_after: earliest departure time to include, HH:MM (inclusive)
        arrive_before: latest arrival time to include, HH:MM (inclusive)
        max_price: highest ticket price per person to include, in EUR
        sort_by: "price" (cheapest first), "duration" (fastest first) or "departure" (earliest first)
        limit: how many results to return (1-50)
    """
    if mode is not None:
        _choice("mode", mode, ("flight", "train", "bus"))
    _time("depart_after", depart_after)
    _time("arrive_before", arrive_before)
    _number("max_price", max_price, 0, 100000)
    _choice("sort_by", sort_by, ("price", "duration", "departure"))
    limit = _limit(limit)
    order = {"price": "price, duration_min, departs, id", "duration": "duration_min, price, id",
             "departure": "departs, price, id"}[sort_by]
    with closing(_connect()) as con:
        a, b = _city(con, from_city), _city(con, to_city)
        sql, params = "SELECT * FROM transport WHERE origin_id = ? AND destination_id = ?", [a["id"], b["id"]]
        if mode is not None:
            sql, params = sql + " AND mode = ?", params + [mode]
        if depart_after is not None:
            sql, params = sql + " AND departs >= ?", params + [depart_after]
        if arrive_before is not None:
            sql, params = sql + " AND arrives <= ?", params + [arrive_before]
        if max_price is not None:
            sql, params = sql + " AND price <= ?", params + [max_price]
        rows = con.execute(f"{sql} ORDER BY {order}", params).fetchall()
    return _page([{"id": r["id"], "mode": r["mode"], "operator": r["operator"], "departs": r["departs"],
                   "arrives": r["arrives"], "duration_min": r["duration_min"], "price": r["price"]} for r in rows],
                 limit)


def get_transport(transport_id: str) -> dict:
    """Full details of one connection: cities, mode, operator, times, duration and price per person.

    Args:
        transport_id: the connection's id, e.g. "T-0815"
    """
    return _details("transport", transport_id)


def _details(kind: str, item_id: str) -> dict:
    with closing(_connect()) as con:
        row = _row(con, kind, item_id)
        out = dict(row)
        if kind == "transport":
            names = dict(con.execute("SELECT id, name FROM cities").fetchall())
            out["from_city"], out["to_city"] = names[out.pop("origin_id")], names[out.pop("destination_id")]
        else:
            out["city"] = con.execute("SELECT name FROM cities WHERE id = ?", (out.pop("city_id"),)).fetchone()[0]
    for k in ("serves_lunch", "serves_dinner"):
        if k in out:
            out[k] = bool(out[k])
    if "amenities" in out:
        out["amenities"] = [a for a in out["amenities"].split(",") if a]
    return out


def _row(con: sqlite3.Connection, kind: str, item_id) -> sqlite3.Row:
    table, prefix = _KINDS[kind]
    if not isinstance(item_id, str) or not item_id.startswith(prefix):
        raise ValueError(f"{kind} ids look like {prefix}0042; got {item_id!r}")
    row = con.execute(f"SELECT * FROM {table} WHERE id = ?", (item_id,)).fetchone()
    if row is None:
        raise ValueError(f"no {kind} with id {item_id!r}")
    return row


def _rooms(travelers: int) -> int:
    return (travelers + 1) // 2


def _check_items(con: sqlite3.Connection, items, need_days: bool) -> list:
    if not isinstance(items, list) or not items:
        raise ValueError("items must be a non-empty list of objects like {\"day\": 1, \"type\": \"hotel\", \"id\": \"H-0042\"}")
    rows = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"item {i} must be an object, got {item!r}")
        allowed = {"day", "type", "id", "meal"}
        extra = sorted(set(item) - allowed)
        if extra:
            raise ValueError(f"item {i} has unknown keys {extra}; allowed: day, type, id, meal")
        kind = item.get("type")
        if kind not in _KINDS:
            raise ValueError(f"item {i}: type must be one of {', '.join(_KINDS)}; got {kind!r}")
        day = item.get("day")
        if need_days or day is not None:
            if isinstance(day, bool) or not isinstance(day, int) or not 1 <= day <= 30:
                raise ValueError(f"item {i}: day must be a whole number from 1 (the first day of the trip); got {day!r}")
        meal = item.get("meal")
        if kind == "restaurant":
            if need_days and meal not in ("lunch", "dinner"):
                raise ValueError(f"item {i}: a restaurant item needs meal \"lunch\" or \"dinner\"; got {meal!r}")
        elif meal is not None:
            raise ValueError(f"item {i}: only restaurant items have a meal")
        rows.append((item, _row(con, kind, item.get("id"))))
    return rows


def _cost(kind: str, row: sqlite3.Row, travelers: int) -> tuple:
    if kind == "hotel":
        return row["price_per_night"], _rooms(travelers)
    unit = {"restaurant": "price_per_person", "attraction": "entry_fee", "transport": "price"}[kind]
    return row[unit], travelers


def calculate_cost(items: List[dict], travelers: int) -> dict:
    """Price a list of plan items for a group. A hotel item is one night in one hotel, charged per room
    (one room per two travellers, rounded up); meals, entry fees and tickets are charged per person.

    Args:
        items: plan items, each {"type": "hotel"|"restaurant"|"attraction"|"transport", "id": ...}; "day" and
            "meal" may be included and are ignored
        travelers: number of people travelling (1-20)
    """
    _number("travelers", travelers, 1, 20)
    if not isinstance(travelers, int):
        raise ValueError("travelers must be a whole number")
    with closing(_connect()) as con:
        rows = _check_items(con, items, need_days=False)
        lines, total = [], 0
        for item, row in rows:
            unit, qty = _cost(item["type"], row, travelers)
            lines.append({"id": row["id"], "type": item["type"], "unit_price": unit, "quantity": qty,
                          "cost": unit * qty})
            total += unit * qty
    return {"travelers": travelers, "rooms": _rooms(travelers), "lines": lines, "total": total}


def submit_result(plan: List[dict], total_cost: int) -> dict:
    """Submit the final travel plan. Call it once the plan is complete; a later call replaces it.

    Args:
        plan: every item of the trip, each an object {"day": N, "type": T, "id": ID} where N is the trip day
            (1 = first day) and T is "hotel", "restaurant", "attraction" or "transport". Give one hotel item per
            night (day N = the night of day N); restaurant items also need "meal": "lunch" or "dinner".
        total_cost: total price of the whole plan for the whole group in EUR: hotels per room per night (one
            room per two travellers, rounded up), everything else per person
    """
    if isinstance(total_cost, bool) or not isinstance(total_cost, (int, float)) or total_cost < 0:
        raise ValueError(f"total_cost must be a non-negative number of EUR, got {total_cost!r}")
    with closing(_connect()) as con:
        _check_items(con, plan, need_days=True)
        con.execute("PRAGMA synchronous = OFF")  # the work dir is a per-episode scratch copy: no fsync needed
        cur = con.execute("INSERT INTO submissions (plan, total_cost) VALUES (?, ?)",
                          (json.dumps(plan, sort_keys=True), total_cost))
        con.commit()
        return {"status": "recorded", "submission": cur.lastrowid, "items": len(plan)}
