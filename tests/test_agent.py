"""The agent runtime through the real openai client against the local fake server (tests/fake_llm.py)."""

from __future__ import annotations

import json
import time

import pytest

from envgen.llm.client import LLMClient, LLMConfig, LLMError, LLMPool, LLMUnavailable, TranscriptFile, Usage, load_llm, load_llm_file, messages_for_request
from envgen.llm.agent import Agent, FunctionTools, SandboxTools, Tools, ToolOutput
from envgen.errors import EnvgenError
from envgen.sandbox import open_sandbox
from envgen.store import Store

try:
    from .fake_llm import Fail, FakeLLM, Raw, Reply, Slow
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from fake_llm import Fail, FakeLLM, Raw, Reply, Slow


@pytest.fixture
def fake():
    with FakeLLM() as f:
        yield f


def cfg(fake: FakeLLM, **kw) -> LLMConfig:
    base = dict(name="test", base_url=fake.url, model="fake-model", api_key="sk-test", timeout=5, max_retries=3,
                backoff_base=0.01, backoff_max=0.05, price_input=2.0, price_output=8.0)
    return LLMConfig(**{**base, **kw})


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


def weather(city: str) -> dict:
    """Today's weather in a city.

    Args:
        city: the city
    """
    return {"city": city, "temp_c": 21}


def read_events(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ----------------------------------------------------------------------------- thinking retention


def test_messages_for_request_is_pure_and_drops_reasoning_of_earlier_user_turns():
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "", "reasoning_content": "r1", "tool_calls": [{"id": "a"}]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "assistant", "content": "done 1", "reasoning_content": "r2"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "", "reasoning_content": "r3", "tool_calls": [{"id": "b"}]},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
    ]
    snapshot = json.loads(json.dumps(history))
    sent = messages_for_request(history)
    assert history == snapshot  # not modified
    assert [m.get("reasoning_content") for m in sent] == [None, None, None, None, None, None, "r3", None]
    assert sent[2]["tool_calls"] == [{"id": "a"}] and sent[3]["content"] == "A"  # calls and results kept
    assert "reasoning_content" not in sent[2] and "reasoning_content" not in sent[4]


def test_thinking_retention_over_two_user_turns_with_tools(fake, tmp_path):
    """Which reasoning goes back at each request of: user1 -> A -> (B, C) -> answer; user2 -> D -> answer."""
    fake.script(
        Reply(reasoning="r1", calls=[("add", {"a": 1, "b": 2})]),
        Reply(reasoning="r2", calls=[("weather", {"city": "Oslo"}), ("add", {"a": 3, "b": 4})]),
        Reply(reasoning="r3", content="3, 21 C, 7"),
        Reply(reasoning="r4", calls=[("weather", {"city": "Rome"})]),
        Reply(reasoning="r5", content="21 C in Rome"),
    )
    agent = Agent(LLMClient(cfg(fake)), FunctionTools([add, weather]), system="be brief",
                  transcript=TranscriptFile(tmp_path / "t.jsonl"))
    first = agent.send("q1")
    second = agent.send("q2")
    assert (first.outcome, first.answer, first.tool_calls) == ("answered", "3, 21 C, 7", 3)
    assert (second.outcome, second.answer, second.tool_calls) == ("answered", "21 C in Rome", 1)

    def sent_reasoning(rec):
        return [m.get("reasoning_content") for m in rec.body["messages"] if m["role"] == "assistant"]

    assert [sent_reasoning(r) for r in fake.log] == [
        [],                                  # q1
        ["r1"],                              # after A: same user turn, r1 goes back
        ["r1", "r2"],                        # after B, C
        [None, None, None],                  # q2 arrived: r1..r3 dropped, their tool calls kept
        [None, None, None, "r4"],            # after D: r4 goes back
    ]
    last = fake.log[-1].body["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "tool", "tool",
                                         "assistant", "user", "assistant", "tool"]
    assert json.loads(last[5]["content"]) == {"city": "Oslo", "temp_c": 21} and last[6]["content"] == "7"
    # the history itself keeps every reasoning (the RL code may want it)
    assert [m.get("reasoning_content") for m in agent.history if m["role"] == "assistant"] == ["r1", "r2", "r3",
                                                                                                 "r4", "r5"]


# ----------------------------------------------------------------------------- failures


