"""Verifier of the travel-planning tasks (the pack's hidden/verify.py; stdlib only, Python 3.8+).

It judges the agent's work against the database and the task's constraints, never against the
reference plan, so every plan that meets the request passes and any other fails:

- lookup tasks: the final answer names exactly one item (ids are read however written: any dash,
  any case), an optimal one for the request, with its price, every number it states is true of that
  item or repeats the request (so "one of: 0 1 2 ... 500" or "95 or 120 EUR" fails), and that item
  appeared in a tool result of the episode (the answer is grounded, not guessed);
- plan tasks: the last accepted ``submit_result`` holds exactly the requested items (one per hotel
  night, meal, visit and journey), each exists, is in the right place and meets its filters, each
  "cheapest"/"best-rated"/... choice is optimal, the conditional rules hold for the chosen items, the
  budget holds, and ``total_cost`` equals the plan's price for the group.

``params`` is the task spec the generator wrote (see generator.py). The generator reuses
``candidates`` and ``value`` to keep proposals feasible, so both agree on what a filter means.
"""

import re
import sqlite3
import unicodedata

TABLES = {"hotel": "hotels", "restaurant": "restaurants", "attraction": "attractions", "transport": "transport"}
PRICE = {"hotel": "price_per_night", "restaurant": "price_per_person", "attraction": "entry_fee",
         "transport": "price"}
PREFIX = {"hotel": "H", "restaurant": "R", "attraction": "A", "transport": "T"}
# pick -> (column, best is the highest?)
PICKS = {"cheapest": (None, False), "best_rated": ("rating", True), "fastest": ("duration_min", False),
         "earliest": ("departs", False)}


def rooms(travelers):
    return (travelers + 1) // 2


def cost(kind, row, travelers):
    """What one plan item costs the group: hotels per room per night, the rest per person."""
    return row[PRICE[kind]] * (rooms(travelers) if kind == "hotel" else travelers)


def _city_id(con, name):
    row = con.execute("SELECT id FROM cities WHERE lower(name) = lower(?)", (name,)).fetchone()
    return row[0] if row else None


def in_place(con, kind, row, place):
    """Is the item where the slot wants it (a city, or a from/to route for transport)?"""
    if kind == "transport":
        return row["origin_id"] == _city_id(con, place["from"]) and row["destination_id"] == _city_id(con, place["to"])
    return row["city_id"] == _city_id(con, place["city"])


def matches(kind, row, filters, meal=None):
    """Does one db row meet the slot's filters (and serve the slot's meal)?"""
    f = filters or {}
    if meal and not row["serves_" + meal]:
        return False
    if "min_rating" in f and row["rating"] < f["min_rating"]:
        return False
    if kind == "hotel":
        if "min_stars" in f and row["stars"] < f["min_stars"]:
            return False
        if "max_price" in f and row["price_per_night"] > f["max_price"]:
            return False
        if "amenity" in f and f["amenity"].lower() not in row["amenities"].split(","):
            return False
    elif kind == "restaurant":
        if "cuisine" in f and row["cuisine"].lower() != f["cuisine"].lower():
            return False
        if "max_price" in f and row["price_per_person"] > f["max_price"]:
            return False
    elif kind == "attraction":
        if "category" in f and row["category"].lower() != f["category"].lower():
            return False
        if "max_fee" in f and row["entry_fee"] > f["max_fee"]:
            return False
        if "open_at" in f and not row["opens"] <= f["open_at"] < row["closes"]:
            return False
    elif kind == "transport":
        if "mode" in f and row["mode"] != f["mode"]:
            return False
        if "depart_after" in f and row["departs"] < f["depart_after"]:
            return False
        if "arrive_before" in f and row["arrives"] > f["arrive_before"]:
            return False
        if "max_price" in f and row["price"] > f["max_price"]:
            return False
    return True


def candidates(con, kind, place, filters, meal=None):
    """Every row of ``kind`` at ``place`` meeting ``filters``, ordered by id."""
    con.row_factory = sqlite3.Row
    if kind == "transport":
        a, b = _city_id(con, place["from"]), _city_id(con, place["to"])
        rows = con.execute("SELECT * FROM transport WHERE origin_id = ? AND destination_id = ? ORDER BY id",
                           (a, b)).fetchall()
    else:
        rows = con.execute(f"SELECT * FROM {TABLES[kind]} WHERE city_id = ? ORDER BY id",
                           (_city_id(con, place["city"]),)).fetchall()
    return [r for r in rows if matches(kind, r, filters, meal)]


