"""The general-agent pipeline end to end: the real openai client over HTTP against a scripted local model.

The model (tests/general_script.py) builds a hotel/restaurant database, writes two tools, proposes a
level-1 task with a wrong solution it repairs after feedback, raises it to level 2 with a verifier that
accepts anything (the red-team gate catches it, the model fixes it), and reaches level 3 by adding a tool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.llm.client import LLMConfig
from envgen.build.offline import validate_pack
from envgen.errors import EnvgenError
from envgen.pack import load, verify_hash
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout
from envgen.store import Store
from envgen.families.general.pipeline import SynthesisError, stage_count, synthesize

try:
    from .fake_llm import Fail, FakeLLM, Reply
    from .general_script import (
        TOOLS_V1,
        GeneralScript,
        Scenario,
        _assistant_turns,
        _first_user,
        _submissions,
    )
except ImportError:
    from fake_llm import Fail, FakeLLM, Reply
    from general_script import (
        TOOLS_V1,
        GeneralScript,
        Scenario,
        _assistant_turns,
        _first_user,
        _submissions,
    )

CATEGORY = "travel planning"
RUN_ID = "general/travel-planning/seed0"


def llm(fake: FakeLLM, **kw) -> LLMConfig:
    return LLMConfig(**{"name": "scripted", "base_url": fake.url, "model": "fake-model", "api_key": "sk-test",
                        "timeout": 30, "max_retries": 2, "backoff_base": 0.01, "backoff_max": 0.05,
                        "price_input": 0.28, "price_output": 0.42, **kw})


@dataclass
class Build:
    report: object
    pack: Path
    store: str
    work: Path
    bodies: list
    keys: list
    progress: list


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Build:
    """One uninterrupted build, shared by the tests that inspect it."""
    d = tmp_path_factory.mktemp("clean")
    store, ticks = f"sqlite:///{d / 'state.sqlite'}", []
    with FakeLLM(GeneralScript()) as fake:
        report = synthesize(CATEGORY, d / "pack", llm=llm(fake), store_url=store, work_dir=d / "work",
                            max_levels=3, progress=ticks.append)
        assert fake.errors == []
        return Build(report, d / "pack", store, d / "work", [r.body for r in fake.log], [r.key for r in fake.log],
                     ticks)


def test_category_goes_from_empty_to_a_pack_with_three_difficulty_levels(clean):
    rep = clean.report
    pack = load(clean.pack)
    verify_hash(pack)
    assert [t.id for t in pack.tasks] == ["travel-planning-c0-l1", "travel-planning-c0-l2", "travel-planning-c0-l3"]
    assert [t.difficulty for t in pack.tasks] == [1, 3, 4]
    assert rep.difficulty == {"1": 1, "3": 1, "4": 1} and (rep.proposed, rep.details["validated"], rep.kept) == (3, 3, 3)
    assert pack.manifest.tool_names == ["search_hotels", "get_hotel", "search_restaurants"]  # level 3 added one
    assert [t.meta["level"] for t in pack.tasks] == [1, 2, 3]
    # not a conversational category: no policy, no simulated user, one program verifier per task
    assert pack.manifest.instructions is None
    assert all(t.user is None and t.reference.messages is None and t.verifier.kind == "program" for t in pack.tasks)
    assert not any("<policy>" in _first_user(b) for b in clean.bodies)
    l1 = pack.tasks[0].reference
    assert [(c.tool, c.args) for c in l1.calls] == [("search_hotels", {"city": "Lisbon", "max_price": 100})]
    assert l1.answer == "Hotel Tejo"
    assert sorted(p.name for p in (clean.pack / "hidden" / "verify").iterdir()) == [f"{t.id}.py" for t in pack.tasks]
    assert (clean.pack / "env" / "state" / "db.sqlite").is_file() and not (clean.pack / "env" / "build_db.py").exists()
    prov = pack.manifest.provenance
    assert prov.models == ["fake-model"] and prov.sources == ["synthetic"] and prov.generator.startswith("envgen.families.general")
    # the report: tokens and money of every paid call, and one progress tick per stage
    assert rep.details["llm"]["spent"]["calls"] == len(clean.keys) == rep.details["llm"]["session"]["calls"]
    assert rep.details["llm"]["spent"]["cost"] == pytest.approx(rep.details["llm"]["session"]["cost"]) and rep.details["llm"]["spent"]["cost"] > 0
    assert rep.summary()["details"]["llm"]["spent"]["prompt_tokens"] > 0
    assert len(clean.progress) == stage_count(3) == 6
    assert pack.manifest.stats["build"]["kept"] == 3


def test_wrong_solution_is_repaired_after_feedback(clean):
    level1 = [b for b in clean.bodies if "submit_task" in json.dumps(b.get("tools")) and "Write level" not in
              _first_user(b)]
    assert [_submissions(b) for b in level1] == [0, 1]  # two model turns: the wrong submission, the repair
    feedback = [m["content"] for m in level1[1]["messages"] if m["role"] == "tool"][-1]
    assert feedback.startswith("Rejected: your verification scored your own solution 0, not 1 (answer '2'")
    assert clean.report.details["levels"][0]["submissions"] == 2 and clean.report.details["failures_by_reason"]["verify"] == 1


def test_verifier_accepting_anything_is_caught_by_the_red_team(clean):
    level2 = [b for b in clean.bodies if "Write level 2" in _first_user(b) and "submit_review" not in
              json.dumps(b.get("tools"))]
    feedback = [m["content"] for m in level2[1]["messages"] if m["role"] == "tool"][-1]
    assert "red-team gate rejected the task" in feedback and "EMPTY final answer" in feedback
    assert clean.report.details["failures_by_reason"]["redteam:empty"] == 1
    assert "return True" not in (clean.pack / "hidden" / "verify" / "travel-planning-c0-l2.py").read_text()


def test_a_verifier_never_fixed_is_rejected_with_its_reason(tmp_path):
    with FakeLLM(GeneralScript(Scenario(malformed_json=False, wrong_first=False, accept_all="always"))) as fake:
        rep = synthesize(CATEGORY, tmp_path / "pack", llm=llm(fake), store_url=f"sqlite:///{tmp_path / 's.sqlite'}",
                         work_dir=tmp_path / "work", max_levels=3)
    assert (rep.proposed, rep.kept) == (2, 1) and rep.rejected_by_reason == {"redteam:empty": 1}
    assert [lv["status"] for lv in rep.details["levels"]] == ["validated", "rejected", "skipped"]
    assert rep.details["levels"][1]["submissions"] == 5 and rep.details["failures_by_reason"] == {"redteam:empty": 5}
    assert [t.id for t in load(tmp_path / "pack").tasks] == ["travel-planning-c0-l1"]


def test_malformed_tool_call_json_is_recorded_not_fatal(clean):
    store = Store(clean.store)
    builder = next(r for r in store.agent_runs(RUN_ID) if r.role == "env-builder")
    assert (builder.malformed, builder.outcome) == (1, "answered")
    events = [json.loads(line) for line in Path(builder.transcript).read_text().splitlines()]
    bad = next(e for e in events if e["event"] == "tool")
    assert bad["ok"] is False and bad["content"].startswith("Error (bad_arguments)")
    assert bad["arguments"] == '{"query": "Lisbon hotels'


def test_produced_pack_validates_and_runs_through_gymnasium(clean):
    results = validate_pack(clean.pack, workers=2)
    assert [r.passed for r in results] == [True, True, True], [r.reason for r in results]
    env = gymnasium.make("envgen/Pack-v0", pack=str(clean.pack))
    try:
        for task_id in ["travel-planning-c0-l1", "travel-planning-c0-l2", "travel-planning-c0-l3"]:
            t = rollout(env, OraclePolicy(), task_id=task_id)
            assert t.reward == 1.0 and t.terminated, t.reward_details
        assert rollout(env, NullPolicy(), task_id="travel-planning-c0-l3").reward == 0.0
    finally:
        env.close()


def test_rerunning_a_finished_build_calls_no_model(clean, tmp_path):
    with FakeLLM() as fake:  # answers 500 to anything: a request would show
        rep = synthesize(CATEGORY, tmp_path / "again", llm=llm(fake, max_retries=0), store_url=clean.store,
                         work_dir=clean.work, max_levels=3)
        assert fake.log == []
    assert rep.details["llm"]["session"]["calls"] == rep.details["llm"]["session"]["cached_calls"] == 0
    assert load(tmp_path / "again").manifest.version == load(clean.pack).manifest.version


CHILD = """
import json, os
from envgen.llm.client import LLMConfig
from envgen.families.general.pipeline import synthesize
a = json.loads(os.environ["SYNTH_ARGS"])
synthesize(a["category"], a["out"], llm=LLMConfig(**a["llm"]), store_url=a["store"], work_dir=a["work"], max_levels=3)
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_killed_build_resumes_without_repeated_calls_or_lost_tasks(clean, tmp_path, backend, request):
    """SIGKILL the build while the model is answering level 2's repair, then run the same command again
    (the state store a SQLite file, or a PostgreSQL database: tests/postgres.py)."""
    cut = next(i for i, b in enumerate(clean.bodies) if "Write level 2" in _first_user(b) and _submissions(b) == 1)
    hold = cut + 1  # 1-based request number the fake server never answers
    store = f"sqlite:///{tmp_path / 'state.sqlite'}" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    work, out = tmp_path / "work", tmp_path / "pack"
    with FakeLLM(GeneralScript()) as fake:
        fake.hold_at = hold
        cfg = llm(fake).model_dump(mode="json")
        cfg["api_key"] = "sk-test"
        args = {"category": CATEGORY, "out": str(out), "llm": cfg, "store": store, "work": str(work)}
        child = subprocess.Popen([sys.executable, "-c", CHILD], env={**os.environ, "SYNTH_ARGS": json.dumps(args)},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert fake.held.wait(120), child.communicate(timeout=5)[0].decode()[-2000:]
        finally:
            child.kill()
            child.wait()
        fake.release()
        assert not out.exists()
        killed = Store(store)
        assert [s.status for s in killed.stages(RUN_ID)] == ["done", "done", "done", "running"]
        before = fake.log[: hold - 1]
        assert all(r.answered for r in before)

        rep = synthesize(CATEGORY, out, llm=llm(fake), store_url=store, work_dir=work, max_levels=3)
        after = fake.log[hold:]
    assert fake.errors == []
    # the unanswered request is sent again (its answer never arrived); no answered one is
    assert after[0].key == fake.log[hold - 1].key
    assert {r.key for r in before}.isdisjoint(r.key for r in after)
    # together, exactly the calls of the uninterrupted build: nothing repeated, nothing skipped
    assert len(before) + len(after) == len(clean.keys) and {r.key for r in before + after} == set(clean.keys)
    replayed = sum(1 for b in clean.bodies[:cut] if "Write level 2" in _first_user(b))
    assert rep.details["llm"]["session"]["cached_calls"] == replayed >= 1
    assert rep.details["llm"]["spent"]["calls"] == len(clean.keys)  # every paid call counted once over both processes
    # the same tasks as the uninterrupted build, once each
    got, want = load(out), load(clean.pack)
    assert [t.model_dump() for t in got.tasks] == [t.model_dump() for t in want.tasks]
    assert got.manifest.version == want.manifest.version
    cands = Store(store).candidates(RUN_ID)
    assert sorted(c.key for c in cands) == ["c0/l1", "c0/l2", "c0/l3"] and {c.status for c in cands} == {"validated"}
    assert Store(store).stage(RUN_ID, "c0/l2").attempts == 2


def test_llm_outage_stops_the_build_with_a_recorded_error(tmp_path):
    with FakeLLM(lambda body: Fail(500, message="overloaded")) as fake:
        store = f"sqlite:///{tmp_path / 's.sqlite'}"
        with pytest.raises(SynthesisError, match=r"stage database stopped: .*gave up after 2 attempts.*HTTP 500: "
                                                 r"overloaded.*Rerun the same command to resume"):
            synthesize(CATEGORY, tmp_path / "pack", llm=llm(fake, max_retries=1), store_url=store,
                       work_dir=tmp_path / "work")
        assert len(fake.log) == 2
    s = Store(store)
    assert s.stage(RUN_ID, "database").status == "failed"
    [err] = s.errors(RUN_ID)
    assert (err.stage, err.kind) == ("database", "LLMUnavailable") and "HTTP 500" in err.message
    events = [json.loads(x) for x in (tmp_path / "work" / "transcripts" / "database--env-builder.jsonl").read_text()
              .splitlines()]
    assert [e["kind"] for e in events if e["event"] == "error"] == ["http_500", "http_500"]
    assert not (tmp_path / "pack").exists()


def test_bad_inputs_fail_with_one_clear_line(tmp_path):
    cfg = LLMConfig(name="x", base_url="http://127.0.0.1:9/v1", model="m", api_key="k")
    with pytest.raises(EnvgenError, match="category '!!!' has no letters"):
        synthesize("!!!", tmp_path / "p", llm=cfg, store_url=f"sqlite:///{tmp_path / 's'}", work_dir=tmp_path / "w")
    (tmp_path / "notapack").mkdir()
    (tmp_path / "notapack" / "x").write_text("mine")
    with pytest.raises(EnvgenError, match="exists and is not a pack"):
        synthesize(CATEGORY, tmp_path / "notapack", llm=cfg, store_url=f"sqlite:///{tmp_path / 's'}",
                   work_dir=tmp_path / "w")
    with pytest.raises(EnvgenError, match="unknown search backend 'bing'; available: .*none.*web"):
        synthesize(CATEGORY, tmp_path / "p", llm=cfg, store_url=f"sqlite:///{tmp_path / 's'}",
                   work_dir=tmp_path / "w", search="bing")


@pytest.mark.docker
def test_docker_sandbox_builds_the_same_tasks_from_the_same_model_calls(clean, tmp_path):
    """Workspace, probes and the final gate in containers: the model sees byte-identical requests."""
    with FakeLLM(GeneralScript()) as fake:
        rep = synthesize(CATEGORY, tmp_path / "pack", llm=llm(fake), store_url=f"sqlite:///{tmp_path / 's.sqlite'}",
                         work_dir=tmp_path / "work", max_levels=1, sandbox="docker")
        keys = [r.key for r in fake.log]
    assert keys == clean.keys[: len(keys)]
    assert rep.sandbox == "docker" and rep.kept == 1
    assert [t.model_dump() for t in load(tmp_path / "pack").tasks] == [load(clean.pack).tasks[0].model_dump()]


BOOK_TOOL = '''

def book_hotel(hotel_id: int, guest: str) -> dict:
    """Book a room at a hotel for a guest; returns the booking number.

    Args:
        hotel_id: the hotel's id from search_hotels
        guest: the guest's full name
    """
    con = sqlite3.connect("state/db.sqlite")
    try:
        con.execute("CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY, hotel_id INTEGER, guest TEXT)")
        if con.execute("SELECT 1 FROM hotels WHERE id = ?", (hotel_id,)).fetchone() is None:
            raise ValueError(f"no hotel with id {hotel_id}")
        cur = con.execute("INSERT INTO bookings (hotel_id, guest) VALUES (?, ?)", (hotel_id, guest))
        con.commit()
        return {"booking": cur.lastrowid, "hotel_id": hotel_id, "guest": guest}
    finally:
        con.close()
'''
BOOK_PROMPT = "Book the cheapest hotel in Porto for Ana Lima and tell me the booking number."
BOOK_SOLUTION = '''def solve():
    cheapest = min(search_hotels(city="Porto"), key=lambda h: h["price"])
    return "Booked, booking number " + str(book_hotel(hotel_id=cheapest["id"], guest="Ana Lima")["booking"])
'''
BOOK_VERIFY = '''import re
import sqlite3


def verify(answer, ctx):
    con = ctx.db("state/db.sqlite")
    try:
        rows = con.execute("SELECT id, hotel_id FROM bookings WHERE guest = 'Ana Lima'").fetchall()
    except sqlite3.OperationalError:
        return False
    cheapest = con.execute("SELECT id FROM hotels WHERE city = 'Porto' ORDER BY price LIMIT 1").fetchone()[0]
    return len(rows) == 1 and rows[0][1] == cheapest and re.findall(r"\\d+", answer) == [str(rows[0][0])]
'''


class BookingScript(GeneralScript):
    """The same builder, then tools that write (book_hotel, which creates its table on first use) and a task
    whose verification looks only at the guest's own booking."""

    def tool_writer(self, body: dict) -> Reply:
        if _assistant_turns(body) == 0:
            return Reply(calls=[("write_file", {"path": "env/tools.py", "content": TOOLS_V1 + BOOK_TOOL})])
        if _assistant_turns(body) == 1:
            return Reply(calls=[("check_tools", {"examples": [
                {"tool": "search_hotels", "args": {"city": "Porto"}}, {"tool": "get_hotel", "args": {"hotel_id": 4}},
                {"tool": "book_hotel", "args": {"hotel_id": 4, "guest": "Test"}}]})])
        return Reply(content="Three tools pass check_tools.")

    def tasks(self, body: dict, level: int) -> Reply:
        return self._submit(BOOK_PROMPT, BOOK_SOLUTION, BOOK_VERIFY, reasoning="A booking task.")


def test_llm_made_tasks_judge_the_whole_database(tmp_path):
    """The LLM path records each task's expected change set; a write the task's own verification ignores
    (a second booking, for someone else) still scores 0."""
    from envgen.episodes.actions import render_action
    from envgen.episodes.gym import ENV_ID

    with FakeLLM(BookingScript(Scenario(malformed_json=False, wrong_first=False))) as fake:
        rep = synthesize(CATEGORY, tmp_path / "pack", llm=llm(fake), store_url=f"sqlite:///{tmp_path / 's.sqlite'}",
                         work_dir=tmp_path / "work", max_levels=1)
    assert rep.kept == 1, rep.rejections
    assert rep.not_applicable == {"collateral": 1}  # a single task: no other reference to borrow a write from
    [task] = load(tmp_path / "pack").tasks
    changes = task.verifier.args["changes"]
    assert changes["db"] == "state/db.sqlite"
    assert [o["object"] for o in changes["expected"]["schema"]] == ["table bookings"]
    assert changes["expected"]["tables"]["bookings"]["added"] == [{"guest": "Ana Lima", "hotel_id": 4}]

    env = gymnasium.make(ENV_ID, pack=str(tmp_path / "pack"))

    def play(extra: list) -> tuple[float, dict]:
        env.reset(options={"task_id": task.id})
        for c in [*((c.tool, c.args) for c in task.reference.calls), *extra]:
            *_, info = env.step(render_action("", [c]))
            assert info["tool_errors"] == 0
        _, reward, terminated, _, info = env.step(render_action(task.reference.answer))
        assert terminated
        return reward, info["reward_details"]

    try:
        assert play([])[0] == 1.0 and play([("search_hotels", {"city": "Lisbon"})])[0] == 1.0
        reward, details = play([("book_hotel", {"hotel_id": 1, "guest": "Rui Costa"})])
        assert reward == 0.0 and details["changes"]["differences"] == [
            'bookings: row {"guest":"Rui Costa","hotel_id":1} was inserted, the task does not do that']
    finally:
        env.close()