def test_malformed_tool_call_json_becomes_an_error_result_and_is_recorded(fake, tmp_path):
    fake.script(
        Reply(calls=[("add", '{"a": 1, "b": ')]),             # truncated JSON
        Reply(calls=[("add", "[1, 2]"), ("nope", "{}")]),     # not an object; unknown tool
        Reply(calls=[("add", {"a": 1, "b": 2})]),
        Reply(content="3"),
    )
    path = tmp_path / "t.jsonl"
    agent = Agent(LLMClient(cfg(fake)), FunctionTools([add]), transcript=TranscriptFile(path))
    res = agent.send("add 1 and 2")
    assert (res.outcome, res.answer, res.malformed, res.tool_errors, res.tool_calls) == ("answered", "3", 3, 3, 4)
    tool_msgs = [m["content"] for m in fake.log[1].body["messages"] if m["role"] == "tool"]
    assert tool_msgs[0].startswith("Error (bad_arguments): the arguments of add are not valid JSON")
    second = [m["content"] for m in fake.log[2].body["messages"] if m["role"] == "tool"][1:]
    assert second[0].startswith("Error (bad_arguments): the arguments of add must be a JSON object")
    assert second[1].startswith("Error (unknown_tool): no tool named 'nope'")
    tools = [e for e in read_events(path) if e["event"] == "tool"]
    assert [(e["name"], e["ok"]) for e in tools] == [("add", False), ("add", False), ("nope", False), ("add", True)]
    assert tools[0]["arguments"] == '{"a": 1, "b": '


def test_429_then_success_honours_retry_after(fake, tmp_path):
    fake.script(Fail(429, {"retry-after-ms": "300"}, "slow down"), Reply(content="ok"))
    usage, path = Usage(), tmp_path / "t.jsonl"
    out = LLMClient(cfg(fake)).complete([{"role": "user", "content": "hi"}], transcript=TranscriptFile(path), usage=usage)
    assert out.message["content"] == "ok" and out.attempts == 2
    assert fake.log[1].t - fake.log[0].t >= 0.3  # waited at least what the server asked
    assert (usage.calls, usage.retries, usage.errors) == (1, 1, 1)
    errors = [e for e in read_events(path) if e["event"] == "error"]
    assert errors[0]["kind"] == "http_429" and errors[0]["retry_after"] == 0.3 and errors[0]["retry"] is True


def test_500_storm_exhausts_retries_with_a_clear_error(fake, tmp_path):
    fake.script(*[Fail(500, message="overloaded")] * 4)
    usage, path = Usage(), tmp_path / "t.jsonl"
    with pytest.raises(LLMUnavailable, match=r"gave up after 4 attempts.*HTTP 500: overloaded"):
        LLMClient(cfg(fake, max_retries=3)).complete([{"role": "user", "content": "hi"}], transcript=TranscriptFile(path),
                                                      usage=usage)
    assert len(fake.log) == 4 and (usage.calls, usage.errors, usage.retries) == (0, 4, 3)
    errors = [e for e in read_events(path) if e["event"] == "error"]
    assert [e["retry"] for e in errors] == [True, True, True, False]
    gaps = [b.t - a.t for a, b in zip(fake.log, fake.log[1:])]
    assert all(g >= 0.005 for g in gaps)  # backoff between attempts


def test_client_errors_are_not_retried(fake):
    fake.script(Fail(401, message="bad key"))
    with pytest.raises(LLMError, match=r"HTTP 401: bad key \(check the API key"):
        LLMClient(cfg(fake)).complete([{"role": "user", "content": "hi"}])
    assert len(fake.log) == 1


def test_timeout_is_retried(fake, tmp_path):
    fake.script(Slow(1.5, Reply(content="late")), Reply(content="on time"))
    path = tmp_path / "t.jsonl"
    t0 = time.monotonic()
    out = LLMClient(cfg(fake, timeout=0.4)).complete([{"role": "user", "content": "hi"}], transcript=TranscriptFile(path))
    assert out.message["content"] == "on time" and out.attempts == 2
    assert time.monotonic() - t0 < 1.4
    assert [e["kind"] for e in read_events(path) if e["event"] == "error"] == ["timeout"]


def test_garbled_and_empty_replies_are_retried(fake, tmp_path):
    fake.script(Raw(b"{not json"), Raw(b'{"id": "x", "object": "chat.completion", "created": 0, "model": "m", '
                                       b'"choices": []}'), Reply(content="fine"))
    path = tmp_path / "t.jsonl"
    out = LLMClient(cfg(fake)).complete([{"role": "user", "content": "hi"}], transcript=TranscriptFile(path))
    assert out.message == {"role": "assistant", "content": "fine"} and out.attempts == 3
    assert [e["kind"] for e in read_events(path) if e["event"] == "error"] == ["bad_response", "empty_reply"]


def test_connection_errors_are_retried_then_reported():
    dead = LLMConfig(name="dead", base_url="http://127.0.0.1:9/v1", model="m", api_key="k", max_retries=2,
                     backoff_base=0.01, timeout=2)
    usage = Usage()
    with pytest.raises(LLMUnavailable, match=r"dead \(m at http://127.0.0.1:9/v1\): gave up after 3 attempts"):
        LLMClient(dead).complete([{"role": "user", "content": "hi"}], usage=usage)
    assert (usage.errors, usage.retries) == (3, 2)


