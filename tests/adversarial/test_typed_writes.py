"""Wrongly typed writes (issue 15): a verifier that trusts a tool's declared argument types is not fooled.

The "cancel" task's program verifier accepts any end status but "open": the tool's schema says the status
is one of open/cancelled/refunded, and both others are right outcomes. Before arguments were checked, the
runtime bound names only, so a value outside the enum, null or a number reached the database and scored 1
(a list made the tool raise). Each attack is made through ``gymnasium.make`` with the pack's real tool; each
must be refused as ``bad_arguments`` naming the field, leave the order open and score 0, while the
reference still scores 1.
"""

from __future__ import annotations

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.episodes.actions import render_action
from envgen.episodes.gym import ENV_ID

from test_tool_args import make_shop_pack


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    pack = make_shop_pack(tmp_path_factory.mktemp("typed-writes") / "shop")
    e = gymnasium.make(ENV_ID, pack=str(pack.root), sandbox="local")
    yield e
    e.close()


def play(env, status) -> tuple[str, float, dict]:
    env.reset(options={"task_id": "cancel"})
    obs, *_ = env.step(render_action("", [{"name": "set_status", "arguments": {"order_id": "O-7", "status": status},
                                          "id": "c1"}], "openai"))
    _, reward, terminated, _, info = env.step("Order O-7 is cancelled.")
    assert terminated
    return obs, reward, info


def test_the_reference_scores_1(env):
    obs, reward, info = play(env, "cancelled")
    assert "O-7: cancelled" in obs and reward == 1.0


@pytest.mark.parametrize("status, named", [
    ("closed", 'status: "closed" is not one of ["open", "cancelled", "refunded"]'),
    ("", 'status: "" is not one of'),
    (None, "status: null is not of type 'string'"),
    (0, "status: 0 is not of type 'string'"),
    (["cancelled"], 'status: ["cancelled"] is not of type \'string\''),
])
def test_a_status_outside_the_schema_is_refused_and_scores_0(env, status, named):
    obs, reward, info = play(env, status)
    assert "Error (bad_arguments): set_status: " + named in obs and obs.count(" status:") == 1, obs
    assert reward == 0.0 and info["reward_details"]["status"] == "open"
