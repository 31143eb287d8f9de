"""The customer-service category (issue 15, item 6): an online shop under a written policy, a scripted
customer who tells details only when asked, typed tool arguments and composite verifiers.

One pack of 12 tasks (every kind) is built once for the module by the real offline build (generator, gate,
save) and played through ``gymnasium.make`` with the local sandbox.
"""

from __future__ import annotations

import json

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.build.offline import build
from envgen.episodes.episode import replay
from envgen.episodes.gym import ENV_ID
from envgen.episodes.prompt import agent_prompt, episode_rules
from envgen.pack import load
from envgen.passcheck.check import check
from envgen.passcheck.config import CheckConfig
from envgen.policies.base import Policy
from envgen.policies.builtin import make_policy, rollout
from envgen.sandbox import open_sandbox

KINDS = {"status", "cancel", "address", "shipped", "return", "window", "identity", "exchange", "transfer"}


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    out = tmp_path_factory.mktemp("shop") / "pack"
    report = build("general", "customer-service", out, tasks=12, seed=0, workers=2)
    return report, load(out)


@pytest.fixture(scope="module")
def env(shop):
    e = gymnasium.make(ENV_ID, pack=str(shop[1].root))
    yield e
    e.close()


@pytest.fixture(scope="module")
def sbx(shop):
    s = open_sandbox(shop[1], "local")
    yield s
    s.close()


def of_kind(pack, kind):
    return next(t for t in pack.tasks if t.meta["template"] == kind)


def call(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"id": f"c_{name}", "type": "function",
                                           "function": {"name": name, "arguments": json.dumps(args)}}]}


def part(details: dict, name: str) -> dict:
    return next(p for p in details["parts"] if p["name"] == name)


class Script(Policy):
    """Plays fixed actions, one per turn."""

    def __init__(self, *actions):
        self.actions = actions

    def act(self, observation, info):
        return self.actions[min(int(info["turns"]), len(self.actions) - 1)]


def test_the_build_keeps_every_kind_and_the_pack_carries_the_policy_once(shop):
    report, pack = shop
    assert (report.proposed, report.kept) == (12, 12), report.rejections
    assert {t.meta["template"] for t in pack.tasks} == KINDS
    assert "30 days of delivery" in pack.manifest.instructions
    system = agent_prompt(pack, pack.tasks[0], episode_rules(pack.tasks[0]))[0]["content"]
    assert system.startswith("# Northwind Goods") and "sent to the user" in system
    assert all(t.user is not None and t.verifier.kind == "composite" for t in pack.tasks)
    assert sorted({t.meta["level"] for t in pack.tasks}) == [1, 2, 3, 4, 5]
    lines = (pack.root / "tasks.jsonl").read_text()
    assert "Northwind Goods" not in lines  # stored once, in pack.json


def test_oracle_scores_one_and_null_zero_through_gymnasium(shop, env):
    for task in shop[1].tasks:
        t = rollout(env, make_policy("oracle"), task_id=task.id)
        assert (t.reward, t.terminated) == (1.0, True), (task.id, t.reward_details)
        assert t.user_turns == len(task.reference.messages) + 1  # each question answered, then the goodbye
        assert rollout(env, make_policy("null"), task_id=task.id).reward == 0.0, task.id


def test_the_pass_check_keeps_every_task_with_the_oracle_and_none_with_null(shop, tmp_path):
    pack = shop[1]
    for policy, kept in (("oracle", 12), ("null", 0)):
        rep = check(str(pack.root), policy, CheckConfig(k=1, workers=2, store_url=str(tmp_path / f"{policy}.db")))
        assert len(rep.kept) == kept, policy


