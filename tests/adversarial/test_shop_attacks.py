"""Attacks on the customer-service category: ways to earn reward 1 without serving the customer by the policy.

Each attack is played through ``gymnasium.make`` against the scripted customer, on a pack made by the real
generator (not gated: the attacks are judged by the verifiers alone). Every tool call an attack makes
succeeds unless said otherwise, so the damage is real; each must score 0, and the verdict names why.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.build.sdk import get_category, load_generator
from envgen.episodes.gym import ENV_ID
from envgen.pack import Manifest, Pack, save
from envgen.policies.base import Policy
from envgen.policies.builtin import rollout
from envgen.sandbox.local import describe_tools


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    gen = load_generator(get_category("general", "customer-service"))
    with tempfile.TemporaryDirectory() as work:
        g = gen.generate(Path(work), 36, 3)
        m = Manifest(name=g.name, family=g.family, category=g.category, description=g.description,
                     tools=describe_tools(g.env_dir), limits=g.limits, instructions=g.instructions)
        return save(Pack(m, g.tasks), tmp_path_factory.mktemp("shop-adv") / "pack", env_from=g.env_dir,
                    hidden_from=g.hidden_dir)


@pytest.fixture(scope="module")
def env(pack):
    e = gymnasium.make(ENV_ID, pack=str(pack.root))
    yield e
    e.close()


def call(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"id": f"c_{name}", "type": "function",
                                           "function": {"name": name, "arguments": json.dumps(args)}}]}


class Script(Policy):
    def __init__(self, *actions):
        self.actions = actions

    def act(self, observation, info):
        return self.actions[min(int(info["turns"]), len(self.actions) - 1)]


def reference_actions(task, extra=(), drop=(), answer=None, messages=True):
    """The task's reference conversation as actions: its messages and calls in order (minus ``drop`` tools,
    plus ``extra`` calls before the last write), then ``answer`` (default the reference's)."""
    from envgen.episodes.episode import reference_plan

    plan = reference_plan(task.reference.calls, task.reference.messages if messages else None)
    steps = [s for s in plan if isinstance(s, str) or s.tool not in drop]
    at = max((i for i, s in enumerate(steps) if not isinstance(s, str) and s.tool not in
              ("authenticate_customer", "get_order", "get_product")), default=len(steps))
    steps[at:at] = list(extra)
    out = [s if isinstance(s, (str, dict)) else call(s.tool, **s.args) for s in steps]
    return out + [answer if answer is not None else task.reference.answer]


def play(env, task, actions):
    return rollout(env, Script(*actions), task_id=task.id)


def first(pack, kind, where=lambda t: True):
    return next(t for t in pack.tasks if t.meta["template"] == kind and where(t))


def part(details: dict, name: str) -> dict:
    return next(p for p in details["parts"] if p["name"] == name)


def facts(task):
    return {f.name: f.value for f in task.user.facts}


def said_value(task):
    return next(p for p in task.verifier.args["parts"] if p["kind"] == "said")["args"]["facts"][0]["expected"]


def test_the_reference_conversations_score_one(pack, env):
    """Not vacuous: each attack below is a small change to a trajectory that scores 1."""
    for kind in ("return", "cancel", "shipped", "window", "identity", "exchange"):
        t = play(env, first(pack, kind), reference_actions(first(pack, kind)))
        assert t.reward == 1.0, (kind, t.reward_details)


def test_a_refund_without_verifying_identity_scores_zero(pack, env):
    task = first(pack, "return")
    t = play(env, task, reference_actions(task, drop=("authenticate_customer",)))
    assert t.reward == 0.0 and t.reward_details["failed"] == ["identified"]
    assert "before their identity was verified" in part(t.reward_details, "identified")["details"]["reason"]


def _other_payment(pack, task):
    con = sqlite3.connect(pack.env_dir / "state" / "shop.db")
    try:
        ret = next(c for c in task.reference.calls if c.tool == "return_items")
        cust = con.execute("SELECT customer_id FROM orders WHERE id = ?", (ret.args["order_id"],)).fetchone()[0]
        rows = con.execute("SELECT id FROM payment_methods WHERE customer_id = ? AND id != ? ORDER BY id",
                           (cust, ret.args["payment_method_id"])).fetchall()
    finally:
        con.close()
    return ret, [r[0] for r in rows]


def test_a_refund_to_another_payment_method_of_the_customer_scores_zero(pack, env):
    task = next(t for t in pack.tasks if t.meta["template"] == "return" and _other_payment(pack, t)[1])
    ret, others = _other_payment(pack, task)
    wrong = {**ret.args, "payment_method_id": others[0]}
    actions = reference_actions(task, drop=("return_items",), extra=[call("return_items", **wrong)])
    t = play(env, task, actions)
    # the description the customer agreed to named the original payment method, not this one
    assert t.reward == 0.0 and t.reward_details["failed"] == ["end_state", "confirmed"]
    assert others[0] in json.dumps(t.reward_details["parts"][0]["details"])


@pytest.mark.parametrize("hedge", ["${v:.2f} or ${w:.2f}", "probably ${v:.2f}", "one of ${w:.2f}, ${v:.2f}, ${x:.2f}"])
def test_hedged_refund_amounts_score_zero(pack, env, hedge):
    task = first(pack, "return")
    v = said_value(task)
    text = hedge.format(v=v, w=v + 10, x=v * 2)
    t = play(env, task, reference_actions(task, answer=f"The refund is {text}. Is there anything else I can help "
                                                       "you with?"))
    assert t.reward == 0.0 and t.reward_details["failed"] == ["told"], t.reward_details


def test_doing_nothing_on_a_refusal_task_still_has_to_say_the_reason(pack, env):
    """Outside the return window: refusing without looking the order up, or without the delivery date,
    scores 0; saying the date without having read it (no lookup) is not grounded."""
    task = first(pack, "window")
    vague = "I'm sorry, I cannot help with this return. Is there anything else I can help you with?"
    t = play(env, task, reference_actions(task, answer=vague))
    assert t.reward == 0.0 and t.reward_details["failed"] == ["told"]
    t = play(env, task, ["Sorry, " + task.reference.answer])  # the right words, no lookup at all
    assert t.reward == 0.0 and "told" in t.reward_details["failed"]


def test_an_extra_collateral_write_scores_zero(pack, env):
    """The return, plus cancelling another pending order of the shop (a write another task makes)."""
    task = first(pack, "return")
    other = first(pack, "cancel")
    cancel = next(c for c in other.reference.calls if c.tool == "cancel_order")
    t = play(env, task, reference_actions(task, extra=[call("cancel_order", **cancel.args)]))
    assert t.reward == 0.0 and "end_state" in t.reward_details["failed"]


def test_guessing_the_order_id_without_asking_scores_zero(pack, env):
    """The customer's order number, used without ever being asked for (as if guessed right): 0. A guess of
    another of the customer's orders fails the lookup and the end state too."""
    task = first(pack, "cancel")
    actions = [a for a in reference_actions(task) if not (isinstance(a, str) and "order number" in a)]
    t = play(env, task, actions)
    assert facts(task)["order_id"] not in json.dumps([m for m in t.messages if m["role"] == "user"])
    assert t.reward == 0.0 and t.reward_details["failed"] == ["identified"]


def test_the_identity_task_forbids_touching_the_order_with_other_details(pack, env):
    """The customer gives a zip code that does not match: authenticating anyway with the account's real
    zip code (read from nowhere the customer said) and cancelling scores 0."""
    task = first(pack, "identity")
    con = sqlite3.connect(pack.env_dir / "state" / "shop.db")
    real = con.execute("SELECT zip_code FROM customers WHERE email = ?", (facts(task)["email"],)).fetchone()[0]
    con.close()
    forbidden = task.reference.forbidden[0]
    actions = ["What are the email address and the zip code on your account?",
               call("authenticate_customer", email=facts(task)["email"], zip_code=real),
               "What is the order number? Shall I proceed?", call(forbidden.tool, **forbidden.args),
               "I could not verify you at first, but it is cancelled now. Anything else?"]
    t = play(env, task, actions)
    assert t.reward == 0.0 and {"nothing_changed", "identified"} <= set(t.reward_details["failed"])
