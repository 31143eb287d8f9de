"""envgen serve with the Docker backend: an OpenEnv client's episode runs in a container from the pack's image
(warm pool on), reaches reward 1, and the agent's tools find no verifier file anywhere in their container."""

from __future__ import annotations

import json

import pytest

from serve_util import need_openenv  # noqa: E402

need_openenv()

from openenv.core.generic_client import GenericEnvClient

from serve_util import Server

pytestmark = pytest.mark.docker


def call(tool: str, **args) -> dict:
    return {"message": {"content": "", "tool_calls": [{"id": "c", "type": "function",
                                                       "function": {"name": tool, "arguments": args}}]}}


def test_a_docker_backed_serve_runs_an_episode_to_1_and_hides_the_verifier(docker_tiny_pack):
    s = Server([str(docker_tiny_pack.root)], "--sandbox", "docker", "--max-sessions", "2")
    try:
        with GenericEnvClient(base_url=s.auth_url).sync() as env:
            env.reset(task_id="tiny-0")
            found = env.step(call("find_file", name="verify.py")).observation["text"]
            assert json.loads(found.split("\n")[1]) == []  # hidden/ is not in the agent's container
            env.step(call("put", key="k0", value="value-0"))
            env.step(call("submit", answer="value-0"))
            r = env.step({"message": "Stored value-0."})
            assert r.done and r.reward == 1.0
            r = env.reset(task_id="tiny-1")
            assert env.step({"message": ""}).reward == 0.0
        m = s.wait_metrics(lambda m: m["sandboxes"]["open"] == 0)
        assert m["sandboxes"]["open"] == 0 and m["backend"] == "docker"
    finally:
        s.stop()
