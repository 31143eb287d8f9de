"""What real endpoints and small models send, through the real openai client against the local fake server
(tests/fake_llm.py): an HTML page with HTTP 200, tool calls written as text, replies cut at max_tokens, a
context-length 400, completions without usage, hundreds of calls in one message; and what a build does with a
failure (the store's run and stage, the usage it prints, --retry-failed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgen.build.pipeline import LLMPipeline
from envgen.errors import ContextTooLong, EnvgenError, LLMUnavailable, SynthesisError
from envgen.llm.agent import Agent, FunctionTools, ToolOutput
from envgen.llm.client import LLMClient, LLMConfig, TranscriptFile, Usage
from envgen.llm.textcalls import parse_text_calls
from envgen.policies.builtin import make_policy
from envgen.store import Store

try:
    from .fake_llm import Fail, FakeLLM, Raw, Reply
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from fake_llm import Fail, FakeLLM, Raw, Reply

HTML = Raw(b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>",
           content_type="text/html")


@pytest.fixture
def fake():
    with FakeLLM() as f:
        yield f


def cfg(fake: FakeLLM, **kw) -> LLMConfig:
    base = dict(name="test", base_url=fake.url, model="fake-model", api_key="sk-test", timeout=5, max_retries=2,
                backoff_base=0.01, backoff_max=0.02)
    return LLMConfig(**{**base, **kw})


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


def events(path: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["event"] == kind]


def tool_results(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


# ----------------------------------------------------------------------------- a 200 that is not JSON


def test_an_html_page_with_http_200_is_retried_then_a_clear_llm_error(fake, tmp_path):
    fake.script(HTML, HTML, HTML)
    usage, path = Usage(), tmp_path / "t.jsonl"
    with pytest.raises(LLMUnavailable, match=r"gave up after 3 attempts.*not a chat completion \(not JSON: "
                                             r"'<html><head><title>502 Bad Gateway"):
        LLMClient(cfg(fake)).complete([{"role": "user", "content": "hi"}], transcript=TranscriptFile(path), usage=usage)
    assert len(fake.log) == 3 and (usage.errors, usage.retries) == (3, 2)
    assert [e["kind"] for e in events(path, "error")] == ["bad_response"] * 3
    fake.script(HTML, Reply(content="fine"))  # one proxy hiccup, then the model: the call succeeds
    assert LLMClient(cfg(fake)).complete([{"role": "user", "content": "hi"}]).message["content"] == "fine"


def test_the_openai_policy_retries_an_html_page_then_raises_an_llm_error(fake):
    fake.script(HTML, Reply(content="hello"), HTML, HTML)
    policy = make_policy(f"openai:fake-model?base_url={fake.url}&max_retries=1")
    info = {"messages": [{"role": "user", "content": "hi"}], "tools": [], "turns": 0}
    assert policy.act("", info)["content"] == "hello"
    with pytest.raises(LLMUnavailable, match=r"policy openai:fake-model: gave up after 2 attempts: HTTP 200 with a "
                                             r"body that is not a chat completion"):
        policy.act("", info)


def test_the_simulated_user_retries_an_html_page_then_raises_an_llm_error(fake, monkeypatch):
    from envgen.episodes import users
    from envgen.pack.format import UserSpec

    monkeypatch.setattr(users.time, "sleep", lambda s: None)
    spec = UserSpec(goal="Cancel my order.")
    fake.script(HTML, Reply(content="Hi, I want to cancel an order."), HTML, HTML, HTML)
    user = users.make_user(spec, f"openai:fake-model?base_url={fake.url}&max_retries=0")
    conversation = [{"role": "assistant", "content": "Hello! How can I help?"}]
    assert user.reply(conversation) == ("Hi, I want to cancel an order.", False)
    with pytest.raises(LLMUnavailable, match=r"simulated user openai:fake-model: gave up after 3 attempts: HTTP 200 "
                                             r"with a body that is not a chat completion"):
        user.reply(conversation)


# ----------------------------------------------------------------------------- a build that fails


class _Pipe(LLMPipeline):
    """The smallest staged LLM build: one stage per item, whose agent must call ``submit``."""

    def __init__(self, tmp: Path, llm: LLMConfig, retry_failed: bool = False):
        agents = tmp / "agents"
        agents.mkdir(exist_ok=True)
        (agents / "adder.md").write_text("---\nname: adder\ndescription: adds\ntools: [submit]\n"
                                         "budgets: {max_turns: 4}\n---\nAdd the numbers, then call submit.\n")
        super().__init__(llm=llm, store_url=f"sqlite:///{tmp / 's.db'}", run_id="robust/run", roles=("adder",),
                         agents_dir=agents, work=tmp / "work", progress=None, retry_failed=retry_failed)

    def scrub(self, text: str) -> str:  # as the general family stores errors: the run's scratch dir hidden
        return text.replace(str(self.work.resolve()), "<work>")

    def one(self, key: str) -> None:
        got: list[int] = []

        def submit(total: int) -> ToolOutput:
            """Hand in the total.

            Args:
                total: the sum
            """
            got.append(total)
            return ToolOutput("accepted", final=True)

        agent = self.agent("adder", key, 0, FunctionTools([submit]))
        try:
            agent.send(f"Add 2 and 3 ({key}).")
        finally:
            self.finish_agent(agent, key, "adder")
        if not got:
            raise SynthesisError(f"the adder never submitted; see {agent.transcript.path}")
        self.store.finish_stage(self.run_id, key, {"total": got[0]})

    def execute(self) -> dict:
        self.store.open_run(self.run_id, "robust", {})
        for key in ("s1", "s2"):
            self.run_stage(key, self.one, key, error=SynthesisError, stopped=f"stage {key} stopped",
                           kept="finished stages")
        self.store.finish_run(self.run_id, "done")
        return {"usage": self.usage.to_dict()}


def submits(body: dict) -> Reply:
    return Reply(calls=[("submit", {"total": 5})])


def test_an_endpoint_failure_marks_the_stage_and_the_run_failed_and_reports_the_usage(tmp_path):
    with FakeLLM(submits) as fake:
        fake.script(Reply(calls=[("submit", {"total": 5})]), HTML, HTML, HTML)
        with pytest.raises(SynthesisError, match=r"stage s2 stopped: .*not a chat completion.*Rerun the same command "
                                                 r"to resume.*--retry-failed") as info:
            _Pipe(tmp_path, cfg(fake)).run()
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    assert [(s.key, s.status) for s in store.stages("robust/run")] == [("s1", "done"), ("s2", "failed")]
    with store.session() as s:
        from envgen.store import Run

        run = s.get(Run, "robust/run")
        assert run.status == "failed" and run.report["llm"]["calls"] == 1
    assert info.value.llm_usage["session"]["calls"] == 1 and info.value.llm_usage["session"]["errors"] == 3
    assert info.value.llm_usage["transcripts"] == str(tmp_path / "work" / "transcripts")


def test_a_bug_in_a_stage_leaves_nothing_running_in_the_store(tmp_path):
    class Buggy(_Pipe):
        def one(self, key: str) -> None:
            raise RuntimeError("a bug")

    with FakeLLM() as fake, pytest.raises(RuntimeError, match="a bug"):
        Buggy(tmp_path, cfg(fake)).run()
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    assert [(s.status, s.error) for s in store.stages("robust/run")] == [("failed", "RuntimeError: a bug")]
    with store.session() as s:
        from envgen.store import Run

        assert s.get(Run, "robust/run").status == "failed"


def test_retry_failed_asks_the_model_afresh_where_a_plain_rerun_replays_the_failure(tmp_path):
    lazy = lambda body: Reply(content="5")  # noqa: E731  (answers, never submits)
    with FakeLLM(lazy) as fake, pytest.raises(SynthesisError, match="the adder never submitted; see "
                                                                     + str(tmp_path / "work" / "transcripts")):
        _Pipe(tmp_path, cfg(fake)).run()
    with FakeLLM(submits) as fake:
        with pytest.raises(SynthesisError, match="the adder never submitted"):
            _Pipe(tmp_path, cfg(fake)).run()  # the cached conversation replays: same failure, no request
        assert fake.log == []
        out = _Pipe(tmp_path, cfg(fake), retry_failed=True).run()
        assert len(fake.log) == 2 and out["usage"]["calls"] == 2  # s1 asked afresh, s2 new
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    assert store.errors("robust/run")[0].message.startswith("the adder never submitted; see <work>/transcripts/")
    assert [s.status for s in store.stages("robust/run")] == ["done", "done"]
    assert store.llm_spend("robust/run")["calls"] == 3  # the forgotten call is still paid for


# ----------------------------------------------------------------------------- tool calls written as text


@pytest.mark.parametrize("text, form", [
    ('Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>', "hermes"),
    ("<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n</function>\n"
     "</tool_call>", "qwen3-xml"),
    ('Let me add.<function=add>{"a": 2, "b": 3}</function>', "function-tag"),
    ('[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}}]', "mistral"),
    ('<|python_tag|>{"name": "add", "parameters": {"a": 2, "b": 3}}', "llama3-json"),
])
def test_text_tool_call_forms_parse(text, form):
    content, calls, got = parse_text_calls(text)
    assert got == form and [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("add", {"a": 2, "b": 3})]
    assert "tool_call" not in content and "function=" not in content


def test_tool_calls_written_as_text_run_and_the_transcript_says_why(fake, tmp_path):
    fake.script(Reply(content='<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'),
                Reply(content="<function=add>\n<parameter=a>\n4\n</parameter>\n<parameter=b>\n5\n</parameter>\n"
                              "</function>"),
                Reply(content="The sums are 5 and 9."))
    path = tmp_path / "t.jsonl"
    agent = Agent(LLMClient(cfg(fake)), FunctionTools([add]), transcript=TranscriptFile(path))
    res = agent.send("Add 2 and 3, then 4 and 5.")
    assert (res.outcome, res.answer, res.tool_calls) == ("answered", "The sums are 5 and 9.", 2)
    assert tool_results(fake.log[2].body) == ["5", "9"]
    notes = events(path, "text_tool_calls")
    assert [n["form"] for n in notes] == ["hermes", "function-tag"]
    assert "--enable-auto-tool-choice --tool-call-parser" in notes[0]["note"]


# ----------------------------------------------------------------------------- cut replies, context, usage, bounds


def test_a_reply_cut_at_max_tokens_is_not_the_answer(fake, tmp_path):
    fake.script(Reply(content="The answer is", finish_reason="length"), Reply(content="5"))
    path = tmp_path / "t.jsonl"
    agent = Agent(LLMClient(cfg(fake, max_tokens=4)), FunctionTools([add]), transcript=TranscriptFile(path))
    res = agent.send("Add 2 and 3.")
    assert (res.outcome, res.answer) == ("answered", "5")
    assert "cut off at the token limit (4 tokens)" in fake.log[1].body["messages"][-1]["content"]
    fake.script(Reply(content="a", finish_reason="length"), Reply(content="b", finish_reason="length"))
    assert agent.send("Again.").outcome == "truncated"
    assert len(events(path, "truncated")) == 3


def test_a_tool_call_cut_mid_arguments_is_reported_as_cut(fake):
    fake.script(Reply(calls=[("add", '{"a": 2, "b')], finish_reason="length"), Reply(content="ok"))
    Agent(LLMClient(cfg(fake)), FunctionTools([add])).send("Add 2 and 3.")
    (result,) = tool_results(fake.log[1].body)
    assert result.startswith("Error (cut_off): the arguments of add were cut off: your reply hit the token limit")


def test_context_length_400_trims_old_tool_results_and_retries_once(fake, tmp_path):
    def long_text(n: int) -> str:
        """A long text.

        Args:
            n: which
        """
        return f"text {n}: " + "x" * 2000

    too_long = Fail(400, message="This model's maximum context length is 4096 tokens. However, you requested 9000")
    fake.script(*[Reply(calls=[("long_text", {"n": i})]) for i in range(3)], too_long, Reply(content="done"))
    path = tmp_path / "t.jsonl"
    agent = Agent(LLMClient(cfg(fake)), FunctionTools([long_text]), system="sys", transcript=TranscriptFile(path))
    assert agent.send("Read the texts.").answer == "done"
    retried = fake.log[4].body["messages"]
    assert [m["role"] for m in retried[:2]] == ["system", "user"] and retried[1]["content"] == "Read the texts."
    assert [len(r) < 400 for r in tool_results(fake.log[4].body)] == [True, False, False]
    assert "trimmed this tool result" in tool_results(fake.log[4].body)[0]
    assert events(path, "trimmed")[0]["results"] == 1
    fake.script(too_long, too_long)
    with pytest.raises(ContextTooLong, match="still too long after trimming"):
        agent.send("More.")


def test_a_reply_without_usage_is_counted_as_unknown_with_one_warning(fake, tmp_path, caplog):
    fake.script(Reply(content="a", usage=False), Reply(content="b", usage=False))
    usage, path, client = Usage(), tmp_path / "t.jsonl", LLMClient(cfg(fake))
    for text in ("x", "y"):
        client.complete([{"role": "user", "content": text}], usage=usage, transcript=TranscriptFile(path))
    assert (usage.calls, usage.unknown, usage.prompt_tokens) == (2, 2, 0)
    assert len(events(path, "warning")) == 1 and "sends no token usage" in caplog.text

    from envgen.cli import _usage_table
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(_usage_table({"session": usage.to_dict()}))
    assert "0 + unknown" in console.export_text()


def test_calls_in_one_message_are_bounded(fake):
    fake.script(Reply(calls=[("add", {"a": i, "b": 1}) for i in range(5)]), Reply(content="ok"))
    agent = Agent(LLMClient(cfg(fake)), FunctionTools([add]), max_calls_per_message=2)
    agent.send("Add.")
    results = tool_results(fake.log[1].body)
    assert results[:2] == ["1", "2"] and len(results) == 5
    assert all(r.startswith("Error (too_many_calls): not run: at most 2 tool calls") for r in results[2:])


def test_a_failed_interpreter_build_is_marked_failed_and_prints_its_usage(tmp_path, monkeypatch, capsys):
    import sys

    from envgen.cli import main

    models = tmp_path / "models.yaml"
    store = f"sqlite:///{tmp_path / 's.db'}"
    monkeypatch.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    with FakeLLM(lambda body: Reply(content="I would rather not write a problem.")) as fake:
        models.write_text(f"models: [{{name: m, base_url: '{fake.url}', model: fake-model, api_key: k, "
                          "max_retries: 0}]\n")
        monkeypatch.setattr(sys, "argv", ["envgen", "build", "interpreter", "--category", "number theory", "--tasks",
                                          "1", "--llm-config", str(models), "--store", store, "--out",
                                          str(tmp_path / "pack"), "--workers", "1"])
        with pytest.raises(SystemExit) as ended:
            main()
        calls = len(fake.log)
    err = capsys.readouterr().err
    assert ended.value.code == 1 and calls >= 1
    assert "LLM usage before the build stopped" in err and "transcripts: " in err
    assert err.strip().splitlines()[-1].startswith("build error: no problem was accepted")
    with Store(store).session() as s:
        from envgen.store import Run

        run = s.get(Run, "interpreter/number-theory/seed0")
        assert run.status == "failed" and run.report["llm"]["calls"] == calls


def test_the_openai_policy_reads_tool_calls_written_as_text(fake, tiny_pack, caplog):
    from envgen.episodes.gym import PackEnv
    from envgen.policies.builtin import rollout

    fake.script(Reply(content='<function=put>{"key": "k0", "value": "value-0"}</function>'), Reply(content="done"))
    env = PackEnv(tiny_pack, max_turns=3)
    try:
        t = rollout(env, make_policy(f"openai:fake-model?base_url={fake.url}"), task_id="tiny-0")
    finally:
        env.close()
    assert t.tool_calls == 1 and t.invalid_actions == 0
    assert "--enable-auto-tool-choice" in caplog.text
