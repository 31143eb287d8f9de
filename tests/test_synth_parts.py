"""Pieces of the general-agent pipeline on their own: code checks, the in-sandbox solution harness,
agent role files, search backends, and the LLM-pipeline runner both LLM families build on."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import sys
import textwrap
import threading

import pytest

from envgen.build.pipeline import LLMPipeline
from envgen.families.general import static_checks as codecheck
from envgen.llm.agent import Tools
from envgen.llm.client import LLMConfig, Usage
from envgen.llm.roles import list_specs, load_spec, parse_spec
from envgen.errors import EnvgenError, LLMError, SynthesisError
from envgen.store import Run, Store
from envgen.pack import Limits, Manifest, Pack
from envgen.paths import bundled
from envgen.sandbox import open_sandbox
from envgen.retrieval.search import SearchBackend, SearchResult, SearchTool, SearchUnavailable, get_backend, register_backend

try:
    from .fake_llm import FakeLLM, Reply
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from fake_llm import FakeLLM, Reply

# ----------------------------------------------------------------------------- static checks


def test_solution_check_allows_tools_and_logic_only():
    ok = textwrap.dedent('''
        LIMIT = 3
        def pick(items):
            return sorted(items, key=lambda h: (h["price"], h["name"]))[:LIMIT]
        def solve():
            hits = search_hotels("Lisbon", max_price=100)
            names = [h["name"].upper() for h in pick(hits)]
            try:
                get_hotel(hotel_id=99)
            except ToolError:
                pass
            return ", ".join(names)
        ''')
    assert codecheck.check_solution(ok, ["search_hotels", "get_hotel"]) == []
    bad = {
        "import sqlite3\ndef solve():\n    return 1": "may not import",
        "def solve():\n    return open('state/db.sqlite').read()": "open() is neither a tool",
        "def solve():\n    return search.__globals__": "__globals__ is not allowed",
        "def solve():\n    return eval('1')": "eval is not allowed",
        "def solve():\n    return fetch('x')": "fetch() is neither a tool",
        "def solve():\n    return (lambda: 1)()": "call a tool, a builtin or a defined function by name",
        "x = search('a')\ndef solve():\n    return x": "top level may hold only function definitions",
        "def solve(city):\n    return city": "solve() must take no arguments",
        "def main():\n    return 1": "defines no top-level function solve()",
        "def solve(:\n": "does not parse",
    }
    for code, problem in bad.items():
        problems = codecheck.check_solution(code, ["search"])
        assert any(problem in p for p in problems), (code, problems)


def test_verification_and_tools_checks():
    assert codecheck.check_verification("import json\ndef verify(answer, calls, ctx):\n    return True") == []
    assert "verify() may take only" in codecheck.check_verification("def verify(answer, db):\n    return 1")[0]
    assert "import of 'os'" in codecheck.check_verification("import os\ndef verify(answer):\n    return 1")[0]
    tools = 'import sqlite3\n\ndef find(city: str) -> list:\n    """Find.\n\n    Args:\n        city: c\n    """\n    return []\n'
    assert codecheck.check_tools_source(tools) == []
    problems = codecheck.check_tools_source("import subprocess, datetime\ndef a():\n    return datetime.now()\n")
    assert any("import of 'subprocess'" in p for p in problems)
    assert any("datetime.now is non-deterministic" in p for p in problems)
    assert any("tool a (line 2) has no docstring" in p for p in problems)
    # raising difficulty may add tools and imports, never change existing ones
    grown = tools.replace("import sqlite3", "import sqlite3, json") + "\ndef more() -> int:\n    return 1\n"
    assert codecheck.changed_definitions(tools, grown) == []
    assert codecheck.changed_definitions(tools, tools.replace("return []", "return [1]")) == ["def find"]


# ----------------------------------------------------------------------------- the solution harness


TOOLS = '''
import sqlite3


def search(city: str, limit: int = 10) -> list:
    """Search.

    Args:
        city: the city
        limit: most results
    """
    con = sqlite3.connect("state/db.sqlite")
    rows = con.execute("SELECT name FROM t WHERE city = ? LIMIT ?", (city, limit)).fetchall()
    con.close()
    if not rows:
        raise ValueError(f"unknown city {city}")
    return [r[0] for r in rows]


def blob(n: int) -> str:
    """Long output.

    Args:
        n: characters
    """
    return "x" * n
'''


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    (root / "env" / "state").mkdir(parents=True)
    harness = (bundled("envs") / "workspace" / "harness.py").read_text()
    (root / "env" / "tools.py").write_text(TOOLS + harness)
    con = sqlite3.connect(root / "env" / "state" / "db.sqlite")
    con.execute("CREATE TABLE t (name TEXT, city TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [("A", "Lisbon"), ("B", "Lisbon"), ("C", "Porto")])
    con.commit()
    con.close()
    pack = Pack(Manifest(name="probe", family="test", tools=[], limits=Limits(output_limit=1 << 20)), [], root=root)
    with open_sandbox(pack, "local") as sbx:
        sbx.reset()
        yield sbx


def solve(sbx, code: str, limit: int = 16384) -> dict:
    res = sbx.call("envgen_solve", {"code": textwrap.dedent(code), "tools": ["search", "blob"], "output_limit": limit})
    assert res.ok, res.content
    return json.loads(res.content)


def test_harness_records_tool_calls_as_the_reference(probe):
    assert "envgen_solve" in [t["function"]["name"] for t in probe.tools]
    out = solve(probe, '''
        def solve():
            names = search("Lisbon", limit=5)
            try:
                search(city="Nowhere")
            except ToolError as e:
                pass
            return len(names)
        ''')
    assert out == {"ok": True, "answer": "2", "calls": [
        {"tool": "search", "args": {"city": "Lisbon", "limit": 5}, "ok": True},
        {"tool": "search", "args": {"city": "Nowhere"}, "ok": False}]}


def test_harness_refuses_direct_access_outside_tool_frames(probe):
    """Code that got past the static check still cannot reach files, the database or processes."""
    out = solve(probe, '''
        def solve():
            return search.__globals__["sqlite3"].connect("state/db.sqlite")
        ''')
    assert out["ok"] is False and out["blocked"] == "sqlite3.connect" and "PermissionError" in out["error"]
    out = solve(probe, '''
        def solve():
            return search.__globals__["__builtins__"]["open"]("state/db.sqlite").read()
        ''')
    assert out["blocked"] == "open"
    out = solve(probe, 'def solve():\n    return open("state/db.sqlite")\n')
    assert out["ok"] is False and "NameError" in out["error"]  # not even in scope
    # the guard is off again: the tools themselves work afterwards
    assert probe.call("search", {"city": "Porto"}).content == '["C"]'


def test_harness_holds_solutions_to_what_an_agent_would_see(probe):
    out = solve(probe, 'def solve():\n    return blob(n=500)\n', limit=300)
    assert out["ok"] is False and "more than the 300 an agent sees" in out["error"]
    out = solve(probe, 'def solve():\n    search("Lisbon")\n')
    assert out["ok"] is False and "returned nothing" in out["error"]
    out = solve(probe, 'def solve():\n    return 1 / 0\n')
    assert out["error"] == "ZeroDivisionError: division by zero (solution line 2)"


# ----------------------------------------------------------------------------- agent roles


def test_every_role_loads_with_its_tools():
    general = ["difficulty-raiser", "env-builder", "reviewer", "task-proposer", "tool-writer"]
    assert set(general) <= set(list_specs())
    for name in list_specs():  # every role file shipped (other families' too) has a valid header
        assert load_spec(name).name == name
    builder = load_spec("env-builder")
    assert builder.tools == ["bash", "read_file", "write_file", "list_files", "search"]
    assert builder.budgets.max_turns == 40 and "env/state/db.sqlite" in builder.instructions
    assert "submit_task" in load_spec("difficulty-raiser").tools and load_spec("reviewer").tools == ["submit_review"]


def test_role_errors_name_the_file_and_field(tmp_path):
    with pytest.raises(EnvgenError) as e:
        load_spec("planner")
    assert str(e.value) == f"unknown agent role 'planner'; known roles: {', '.join(list_specs())}"
    assert "difficulty-raiser, env-builder" in str(e.value)
    with pytest.raises(EnvgenError, match=r"x.md: header: budgets.max_turns: Input should be greater"):
        parse_spec("---\nname: x\ndescription: d\nbudgets: {max_turns: 0}\n---\nbody", tmp_path / "x.md")
    with pytest.raises(EnvgenError, match=r"x.md: header: colour: unknown field"):
        parse_spec("---\nname: x\ndescription: d\ncolour: red\n---\nbody", tmp_path / "x.md")
    with pytest.raises(EnvgenError, match=r"header: description: missing required field"):
        parse_spec("---\nname: x\n---\nbody")
    with pytest.raises(EnvgenError, match="missing YAML header"):
        parse_spec("just text")
    (tmp_path / "a.md").write_text("---\nname: b\ndescription: d\n---\nhi\n")
    with pytest.raises(EnvgenError, match="does not match the file name 'a'"):
        load_spec("a", tmp_path)


# ----------------------------------------------------------------------------- search


def test_search_backends():
    tool = SearchTool(get_backend("none"))
    with pytest.raises(SearchUnavailable, match="web search is off"):
        tool("hotels in Lisbon")
    if importlib.util.find_spec("ddgs") is None:
        with pytest.raises(SearchUnavailable, match=r"needs the 'search' extra: pip install 'envgen\[search\]'"):
            get_backend("web").search("x")

    class Fixed(SearchBackend):
        name = "fixed"

        def search(self, query, max_results=5):
            return [SearchResult(f"{query} {i}", f"https://example.org/{i}", "...") for i in range(max_results)]

    register_backend("fixed", Fixed)
    tool = SearchTool(get_backend("fixed"), max_results=3)
    assert [r["url"] for r in tool("q", max_results=10)] == [f"https://example.org/{i}" for i in range(3)]
    tool("q", max_results=1)
    assert tool.seen == [f"https://example.org/{i}" for i in range(3)]
    fn = tool.as_function()
    assert fn.__name__ == "search" and "Args:" in fn.__doc__


# ----------------------------------------------------------------------------- conversational submissions

USER = {"goal": "Cancel order O-1002.", "facts": [{"name": "order_id", "value": "O-1002", "ask": "order (id|number)"}],
        "stop": ["is cancelled"]}


def test_conversation_spec_names_each_invalid_field():
    from envgen.families.general.pipeline import conversation_spec

    ok = conversation_spec("Please cancel my order.", USER, [{"after": 0, "content": "Your order number?"}],
                           [{"kind": "said", "args": {"facts": [54.2]}}])
    assert ok.problems == [] and ok.user.facts[0].value == "O-1002" and ok.parts[0]["kind"] == "said"
    assert conversation_spec("Please cancel my order.", None, None, None).problems == []

    def problems(prompt="Please cancel my order.", user=None, messages=None, parts=None):
        out = conversation_spec(prompt, user, messages, parts)
        return out.reason, out.problems

    assert problems("Cancel my order O-1002.", USER) == ("conversation", [
        "the prompt gives away the user's fact 'order_id' ('O-1002'); the user tells it only when asked, so leave it "
        "out of the opening message"])
    assert problems(user={**USER, "stop": []})[1][0].startswith("user: nothing ends the conversation")
    assert problems(user={"goal": "", "facts": [{"name": "x", "value": "1", "ask": "("}], "stop": ["ok"], "mood": 1})[1] \
        == ["user.goal: String should have at least 1 character",
            "user.facts[0].ask: '(' is not a valid regular expression (missing ), unterminated subpattern at position 0)",
            "user.mood: Extra inputs are not permitted"]
    assert problems(messages=[{"after": 0, "content": "hi"}])[1][0].startswith("messages are what the agent says")
    assert problems(parts=[{"kind": "program", "args": {}}]) == ("parts", [
        "parts[0].kind: 'program' is not one of said, no_write, state, rubric (your verification is the program part)"])
    assert problems(parts=[{"kind": "rubric", "args": {"criteria": [{"id": "c", "text": "t"}]}}])[1][0].startswith(
        "parts[0].args: a rubric part needs criteria")
    assert problems(parts=[{"kind": "no_write", "args": {}}, {"kind": "said", "args": {"facts": [1]}, "weight": -1}]) \
        == ("parts", ["parts[0].args.db: a no_write verifier needs db (a database path under env/) or dbs (a list of "
                      "them), or json / jsons (JSON state files under env/)"])
    assert problems(parts=[{"kind": "said", "args": {"facts": [1]}, "weight": -1}]) == (
        "parts", ["parts[0].weight: must be a positive number, got -1"])


def test_conversation_must_end_with_the_final_answer_and_not_before():
    from envgen.families.general.pipeline import conversation_problems
    from envgen.pack import Task

    task = Task(id="t", prompt=[{"role": "user", "content": "Please cancel my order."}], user=USER, difficulty=0,
                verifier={"kind": "program"}, reference={"answer": "Order O-1002 is cancelled."})

    def said(*texts):
        return [{"role": "assistant", "content": t, "turn": i} for i, t in enumerate(texts, 1)]

    assert conversation_problems(task, said("Your order number?", "Order O-1002 is cancelled.")) == []
    [early] = conversation_problems(task, said("It is cancelled? Your order number?", "Order O-1002 is cancelled."))
    assert early.startswith("the user ended the conversation after your message 1 ('It is cancelled? Your order")
    [never] = conversation_problems(task, said("Your order number?", "Done."))
    assert never.startswith("the user did not end the conversation after your final answer ('Done.'; it replied ")


# ----------------------------------------------------------------------------- the LLM-pipeline runner


def _pipeline(tmp_path, llm, run_id="test/run") -> LLMPipeline:
    return LLMPipeline(llm=llm, store_url=f"sqlite:///{tmp_path / 'state.sqlite'}", run_id=run_id,
                       roles=("reviewer",), agents_dir=None, work=tmp_path / "work", progress=None)


def _configs(url: str) -> list[LLMConfig]:
    # retries: the fake server's listen backlog is small and many agents connect at once
    return [LLMConfig(name=n, base_url=url, model=f"fake-{n}", api_key="sk-test", timeout=10, max_retries=5,
                      backoff_base=0.01, backoff_max=0.05) for n in ("a", "b")]


def _together(n: int, fn) -> list:
    """``fn(i)`` on ``n`` threads released at once; their results (a thread's exception fails the test)."""
    barrier, out, errors = threading.Barrier(n), [None] * n, []

    def run(i):
        try:
            barrier.wait()
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return out


def test_pipeline_agents_on_threads_share_clients_and_sum_usage(tmp_path):
    """Stages may run on worker threads: one client per config, and usage that adds up exactly."""
    with FakeLLM(lambda body: Reply("ok")) as fake:
        cfgs = _configs(fake.url)
        p = _pipeline(tmp_path, cfgs)
        p.store.open_run(p.run_id, "test", {})
        clients = _together(32, lambda i: p.client(cfgs[i % 2]))
        assert {id(c) for c in clients[0::2]} == {id(clients[0])} and {id(c) for c in clients[1::2]} == {id(clients[1])}
        assert clients[0] is not clients[1] and p.models == {"fake-a", "fake-b"}

        def stage(i):
            agent = p.agent("reviewer", f"q{i:04d}", i, Tools(), suffix="-x")
            assert agent.send("Say ok.").answer == "ok"
            p.finish_agent(agent, f"q{i:04d}", "reviewer")
            return agent

        agents = _together(16, stage)
    assert {id(a.llm) for a in agents} == {id(clients[0]), id(clients[1])}
    expected = Usage()
    for a in agents:
        expected.add(a.usage)
    assert expected.calls == 16 and p.usage == expected
    runs = Store(p.store.url).agent_runs("test/run")
    assert sorted(r.stage for r in runs) == [f"q{i:04d}" for i in range(16)]
    assert (p.transcripts / "q0007--reviewer-x.jsonl").is_file()
    # salted per stage: the same request in another stage is paid for, not replayed from the store's cache
    assert sorted(a.salt for a in agents) == [f"test/run|q{i:04d}|reviewer-x" for i in range(16)]

    # the total is a read-modify-write of every field: without the lock, switching threads often loses additions
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _together(8, lambda i: [p.add_usage(Usage(calls=1, prompt_tokens=3, cost=0.25)) for _ in range(3000)])
    finally:
        sys.setswitchinterval(old)
    assert (p.usage.calls, p.usage.prompt_tokens) == (expected.calls + 24000, expected.prompt_tokens + 72000)
    assert p.usage.cost == pytest.approx(expected.cost + 6000)


def test_pipeline_stages_resume(tmp_path):
    """A done stage is skipped, a failed one is marked and run again on the rerun, its old checks forgotten."""
    llm = LLMConfig(name="a", base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-test")
    p = _pipeline(tmp_path, llm)
    p.store.open_run(p.run_id, "test", {})
    ran: list[str] = []

    def body(key, fail=None):
        ran.append(key)
        p.store.add_result(p.run_id, key, "check", fail is None)
        if fail is not None:
            raise fail
        p.store.finish_stage(p.run_id, key, {"ok": True})

    kw = {"error": SynthesisError, "kept": "finished stages"}
    assert p.run_stage("one", body, "one", stopped="stage one stopped", **kw) is True
    assert p.run_stage("one", body, "one", stopped="stage one stopped", **kw) is False
    with pytest.raises(SynthesisError, match=r"^stage two stopped: model down\. Rerun the same command to resume; "
                                             r"finished stages are kept in sqlite:///"):
        p.run_stage("two", body, "two", LLMError("model down"), stopped="stage two stopped", **kw)
    with pytest.raises(KeyError):  # a bug is not dressed up as a resumable stop
        p.run_stage("three", body, "three", KeyError("bug"), stopped="stage three stopped", **kw)
    assert ran == ["one", "two", "three"]
    store = Store(p.store.url)
    two = store.stage(p.run_id, "two")
    assert (two.status, two.error, two.attempts) == ("failed", "model down", 1)
    assert [(e.stage, e.kind, e.message) for e in store.errors(p.run_id)] == [("two", "LLMError", "model down")]
    with store.session() as s:
        assert s.get(Run, p.run_id).status == "failed"

    # the rerun: a fresh process on the same store and run id
    again = _pipeline(tmp_path, llm)
    ran.clear()
    for key in ("one", "two", "three"):
        again.run_stage(key, body, key, stopped=f"stage {key} stopped", **kw)
    assert ran == ["two", "three"]
    two = store.stage(p.run_id, "two")
    assert (two.status, two.attempts, two.result) == ("done", 2, {"ok": True})
    assert [(r.stage, r.passed) for r in store.results(p.run_id) if r.stage == "two"] == [("two", True)]
