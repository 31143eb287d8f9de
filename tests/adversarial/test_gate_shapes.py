"""A gate that knows the verifier (issue 15, item 5): probes follow the verifier's kind and the task's shape.

End-state tasks (graded on the database alone) meet no calls, one write dropped, one argument of a write
mutated and a collateral write, not the "empty answer" probe; no-change tasks (refuse) meet a plausible
wrong write (``reference.forbidden``) instead of "claim"; conversational tasks meet "never asked" (the
user's hidden facts guessed wrongly). Correct tasks of every shape are kept and weak verifiers dropped.

Everything replays on a real local sandbox over a small shop pack built here.
"""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

import pytest

from envgen.build.gate import gate, shape
from envgen.build.offline import record_and_gate
from envgen.pack import format as packmod
from envgen.sandbox import open_sandbox
from envgen.sandbox.local import describe_tools

TOOLS = '''
import sqlite3
from typing import Literal


def _db():
    return sqlite3.connect("state/shop.db")


def get_order(order_id: str) -> dict:
    """Look up an order.

    Args:
        order_id: the order, e.g. "O-101"
    """
    row = _db().execute("SELECT id, status, total FROM orders WHERE id = ?", (order_id,)).fetchone()
    if row is None:
        raise KeyError(f"no order {order_id}")
    return {"id": row[0], "status": row[1], "total": row[2]}


def refund(order_id: str, method: Literal["card", "store_credit"]) -> str:
    """Refund an order in full.

    Args:
        order_id: the order
        method: where the money goes
    """
    con = _db()
    row = con.execute("SELECT total FROM orders WHERE id = ?", (order_id,)).fetchone()
    if row is None:
        raise KeyError(f"no order {order_id}")
    con.execute("UPDATE orders SET status = 'refunded' WHERE id = ?", (order_id,))
    con.execute("INSERT INTO refunds (order_id, amount, method) VALUES (?, ?, ?)", (order_id, row[0], method))
    con.commit()
    return f"refunded {row[0]:.2f} for {order_id} to {method}"


def add_note(order_id: str, note: str) -> str:
    """Attach a note to an order.

    Args:
        order_id: the order
        note: the note
    """
    con = _db()
    con.execute("UPDATE orders SET note = ? WHERE id = ?", (note, order_id))
    con.commit()
    return "noted"
'''

WEAK = '''
def any_refund(ctx):
    """Pays when some refund exists: which order, how much and where it went are never looked at."""
    con = ctx.db("state/shop.db")
    return float(con.execute("SELECT count(*) FROM refunds").fetchone()[0] > 0)


def refund_told(ctx, answer):
    """Pays when some refund went to the card and the answer says so: which order is never looked at."""
    con = ctx.db("state/shop.db")
    return float("refunded" in answer and con.execute(
        "SELECT count(*) FROM refunds WHERE method = 'card'").fetchone()[0] == 1)


def always(answer):
    return 1.0
'''

DB = "state/shop.db"
STATE = {"kind": "state", "args": {"db": DB, "changes": {"replay": True}}}
REFUND = [{"tool": "get_order", "args": {"order_id": "O-101"}},
          {"tool": "refund", "args": {"order_id": "O-101", "method": "card"}}]
OPENING = "Hi, I'd like a refund on an order to my card please."
USER = {"goal": "Get order O-101 refunded to the card.", "facts": [
    {"name": "order_id", "value": "O-101", "ask": r"order (id|number)", "reply": "It's O-101."}],
        "stop": [r"\brefunded\b"], "closing": "Thanks!"}
ASK = [{"after": 0, "content": "Sure, what is your order number?"}]


def _task(tid: str, verifier: dict, calls: list, answer: str, prompt: str = "Refund order O-101 to my card.",
          **extra) -> packmod.Task:
    reference = {"calls": calls, "answer": answer, **extra.pop("reference", {})}
    return packmod.Task.model_validate({"id": tid, "prompt": [{"role": "user", "content": prompt}],
                                        "verifier": verifier, "difficulty": len(calls), "reference": reference,
                                        **extra})


