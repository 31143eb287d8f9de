"""The travel-planning category: a reproducible world, sound tools, and a verifier that judges plans
against the database and the constraints (not against the reference)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import sqlite3
from pathlib import Path

import pytest

from envgen.build.offline import build
from envgen.episodes.episode import Episode, replay
from envgen.build.sdk import get_category, load_generator, load_module
from envgen.pack import ToolSchema
from envgen.sandbox import open_sandbox
from envgen.sandbox.local import describe_tools

N_TASKS = 100
SEED = 5


@pytest.fixture(scope="module")
def travel():
    return load_generator(get_category("general", "travel-planning"))


@pytest.fixture(scope="module")
def gen(travel, tmp_path_factory):
    return travel.generate(tmp_path_factory.mktemp("travel"), N_TASKS, SEED)


@pytest.fixture(scope="module")
def verifier(gen):
    return load_module(gen.hidden_dir / "verify.py", "test_travel_verify")


class Ctx:
    """What the program verifier hands a verify function: read-only access to the work dir's db."""

    def __init__(self, work_dir: Path):
        self.work_dir = str(work_dir)

    def db(self, path: str) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{os.path.join(self.work_dir, path)}?mode=ro", uri=True)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _dump(tasks) -> list[str]:
    return [t.model_dump_json() for t in tasks]


# ------------------------------------------------------------------ the world


def test_same_seed_same_world_and_tasks(travel, gen, tmp_path):
    again = travel.generate(tmp_path / "a", 12, SEED)
    assert _sha(again.env_dir / "state" / "travel.db") == _sha(gen.env_dir / "state" / "travel.db")
    assert _dump(again.tasks) == _dump(gen.tasks[:12])  # task i depends on the seed and i only
    other = travel.generate(tmp_path / "b", 12, SEED + 1)
    assert _sha(other.env_dir / "state" / "travel.db") != _sha(gen.env_dir / "state" / "travel.db")
    assert _dump(other.tasks) != _dump(gen.tasks[:12])
    assert [t.id for t in again.tasks] == [f"travel-s{SEED}-{i:04d}" for i in range(12)]


def test_database_is_real_and_sized(gen):
    con = sqlite3.connect(gen.env_dir / "state" / "travel.db")
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in ("cities", "hotels", "restaurants", "attractions", "transport", "submissions")}
    assert counts["cities"] == 30 and counts["submissions"] == 0
    assert counts["hotels"] >= 800 and counts["restaurants"] >= 1200 and counts["attractions"] >= 300
    assert counts["transport"] >= 1000
    assert sum(counts.values()) >= 4000
    # prices span the conditional thresholds the prompts use
    assert con.execute("SELECT max(price_per_night) FROM hotels").fetchone()[0] >= 800
    assert con.execute("SELECT count(*) FROM transport WHERE arrives <= departs").fetchone()[0] == 0


def test_tool_schemas(gen):
    schemas = describe_tools(gen.env_dir)
    names = [s["function"]["name"] for s in schemas]
    assert 10 <= len(names) <= 15 and "submit_result" in names and gen.submit_tool == "submit_result"
    for s in schemas:
        ToolSchema.model_validate(s)
        fn = s["function"]
        assert fn["description"], fn["name"]
        for pname, prop in fn["parameters"]["properties"].items():
            assert prop.get("description"), f"{fn['name']}.{pname} has no description"
    submit = next(s["function"] for s in schemas if s["function"]["name"] == "submit_result")
    assert submit["parameters"]["required"] == ["plan", "total_cost"]
    hotels = next(s["function"] for s in schemas if s["function"]["name"] == "search_hotels")
    assert hotels["parameters"]["properties"]["sort_by"]["enum"] == ["price", "rating", "stars"]


# ------------------------------------------------------------------ tasks


def test_levels_difficulties_and_prompts(gen):
    tasks = gen.tasks
    assert len(tasks) == N_TASKS and len({t.id for t in tasks}) == N_TASKS
    assert {t.meta["level"] for t in tasks} == set(range(1, 11))
    diffs = {t.difficulty for t in tasks}
    assert set(range(1, 9)) <= diffs and max(diffs) >= 9
    for t in tasks:
        assert t.difficulty == len(t.reference.calls)
        spec = t.verifier.args["params"]
        text = t.prompt[0].content
        if spec["mode"] == "lookup":
            assert t.reference.calls[0].tool.startswith("search_")
            continue
        assert t.reference.calls[-1].tool == "submit_result"
        # every constraint is stated in the request
        for slot in spec["slots"]:
            for place in ("city", "from", "to"):
                if place in slot:
                    assert slot[place] in text, (t.id, slot[place])
            for key, value in slot["filters"].items():
                assert str(value) in text, (t.id, key, value)
        for rule in spec["rules"]:
            for key in ("at_least", "cap_per_person", "below", "budget"):
                if key in rule:
                    assert str(rule[key]) in text, (t.id, key)
        if spec["budget"] is not None:
            assert str(spec["budget"]) in text


