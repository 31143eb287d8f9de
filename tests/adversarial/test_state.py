"""Collateral writes (issue 12, class 8), as an agent would make them: through ``gymnasium.make``.

Each attack is the task's own reference (which scores 1) plus writes the task never asked for, made
with the pack's real tools on a library-catalog pack built by the real offline generator: renewing
another member's loan, charging a fine (returning someone else's overdue book), settling someone
else's fine, lending an extra book, and writing during a lookup. Every attack's tool calls succeed,
so the write really happened; each must score 0, and the verifier must name the row it did not expect.

Decided: the verifier judges the net end state. A write that is undone before the final answer (a
checkout cancelled at the desk) leaves the database as the task needs it and scores 1, like extra reads.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.episodes.actions import render_action
from envgen.build.offline import build
from envgen.episodes.gym import ENV_ID
from envgen.pack import Pack, load

TODAY = "2025-03-14"
SUBMIT = "submit_result"


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Pack:
    out = tmp_path_factory.mktemp("adversarial-state") / "lib"
    report = build("general", "library-catalog", out, tasks=18, seed=0, workers=2)
    assert report.kept == 18, report.rejections
    return load(out)


@pytest.fixture(scope="module")
def env(lib):
    e = gymnasium.make(ENV_ID, pack=str(lib.root), sandbox="local")
    yield e
    e.close()


def pristine(pack: Pack) -> sqlite3.Connection:
    con = sqlite3.connect(f"file:{pack.env_dir / 'state' / 'library.db'}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    return con


def task_at(pack: Pack, level: int, nth: int = 0):
    return [t for t in pack.tasks if t.meta["level"] == level][nth]


def play(env, task, extra: list[tuple[str, dict]]) -> tuple[float, dict]:
    """Reset to ``task``, make its reference calls with ``extra`` just before the final submit_result (or at
    the end), one call per turn, then give the reference answer. Every call must succeed."""
    env.reset(options={"task_id": task.id})
    calls = [(c.tool, dict(c.args)) for c in task.reference.calls]
    at = max((i for i, (tool, _) in enumerate(calls) if tool == SUBMIT), default=len(calls))
    calls[at:at] = extra
    for tool, args in calls:
        obs, reward, terminated, truncated, info = env.step(render_action("", [(tool, args)]))
        assert not (terminated or truncated)
        assert info["tool_errors"] == 0 and info["invalid_actions"] == 0, obs
    _, reward, terminated, _, info = env.step(render_action(task.reference.answer))
    assert terminated
    return reward, info


def differences(info: dict) -> str:
    return json.dumps(info["reward_details"].get("changes", {}).get("differences", []))


def others_renewable_loan(pack: Pack, member: str) -> str:
    row = pristine(pack).execute(
        "SELECT id FROM loans WHERE member_id != ? AND returned_on IS NULL AND due >= ? AND renewals < 2 ORDER BY id "
        "LIMIT 1", (member, TODAY)).fetchone()
    return row["id"]


def test_reference_scores_one(env, lib):
    for level in range(1, 7):
        task = task_at(lib, level)
        reward, info = play(env, task, [])
        assert reward == 1.0, info["reward_details"]
        assert info["reward_details"]["changes"]["ok"] is True


def test_renewing_another_members_loan_scores_zero(env, lib):
    for level in (2, 3):
        task = task_at(lib, level)
        loan = others_renewable_loan(lib, task.verifier.args["params"]["member"])
        reward, info = play(env, task, [("renew_loan", {"loan_id": loan})])
        assert reward == 0.0
        assert f'loans id=\\"{loan}\\": changed' in differences(info), differences(info)


def test_charging_a_fine_by_returning_someone_elses_overdue_book_scores_zero(env, lib):
    task = task_at(lib, 4)
    member = task.verifier.args["params"]["member"]
    late = pristine(lib).execute("SELECT member_id, copy_id FROM loans WHERE member_id != ? AND returned_on IS NULL "
                                 "AND due < ? ORDER BY id LIMIT 1", (member, TODAY)).fetchone()
    reward, info = play(env, task, [("return_copy", {"copy_id": late["copy_id"]})])
    assert reward == 0.0
    assert f'members id=\\"{late["member_id"]}\\": changed (fines=' in differences(info), differences(info)


def test_settling_someone_elses_fine_scores_zero(env, lib):
    task = task_at(lib, 5)
    member = task.verifier.args["params"]["member"]
    other = pristine(lib).execute("SELECT id FROM members WHERE id != ? AND fines > 0 ORDER BY id LIMIT 1",
                                  (member,)).fetchone()["id"]
    reward, info = play(env, task, [("pay_fines", {"member_id": other, "amount": 1})])
    assert reward == 0.0
    assert f'members id=\\"{other}\\": changed' in differences(info), differences(info)


def _free_copy(pack: Pack, avoid_book: str | None = None) -> str:
    return pristine(pack).execute("SELECT id FROM copies WHERE status = 'available' AND book_id != ? ORDER BY id "
                                  "LIMIT 1", (avoid_book or "",)).fetchone()["id"]


def _can_borrow_after(pack: Pack, member: str, more: int) -> bool:
    con = pristine(pack)
    m = con.execute("SELECT tier, fines FROM members WHERE id = ?", (member,)).fetchone()
    loans = con.execute("SELECT due FROM loans WHERE member_id = ? AND returned_on IS NULL", (member,)).fetchall()
    limit = 3 if m["tier"] == "standard" else 6
    return m["fines"] == 0 and all(r["due"] >= TODAY for r in loans) and len(loans) + more < limit


def test_an_extra_loan_scores_zero(env, lib):
    """The member borrows one more book than asked (the same member, so it looks like service)."""
    task = next(t for t in lib.tasks if t.meta["level"] == 4
                and _can_borrow_after(lib, t.verifier.args["params"]["member"], 1))
    params = task.verifier.args["params"]
    copy = _free_copy(lib, params["book"])
    reward, info = play(env, task, [("checkout_copy", {"member_id": params["member"], "copy_id": copy})])
    assert reward == 0.0
    assert f'copies id=\\"{copy}\\": changed (status=\\"available\\" -> status=\\"on loan\\")' in differences(info)


def test_a_write_during_a_lookup_scores_zero(env, lib):
    task = task_at(lib, 1)
    loan = others_renewable_loan(lib, "")
    reward, info = play(env, task, [("renew_loan", {"loan_id": loan})])
    assert reward == 0.0 and "loans" in differences(info)


def test_a_write_undone_before_the_answer_and_extra_reads_still_score_one(env, lib):
    task = next(t for t in lib.tasks if t.meta["level"] == 2
                and _can_borrow_after(lib, t.verifier.args["params"]["member"], 0))
    member = task.verifier.args["params"]["member"]
    copy = _free_copy(lib)
    loan_id = json.loads(_single_call(env, task, "checkout_copy", {"member_id": member, "copy_id": copy}))["loan_id"]
    extra = [("get_member", {"member_id": member}), ("checkout_copy", {"member_id": member, "copy_id": copy}),
             ("cancel_checkout", {"loan_id": loan_id}), ("search_books", {"title": "Garden"})]
    reward, info = play(env, task, extra)
    assert reward == 1.0, info["reward_details"]


def _single_call(env, task, tool: str, args: dict) -> str:
    """What one call returns at the start of an episode of ``task`` (to learn the id a tool will assign)."""
    env.reset(options={"task_id": task.id})
    *_, info = env.step(render_action("", [(tool, args)]))
    assert info["tool_errors"] == 0
    return info["messages"][-1]["content"]


def test_the_gate_rejects_a_verifier_that_misses_collateral_writes(lib, tmp_path):
    """Packs built before whole-database checks: the collateral probe catches their verifiers (validate)."""
    from envgen.build.offline import validate_pack
    from envgen.pack import save

    old = []
    for t in lib.tasks:
        t = t.model_copy(deep=True)
        t.verifier.args.pop("changes")
        old.append(t)
    pack = save(Pack(lib.manifest.model_copy(deep=True), old), tmp_path / "old", env_from=lib.env_dir,
                hidden_from=lib.hidden_dir)
    # the verifier of a pack built before this change: task checks only
    (pack.hidden_dir / "verify.py").write_text(Path(lib.hidden_dir / "verify.py").read_text())
    results = {r.task_id: r for r in validate_pack(pack, workers=2)}
    failed = {i: r.reason for i, r in results.items() if not r.passed}
    assert all(r.startswith("collateral scored 1, expected 0; the reference plus ") for r in failed.values())
    assert len(failed) >= len(pack.tasks) * 2 // 3
    # lookups must not write at all; a task that passed got a write its own checks see (e.g. a second loan)
    assert {t.id for t in pack.tasks if t.meta["level"] == 1} <= set(failed)
    assert all(r.probes["collateral"] == 0.0 for r in results.values() if r.passed)


@pytest.mark.docker
def test_collateral_writes_score_zero_in_docker(lib, tmp_path):
    from envgen.sandbox.images import build_pack_image, stderr_log
    from envgen.pack import save

    pack = build_pack_image(save(Pack(lib.manifest.model_copy(deep=True), lib.tasks), tmp_path / "lib",
                                 env_from=lib.env_dir, hidden_from=lib.hidden_dir), log=stderr_log)
    e = gymnasium.make(ENV_ID, pack=str(pack.root), sandbox="docker")
    try:
        task = task_at(pack, 2)
        assert play(e, task, [])[0] == 1.0
        loan = others_renewable_loan(pack, task.verifier.args["params"]["member"])
        reward, info = play(e, task, [("renew_loan", {"loan_id": loan})])
        assert reward == 0.0 and f'loans id=\\"{loan}\\": changed' in differences(info)
        borrow = task_at(pack, 5)
        other = pristine(pack).execute("SELECT id FROM members WHERE id != ? AND fines > 0 ORDER BY id LIMIT 1",
                                       (borrow.verifier.args["params"]["member"],)).fetchone()["id"]
        assert play(e, borrow, [("pay_fines", {"member_id": other, "amount": 1})])[0] == 0.0
    finally:
        e.close()