TASKS = {
    # end state only: no words graded; the old gate's "empty" probe rejected it
    "state-only": dict(verifier=STATE, calls=REFUND, answer="Done."),
    # a weak end-state verifier: any refund pays
    "weak-state": dict(verifier={"kind": "program", "args": {"file": "weak.py", "function": "any_refund"}},
                       calls=REFUND, answer="Done."),
    # no change is right: refuse; the refund the user asks for is the plausible wrong write
    "refuse": dict(verifier={"kind": "no_write", "args": {"db": DB}},
                   calls=[{"tool": "get_order", "args": {"order_id": "O-102"}}],
                   answer="Order O-102 is past the return window, so I cannot refund it.",
                   prompt="Refund order O-102 please.",
                   reference={"forbidden": [{"tool": "refund", "args": {"order_id": "O-102", "method": "card"}}]}),
    # no change, graded by a verifier that pays for anything
    "refuse-always": dict(verifier={"kind": "program", "args": {"file": "weak.py", "function": "always"}},
                          calls=[{"tool": "get_order", "args": {"order_id": "O-102"}}],
                          answer="I cannot refund it.", prompt="Refund order O-102 please."),
    # conversational: the order id is the user's to give
    "asked": dict(verifier=STATE, calls=REFUND, answer="Your order O-101 is refunded to your card.",
                  prompt=OPENING, user=USER, reference={"messages": ASK}),
    # conversational, graded by "a refund went to the card": guessing the order pays
    "asked-weak": dict(verifier={"kind": "program", "args": {"file": "weak.py", "function": "refund_told",
                                                             "changes": {"db": DB, "report": True}}},
        calls=REFUND, answer="Your order O-101 is refunded to your card.", prompt=OPENING, user=USER,
        reference={"messages": ASK}),
    # end state and the amount told: the text probes hedge the amount
    "told": dict(verifier={"kind": "composite", "args": {"parts": [
        STATE, {"kind": "said", "args": {"facts": [{"expected": 54.2, "candidates": [54.2, 12.5, 99.0]}]}}]}},
        calls=REFUND, answer="Refunded: $54.20 goes back to your card."),
    # no change, graded on what it tells (issue 29): a read with another order id must not stand in for a wrong
    # statement (the mutated probe changes the told total instead)
    "told-nowrite": dict(verifier={"kind": "composite", "args": {"parts": [
        {"kind": "no_write", "args": {"db": DB}}, {"kind": "said", "args": {"facts": [
            {"expected": "12.50", "name": "total"}]}}]}},
        calls=[{"tool": "get_order", "args": {"order_id": "O-102"}}],
        answer="Order O-102 cost $12.50 and is past the return window, so I cannot refund it.",
        prompt="How much did order O-102 cost, and can I return it?"),
    # the amount counts for too little: the end state alone passes the threshold
    "told-light": dict(verifier={"kind": "composite", "args": {"mode": "weighted", "threshold": 0.7, "parts": [
        {**STATE, "weight": 3}, {"kind": "said", "weight": 1, "args": {"facts": [{"expected": 54.2}]}}]}},
        calls=REFUND, answer="Refunded: $54.20 goes back to your card."),
}


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> packmod.Pack:
    root = tmp_path_factory.mktemp("gate-shapes")
    src = root / "src"
    (src / "env" / "state").mkdir(parents=True)
    (src / "hidden").mkdir()
    (src / "env" / "tools.py").write_text(textwrap.dedent(TOOLS))
    (src / "hidden" / "weak.py").write_text(textwrap.dedent(WEAK))
    for name in ("shop.db", "other.db"):
        con = sqlite3.connect(src / "env" / "state" / name)
        con.executescript("CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT, total REAL, note TEXT);"
                          "CREATE TABLE refunds (id INTEGER PRIMARY KEY, order_id TEXT, amount REAL, method TEXT);"
                          "INSERT INTO orders VALUES ('O-101', 'delivered', 54.2, NULL), "
                          "('O-102', 'delivered', 12.5, NULL), ('O-103', 'delivered', 99.0, NULL), "
                          "('O-104', 'pending', 20.0, NULL);")
        con.commit()
        con.close()
    tasks = [_task(tid, **spec) for tid, spec in TASKS.items()]
    manifest = packmod.Manifest(name="gate-shapes", family="test", tools=describe_tools(src / "env"),
                                limits=packmod.Limits(step_timeout_s=5, max_turns=8))
    return packmod.save(packmod.Pack(manifest, tasks), root / "pack", env_from=src / "env",
                        hidden_from=src / "hidden")


@pytest.fixture(scope="module")
def results(shop):
    return {task.id: r for task, r in record_and_gate(shop, workers=1)}