def _submission(task) -> dict:
    call = task.reference.calls[-1]
    assert call.tool == "submit_result"
    return copy.deepcopy(call.args)


def _judge(verifier, gen, task, args: dict | None = None, answer: str = "") -> tuple[float, dict]:
    args = _submission(task) if args is None else args
    calls = [{"tool": "submit_result", "args": args, "ok": True, "content": "{}"}]
    return verifier.verify(answer, calls, task.verifier.args["params"], Ctx(gen.env_dir))


def _con(gen):
    con = sqlite3.connect(gen.env_dir / "state" / "travel.db")
    con.row_factory = sqlite3.Row
    return con


def _swap(verifier, con, task, key: str, new_row) -> dict:
    """The reference plan with slot ``key`` changed to ``new_row`` and the total recomputed (a well-formed plan)."""
    spec = task.verifier.args["params"]
    slot = next(s for s in spec["slots"] if s["key"] == key)
    args = _submission(task)
    positions = {(p[1], p[2]) for p in verifier._slot_positions(slot)}
    old = None
    for item in args["plan"]:
        if item["type"] == slot["type"] and (item["day"], item.get("meal")) in positions:
            old = item["id"]
            item["id"] = new_row["id"]
    old_row = con.execute(f"SELECT * FROM {verifier.TABLES[slot['type']]} WHERE id = ?", (old,)).fetchone()
    n = len(positions)
    args["total_cost"] += n * (verifier.cost(slot["type"], new_row, spec["travelers"])
                               - verifier.cost(slot["type"], old_row, spec["travelers"]))
    return args


def _place(slot):
    return {"from": slot["from"], "to": slot["to"]} if slot["type"] == "transport" else {"city": slot["city"]}


def test_reference_plans_pass_in_process(verifier, gen):
    plans = [t for t in gen.tasks if t.verifier.args["params"]["mode"] == "plan"]
    for t in plans:
        assert _judge(verifier, gen, t)[0] == 1.0, (t.id, _judge(verifier, gen, t)[1])


def test_verifier_rejects_malformed_plans(verifier, gen):
    t = next(t for t in gen.tasks if t.meta["level"] == 7 and not t.verifier.args["params"]["rules"])
    ok = _submission(t)
    wrong_total = {**ok, "total_cost": ok["total_cost"] + 1}
    missing = {**ok, "plan": ok["plan"][1:]}
    doubled = {**ok, "plan": ok["plan"] + ok["plan"][:1]}
    moved = copy.deepcopy(ok)
    moved["plan"][0]["day"] += 7
    split = copy.deepcopy(ok)  # a two-night stay split across two hotels
    nights = [i for i in split["plan"] if i["type"] == "hotel" and i["day"] in (2, 3)]
    other = _con(gen).execute("SELECT id FROM hotels WHERE id != ? LIMIT 1", (nights[0]["id"],)).fetchone()[0]
    nights[1]["id"] = other
    for bad in (wrong_total, missing, doubled, moved, split):
        reward, details = _judge(verifier, gen, t, bad)
        assert reward == 0.0 and details["reason"], details
    assert _judge(verifier, gen, t, {"plan": "everything", "total_cost": 1})[0] == 0.0
    calls = [{"tool": "submit_result", "args": ok, "ok": False, "content": "Error"}]  # refused by the tool
    assert verifier.verify("", calls, t.verifier.args["params"], Ctx(gen.env_dir))[0] == 0.0


def test_verifier_rejects_valid_but_not_optimal_choices(verifier, gen):
    con = _con(gen)
    checked = 0
    for t in gen.tasks:
        spec = t.verifier.args["params"]
        if spec["mode"] != "plan" or spec["rules"]:
            continue
        for slot in spec["slots"]:
            if not slot["pick"]:
                continue
            rows = verifier.candidates(con, slot["type"], _place(slot), slot["filters"], slot.get("meal"))
            target = verifier.best(slot["type"], rows, slot["pick"])
            worse = [r for r in rows if verifier.value(slot["type"], r, slot["pick"]) != target]
            if worse:
                reward, details = _judge(verifier, gen, t, _swap(verifier, con, t, slot["key"], worse[0]))
                assert reward == 0.0 and "is not the" in details["reason"], (t.id, details)
                checked += 1
    assert checked >= 30


