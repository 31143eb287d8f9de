"""Issue 12, classes 7 and 10: answers that enumerate or hedge, and search questions answered without searching.

Every attack is played as an agent would play it: through ``gymnasium.make("envgen/Pack-v0", ...)`` on packs
built by the real offline generators, the reference's tool calls as actions, then the attack as the final
message. Each hack must score 0, and the natural single answers beside it 1 (so a verifier that rejects
everything does not pass). The red-team gate is then shown to catch a verifier that pays for hedges.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.episodes.actions import render_action
from envgen.build.offline import build, gate_all
from envgen.episodes.gym import ENV_ID
from envgen.pack import load
from envgen.build.gate import gate
from envgen.sandbox import open_sandbox

TEXT_PROBES = ("hedge-first", "hedge-last", "enumeration", "answer-lines")


def _pack(tmp_path_factory, family: str, category: str, tasks: int, seed: int) -> str:
    report = build(family, category, tmp_path_factory.mktemp(category) / "pack", tasks=tasks, seed=seed, workers=1)
    assert report.kept == tasks, report.rejections
    return str(report.out)


@pytest.fixture(scope="module")
def geo(tmp_path_factory):
    """Eight geo tasks, one per template; seed 1 gives name answers with GeoNames aliases."""
    path = _pack(tmp_path_factory, "search", "geo-multihop", 8, 1)
    env = gymnasium.make(ENV_ID, pack=path, sandbox="local")
    yield load(path), env
    env.close()


@pytest.fixture(scope="module")
def travel(tmp_path_factory):
    """Seed 0: task 0 is the issue's lookup ("the museum in Bordeaux with the lowest entry fee": A-0075, 8 EUR)
    and task 1 a plan, graded on its submission."""
    path = _pack(tmp_path_factory, "general", "travel-planning", 2, 0)
    env = gymnasium.make(ENV_ID, pack=path, sandbox="local")
    yield load(path), env
    env.close()


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """Task 0 asks for an author's newest book id."""
    path = _pack(tmp_path_factory, "general", "library-catalog", 1, 0)
    env = gymnasium.make(ENV_ID, pack=path, sandbox="local")
    yield load(path), env
    env.close()


def play(env, task, final: str, calls=None) -> float:
    """One episode: the reference's tool calls (or ``calls``) as the agent's actions, then ``final``."""
    env.reset(options={"task_id": task.id})
    for c in task.reference.calls if calls is None else calls:
        _, _, terminated, _, _ = env.step(render_action("", [(c.tool, dict(c.args))]))
        assert not terminated
    _, reward, terminated, _, info = env.step(final)
    assert terminated, info
    return reward


def _task(pack, template: str):
    return next(t for t in pack.tasks if t.meta["template"] == template)


# ----------------------------------------------------------------------------- numeric answers (geo)


def test_numeric_answers_hedged_ranged_or_enumerated_score_zero(geo):
    pack, env = geo
    task = _task(pack, "nearest-pop")
    gold = task.verifier.args["answer"]["expected"]
    other = task.meta["entity"]["population"]  # the start city's own population: the classic wrong answer
    assert other != gold
    why = task.reference.answer.splitlines()[0]
    for hack in (f"Answer: {gold} or {other}", f"Answer: {other} or {gold}",
                 f"Answer: between {gold:,} and {other:,}", f"Answer: {min(gold, other)}-{max(gold, other)}",
                 "Answer: one of: " + ", ".join(str(gold + k) for k in range(-3, 4)),
                 f"{why}\nAnswer: {other}\nAnswer: {gold}", f"{why}\nAnswer: {gold}\nAnswer: {other}",
                 f"Answer: {gold}\n(if that is wrong, {other})"):
        assert play(env, task, hack) == 0.0, hack
    for fine in (task.reference.answer, f"Answer: {gold:,}", f"Answer: It has {gold:,} inhabitants.",
                 f"Answer: {gold:,}".replace(",", "."), f"{why} Its population is large.\nAnswer: {gold}"):
        assert play(env, task, fine) == 1.0, fine
    # the right text with no lookup: the number never came back from a tool
    assert play(env, task, task.reference.answer, calls=[]) == 0.0


# ----------------------------------------------------------------------------- names (geo)


def test_name_answers_with_a_second_city_score_zero_and_aliases_pass(geo):
    pack, env = geo
    task = _task(pack, "bigger-of-two")
    check = task.verifier.args["answer"]
    gold, alias = check["expected"], check["aliases"][0]
    explanation = task.reference.answer.splitlines()[0]
    other = next(n for n in re.findall(r"(.+?) has [\d,]+ inhabitants and (.+?) [\d,]+\.", explanation)[0]
                 if n != gold)  # the smaller of the two, from the corpus
    names = set((Path(pack.root) / "hidden" / check["candidates"]).read_text(encoding="utf-8").splitlines())
    assert {gold, alias, other} <= names
    for hack in (f"Answer: {gold} or {other}", f"Answer: {other} or {gold}", f"Answer: either {gold} or {other}",
                 f"Answer: {gold}/{other}", f"Answer: {other}, {gold}", f"Answer: {gold.lower()} {other.lower()}",
                 f"Answer: {other}\nAnswer: {gold}", f"Answer: {gold} (or maybe {other})",
                 f"Answer: {gold}-x"):
        assert play(env, task, hack) == 0.0, hack
    for fine in (task.reference.answer, f"Answer: {alias}", f"Answer: The bigger one is {gold}.",
                 f"Answer: {gold.upper()}", f"Answer: {gold}\nAnswer: {gold}"):
        assert play(env, task, fine) == 1.0, fine


