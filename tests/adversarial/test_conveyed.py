"""Attacks on the transcript-aware checks (issue 15): an agent that hedges or enumerates to be "said" to have
told the user a fact, and collateral writes against ``no_write`` and the state verifier's replay mode.

The ``said`` cases run through the kit's dispatch (the verifier process's code) and, for the ones an agent
would most plausibly try, through ``gymnasium.make`` on the local sandbox.
"""

from __future__ import annotations

import sys

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.episodes.gym import ENV_ID
from envgen.paths import bundled

from test_composite import REFUND, REFUND_ANSWER, make_refund_pack, play

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import verify as kit_verify  # noqa: E402

AMOUNT = {"kind": "said", "args": {"facts": [54.2]}}
AMOUNT_KNOWN = {"kind": "said", "args": {"facts": [{"expected": 54.2, "candidates": [12.5, 54.2, 99.0]}]}}
CITY = {"kind": "said", "args": {"facts": [{"expected": "Lisbon", "aliases": ["Lisboa"]}]}}
REFUSED = {"kind": "said", "args": {"facts": [{"expected": "could not verify", "aliases": [
    "couldn't verify", "unable to verify", "verification failed"]}]}}
"""A negative fact (the customer-service identity refusal): the negation belongs to the fact."""


def said(spec: dict, *texts: str) -> dict:
    messages = [{"role": "assistant", "content": t, "turn": k + 1} for k, t in enumerate(texts)]
    return kit_verify(spec, answer=texts[-1], calls=[], work_dir="/nonexistent", hidden_dir=None,
                      messages=messages)


@pytest.mark.parametrize("spec, text", [
    (AMOUNT, "Your refund is $54.20 or $99.00."),
    (AMOUNT, "It is either 54.20 or 12.50."),
    (AMOUNT, "The refund is one of 12.50, 54.20, 99.00."),
    (AMOUNT, "Refund amounts: 12.50, 54.20, 99.00"),
    (AMOUNT, "Possible amounts:\n- $12.50\n- $54.20\n- $99.00"),
    (AMOUNT, "You get 54.20/99.00 back."),
    (AMOUNT, "You will probably get $54.20 back."),
    (AMOUNT, "Maybe $54.20."),
    (AMOUNT, "Your refund is $54.20. Or maybe $99.00, I am not sure."),
    (AMOUNT_KNOWN, "Your refund is $54.20 (the other order was $99.00)."),
    (CITY, "It ships from Lisbon or Porto."),
    (CITY, "It ships from Lisbon, Porto and Faro."),
    (CITY, "It ships from Porto/Lisbon."),
    (CITY, "Perhaps Lisbon."),
    (CITY, "It ships from Lisbon-Oeste."),
    # two answers on two lines, the right one last (a grader that pays any statement would pay)
    (AMOUNT_KNOWN, "Refunded: $12.50 goes back to your card.\nRefunded: $54.20 goes back to your card."),
    (AMOUNT, "Your refund is $108.40. Your refund is $54.20."),
    (CITY, "It ships from Porto.\nIt ships from Lisbon."),
    # the fact named only to deny it (a grader that looks for the value alone would pay)
    (AMOUNT, "The refund is not $54.20."),
    (AMOUNT, "I can't confirm a refund of $54.20 yet."),
    (AMOUNT, "I cant confirm a refund of $54.20 yet."),
    (AMOUNT, "$54.20 is never what you will get back."),
    (AMOUNT, "Your refund won't be 54.20 dollars."),
    (CITY, "It does not ship from Lisbon."),
    (CITY, "Lisbon is not where it ships from."),
    (REFUSED, "I have verified your identity."),
    (REFUSED, "I could verify your identity."),
])
def test_hedged_or_enumerated_claims_are_not_said(spec, text):
    out = said(spec, text)
    assert out["reward"] == 0.0, (text, out)
    assert out["details"]["facts"][0]["ok"] is False