def test_the_customer_tells_the_order_id_only_when_asked(shop, env):
    """Authenticated, the agent looks up the right order without asking for it: it never heard the number, so
    the lookup is a guess, and the episode scores 0; asked, the customer tells it."""
    task = of_kind(shop[1], "cancel")
    ident = {f.name: f.value for f in task.user.facts}
    order = ident["order_id"]
    refund = task.verifier.args["parts"][1]["args"]["facts"][0]["expected"]
    guess = Script("What are the email address and zip code on your account?",
                   call("authenticate_customer", email=ident["email"], zip_code=ident["zip_code"]),
                   call("get_order", order_id=order), "What is the reason for cancelling? Shall I proceed?",
                   call("cancel_order", order_id=order, reason=ident["reason"]),
                   f"Order {order} is cancelled; ${refund:.2f} is refunded. Anything else?")
    t = rollout(env, guess, task_id=task.id)
    told = [m["content"] for m in t.messages if m["role"] == "user"]
    assert not any(order in m for m in told)
    assert t.reward == 0.0 and "identified" in t.reward_details["failed"]
    assert "never gave" in part(t.reward_details, "identified")["details"]["reason"]
    # the same trajectory, asking for the number first: the customer tells it
    asked = Script("What are the email address and zip code on your account?",
                   call("authenticate_customer", email=ident["email"], zip_code=ident["zip_code"]),
                   "Thanks. What is the order number?", call("get_order", order_id=order),
                   "What is the reason for cancelling?", "Shall I proceed with the cancellation?",
                   call("cancel_order", order_id=order, reason=ident["reason"]))
    t = rollout(env, asked, task_id=task.id)
    assert any(f"The order number is {order}." == m["content"] for m in t.messages if m["role"] == "user")


def test_a_refusal_task_scores_the_refusal_and_zero_for_the_forbidden_write(shop, sbx):
    """An order that has shipped: the right outcome changes nothing and says why; the cancel the policy
    forbids (the task's forbidden call) scores 0, and so does saying "shipped" without looking it up."""
    task = of_kind(shop[1], "shipped")
    ref = task.reference
    assert replay(sbx, task, ref.calls, ref.answer, ref.messages).verdict.reward == 1.0
    (forbidden,) = task.reference.forbidden
    ep = replay(sbx, task, [*ref.calls, forbidden], ref.answer, ref.messages)
    assert ep.verdict.reward == 0.0 and "nothing_changed" in ep.verdict.details["failed"]
    ep = replay(sbx, task, ref.calls[:1], ref.answer, ref.messages)  # authenticated, never looked the order up
    assert ep.verdict.reward == 0.0 and "not grounded" in ep.verdict.details["reason"]


def test_each_part_of_the_composite_alone_is_not_enough(shop, sbx):
    """A return: the right end state without saying the refund, the refund said without the write, both
    without authenticating first, and both without describing the return before the customer's yes each
    score 0, and the verdict names the one part that failed."""
    task = of_kind(shop[1], "return")
    ref = task.reference
    full = replay(sbx, task, ref.calls, ref.answer, ref.messages).verdict
    assert full.reward == 1.0 and [p["reward"] for p in full.details["parts"]] == [1.0, 1.0, 1.0, 1.0]
    unauthenticated = [m.model_copy(update={"after": max(0, m.after - 1)}) for m in ref.messages]
    undescribed = [m.model_copy(update={"content": "Shall I proceed?"}) if "To confirm" in m.content else m
                   for m in ref.messages]
    cases = {
        "told": (ref.calls, "The return is recorded. Is there anything else I can help you with?", ref.messages),
        "end_state": ([c for c in ref.calls if c.tool != "return_items"], ref.answer, ref.messages),
        "identified": ([c for c in ref.calls if c.tool != "authenticate_customer"], ref.answer, unauthenticated),
        "confirmed": (ref.calls, ref.answer, undescribed),
    }
    for part, (calls, answer, messages) in cases.items():
        v = replay(sbx, task, calls, answer, messages).verdict
        assert v.reward == 0.0 and v.details["failed"] == [part], (part, v.details)


def test_a_wrongly_typed_argument_is_refused_naming_the_field(shop, env):
    task = of_kind(shop[1], "address")
    env.reset(options={"task_id": task.id})
    address = {"street": "1 Elm Street", "city": "Boise", "state": None, "zip_code": 83702}
    obs, *_ , info = env.step(call("modify_order_address", order_id="W1000000", address=address))
    assert "bad_arguments" in obs and "address.zip_code: 83702 is not of type 'string'" in obs
    assert "address.state: null is not of type 'string'" in obs
    obs, *_ = env.step(call("cancel_order", order_id="W1000000", reason="changed my mind"))
    assert "bad_arguments" in obs and "reason: \"changed my mind\" is not one of" in obs
    schema = next(t for t in shop[1].manifest.tools if t.name == "modify_order_address").model_dump(exclude_none=True)
    nested = schema["function"]["parameters"]["properties"]["address"]
    assert nested["required"] == ["street", "city", "state", "zip_code"] and nested["additionalProperties"] is False