def test_retry_after_beyond_max_wait_gives_up_at_once(fake):
    fake.script(Fail(429, {"retry-after": "3600"}))
    with pytest.raises(LLMUnavailable, match="asks to wait 3600 s"):
        LLMClient(cfg(fake)).complete([{"role": "user", "content": "hi"}])
    assert len(fake.log) == 1


# ----------------------------------------------------------------------------- accounting and caching


def test_usage_cost_and_cache_replay(fake, tmp_path):
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    fake.script(Reply(reasoning="hmm", content="hello there"))
    client = LLMClient(cfg(fake), cache=store, run_id="r1")
    usage = Usage()
    first = client.complete([{"role": "user", "content": "hi"}], usage=usage, salt="s")
    assert not first.cached and usage.calls == 1
    expected = (first.usage["prompt_tokens"] * 2.0 + first.usage["completion_tokens"] * 8.0) / 1e6
    assert first.cost == pytest.approx(expected) and usage.cost == pytest.approx(expected) and expected > 0
    # same request, same salt: served from the store without an HTTP request, even by a new client
    again = LLMClient(cfg(fake), cache=store).complete([{"role": "user", "content": "hi"}], usage=usage, salt="s")
    assert again.cached and again.message == first.message and len(fake.log) == 1
    assert (usage.calls, usage.cached_calls) == (1, 1)
    spent = store.llm_spend("r1")
    assert spent["calls"] == 1 and spent["cost"] == pytest.approx(expected)


def test_agent_turn_budget_and_final_tool(fake):
    def finish(summary: str) -> ToolOutput:
        """Hand in the result.

        Args:
            summary: the result
        """
        return ToolOutput("accepted", final=True, data={"summary": summary})

    fake.script(*[Reply(calls=[("add", {"a": 1, "b": 1})])] * 2)
    agent = Agent(LLMClient(cfg(fake)), FunctionTools([add]), max_turns=2)
    res = agent.send("loop")
    assert (res.outcome, res.answer, res.turns) == ("turn_budget", None, 2)
    fake.script(Reply(calls=[("finish", {"summary": "s"})]))
    res = Agent(LLMClient(cfg(fake)), FunctionTools([add, finish])).send("go")
    assert (res.outcome, res.answer, res.final_data) == ("stopped", "accepted", {"summary": "s"})


def test_sandbox_tools_run_in_the_sandbox(fake, tiny_pack):
    fake.script(Reply(calls=[("put", {"key": "a", "value": "1"}), ("get", {"key": "a"}), ("get", {"key": "zz"})]),
                Reply(content="done"))
    with open_sandbox(tiny_pack, "local") as sbx:
        sbx.reset()
        tools = Tools(SandboxTools(sbx, only=["put", "get"]), FunctionTools([add]))
        assert sorted(tools.names) == ["add", "get", "put"]
        res = Agent(LLMClient(cfg(fake)), tools).send("store a")
    assert res.outcome == "answered" and res.tool_errors == 1
    contents = [m["content"] for m in fake.log[1].body["messages"] if m["role"] == "tool"]
    assert contents[:2] == ["stored", "1"] and contents[2].startswith("Error (KeyError)")


# ----------------------------------------------------------------------------- configs


def test_llm_configs_from_file_and_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OTHER_KEY", "sk-other")
    path = tmp_path / "llm.yaml"
    path.write_text("models:\n"
                    "  - {name: big, base_url: 'http://h1/v1', model: deepseek-v3.2, price_input: 0.28, price_output: 0.42}\n"
                    "  - {name: small, base_url: 'http://h2/v1', model: qwen, api_key_env: OTHER_KEY}\n"
                    "roles: {reviewer: small}\n")
    pool = load_llm_file(path)
    assert pool.pick("reviewer").name == "small"
    assert pool.pick("task-proposer", preferred="big").name == "big"
    assert [pool.pick("x", ordinal=i).name for i in range(4)] == ["big", "small", "big", "small"]
    assert pool.get("big").key() == "sk-env" and pool.get("small").key() == "sk-other"
    assert "sk-" not in pool.get("big").model_dump_json()  # keys never serialise
    mixed = load_llm(path, base_url="http://h3/v1", model="m3", temperature=0.2)
    assert [c.name for c in mixed.configs] == ["cli", "big", "small"] and mixed.get("cli").temperature == 0.2
    (tmp_path / "bad.json").write_text(json.dumps({"models": [{"name": "x"}]}))
    with pytest.raises(EnvgenError, match=r"bad.json: models.0.model: Field required"):
        load_llm_file(tmp_path / "bad.json")
    with pytest.raises(EnvgenError, match="roles: 'reviewer' names config 'nope'"):
        LLMPool([LLMConfig(name="a", model="m", base_url="http://x")], roles={"reviewer": "nope"})
    with pytest.raises(EnvgenError, match="--llm-base-url needs --llm-model"):
        load_llm(base_url="http://x/v1")
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(EnvgenError, match="no API key; set OPENAI_API_KEY"):
        LLMConfig(model="m", base_url=None).key()
