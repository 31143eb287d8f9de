"""Attacks on a pack imported from tau2-bench (the fixture domain of tests/test_import_tau2.py): ways to end a
conversation that would earn tau2's reward without doing the task score 0, in the local sandbox."""

from __future__ import annotations

import pytest
from test_import_tau2 import write_checkout

from envgen.episodes.episode import replay
from envgen.importers.tau2 import import_tau2
from envgen.pack import ToolCall
from envgen.pack.format import ReferenceMessage
from envgen.sandbox import open_sandbox



@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    root = write_checkout(tmp_path_factory.mktemp("tau2"))
    return import_tau2(root, "shop", tmp_path_factory.mktemp("out") / "pack").pack


@pytest.fixture(scope="module")
def sbx(pack):
    s = open_sandbox(pack, "local")
    yield s
    s.close()


def play(sbx, task, calls, messages=None, answer=None):
    ref = task.reference
    msgs = ref.messages if messages is None else [ReferenceMessage(**m) for m in messages]
    return replay(sbx, task, [ToolCall(**c) if isinstance(c, dict) else c for c in calls],
                  ref.answer if answer is None else answer, msgs).verdict


def test_a_collateral_write_beside_the_right_one_scores_0(pack, sbx):
    task = pack.task("tau2-shop-0")
    extra = {"tool": "modify_items", "args": {"order_id": "#W1001", "item_ids": ["111"]}}
    assert play(sbx, task, [*task.reference.calls, extra]).reward == 0.0


def test_the_right_change_on_another_order_scores_0(pack, sbx):
    task = pack.task("tau2-shop-3")
    calls = [task.reference.calls[0], {"tool": "modify_items", "args": {"order_id": "#W1002", "item_ids": ["444", "555"]}}]
    assert play(sbx, task, calls).reward == 0.0


def test_a_hedged_value_is_not_telling_it(pack, sbx):
    task = pack.task("tau2-shop-1")
    msgs = [{"after": len(task.reference.calls), "content": "The total may be 54.2 or 19.99, I am not sure."}]
    assert play(sbx, task, task.reference.calls, msgs).reward == 0.0


def test_a_silent_write_scores_0(pack, sbx):
    task = pack.task("tau2-shop-0")
    assert play(sbx, task, task.reference.calls, [m.model_dump() for m in task.reference.messages
                                                  if "Shall I proceed" not in m.content]).reward == 0.0


def test_a_blanket_yes_before_any_description_scores_0(pack, sbx):
    task = pack.task("tau2-shop-0")
    msgs = [{"after": 0, "content": "I will need your email and order id. Shall I proceed with whatever is needed "
                                    "once I have these?"}]
    msgs += [m.model_dump() for m in task.reference.messages if "Shall I proceed" not in m.content]
    assert play(sbx, task, task.reference.calls, sorted(msgs, key=lambda m: m["after"])).reward == 0.0


def test_saying_transferred_without_the_call_scores_0(pack, sbx):
    task = pack.task("tau2-shop-2")
    calls = [c for c in task.reference.calls if c.tool != "transfer_to_human_agents"]
    msgs = [{"after": len(calls), "content": "I am transferring you to a human agent now."}]
    assert play(sbx, task, calls, msgs).reward == 0.0


def _told(task) -> int:
    return next(i for i, m in enumerate(task.reference.messages) if "54.2" in m.content)


@pytest.mark.parametrize("extra", ["It may also have been 41.2, I am checking.", "The system also shows 41.2 for this.",
                                   "Correction: the amount is 67.2.", "Sorry, it is not 54.2."])
def test_a_second_value_or_a_retraction_after_the_right_one_scores_0(pack, sbx, extra):
    task = pack.task("tau2-shop-1")
    msgs = [m.model_dump() for m in task.reference.messages]
    i = _told(task)
    msgs.insert(i + 1, {"after": msgs[i]["after"], "content": extra})
    assert play(sbx, task, task.reference.calls, msgs).reward == 0.0


@pytest.mark.parametrize("question", ["Is that OK with you?", "Would you like me to do that?",
                                      "Do you want me to go on?"])
def test_consent_asked_in_plain_words_scores_1(pack, sbx, question):
    task = pack.task("tau2-shop-0")
    msgs = [{**m.model_dump(), "content": m.content.replace("Shall I proceed?", question)}
            for m in task.reference.messages]
    assert any(question in m["content"] for m in msgs)
    assert play(sbx, task, task.reference.calls, msgs).reward == 1.0
