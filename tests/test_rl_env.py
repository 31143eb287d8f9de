"""The pack adapter for TRL: tool methods from schemas, reset/episodes, datasets, the verifier reward."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Literal

import pytest

from envgen.errors import EnvgenError
from envgen.rl.env import _annotation, environment_class, environment_factories, final_answer, pack_dataset, \
    verifier_reward


def test_import_envgen_rl_stays_light():
    code = ("import sys, envgen, envgen.rl; envgen.rl.environment_class; envgen.rl.template_path('qwen3'); "
            "print(sorted(m for m in ('torch', 'trl', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tool_methods_carry_the_pack_schema(tiny_pack):
    utils = pytest.importorskip("transformers.utils", reason="the rl extra (transformers) is not installed")
    get_json_schema = utils.get_json_schema
    cls = environment_class(tiny_pack)
    env = cls()
    public = sorted(n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_"))
    assert public == sorted([*tiny_pack.manifest.tool_names, "reset"])  # nothing but tools and reset
    for schema in tiny_pack.manifest.tools:
        derived = get_json_schema(getattr(env, schema.name))
        assert derived["function"]["name"] == schema.name
        assert derived["function"]["description"] == schema.function.description
        want = schema.function.parameters
        got = derived["function"]["parameters"]
        assert got.get("required", []) == want.get("required", [])
        assert {k: v["type"] for k, v in got["properties"].items()} == \
               {k: v["type"] for k, v in want.get("properties", {}).items()}
    assert str(inspect.signature(env.put)) == "(*, key: str, value: str)"
    assert inspect.signature(env.spin).parameters["seconds"].default is not inspect.Parameter.empty


def test_json_schema_types_become_type_hints():
    assert _annotation({"type": "string", "enum": ["a", "b"]}) == Literal["a", "b"]
    assert _annotation({"type": "array", "items": {"type": "integer"}}) == list[int]
    assert _annotation({"type": ["string", "null"]}) == (str | None)
    assert _annotation({"type": "object", "additionalProperties": {"type": "number"}}) == dict[str, float]
    assert _annotation({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}) == (int | bool)


def test_reset_runs_the_rows_task_in_a_sandbox_and_bad_arguments_raise_like_python(tiny_pack):
    cls = environment_class(tiny_pack, tools=["put", "get", "submit"])
    env = cls()
    rows = pack_dataset(tiny_pack)
    assert rows.column_names == ["prompt", "task_id", "pack"]
    assert rows[0]["prompt"][0]["role"] == "system" and rows[0]["prompt"][-1]["content"].startswith("Store value-0")
    assert env.reset(**rows[1]) is None
    assert not hasattr(env, "add")
    with pytest.raises(TypeError, match="value"):
        env.put(key="k1")
    assert env.put(key="k1", value="value-1") == "stored"
    assert env.get(key="nope").startswith("Error")  # a tool's failure is the observation, never an exception
    assert env.submit(answer="value-1") == "submitted"
    assert env._finish("Stored value-1.") == 1.0
    assert [c["tool"] for c in env._calls] == ["put", "get", "submit"]
    env.reset(**rows[1])  # the same instance, next episode: pristine state again
    assert env.get(key="k1").startswith("Error")
    assert env._finish(None) == 0.0  # no final answer: zero, unjudged
    env._close()


def test_reset_refuses_a_row_of_another_pack(tiny_pack):
    env = environment_class(tiny_pack)()
    with pytest.raises(EnvgenError, match="pack 'other'"):
        env.reset(task_id="tiny-0", pack="other")


def test_several_packs_route_through_an_environment_column(tiny_pack, tmp_path):
    import _rl_util

    slow = _rl_util.make_slow_pack(tmp_path / "slow")
    factories = environment_factories([tiny_pack, slow])
    assert sorted(factories) == ["slow", "tiny"]
    ds = pack_dataset([tiny_pack, slow])
    assert set(ds["environment"]) == {"tiny", "slow"} and ds.column_names[-1] == "environment"
    with pytest.raises(EnvgenError, match="two packs are named"):
        environment_factories([tiny_pack, tiny_pack])


def test_final_answer_is_the_last_message_without_tool_calls():
    call = {"type": "function", "function": {"name": "put", "arguments": {}}}
    assert final_answer([{"role": "assistant", "content": "x", "tool_calls": [call]},
                         {"role": "tool", "content": "ok"}, {"role": "assistant", "content": "done"}]) == "done"
    assert final_answer([{"role": "assistant", "content": "x", "tool_calls": [call]}]) is None
    assert final_answer([{"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "content": "ok"}]) is None


def test_verifier_reward_scores_rollouts_and_logs_per_pack(tiny_pack):
    cls = environment_class(tiny_pack, tools=["put", "submit"], max_concurrency=4)
    rows = pack_dataset(tiny_pack)
    envs = [cls() for _ in range(3)]
    for env, row in zip(envs, rows):
        env.reset(**row)
    envs[0].put(key="k0", value="value-0")
    envs[0].submit(answer="value-0")
    envs[1].submit(answer="value-1")  # no put: the verifier says 0
    done = [{"role": "assistant", "content": "done"}]
    cut = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "put"}}]}]
    logged = {}
    rewards = verifier_reward([done, done, cut], environments=envs, log_metric=logged.__setitem__)
    assert rewards == [1.0, 0.0, 0.0]
    assert envs[0]._episode.verdict.details == {"got": "value-0"}  # the pack's own verifier judged it
    assert logged["envgen/tiny/reward"] == pytest.approx(1 / 3)
    assert logged["envgen/tiny/tool_calls"] == pytest.approx(1.0)
    assert logged["envgen/tiny/answered"] == pytest.approx(2 / 3)
    for env in envs:
        env._close()