def value(kind, row, pick):
    column, _ = PICKS[pick]
    return row[column or PRICE[kind]]


def best(kind, rows, pick):
    """The optimal value of ``pick`` over ``rows`` (None when there are none)."""
    if not rows:
        return None
    vals = [value(kind, r, pick) for r in rows]
    return max(vals) if PICKS[pick][1] else min(vals)


def _fetch(con, kind, item_id):
    if not isinstance(item_id, str):
        return None
    return con.execute(f"SELECT * FROM {TABLES[kind]} WHERE id = ?", (item_id,)).fetchone()


def verify(answer, calls, params, ctx):
    con = ctx.db("state/travel.db")
    con.row_factory = sqlite3.Row
    try:
        if params["mode"] == "lookup":
            return _lookup(con, answer, calls, params)
        return _plan(con, calls, params)
    finally:
        con.close()


# ------------------------------------------------------------------ lookups


def _lookup(con, answer, calls, p):
    kind = p["kind"]
    rows = candidates(con, kind, p["place"], p.get("filters"))
    target = best(kind, rows, p["pick"])
    optimal = {r["id"]: r for r in rows if value(kind, r, p["pick"]) == target}
    text = _canon(answer or "")
    named = set(re.findall(r"(?<![A-Z0-9])%s\s?-\s?(\d{4})(?!\d)" % PREFIX[kind], text.upper()))
    named = {f"{PREFIX[kind]}-{n}" for n in named}
    if not named:
        return 0.0, {"reason": f"the answer names no {kind} id"}
    if len(named) > 1:
        return 0.0, {"reason": f"the answer names {len(named)} {kind}s; the request asks for one", "named": sorted(named)}
    item = named.pop()
    if item not in optimal:
        return 0.0, {"reason": f"{item} is not the {p['pick'].replace('_', '-')} match", "expected_any_of": sorted(optimal)}
    row = optimal[item]
    price = row[PRICE[kind]]
    rest = re.sub(r"(?<![A-Za-z0-9])[A-Za-z]\s?-\s?\d{4}(?!\d)|\b\d{1,2}:\d{2}\b", " ", text)
    numbers = {float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", rest)}
    if float(price) not in numbers and not (price == 0 and re.search(r"\bfree\b", rest, re.I)):
        return 0.0, {"reason": f"the answer does not state the price ({price} EUR)"}
    untrue = sorted(numbers - _facts(row, p))
    if untrue:
        return 0.0, {"reason": f"the answer states {', '.join(f'{n:g}' for n in untrue[:5])}, not true of {item} nor "
                               f"in the request: one price is asked for"}
    grounded = any(c.get("ok") and item in str(c.get("content", "")) for c in calls)
    if not grounded:
        return 0.0, {"reason": f"{item} never appeared in a tool result: the answer is not grounded in the episode"}
    return 1.0, {"item": item}


_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2043\u2212\ufe58\ufe63\uff0d"), "-")


def _canon(text):
    """NFKC (full-width letters and digits) with every dash read as "-": "a\u20110013" is a-0013."""
    return unicodedata.normalize("NFKC", str(text)).translate(_DASHES)


def _facts(row, p):
    """The numbers a lookup answer may state: the item's own values (also those inside its name or address;
    not its keys) and the request's (its filters)."""
    out = set()
    own = [row[k] for k in row.keys() if k != "id" and not k.endswith("_id")]  # not the db's keys
    for v in own + list((p.get("filters") or {}).values()):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.add(float(v))
        elif isinstance(v, str):
            out.update(float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", v))
    return out


# ------------------------------------------------------------------ plans


def _slot_positions(slot):
    """The plan positions (type, day, meal) a slot fills: one per hotel night, one otherwise."""
    if slot["type"] == "hotel":
        return [("hotel", n, None) for n in slot["nights"]]
    return [(slot["type"], slot["day"], slot.get("meal"))]


def _place(slot):
    return {"from": slot["from"], "to": slot["to"]} if slot["type"] == "transport" else {"city": slot["city"]}


def _fail(reason, **details):
    details["reason"] = reason
    return 0.0, details


def _plan(con, calls, p):
    subs = [c for c in calls if c.get("tool") == "submit_result" and c.get("ok")]
    if not subs:
        return _fail("no accepted submit_result call")
    args = subs[-1].get("args") or {}
    plan, total = args.get("plan"), args.get("total_cost")
    if not isinstance(plan, list) or isinstance(total, bool) or not isinstance(total, (int, float)):
        return _fail("the submission is not {plan: [...], total_cost: number}")
    travelers = p["travelers"]

    # 1. exactly the requested positions, one item each
    want = {}
    for slot in p["slots"]:
        for pos in _slot_positions(slot):
            want[pos] = slot["key"]
    got = {}
    for item in plan:
        if not isinstance(item, dict):
            return _fail("a plan item is not an object")
        kind = item.get("type")
        pos = (kind, item.get("day"), item.get("meal") if kind == "restaurant" else None)
        if pos in got:
            return _fail(f"two items for {pos}")
        if pos not in want:
            return _fail(f"unrequested item {pos}", requested=sorted(map(str, want)))
        got[pos] = item
    missing = [pos for pos in want if pos not in got]
    if missing:
        return _fail(f"missing items {missing}")

    # 2. each slot's item exists and is where the slot wants it
    chosen = {}
    slots = {s["key"]: s for s in p["slots"]}
    for key, slot in slots.items():
        ids = [got[pos].get("id") for pos in _slot_positions(slot)]
        if not all(isinstance(i, str) for i in ids):
            return _fail(f"slot {key}: item ids must be strings")
        ids = set(ids)
        if len(ids) != 1:
            return _fail(f"slot {key}: one stay must be one hotel, got {sorted(map(str, ids))}")
        item_id = ids.pop()
        row = _fetch(con, slot["type"], item_id)
        if row is None:
            return _fail(f"slot {key}: no {slot['type']} {item_id!r}")
        if not in_place(con, slot["type"], row, _place(slot)):
            return _fail(f"slot {key}: {item_id} is not in {_place(slot)}")
        chosen[key] = row
    computed = sum(cost(s["type"], chosen[k], travelers) * len(_slot_positions(s)) for k, s in slots.items())

    # 3. rules decide each slot's effective filters and pick
    filters = {k: dict(s.get("filters") or {}) for k, s in slots.items()}
    picks = {k: s.get("pick") for k, s in slots.items()}
    for rule in p.get("rules", []):
        kind = rule["kind"]
        if kind == "price_switch":
            cond = chosen[rule["if_slot"]][PRICE[slots[rule["if_slot"]]["type"]]] >= rule["at_least"]
            if cond:
                spent = sum(chosen[k][PRICE[slots[k]["type"]]] for k in rule["slots"])
                if not spent < rule["cap_per_person"]:
                    return _fail(f"rule: the {rule['if_slot']} price is at least {rule['at_least']}, so "
                                 f"{'+'.join(rule['slots'])} must cost under {rule['cap_per_person']} per person "
                                 f"(got {spent})")
                for k in rule["slots"]:
                    picks[k] = rule["then_pick"]
        elif kind == "rating_switch":
            if chosen[rule["if_slot"]]["rating"] < rule["below"]:
                filters[rule["slot"]].update(rule["then_filters"])
        elif kind == "budget_fallback":
            key = rule["slot"]
            s = slots[key]
            base = candidates(con, s["type"], _place(s), filters[key])
            if not base:
                return _fail(f"rule: slot {key} has no base option")
            base_price = best(s["type"], base, "cheapest")
            with_base = computed - cost(s["type"], chosen[key], travelers) + base_price * travelers
            if with_base > rule["budget"]:
                filters[key].update(rule["fallback"])
        else:
            return _fail(f"unknown rule kind {kind!r}")

    # 4. filters and optimal picks
    for key, slot in slots.items():
        kind, row = slot["type"], chosen[key]
        if not matches(kind, row, filters[key], slot.get("meal")):
            return _fail(f"slot {key}: {row['id']} does not meet {filters[key]}"
                         + (f" or is not open for {slot['meal']}" if slot.get("meal") else ""))
        if picks[key]:
            rows = candidates(con, kind, _place(slot), filters[key], slot.get("meal"))
            target = best(kind, rows, picks[key])
            if value(kind, row, picks[key]) != target:
                return _fail(f"slot {key}: {row['id']} is not the {picks[key].replace('_', '-')} option",
                             expected_value=target, got_value=value(kind, row, picks[key]))

    # 5. money
    if abs(total - computed) > 1e-9:
        return _fail(f"total_cost {total} is wrong", expected=computed)
    if p.get("budget") is not None and computed > p["budget"]:
        return _fail(f"the plan costs {computed}, over the budget of {p['budget']}")
    return 1.0, {"total": computed, "items": len(plan)}