def test_budget_tasks_accept_any_plan_within_budget(verifier, gen):
    con = _con(gen)
    accepted = over = 0
    for t in gen.tasks:
        spec = t.verifier.args["params"]
        if spec["mode"] != "plan" or spec["budget"] is None:
            continue
        for slot in spec["slots"]:
            chosen = next(i["id"] for i in _submission(t)["plan"] if i["type"] == slot["type"])
            for row in verifier.candidates(con, slot["type"], _place(slot), slot["filters"], slot.get("meal")):
                if row["id"] == chosen:
                    continue
                args = _swap(verifier, con, t, slot["key"], row)
                reward, details = _judge(verifier, gen, t, args)
                if args["total_cost"] <= spec["budget"]:
                    assert reward == 1.0, (t.id, details)  # a different plan that meets the request passes
                    accepted += 1
                else:
                    assert reward == 0.0 and "over the budget" in details["reason"]
                    over += 1
    assert accepted >= 5 and over >= 5


def _rule_tasks(gen, kind):
    return [t for t in gen.tasks if t.verifier.args["params"]["mode"] == "plan"
            and any(r["kind"] == kind for r in t.verifier.args["params"]["rules"])]


def test_price_rule_both_branches(verifier, gen):
    con = _con(gen)
    branches = set()
    for t in _rule_tasks(gen, "price_switch"):
        spec = t.verifier.args["params"]
        rule = next(r for r in spec["rules"] if r["kind"] == "price_switch")
        hotel_id = next(i["id"] for i in _submission(t)["plan"] if i["type"] == "hotel" and
                        i["day"] == next(s for s in spec["slots"] if s["key"] == rule["if_slot"])["nights"][0])
        price = con.execute("SELECT price_per_night FROM hotels WHERE id = ?", (hotel_id,)).fetchone()[0]
        holds = price >= rule["at_least"]
        branches.add(holds)
        # the meal pick the other branch would make must fail here
        for key in rule["slots"]:
            slot = next(s for s in spec["slots"] if s["key"] == key)
            rows = verifier.candidates(con, "restaurant", _place(slot), slot["filters"], slot["meal"])
            wrong_pick = "best_rated" if holds else "cheapest"
            target = verifier.best("restaurant", rows, wrong_pick)
            right = verifier.best("restaurant", rows, "cheapest" if holds else "best_rated")
            other = [r for r in rows if verifier.value("restaurant", r, wrong_pick) == target and
                     verifier.value("restaurant", r, "cheapest" if holds else "best_rated") != right]
            if other:
                assert _judge(verifier, gen, t, _swap(verifier, con, t, key, other[0]))[0] == 0.0, t.id
    assert branches == {True, False}


def test_rating_and_budget_fallback_rules_both_branches(verifier, gen):
    con = _con(gen)
    rating = set()
    for t in _rule_tasks(gen, "rating_switch"):
        spec = t.verifier.args["params"]
        rule = next(r for r in spec["rules"] if r["kind"] == "rating_switch")
        hotel = next(i["id"] for i in _submission(t)["plan"] if i["type"] == "hotel")
        holds = con.execute("SELECT rating FROM hotels WHERE id = ?", (hotel,)).fetchone()[0] < rule["below"]
        rating.add(holds)
        if holds:  # a cheaper dinner below the required rating must fail
            slot = next(s for s in spec["slots"] if s["key"] == rule["slot"])
            rows = verifier.candidates(con, "restaurant", _place(slot), slot["filters"], "dinner")
            low = [r for r in rows if r["rating"] < rule["then_filters"]["min_rating"]]
            if low:
                reward, details = _judge(verifier, gen, t, _swap(verifier, con, t, rule["slot"], low[0]))
                assert reward == 0.0, details
    assert rating == {True, False}

    fallback = set()
    for t in _rule_tasks(gen, "budget_fallback"):
        spec = t.verifier.args["params"]
        rule = spec["rules"][0]
        slot = next(s for s in spec["slots"] if s["key"] == rule["slot"])
        used = con.execute("SELECT mode FROM transport WHERE id = ?",
                           (next(i["id"] for i in _submission(t)["plan"] if i["type"] == "transport"),)).fetchone()[0]
        took_bus = used == "bus"
        fallback.add(took_bus)
        assert t.difficulty == (10 if took_bus else 8)
        # the other branch's journey, priced correctly, must fail
        other_filters = {**slot["filters"], **rule["fallback"]} if not took_bus else slot["filters"]
        rows = verifier.candidates(con, "transport", _place(slot), other_filters)
        cheapest = min(rows, key=lambda r: (r["price"], r["id"]))
        reward, details = _judge(verifier, gen, t, _swap(verifier, con, t, rule["slot"], cheapest))
        assert reward == 0.0, (t.id, details)
    assert fallback == {True, False}


