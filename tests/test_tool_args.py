"""Typed tool arguments (issue 15): every call is checked against its tool's JSON schema before it runs.

Through ``gymnasium.make`` on a real local sandbox: a wrongly typed call is a ``bad_arguments`` observation
naming each field, the tool does not run (the database is untouched) and the episode goes on; nested
objects, arrays, enums, required fields and ``additionalProperties: false`` of a schema the pack author
tightened are enforced; the turn of each call reaches the verifier; ``spec.max_episode_steps`` is the
env's ``max_turns`` and truncation happens there exactly once.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.episodes.actions import render_action
from envgen.episodes.arguments import ArgumentChecker
from envgen.episodes.episode import replay
from envgen.episodes.gym import ENV_ID
from envgen.pack import format as packmod
from envgen.pack.format import ToolCall
from envgen.sandbox import open_sandbox
from envgen.sandbox.local import describe_tools

TOOLS = '''
import json
import sqlite3
from typing import List, Literal, Optional


def _db():
    return sqlite3.connect("state/shop.db")


def set_address(customer_id: str, street: str, city: str, state: str, zip: str) -> str:
    """Store a customer's postal address.

    Args:
        customer_id: the customer, e.g. "C-1"
        street: street and number
        city: the city
        state: two-letter state code
        zip: the ZIP code, as text
    """
    con = _db()
    con.execute("INSERT OR REPLACE INTO addresses VALUES (?, ?, ?, ?, ?)", (customer_id, street, city, state, zip))
    con.commit()
    return "stored"


def get_address(customer_id: str) -> dict:
    """Read a customer's address.

    Args:
        customer_id: the customer
    """
    row = _db().execute("SELECT street, city, state, zip FROM addresses WHERE customer_id = ?",
                        (customer_id,)).fetchone()
    return {"address": row}


def ship(order_id: str, address: dict, items: List[dict], speed: Literal["standard", "express"],
         note: Optional[str] = None, weight_kg: float = 1.0) -> str:
    """Ship an order.

    Args:
        order_id: the order
        address: where to (street, zip)
        items: lines of {sku, qty}
        speed: standard or express
        note: an optional note for the courier
        weight_kg: parcel weight
    """
    con = _db()
    con.execute("INSERT INTO shipments VALUES (?, ?)", (order_id, json.dumps([address, items, speed, note, weight_kg])))
    con.commit()
    return "shipped " + order_id


def list_shipments() -> list:
    """The shipments made so far."""
    return [list(r) for r in _db().execute("SELECT order_id FROM shipments")]


def set_status(order_id: str, status: Literal["open", "cancelled", "refunded"]) -> str:
    """Set an order's status.

    Args:
        order_id: the order
        status: the new status
    """
    con = _db()
    con.execute("UPDATE orders SET status = ? WHERE id = ?", (status, order_id))
    con.commit()
    return f"{order_id}: {status}"
'''

VERIFY = '''
import sqlite3


def verify(answer, calls, params, ctx):
    con = ctx.db("state/shop.db")
    turns = [[c["tool"], c.get("turn"), c["ok"]] for c in calls]
    if params.get("check") == "closed":
        # trusts set_status's contract: any status but "open" is one the task accepts (cancelled or refunded)
        row = con.execute("SELECT status FROM orders WHERE id = 'O-7'").fetchone()
        return float(row[0] != "open"), {"status": row[0], "turns": turns}
    row = con.execute("SELECT street, city, state, zip FROM addresses WHERE customer_id = 'C-1'").fetchone()
    ok = row is not None and list(row) == ["1 Elm St", "Philadelphia", "PA", "19122"]
    return float(ok), {"row": list(row) if row else None, "turns": turns}
'''

GOOD = {"customer_id": "C-1", "street": "1 Elm St", "city": "Philadelphia", "state": "PA", "zip": "19122"}
BAD = {**GOOD, "zip": 19122, "city": 1.5, "state": None}


def make_shop_pack(dest: Path) -> packmod.Pack:
    src = dest.parent / f"{dest.name}-src"
    (src / "env" / "state").mkdir(parents=True)
    (src / "hidden").mkdir()
    (src / "env" / "tools.py").write_text(textwrap.dedent(TOOLS))
    (src / "hidden" / "verify.py").write_text(textwrap.dedent(VERIFY))
    con = sqlite3.connect(src / "env" / "state" / "shop.db")
    con.executescript("CREATE TABLE addresses (customer_id TEXT PRIMARY KEY, street, city, state, zip);"
                      "CREATE TABLE shipments (order_id TEXT, spec TEXT);"
                      "CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT);"
                      "INSERT INTO orders VALUES ('O-7', 'open');")
    con.commit()
    con.close()
    schemas = describe_tools(src / "env")
    ship_schema = next(s for s in schemas if s["function"]["name"] == "ship")["function"]["parameters"]
    # the pack author tightens what the signature cannot say: the address's fields and the item lines
    ship_schema["properties"]["address"].update({
        "properties": {"street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
        "required": ["street", "zip"], "additionalProperties": False})
    ship_schema["properties"]["items"]["items"].update({
        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
        "required": ["sku", "qty"]})
    tasks = [
        packmod.Task(id="address", prompt=[{"role": "user", "content": "Store C-1's address: 1 Elm St, "
                                            "Philadelphia, PA 19122."}],
                     verifier={"kind": "program", "args": {"params": {}}},
                     reference={"calls": [{"tool": "set_address", "args": GOOD}], "answer": "Stored."}, difficulty=1),
        packmod.Task(id="cancel", prompt=[{"role": "user", "content": "Cancel order O-7."}],
                     verifier={"kind": "program", "args": {"params": {"check": "closed"}}},
                     reference={"calls": [{"tool": "set_status", "args": {"order_id": "O-7", "status": "cancelled"}}],
                                "answer": "Cancelled."}, difficulty=1),
    ]
    manifest = packmod.Manifest(name="shop", family="test", description="typed arguments test pack", tools=schemas,
                                limits=packmod.Limits(step_timeout_s=5, max_turns=4))
    return packmod.save(packmod.Pack(manifest, tasks), dest, env_from=src / "env", hidden_from=src / "hidden")


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> packmod.Pack:
    return make_shop_pack(tmp_path_factory.mktemp("typed") / "shop")


@pytest.fixture(scope="module")
def env(shop):
    e = gymnasium.make(ENV_ID, pack=str(shop.root), sandbox="local")
    yield e
    e.close()


def call(name: str, args) -> str:
    return render_action("", [{"name": name, "arguments": args, "id": "c1"}], "openai")


def test_the_issue_address_is_refused_naming_each_field(env):
    env.reset(options={"task_id": "address"})
    obs, reward, term, trunc, info = env.step(call("set_address", BAD))
    assert obs.count("Error (bad_arguments)") == 1 and not term and not trunc
    for line in ("zip: 19122 is not of type 'string'", "city: 1.5 is not of type 'string'",
                 "state: null is not of type 'string'"):
        assert line in obs, obs
    assert info["invalid_actions"] == 1 and info["tool_errors"] == 0
    obs, *_ = env.step(call("get_address", {"customer_id": "C-1"}))
    assert '"address": null' in obs  # the tool did not run: nothing was stored
    obs, *_ = env.step(call("set_address", GOOD))
    assert "stored" in obs
    obs, reward, term, trunc, info = env.step("Stored the address.")
    assert (reward, term, trunc) == (1.0, True, False)
    # the verifier got every call, the refused one too, each with the turn (assistant message) that made it
    assert info["reward_details"]["turns"] == [["set_address", 1, False], ["get_address", 2, True],
                                               ["set_address", 3, True]]


def test_the_wrongly_typed_write_alone_scores_0(env):
    env.reset(options={"task_id": "address"})
    env.step(call("set_address", BAD))
    _, reward, term, _, info = env.step("Stored.")
    assert term and reward == 0.0 and info["reward_details"]["row"] is None


@pytest.mark.parametrize("args, wrong", [
    ({"order_id": "O-1", "address": {"street": "1 Elm St", "zip": "19122"}, "items": [{"sku": "A", "qty": 2}],
      "speed": "overnight"}, "speed: \"overnight\" is not one of [\"standard\", \"express\"]"),
    ({"order_id": "O-1", "address": {"street": "1 Elm St", "zip": "19122"}, "items": [{"sku": "A", "qty": 2}]},
     "'speed' is a required property"),
    ({"order_id": "O-1", "address": {"street": "1 Elm St", "zip": 19122}, "items": [], "speed": "express"},
     "address.zip: 19122 is not of type 'string'"),
    ({"order_id": "O-1", "address": {"street": "1 Elm St", "zip": "191"}, "items": [], "speed": "express"},
     "address.zip: '191' does not match '^[0-9]{5}$'"),
    ({"order_id": "O-1", "address": {"street": "1 Elm St", "zip": "19122", "gate": "B"}, "items": [],
      "speed": "express"}, "address: Additional properties are not allowed ('gate' was unexpected)"),
    ({"order_id": "O-1", "address": {"street": "1 Elm St", "zip": "19122"},
      "items": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2.5}], "speed": "express"},
     "items[1].qty: 2.5 is not of type 'integer'"),
    ({"order_id": "O-1", "address": {"street": "1 Elm St", "zip": "19122"}, "items": [{"sku": "A", "qty": True}],
      "speed": "express"}, "items[0].qty: true is not of type 'integer'"),
    ({"order_id": "O-1", "address": ["1 Elm St"], "items": {}, "speed": "express"},
     "address: [\"1 Elm St\"] is not of type 'object'; items: {} is not of type 'array'"),
    ({"order_id": "O-1", "address": {"street": "1 Elm St", "zip": "19122"}, "items": [], "speed": "express",
      "weight_kg": None}, "weight_kg: null is not of type 'number'"),
])
def test_nested_enum_required_refused_and_nothing_runs(env, args, wrong):
    env.reset(options={"task_id": "address"})
    obs, _, _, _, info = env.step(call("ship", args))
    assert "Error (bad_arguments): ship: " in obs and wrong in obs, obs
    assert info["invalid_actions"] == 1
    obs, *_ = env.step(call("list_shipments", {}))
    assert "\n[]\n" in obs, obs  # the tool did not run


def test_well_typed_calls_run(env):
    """An int where the tool says float, null for an optional parameter whose default is None, and
    every field of the tightened nested schema right: the tool runs."""
    env.reset(options={"task_id": "address"})
    args = {"order_id": "O-1", "address": {"street": "1 Elm St", "zip": "19122"},
            "items": [{"sku": "A", "qty": 2}], "speed": "express", "note": None, "weight_kg": 3}
    obs, _, _, _, info = env.step(call("ship", args))
    assert "shipped O-1" in obs and info["invalid_actions"] == 0
    obs, *_ = env.step(call("list_shipments", {}))
    assert '[["O-1"]]' in obs


def test_checker_messages_without_a_sandbox(shop):
    checker = ArgumentChecker(t.model_dump(exclude_none=True) for t in shop.manifest.tools)
    assert checker.check("set_address", GOOD) is None
    assert checker.check("set_address", BAD) == ("set_address: city: 1.5 is not of type 'string'; "
                                                 "state: null is not of type 'string'; "
                                                 "zip: 19122 is not of type 'string'")
    assert checker.check("set_address", ["C-1"]) == 'set_address: arguments must be a JSON object, got ["C-1"]'
    assert checker.check("set_status", {"order_id": "O-7", "status": "closed"}) == (
        "set_status: status: \"closed\" is not one of [\"open\", \"cancelled\", \"refunded\"]")


def test_replay_checks_reference_calls_and_records_turns(shop):
    with open_sandbox(shop, "local") as sbx:
        task = shop.task("address")
        ep = replay(sbx, task, [ToolCall(tool="get_address", args={"customer_id": "C-1"}),
                                ToolCall(tool="set_address", args=GOOD)], "Stored.")
        assert ep.verdict.reward == 1.0 and [c["turn"] for c in ep.calls] == [1, 2]
        bad = replay(sbx, task, [ToolCall(tool="set_address", args=BAD)], "Stored.")
        assert bad.verdict.reward == 0.0 and bad.calls[0]["ok"] is False
        assert "zip: 19122 is not of type 'string'" in bad.calls[0]["content"]


def test_spec_max_episode_steps_is_max_turns_and_truncation_happens_once(shop):
    for kwargs, turns in (({}, 4), ({"max_turns": 2}, 2)):
        e = gymnasium.make(ENV_ID, pack=str(shop.root), sandbox="local", **kwargs)
        try:
            assert e.spec.max_episode_steps == turns
            assert "TimeLimit" not in str(e)  # the env truncates itself; make adds no second counter
            e.reset(options={"task_id": "address"})
            flags = [e.step(call("get_address", {"customer_id": "C-1"}))[3] for _ in range(turns)]
            assert flags == [False] * (turns - 1) + [True]
            with pytest.raises(gymnasium.error.ResetNeeded):
                e.step("late")
            # a copy made from the spec (gymnasium adds a TimeLimit there) truncates at the same step
            again = gymnasium.make(e.spec)
            try:
                again.reset(options={"task_id": "address"})
                flags = [again.step(call("get_address", {"customer_id": "C-1"}))[3] for _ in range(turns)]
                assert flags == [False] * (turns - 1) + [True]
                assert again.spec.max_episode_steps == turns
            finally:
                again.close()
        finally:
            e.close()