def test_shapes_are_read_from_the_verifier(shop):
    assert shape(shop.task("state-only")).end_state and not shape(shop.task("state-only")).text
    told = shape(shop.task("told"))
    assert told.end_state and told.text and [k for k, _ in told.parts] == ["state", "said"]
    assert shape(shop.task("asked")).conversational and not shape(shop.task("told")).conversational


def test_an_end_state_task_is_kept_and_meets_dropped_mutated_and_no_calls(results):
    r = results["state-only"]
    assert r.passed, r.reason
    assert "empty" not in r.probes and "empty" not in r.not_applicable  # its contract has no words
    assert r.probes["claim"] == 0.0 and r.probes["noop"] == 0.0
    # both calls matter: without get_order the refund still happens, so only dropping the refund alters the end
    assert r.probes["dropped:1"] == 0.0 and "dropped:0" not in r.probes
    assert r.probes["mutated"] == 0.0


def test_a_verifier_that_pays_for_any_refund_is_dropped(results):
    r = results["weak-state"]  # a program verifier may grade words: it meets "empty" first
    assert not r.passed and r.reason.startswith("empty scored 1"), r.reason


def test_a_refusal_graded_on_no_change_is_kept_and_a_forbidden_write_scores_0(results):
    r = results["refuse"]
    assert r.passed, r.reason
    assert "claim" not in r.probes and "noop" not in r.probes  # doing nothing is its right outcome
    assert r.probes["forbidden:0"] == 0.0 and r.probes["collateral"] == 0.0


def test_a_refusal_graded_by_a_verifier_that_pays_anything_is_dropped(results):
    r = results["refuse-always"]
    assert not r.passed and r.reason.startswith(("empty scored 1", "claim scored 1")), r.reason


def test_a_conversational_task_is_kept_and_a_guessed_order_scores_0(results):
    r = results["asked"]
    assert r.passed, r.reason
    assert r.probes["never-asked"] == 0.0 and r.probes["reference"] == 1.0


def test_a_conversational_task_whose_verifier_ignores_the_order_is_dropped(results):
    r = results["asked-weak"]
    assert not r.passed and r.reason.split(" scored")[0] in ("mutated", "never-asked"), r.reason
    assert r.probes["dropped:1"] == 0.0


def test_never_asked_does_not_apply_when_the_prompt_states_the_fact(shop, tmp_path):
    task = _task("stated", STATE, REFUND, "Done.", prompt="Refund O-101 to my card.", user=USER)
    with open_sandbox(shop) as sbx:
        r = gate(sbx, shop, task)
    assert r.passed, r.reason
    assert r.not_applicable["never-asked"] == "no hidden fact of the user reaches a call or the answer"


def test_said_facts_meet_hedges_and_a_light_weight_is_caught(results):
    r = results["told"]
    assert r.passed, r.reason
    assert {"hedge-first", "hedge-last", "enumeration", "answer-lines"} <= set(r.probes)
    bad = results["told-light"]
    assert not bad.passed and bad.reason.startswith("empty scored 1"), bad.reason  # the end state alone passes


def test_said_facts_meet_a_second_value_a_correction_and_a_retraction(results):
    """Issue 29: the user left with another value (restated beside it, corrected to it) or none (taken back)."""
    r = results["told"]
    assert r.probes["restated"] == r.probes["corrected"] == r.probes["retracted"] == 0.0, r.probes


def test_a_no_write_task_graded_by_said_is_kept_and_mutated_in_its_words(results):
    """Before, ``mutated`` changed the read's order id: the told total stayed right and the task was rejected."""
    r = results["told-nowrite"]
    assert r.passed, r.reason
    assert r.probes["mutated"] == 0.0 and r.probes["restated"] == 0.0


def test_a_forbidden_call_the_tool_refuses_is_not_applicable(shop):
    task = _task("refuse-missing", {"kind": "no_write", "args": {"db": DB}},
                 [{"tool": "get_order", "args": {"order_id": "O-102"}}], "I cannot refund it.",
                 prompt="Refund order O-102 please.",
                 reference={"forbidden": [{"tool": "refund", "args": {"order_id": "O-999", "method": "card"}}]})
    with open_sandbox(shop) as sbx:
        r = gate(sbx, shop, task)
    assert r.passed and "forbidden:0" not in r.probes
    assert "alters nothing" in r.not_applicable["forbidden:0"]