def test_lookup_answers_must_name_one_grounded_optimum(verifier, gen):
    t = next(t for t in gen.tasks if t.verifier.args["params"]["mode"] == "lookup")
    spec = t.verifier.args["params"]
    answer = t.reference.answer
    item = next(w.strip("():.,") for w in answer.split() if w.strip("():.,")[1:2] == "-")
    seen = [{"tool": t.reference.calls[0].tool, "args": {}, "ok": True, "content": json.dumps({"results": [item]})}]
    ctx = Ctx(gen.env_dir)
    assert verifier.verify(answer, seen, spec, ctx)[0] == 1.0
    assert verifier.verify(answer, [], spec, ctx)[0] == 0.0  # not grounded in the episode
    assert verifier.verify(answer + " Or maybe H-0001, R-0001, A-0001, T-0001.", seen, spec, ctx)[0] == 0.0
    assert verifier.verify(answer.replace(item, item[:2] + "9999"), seen, spec, ctx)[0] == 0.0


def test_lookup_answers_state_one_true_price_and_ids_however_written(verifier, gen):
    """Issue 12, class 7: every number a lookup answer states is true of the item or repeats the request, and
    ids are read through NFKC, dash variants and case, so hedges hidden in either score 0."""
    ctx = Ctx(gen.env_dir)
    lookups = [t for t in gen.tasks if t.verifier.args["params"]["mode"] == "lookup"]
    assert len({t.verifier.args["params"]["kind"] for t in lookups}) >= 3
    for t in lookups:
        spec = t.verifier.args["params"]
        item = re.search(r"[HRAT]-\d{4}", t.reference.answer).group()
        row = verifier.candidates(_con(gen), spec["kind"], spec["place"], spec.get("filters"))
        price = next(r for r in row if r["id"] == item)[verifier.PRICE[spec["kind"]]]
        seen = [{"tool": "search", "args": {}, "ok": True, "content": json.dumps({"results": [item]})}]
        n = int(item[2:])
        other = f"{item[0]}-{n + 1 if n < 9999 else n - 1:04d}"

        def score(text):
            return verifier.verify(text, seen, spec, ctx)[0]

        assert score(t.reference.answer) == 1.0, t.id
        assert score(f"{item.lower().replace('-', chr(0x2011))}: {price} EUR") == 1.0, t.id
        assert score(f"{item} costs one of: " + " ".join(map(str, range(max(price, 1) * 2 + 2)))) == 0.0, t.id
        assert score(f"{item}: {price} or {price * 2 + 1} EUR") == 0.0, t.id
        assert score(f"{item}: {price * 2 + 1} or {price} EUR") == 0.0, t.id
        assert score(f"{item} (if closed, try {other.replace('-', chr(0x2011))}): {price} EUR") == 0.0, t.id
        assert score(f"{item} (or {other.lower()}): {price} EUR") == 0.0, t.id
        assert score(f"{other}: {price} EUR\n{item}: {price} EUR") == 0.0, t.id
        for key, value in (spec.get("filters") or {}).items():  # restating the request is not a second price
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value != price:
                assert score(f"{item}: {price} EUR (your limit was {value})") == 1.0, (t.id, key)


# ------------------------------------------------------------------ through the sandbox


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    report = build("general", "travel-planning", tmp_path_factory.mktemp("tp") / "pack", tasks=20, seed=SEED)
    assert report.kept == 20, report.rejections
    from envgen.pack import load

    return load(report.out)


def test_oracle_scores_one_and_null_zero_in_the_sandbox(pack):
    with open_sandbox(pack, "local") as sbx:
        for task in pack.tasks:
            ep = replay(sbx, task, task.reference.calls, task.reference.answer)
            assert ep.verdict.reward == 1.0, (task.id, ep.verdict.details)
            assert all(c["ok"] for c in ep.calls)
            null = Episode(sbx, task)
            assert null.finish("").reward == 0.0


def test_tools_report_bad_arguments_as_errors(pack):
    with open_sandbox(pack, "local") as sbx:
        sbx.reset()
        for tool, args, hint in [
            ("search_hotels", {"city": "Atlantis"}, "list_cities"),
            ("search_hotels", {"city": "Lyon", "sort_by": "cost"}, "sort_by"),
            ("search_restaurants", {"city": "Lyon", "cuisine": "Martian"}, "cuisines there"),
            ("search_transport", {"from_city": "Lyon", "to_city": "Paris", "depart_after": "9am"}, "HH:MM"),
            ("submit_result", {"plan": [{"day": 1, "type": "hotel", "id": "H-99999"}], "total_cost": 5}, "H-99999"),
            ("submit_result", {"plan": [{"day": 1, "type": "restaurant", "id": "R-0001"}], "total_cost": 5}, "meal"),
        ]:
            res = sbx.call(tool, args)
            assert not res.ok and hint in res.content, (tool, res.content)
        res = sbx.call("get_city", {"city": "lyon"})
        assert res.ok and json.loads(res.content)["city"] == "Lyon"