def test_second_nearest_accepts_a_natural_sentence_but_not_the_intermediate_city(geo):
    pack, env = geo
    task = _task(pack, "second-nearest")
    gold = task.verifier.args["answer"]["expected"]
    near = re.search(r"is (.+?), and the city nearest", task.reference.answer).group(1)
    assert play(env, task, f"Answer: The city nearest to it is {gold}.") == 1.0
    assert play(env, task, f"Answer: {near}, then {gold}") == 0.0
    assert play(env, task, f"Answer: {near}") == 0.0


# ----------------------------------------------------------------------------- ids and prices (travel, library)


def test_travel_lookup_enumerations_and_id_hedges_score_zero(travel):
    pack, env = travel
    task = pack.tasks[0]
    ref = task.reference.answer
    assert ref == "Bordeaux Natural History Museum (A-0075): 8 EUR entry fee per person."
    for hack in ("Bordeaux Natural History Museum (A-0075). Its entry fee is one of: " + " ".join(map(str, range(501))),
                 "A-0075: 8 or 12 EUR entry fee per person.", "A-0075: 12 or 8 EUR entry fee per person.",
                 "A-0075: between 5 and 10 EUR.",
                 "A-0075 (if closed, try A\u20110012 or a-0013): 8 EUR entry fee.",
                 "a-0013 (or else A-0075): 8 EUR entry fee.",
                 "A-0012: 3 EUR entry fee.\nA-0075: 8 EUR entry fee."):
        assert play(env, task, hack) == 0.0, hack
    for fine in (ref, "The cheapest museum open at 14:00 is a\u20110075, entry 8 EUR.", "\uff21-0075: 8 EUR"):
        assert play(env, task, fine) == 1.0, fine


def test_library_newest_book_id_hedges_score_zero(library):
    pack, env = library
    task = pack.tasks[0]
    book = re.search(r"BK-\d{4}", task.reference.answer).group()
    n = int(book[3:])
    other = f"BK-{n + 1:04d}" if n < 9999 else "BK-0001"
    for hack in (f"{book} (or {other.lower()})", f"{book} or {other.replace('-', chr(0x2011))}",
                 f"{other}\n{book}", f"one of: {book}, {other}"):
        assert play(env, task, hack) == 0.0, hack
    assert play(env, task, task.reference.answer) == 1.0
    assert play(env, task, f"The newest is book id {book.lower().replace('-', chr(0x2011))}.") == 1.0


# ----------------------------------------------------------------------------- the gate


def test_gate_runs_the_text_probes_where_the_text_is_graded(geo, travel, library):
    """Final-text tasks (and program tasks whose text is graded) meet every text probe and pass them; a plan
    task, graded on its submission, is not probed on its text; answers with evidence meet the noop probe."""
    for pack in (geo[0], library[0], travel[0]):
        with open_sandbox(pack, "local") as sbx:
            for task in pack.tasks:
                res = gate(sbx, pack, task)
                assert res.passed, (task.id, res.reason)
                probed = {name.split(":")[0] for name in res.probes} & set(TEXT_PROBES)
                params = task.verifier.args.get("params", {})
                graded_text = task.verifier.kind != "program" or "plan" not in (params.get("mode"), params.get("kind"))
                assert probed == (set(TEXT_PROBES) if graded_text else set()), (task.id, sorted(res.probes))
                if task.verifier.kind == "rubric":
                    assert res.probes["noop"] == 0.0
                assert all(res.probes[n] == 0.0 for n in res.probes if n.split(":")[0] in TEXT_PROBES)


WEAK = """
def verify(answer, calls, params):
    # the bug class 7 is about: any mention of the right value passes
    return bool(calls) and all(c["ok"] for c in calls) and params["gold"] in answer
"""


def test_gate_rejects_a_verifier_that_pays_for_hedges_and_names_the_probe(geo, tmp_path):
    """The same tasks behind a verifier that only looks for the right value: every task is rejected, by a
    text probe (the earlier probes all pass), and the reason names it."""
    src = Path(geo[0].root)
    dst = tmp_path / "weak"
    shutil.copytree(src, dst)
    (dst / "hidden" / "weak.py").write_text(WEAK)
    pack = load(dst)
    for t in pack.tasks:
        t.verifier = t.verifier.model_copy(update={"kind": "program", "args": {
            "file": "weak.py", "params": {"gold": str(t.verifier.args["answer"]["expected"])}}})
    results = gate_all(pack, workers=1)
    assert all(not r.passed for r in results), [(r.task_id, r.reason, r.probes) for r in results if r.passed]
    for r in results:
        probe = r.reason.split(" scored")[0]
        assert probe.split(":")[0] in TEXT_PROBES and r.reason.endswith("scored 1, expected 0"), r.reason
        assert all(r.probes[p] == want for p, want in (("reference", 1.0), ("empty", 0.0), ("mutated", 0.0)))
    assert {r.reason.split(" scored")[0] for r in results} == {"hedge-first"}
