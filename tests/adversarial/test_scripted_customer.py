"""The scripted customer answers consent however it is asked (issue 29): a careful agent that asks "Is that OK
with you?" instead of the generator's "Shall I proceed?" gets the customer's yes and scores 1, where the magic
words alone used to earn it (42/42 such trajectories scored 0). Played on the customer-service category's own
tasks: every reference conversation with its consent questions reworded, replayed with the scripted user."""

from __future__ import annotations

import re

import pytest

from envgen.build.offline import build
from envgen.episodes.episode import replay
from envgen.pack import load
from envgen.sandbox import open_sandbox

WORDINGS = ["Is that OK with you?", "Would you like me to do that?", "Do you want me to go on?"]
ASKED = re.compile(r"(Shall I proceed\?|Shall I transfer you\?)$")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    out = tmp_path_factory.mktemp("shop") / "pack"
    build("general", "customer-service", out, tasks=12, seed=0, workers=2)
    pack = load(out)
    sbx = open_sandbox(pack, "local")
    yield pack, sbx
    sbx.close()


@pytest.mark.parametrize("wording", WORDINGS)
def test_consent_asked_in_natural_words_scores_one(shop, wording):
    pack, sbx = shop
    asking = [t for t in pack.tasks if any(ASKED.search(m.content) for m in t.reference.messages or [])]
    assert len(asking) >= 3
    for task in asking:
        messages = [m.model_copy(update={"content": ASKED.sub(wording, m.content)}) for m in task.reference.messages]
        assert any(m.content.endswith(wording) for m in messages)
        ep = replay(sbx, task, task.reference.calls, task.reference.answer, messages)
        answers = [m["content"] for m in ep.messages if m["role"] == "user"]
        assert "Yes, please go ahead." in answers, task.id
        assert ep.verdict.reward == 1.0, (task.id, ep.verdict.details)
