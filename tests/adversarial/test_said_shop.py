"""``said`` on the customer-service category (issue 29, item 1), played through ``gymnasium.make`` against the
scripted customer on a pack made by the real generator (not gated: the verdicts are the verifiers' alone).

Before, the right amount next to a second one ("It may also have been $X, I am checking.", "The system also
shows $X for this.") or taken back in the final message ("Correction: ... the amount is $X+13", "it is not
$V") scored 1 on every task with a numeric fact, and a natural refusal whose negation shares the sentence
with its reason ("I can't cancel it because your order has already shipped.") scored 0. The reference
conversation, with one sentence added to its final message, must now score 0 (attacks) or 1 (the refusal).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.build.sdk import get_category, load_generator
from envgen.episodes.gym import ENV_ID
from envgen.pack import Manifest, Pack, save
from envgen.sandbox.local import describe_tools

from test_shop_attacks import first, play, reference_actions


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    gen = load_generator(get_category("general", "customer-service"))
    with tempfile.TemporaryDirectory() as work:
        g = gen.generate(Path(work), 18, 3)
        m = Manifest(name=g.name, family=g.family, category=g.category, description=g.description,
                     tools=describe_tools(g.env_dir), limits=g.limits, instructions=g.instructions)
        return save(Pack(m, g.tasks), tmp_path_factory.mktemp("said-shop") / "pack", env_from=g.env_dir,
                    hidden_from=g.hidden_dir)


@pytest.fixture(scope="module")
def env(shop):
    e = gymnasium.make(ENV_ID, pack=str(shop.root))
    yield e
    e.close()

END = " Is there anything else I can help you with?"

ATTACKS = ["It may also have been ${x:.2f}, I am checking.", "The system also shows ${x:.2f} for this.",
           "Correction: after a second look, the amount is ${x:.2f}.", "Sorry, it is not ${v:.2f}."]


def amount_fact(task) -> dict:
    told = next(p for p in task.verifier.args["parts"] if p["kind"] == "said")
    return told["args"]["facts"][0]


@pytest.mark.parametrize("kind", ["cancel", "return", "exchange"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_a_second_amount_or_a_retraction_after_the_right_one_scores_zero(shop, env, kind, attack):
    task = first(shop, kind)
    v = float(amount_fact(task)["expected"])
    final = task.reference.answer + " " + attack.format(v=v, x=v + 13)
    t = play(env, task, reference_actions(task, answer=final))
    assert t.reward == 0.0 and t.reward_details["failed"] == ["told"], (final, t.reward_details)


@pytest.mark.parametrize("refusal", [
    "Unfortunately I can't cancel it because your order has already shipped.",
    "I cannot cancel order {oid}, as it has already shipped.",
])
def test_a_refusal_that_names_its_reason_is_said(shop, env, refusal):
    task = first(shop, "shipped")
    oid = next(c.args["order_id"] for c in task.reference.calls if c.tool == "get_order")
    t = play(env, task, reference_actions(task, answer=refusal.format(oid=oid) + END))
    assert t.reward == 1.0, t.reward_details


def test_a_correct_amount_after_a_wrong_one_in_an_earlier_message_is_said(shop, env):
    """The customer is left with the last statement: a wrong amount corrected later is no second answer."""
    task = first(shop, "return")
    v = float(amount_fact(task)["expected"])
    final = f"Sorry, I misread the total earlier: the refund is ${v:,.2f}, not ${v + 13:,.2f}.{END}"
    actions = reference_actions(task, answer=final)
    actions.insert(len(actions) - 1, f"The refund will be ${v + 13:,.2f}.")
    t = play(env, task, actions)
    assert t.reward == 1.0, t.reward_details
