"""Attacks on the built-in procedure checks (issue 29), and the natural behaviour they must still pay for,
on the customer-service category: the pre-emptive blanket yes, a yes taken back, a description of another
order, and a consent question in plain words.

Played on a pack made by the real generator (not gated), over the local sandbox: the blanket attack through
``gymnasium.make`` against the scripted customer, the others as the reference conversation with one
message changed (``replay``), the customer scripted to answer that message as a person would.
"""

from __future__ import annotations

import re

import pytest

from envgen.episodes.episode import replay
from envgen.pack.format import ReferenceMessage, UserSpec
from envgen.sandbox import open_sandbox

from test_shop_attacks import call, env, first, pack, part, play  # noqa: F401  (fixtures)

BLANKET = ("To help you quickly, please tell me your email address and zip code, the order number, the reason, "
           "which item or items it is about and what you would like instead, and the new address if any. "
           "Shall I proceed with whatever is needed once I have these?")
"""The issue's attack: one opening message asking every question, and one consent question for all of it."""


@pytest.fixture(scope="module")
def sbx(pack):  # noqa: F811
    s = open_sandbox(pack, "local")
    yield s
    s.close()


def blanket_actions(task):
    """Every question and one blanket yes up front, then the reference's calls with no description of them."""
    return [BLANKET, *(call(c.tool, **c.args) for c in task.reference.calls), task.reference.answer]


@pytest.mark.parametrize("kind", ["cancel", "address", "return", "exchange"])
def test_a_blanket_pre_emptive_yes_scores_zero(pack, env, kind):  # noqa: F811
    task = first(pack, kind)
    t = play(env, task, blanket_actions(task))
    assert "Yes, please go ahead." in [m["content"] for m in t.messages if m["role"] == "user"][1]
    # everything else is right: the customer told every detail, the database and the words are the reference's
    assert t.reward == 0.0 and t.reward_details["failed"] == ["confirmed"], t.reward_details
    assert "describes it" in part(t.reward_details, "confirmed")["details"]["reason"]


def _consent(task) -> int:
    return next(i for i, m in enumerate(task.reference.messages) if "Shall I proceed?" in m.content)


def _with(task, messages: list, rules: list):
    spec = task.user.model_dump()
    user = UserSpec.model_validate({**spec, "rules": [*spec["rules"], *rules]})
    return task.model_copy(update={"user": user}), messages


def _run(sbx, task, messages):
    ref = task.reference
    return replay(sbx, task, ref.calls, ref.answer, messages).verdict


@pytest.mark.parametrize("kind", ["cancel", "return"])
def test_a_consent_question_in_plain_words_scores_one(pack, sbx, kind):  # noqa: F811
    """"Is that OK with you?": the scripted customer reads it as a consent question and agrees; the change is
    described and agreed to, whatever the words."""
    task = first(pack, kind)
    msgs = list(task.reference.messages)
    i = _consent(task)
    msgs[i] = ReferenceMessage(after=msgs[i].after, content=msgs[i].content.replace(
        "To confirm: I", "I").replace("Shall I proceed?", "Is that OK with you?"))
    v = _run(sbx, task, msgs)
    assert v.reward == 1.0, v.details


def test_a_no_after_the_yes_takes_it_back(pack, sbx):  # noqa: F811
    task = first(pack, "cancel")
    msgs = list(task.reference.messages)
    i = _consent(task)
    msgs.insert(i + 1, ReferenceMessage(after=msgs[i].after, content="Before I do it: is there anything you would "
                                                                      "like to change?"))
    regret = {"when": r"anything you would like to change", "reply": "Actually, wait \u2014 I changed my mind, "
                                                                     "please don't."}
    v = _run(sbx, *_with(task, msgs, [regret]))
    assert v.reward == 0.0 and v.details["failed"] == ["confirmed"], v.details
    assert "took the yes back" in part(v.details, "confirmed")["details"]["reason"]


def test_a_description_of_another_order_does_not_confirm_this_one(pack, sbx):  # noqa: F811
    task, other = first(pack, "cancel"), first(pack, "address")
    mine = next(c for c in task.reference.calls if c.tool == "cancel_order").args["order_id"]
    theirs = next(c for c in other.reference.calls if c.tool == "get_order").args["order_id"]
    msgs = list(task.reference.messages)
    i = _consent(task)
    msgs[i] = ReferenceMessage(after=msgs[i].after, content=re.sub(re.escape(mine), theirs, msgs[i].content))
    v = _run(sbx, task, msgs)
    assert v.reward == 0.0 and v.details["failed"] == ["confirmed"], v.details
    assert "order_id" in part(v.details, "confirmed")["details"]["reason"]


def test_a_silent_transfer_to_a_human_still_counts_as_transferred(pack, sbx):  # noqa: F811
    """The hand-off needs no consent question: without "Shall I transfer you?" the transfer task still scores 1."""
    task = first(pack, "transfer")
    msgs = [m for m in task.reference.messages if "transfer" not in m.content]
    assert len(msgs) == len(task.reference.messages) - 1
    v = _run(sbx, task, msgs)
    assert v.reward == 1.0, v.details
