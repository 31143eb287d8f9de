"""The kit's `state` / `no_write` kinds over a JSON state file (imported tau2-bench domains keep their database
as one JSON document): what the episode did to the document is judged on its parsed content, so a collateral
write scores 0 wherever it hides, while the same state spelled differently (keys reordered, floats written
another way, other whitespace) is no change."""

from __future__ import annotations

import json
import sys

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import verify as kit_verify  # noqa: E402
from envgen_verifiers.state import json_changeset  # noqa: E402

DB = {"users": {"ana_1": {"name": "Ana", "balance": 10.5, "orders": ["#W1", "#W2"]}},
      "orders": {"#W1": {"status": "pending", "total": 54.2, "gift": False},
                 "#W2": {"status": "delivered", "total": 3.0, "gift": True}}}


@pytest.fixture
def dirs(tmp_path):
    env, work = tmp_path / "env", tmp_path / "work"
    for d in (env, work):
        (d / "state").mkdir(parents=True)
        (d / "state" / "db.json").write_text(json.dumps(DB, indent=2))
    return env, work


def write(work, text: str) -> None:
    (work / "state" / "db.json").write_text(text)


def judge(spec, env, work) -> dict:
    return kit_verify(spec, answer="", calls=[], work_dir=str(work), hidden_dir=None, env_dir=str(env))


def cancelled() -> dict:
    db = json.loads(json.dumps(DB))
    db["orders"]["#W1"]["status"] = "cancelled"
    return db


def expected_cancel(env, work) -> dict:
    """The change set of the right episode (cancel #W1), recorded as the build records it."""
    write(work, json.dumps(cancelled()))
    changes = json_changeset(str(env / "state" / "db.json"), str(work / "state" / "db.json"))
    write(work, json.dumps(DB, indent=2))
    return changes


def state_spec(expected: dict) -> dict:
    return {"kind": "state", "args": {"json": "state/db.json", "changes": {"expected": expected}}}


def test_the_same_state_spelled_differently_is_no_change(dirs):
    env, work = dirs
    # keys in another order, no whitespace, 54.2 as 54.20 / 5.42e1, 3.0 as 3
    text = ('{"orders":{"#W2":{"gift":true,"total":3,"status":"delivered"},"#W1":{"total":5.42e1,"gift":false,'
            '"status":"pending"}},"users":{"ana_1":{"orders":["#W1","#W2"],"balance":10.50,"name":"Ana"}}}')
    write(work, text)
    assert judge({"kind": "no_write", "args": {"json": "state/db.json"}}, env, work)["reward"] == 1.0


def test_the_right_change_scores_1_however_it_is_written(dirs):
    env, work = dirs
    spec = state_spec(expected_cancel(env, work))
    write(work, json.dumps(cancelled(), sort_keys=True, separators=(",", ":")))
    assert judge(spec, env, work)["reward"] == 1.0


@pytest.mark.parametrize("attack", ["collateral", "added_key", "removed_key", "reordered_list", "bool_for_int",
                                    "string_for_number", "float_drift"])
def test_a_collateral_write_anywhere_scores_0(dirs, attack):
    env, work = dirs
    spec = state_spec(expected_cancel(env, work))
    db = cancelled()
    if attack == "collateral":  # the task's change plus a refund nobody asked for
        db["users"]["ana_1"]["balance"] = 64.7
    elif attack == "added_key":
        db["orders"]["#W1"]["refund"] = 54.2
    elif attack == "removed_key":
        del db["orders"]["#W2"]["gift"]
    elif attack == "reordered_list":
        db["users"]["ana_1"]["orders"].reverse()
    elif attack == "bool_for_int":
        db["orders"]["#W2"]["gift"] = 1
    elif attack == "string_for_number":
        db["orders"]["#W2"]["total"] = "3.0"
    elif attack == "float_drift":
        db["orders"]["#W1"]["total"] = 54.2000001
    write(work, json.dumps(db))
    out = judge(spec, env, work)
    assert out["reward"] == 0.0, attack
    assert out["details"]["reason"]


def test_no_write_catches_one_leaf_and_names_it(dirs):
    env, work = dirs
    db = json.loads(json.dumps(DB))
    db["orders"]["#W2"]["status"] = "returned"
    write(work, json.dumps(db))
    out = judge({"kind": "no_write", "args": {"json": "state/db.json"}}, env, work)
    assert out["reward"] == 0.0 and "/orders/#W2/status" in out["details"]["reason"]


def test_ignore_patterns_are_json_pointers(dirs):
    env, work = dirs
    db = json.loads(json.dumps(DB))
    db["orders"]["#W2"]["status"] = "returned"
    write(work, json.dumps(db))
    spec = {"kind": "no_write", "args": {"json": "state/db.json", "ignore": ["/orders/*/status"]}}
    assert judge(spec, env, work)["reward"] == 1.0


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_missing_or_unreadable_state_scores_0(dirs, damage):
    env, work = dirs
    if damage == "missing":
        (work / "state" / "db.json").unlink()
    else:
        write(work, "{not json")
    out = judge({"kind": "no_write", "args": {"json": "state/db.json"}}, env, work)
    assert out["reward"] == 0.0 and "db.json" in out["details"]["reason"]


def test_no_recorded_expectation_never_passes(dirs):
    env, work = dirs
    out = judge({"kind": "state", "args": {"json": "state/db.json"}}, env, work)
    assert out["reward"] == 0.0 and "refusing to pass by default" in out["details"]["reason"]
