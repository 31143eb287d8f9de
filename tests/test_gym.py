"""PackEnv through Gymnasium: episodes, bad actions, runaway tools, truncation, spaces, vector envs."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.episodes.actions import render_action
from envgen.errors import EnvgenError, PackError
from envgen.episodes.gym import ENV_ID, PackEnv, TextSpace, register_envs
from envgen.policies.builtin import (
    NullPolicy,
    OraclePolicy,
    Transcript,
    format_transcript,
    make_policy,
    rollout,
    unbatch_info,
)

from conftest import make_tiny_pack


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> str:
    return str(make_tiny_pack(tmp_path_factory.mktemp("gym") / "tiny").root)


@pytest.fixture(scope="module")
def fast_pack_dir(tmp_path_factory) -> str:
    """Short step timeout so timeout and runaway tests take about a second each."""
    return str(make_tiny_pack(tmp_path_factory.mktemp("fast") / "tiny", limits={"step_timeout_s": 0.5}).root)


@pytest.fixture
def env(pack_dir):
    e = gymnasium.make(ENV_ID, pack=pack_dir)
    yield e
    e.close()


def call(name, **args):
    return render_action("", [(name, args)])


def solve(env, task_id="tiny-0"):
    """Finish the current episode with the reference moves of a tiny task; return (reward, info)."""
    i = task_id.rsplit("-", 1)[1]
    env.step(call("put", key=f"k{i}", value=f"value-{i}"))
    env.step(call("submit", answer=f"value-{i}"))
    _, reward, terminated, truncated, info = env.step("Done.")
    assert terminated and not truncated
    return reward, info


# ---------------------------------------------------------------- episodes


def test_oracle_scores_1_and_null_scores_0(env):
    t = rollout(env, OraclePolicy(), task_id="tiny-1")
    assert (t.reward, t.terminated, t.truncated, t.turns, t.tool_calls) == (1.0, True, False, 3, 2)
    assert t.invalid_actions == t.tool_errors == 0
    t0 = rollout(env, NullPolicy(), task_id="tiny-1")
    assert (t0.reward, t0.terminated, t0.turns) == (0.0, True, 1)
    assert t0.reward_details == {"reason": "no submission"}


@pytest.mark.parametrize("fmt", ["openai", "hermes", "deepseek", "deepseek-v3", "dsml"])
def test_every_action_format_solves_a_task(pack_dir, fmt):
    e = gymnasium.make(ENV_ID, pack=pack_dir, tool_format="auto" if fmt == "openai" else fmt)
    try:
        assert rollout(e, make_policy(f"oracle:{fmt}"), task_id="tiny-2").reward == 1.0
    finally:
        e.close()


def test_openai_json_string_and_raw_qwen_text(env):
    env.reset(options={"task_id": "tiny-0"})
    import json

    env.step(json.dumps(render_action("", [("put", {"key": "k0", "value": "value-0"})])))
    obs, *_ = env.step('<think>now submit</think><tool_call>\n{"name": "submit", "arguments": {"answer": "value-0"}}'
                       "\n</tool_call><|im_end|>")
    assert obs == '<tool_response name="submit" id="call_2_0">\nsubmitted\n</tool_response>'
    _, reward, terminated, _, info = env.step("<think>all done</think>Stored value-0.")
    assert (reward, terminated) == (1.0, True)
    assert info["messages"][-1] == {"role": "assistant", "content": "Stored value-0.", "reasoning_content": "all done"}


def test_info_carries_messages_tools_and_counters(env):
    obs, info = env.reset(options={"task_id": "tiny-0"})
    assert obs == "Store value-0 under k0, then submit it."
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert {t["function"]["name"] for t in info["tools"]} >= {"put", "submit", "spin"}
    assert info["task_id"] == "tiny-0"
    assert {k: info[k] for k in ("turns", "tool_calls", "invalid_actions", "tool_errors")} == dict.fromkeys(
        ("turns", "tool_calls", "invalid_actions", "tool_errors"), 0)
    obs, _, _, _, info = env.step(render_action("two at once", [("add", {"a": 2, "b": 3}), ("noop", {})]))
    assert obs == ('<tool_response name="add" id="call_0">\n5\n</tool_response>\n\n'
                   '<tool_response name="noop" id="call_1">\nok\n</tool_response>')
    assistant, tool1, tool2 = info["messages"][2:]
    assert assistant["role"] == "assistant" and assistant["content"] == "two at once"
    assert [tc["function"]["name"] for tc in assistant["tool_calls"]] == ["add", "noop"]
    assert tool1 == {"role": "tool", "tool_call_id": "call_0", "name": "add", "content": "5"}
    assert tool2["tool_call_id"] == "call_1"
    assert (info["turns"], info["tool_calls"]) == (1, 2)
    assert "reward_details" not in info
    info["messages"].clear()  # the env hands out copies
    assert len(env.unwrapped._info()["messages"]) == 5


def test_task_prompt_system_message_and_no_system_prompt(pack_dir):
    e = PackEnv(pack_dir, system_prompt=None)
    try:
        _, info = e.reset(options={"task_id": "tiny-0"})
        assert [m["role"] for m in info["messages"]] == ["user"]
    finally:
        e.close()


# ---------------------------------------------------------------- bad actions


def test_malformed_json_is_an_observation_not_an_exception(env):
    env.reset(options={"task_id": "tiny-0"})
    obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": "put", "arguments": {"key": }</tool_call>')
    assert obs.startswith("Error (malformed_json): <tool_call> block 1 is not valid JSON")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert (info["invalid_actions"], info["tool_calls"], info["turns"]) == (1, 0, 1)
    assert info["messages"][-1] == {"role": "user", "content": obs}
    obs, *_, info = env.step('{"content": "", "tool_calls": [')
    assert obs.startswith("Error (malformed_json)") and info["invalid_actions"] == 2
    assert solve(env)[0] == 1.0


def test_unknown_tool_and_wrong_arguments(env):
    env.reset(options={"task_id": "tiny-0"})
    obs, *_, info = env.step(call("teleport", where="mars"))
    assert "Error (unknown_tool)" in obs and "teleport" in obs
    assert (info["invalid_actions"], info["tool_errors"]) == (1, 0)
    obs, *_, info = env.step(call("put", key="k0"))
    assert "Error (bad_arguments)" in obs and "value" in obs
    obs, *_, info = env.step(call("put", key="k0", value="value-0", extra=1))
    assert "Error (bad_arguments)" in obs and info["invalid_actions"] == 3
    obs, *_, info = env.step({"tool_calls": [{"function": {"name": "put", "arguments": "[1]"}}]})
    assert obs.startswith("Error (bad_tool_call)") and info["invalid_actions"] == 4
    obs, *_, info = env.step(12345)
    assert obs.startswith("Error (unsupported_action)") and info["invalid_actions"] == 5
    assert solve(env)[0] == 1.0


def test_a_tool_that_raises(env):
    env.reset(options={"task_id": "tiny-0"})
    obs, *_, info = env.step(call("boom"))
    assert "Error (ValueError): boom happened" in obs
    assert (info["tool_errors"], info["invalid_actions"]) == (1, 0)
    reward, info = solve(env)
    assert reward == 1.0 and info["tool_errors"] == 1


def test_megabytes_of_output_are_truncated(pack_dir):
    e = gymnasium.make(ENV_ID, pack=pack_dir, max_text=4096)
    try:
        e.reset(options={"task_id": "tiny-0"})
        obs, *_, info = e.step(render_action("", [("shout", {"n": 3_000_000})] * 3))
        assert len(obs) <= 4096 and "truncated" in obs
        assert obs in e.observation_space
        assert all(len(m["content"]) < 20_000 for m in info["messages"] if m["role"] == "tool")
        assert solve(e)[0] == 1.0
    finally:
        e.close()


@pytest.mark.parametrize("tool, args, kind", [
    ("spin", {}, "timeout"),           # a Python loop: the runtime's alarm stops it
    ("block", {}, "killed"),           # blocked in C with SIGALRM masked: the host kills and restarts the runtime
    ("hog", {}, "MemoryError"),        # the address-space limit turns it into MemoryError
    ("die", {}, "crashed"),            # the runtime exits: the host restarts it
])
def test_runaway_tools_are_stopped_and_the_env_keeps_working(fast_pack_dir, tool, args, kind):
    e = gymnasium.make(ENV_ID, pack=fast_pack_dir)
    try:
        e.reset(options={"task_id": "tiny-1"})
        obs, reward, terminated, truncated, info = e.step(call(tool, **args))
        assert f"Error ({kind})" in obs, obs
        assert (reward, terminated, truncated, info["tool_errors"]) == (0.0, False, False, 1)
        assert solve(e, "tiny-1")[0] == 1.0
        e.reset(options={"task_id": "tiny-2"})  # and the next episode is fine
        assert solve(e, "tiny-2")[0] == 1.0
    finally:
        e.close()


# ---------------------------------------------------------------- truncation and episode control


def test_max_turns_truncates_without_verifying(pack_dir):
    e = gymnasium.make(ENV_ID, pack=pack_dir, max_turns=3)
    try:
        e.reset(options={"task_id": "tiny-0"})
        e.step(call("put", key="k0", value="value-0"))
        e.step(call("submit", answer="value-0"))
        obs, reward, terminated, truncated, info = e.step(call("noop"))
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["reward_details"] == {"truncated": "max_turns", "verified": False,
                                          "message": "no final answer within 3 turns"}
        assert obs == '<tool_response name="noop" id="call_0">\nok\n</tool_response>'
        with pytest.raises(gymnasium.error.ResetNeeded):
            e.unwrapped.step("too late")
        t = rollout(e, OraclePolicy(), task_id="tiny-0")  # 3 turns are exactly enough for the oracle
        assert (t.reward, t.terminated) == (1.0, True)
    finally:
        e.close()


def test_pack_limit_is_the_default_max_turns(tmp_path):
    p = make_tiny_pack(tmp_path / "short", limits={"max_turns": 1})
    e = PackEnv(p)
    try:
        assert e.max_turns == 1
        e.reset(seed=0)
        *_, truncated, info = e.step(call("noop"))
        assert truncated and info["reward_details"]["truncated"] == "max_turns"
    finally:
        e.close()


def test_episode_timeout_truncates_and_skips_remaining_calls(tmp_path):
    p = make_tiny_pack(tmp_path / "slow", limits={"episode_timeout_s": 1.0})
    e = PackEnv(p)
    try:
        e.reset(options={"task_id": "tiny-0"})
        obs, reward, terminated, truncated, info = e.step(render_action("", [("block", {"seconds": 0.4})] * 4))
        ran = info["tool_calls"]
        assert 2 <= ran < 4 and obs.count("woke") == ran  # ~0.4 s each against a 1 s budget
        assert obs.count("Error (episode_timeout)") == 4 - ran
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["reward_details"]["truncated"] == "episode_timeout"
    finally:
        e.close()


def test_task_id_option_and_unknown_ids(env, pack_dir):
    obs, info = env.reset(options={"task_id": "tiny-2"})
    assert info["task_id"] == "tiny-2" and "value-2" in obs
    with pytest.raises(PackError, match="no task with id 'nope'"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(EnvgenError, match="unknown reset option"):
        env.reset(options={"task": "tiny-0"})
    with pytest.raises(PackError, match="nope"):
        PackEnv(pack_dir, task_ids=["tiny-0", "nope"])


def test_seeded_reset_is_deterministic_and_task_ids_restrict_draws(pack_dir):
    def draws(env, seed, n=8):
        ids = [env.reset(seed=seed)[1]["task_id"]]
        ids += [env.reset()[1]["task_id"] for _ in range(n - 1)]
        return ids

    a, b = PackEnv(pack_dir), PackEnv(pack_dir)
    try:
        assert draws(a, 7) == draws(b, 7)
        assert len({tuple(draws(a, s)) for s in range(5)}) > 1
        assert len(set(draws(a, 3, 30))) == 3
    finally:
        a.close()
        b.close()
    c = PackEnv(pack_dir, task_ids=["tiny-1"])
    try:
        assert set(draws(c, 0)) == {"tiny-1"}
    finally:
        c.close()


def test_constructor_rejects_bad_settings(pack_dir):
    for kwargs, needle in [({"tool_format": "xml"}, "tool_format"), ({"sandbox": "vm"}, "backend"),
                           ({"max_turns": 0}, "max_turns"), ({"max_text": 10}, "max_text"),
                           ({"render_mode": "human"}, "render_mode")]:
        with pytest.raises(EnvgenError, match=needle):
            PackEnv(pack_dir, **kwargs)


def test_render_close_and_reopen(pack_dir):
    e = gymnasium.make(ENV_ID, pack=pack_dir, render_mode="ansi")
    e.reset(options={"task_id": "tiny-0"})
    e.step(call("put", key="k0", value="value-0"))
    text = e.render()
    assert "[user]\nStore value-0 under k0" in text and '-> put({"key": "k0", "value": "value-0"})' in text
    assert "[tool put call_0]\nstored" in text
    e.close()
    e.close()  # idempotent
    e.reset(options={"task_id": "tiny-0"})  # a closed env starts a fresh sandbox
    assert solve(e)[0] == 1.0
    e.close()


# ---------------------------------------------------------------- Gymnasium conformance


def test_check_env_passes_without_warnings(pack_dir):
    e = gymnasium.make(ENV_ID, pack=pack_dir)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(e.unwrapped)  # with its spec, so the render modes and close are checked too
        assert [str(w.message) for w in caught] == []
    finally:
        e.close()


def test_text_space():
    s = TextSpace(10, seed=3)
    assert "ünïcödé ∑" in s and "x" * 11 not in s and b"bytes" not in s and {"content": ""} not in s
    assert {"content": "", "tool_calls": []} in TextSpace(10, accept_messages=True)
    samples = [s.sample() for _ in range(20)]
    assert all(x in s for x in samples)
    s.seed(3)
    assert [s.sample() for _ in range(20)] == samples
    assert s == TextSpace(10) and s != TextSpace(11)


def test_text_space_shared_memory_round_trips_unicode():
    import copy
    import multiprocessing as mp

    from gymnasium.vector.utils import (create_empty_array, create_shared_memory, read_from_shared_memory,
                                        write_to_shared_memory)

    s = TextSpace(300)
    assert create_empty_array(s, n=2) == ("", "")
    view = read_from_shared_memory(s, create_shared_memory(s, n=2, ctx=mp), n=2)
    shm = view._buf  # noqa: SLF001  (write through the same buffer, as the workers do)
    texts = ["emoji 🎉 and 中文 and \x00 nul", "x" * 300]
    for i, t in enumerate(texts):
        write_to_shared_memory(s, i, t, type("Shm", (), {"get_obj": lambda self, b=shm: b})())
    assert tuple(view) == tuple(texts) and view[1] == texts[1] and len(view) == 2
    snapshot = copy.deepcopy(view)
    assert type(snapshot) is tuple and snapshot == tuple(texts)
    with pytest.raises(ValueError, match="exceeds"):
        write_to_shared_memory(s, 0, "y" * 301, type("Shm", (), {"get_obj": lambda self, b=shm: b})())


def test_registration_is_idempotent_and_make_works_without_import(pack_dir):
    register_envs()
    register_envs()
    assert gymnasium.spec(ENV_ID).entry_point == "envgen.episodes.gym:PackEnv"
    code = ("import gymnasium, sys\n"
            "assert 'envgen' not in sys.modules\n"
            f"e = gymnasium.make('envgen:{ENV_ID}', pack={pack_dir!r})\n"
            "from envgen.policies.builtin import rollout, OraclePolicy\n"
            "assert rollout(e, OraclePolicy()).reward == 1.0\n"
            "e.close()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr


def test_import_envgen_stays_light():
    code = ("import sys, envgen\n"
            "heavy = [m for m in ('torch', 'transformers', 'trl', 'datasets', 'docker', 'openai', 'sqlalchemy') "
            "if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "import gymnasium\nassert 'envgen/Pack-v0' in gymnasium.registry\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("mode", ["sync", "async", "async-no-shm"])
def test_vector_envs_step_the_oracle_to_reward_1(pack_dir, mode):
    fns = [lambda: gymnasium.make(ENV_ID, pack=pack_dir)] * 2
    if mode == "sync":
        venv = gymnasium.vector.SyncVectorEnv(fns)
    else:
        venv = gymnasium.vector.AsyncVectorEnv(fns, shared_memory=mode == "async")
    policy = OraclePolicy(pack_dir)
    try:
        obs, infos = venv.reset(seed=0)
        assert isinstance(obs, tuple) and all(isinstance(o, str) and o.startswith("Store value-") for o in obs)
        for _ in range(3):
            obs, rewards, terminated, truncated, infos = venv.step(policy.act_batch(obs, infos))
            assert isinstance(obs, tuple) and all(isinstance(o, str) for o in obs)
        assert list(rewards) == [1.0, 1.0] and all(terminated) and not any(truncated)
        assert unbatch_info(infos, 1)["reward_details"]["got"].startswith("value-")
        obs, *_ = venv.step(("", ""))  # autoreset: the next step starts fresh episodes
        assert all(o.startswith("Store value-") for o in obs)
    finally:
        venv.close()


def test_make_vec_async_with_defaults(pack_dir):
    venv = gymnasium.make_vec(ENV_ID, num_envs=2, vectorization_mode="async", pack=pack_dir)
    try:
        obs, infos = venv.reset(seed=1)
        policy = OraclePolicy(pack_dir, tool_format="hermes")
        for _ in range(3):
            obs, rewards, terminated, _, infos = venv.step(policy.act_batch(obs, infos))
        assert list(rewards) == [1.0, 1.0] and all(terminated)
    finally:
        venv.close()


# ---------------------------------------------------------------- policies and transcripts


def test_make_policy():
    assert isinstance(make_policy("oracle"), OraclePolicy)
    assert make_policy("oracle:dsml").tool_format == "dsml"
    assert isinstance(make_policy("null"), NullPolicy)
    for bad in ("gpt", "null:x", "oracle:xml"):
        with pytest.raises(EnvgenError, match="oracle|tool_format"):
            make_policy(bad)
    with pytest.raises(EnvgenError, match="known: oracle"):
        make_policy("random")
    with pytest.raises(EnvgenError, match="no pack"):
        OraclePolicy().act("", {"task_id": "tiny-0", "turns": 0})


def test_transcript_text_and_dict(env):
    t = rollout(env, OraclePolicy(), task_id="tiny-0", seed=5)
    assert isinstance(t, Transcript) and t.seconds > 0
    text = format_transcript(t)
    assert text.startswith("task tiny-0 · reward 1 · 3 turns · 2 tool calls")
    assert "[assistant]\nStored value-0." in text and '[reward details] {"got": "value-0"}' in text
    d = t.to_dict()
    assert d["task_id"] == "tiny-0" and d["messages"][-1]["content"] == "Stored value-0."