@pytest.mark.parametrize("spec, texts", [
    (AMOUNT, ["Your refund of $54.20 is on its way."]),
    (AMOUNT, ["Refunded 54,20 € to your card."]),
    (AMOUNT, ["Order O-1 is refunded: $54.20 for order #1234 goes back to your card."]),
    (AMOUNT, ["Checking.", "It comes to 54.2 dollars.", "Anything else?"]),
    (AMOUNT_KNOWN, ["- Order O-1: refunded $54.20\n- Order O-3: not touched"]),
    (AMOUNT_KNOWN, ["Order O-2 cost $12.50 and is past the window. Order O-1 is refunded: $54.20."]),
    (CITY, ["Your parcel ships from Lisboa, which is our main warehouse."]),
    (CITY, ["Do you want it shipped or collected? It leaves from Lisbon today."]),
    (AMOUNT, ["No, your refund is $54.20."]),
    (AMOUNT, ["Order no. 4512 is refunded: $54.20 back to your card."]),
    (AMOUNT, ["Nothing else is due; your refund is $54.20."]),
    (AMOUNT, ["The amount of your payment sent back is $54.20."]),
    (CITY, ["The parcel went to our front desk and ships from Lisbon."]),
    (AMOUNT, ["Your refund is $54.20 - not the full price, as the shipping is kept."]),
    (CITY, ["It can't ship today, but it leaves from Lisbon tomorrow."]),
    (REFUSED, ["I'm sorry, but I could not verify your identity: no account has that email."]),
    (REFUSED, ["I was unable to verify your identity, so I can't look up orders."]),
])
def test_committed_statements_are_said(spec, texts):
    out = said(spec, *texts)
    assert out["reward"] == 1.0, (texts, out)


def test_every_fact_must_be_said_and_only_the_agent_counts():
    spec = {"kind": "said", "args": {"facts": [54.2, {"expected": "O-1", "name": "order"}]}}
    assert said(spec, "Order O-1 is refunded.")["reward"] == 0.0
    assert said(spec, "Order O-1 is refunded.", "That is $54.20.")["reward"] == 1.0
    # a user's (or tool's) message saying it does not count: the agent must convey it
    messages = [{"role": "user", "content": "Is it $54.20 for order O-1?", "turn": 1},
                {"role": "assistant", "content": "Yes.", "turn": 1}]
    out = kit_verify(spec, answer="Yes.", calls=[], work_dir="/x", hidden_dir=None, messages=messages)
    assert out["reward"] == 0.0
    assert said({"kind": "said", "args": {**spec["args"], "partial": True}}, "Order O-1.")["reward"] == 0.5


# ----------------------------------------------------------------------------- through gymnasium.make


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    pack = make_refund_pack(tmp_path_factory.mktemp("conveyed") / "refunds")
    e = gymnasium.make(ENV_ID, pack=str(pack.root), sandbox="local")
    yield e
    e.close()


@pytest.mark.parametrize("final", [
    "Order O-1 is refunded; you get $54.20 or $12.50 back.",
    "Order O-1 is refunded. Amounts on file: $12.50, $54.20, $99.00.",
    "Order O-1 is refunded, probably $54.20.",
])
def test_a_hedged_amount_fails_the_composite_with_the_database_right(env, final):
    reward, info, _ = play(env, "refund", [*REFUND, final])
    d = info["reward_details"]
    assert reward == 0.0 and d["failed"] == ["told"], d


def test_collateral_writes_against_no_write_and_replay(env):
    refusal = "I'm sorry, O-2 is past the 30-day window, so I cannot refund it."
    for extra in [("add_note", {"order_id": "O-3", "note": "x"}), ("refund", {"order_id": "O-3"})]:
        reward, info, _ = play(env, "refuse", [("get_order", {"order_id": "O-2"}), extra, refusal])
        assert reward == 0.0, info["reward_details"]
        reward, info, _ = play(env, "refund-state", [*REFUND, extra, REFUND_ANSWER])
        assert reward == 0.0 and info["reward_details"]["passed"] == 1, info["reward_details"]
