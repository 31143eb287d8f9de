"""The state store under concurrent writers from many processes, on SQLite and on a real PostgreSQL server.

Every test that takes ``store_url`` runs twice: on a SQLite file and on a fresh database of the session's
PostgreSQL server (tests/postgres.py; started by initdb + pg_ctl, skipped with a reason when PostgreSQL
is not installed, failed under CI=true). The counts asserted are exact: a lost update, a duplicate row or an
IntegrityError escaping from a normal race fails them.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import time
import traceback

import pytest
from sqlalchemy import func, select

from envgen.errors import InputError
from envgen.passcheck.check import check
from envgen.passcheck.ledger import Rollout, RolloutLedger
from envgen.passcheck.rules import Outcome
from envgen.retrieval.pages import SearchCache, SearchCall
from envgen.store import Artifact, CandidateRow, Claim, LLMCall, Result, Run, Stage, Store, shown_url, store_url

from conftest import make_tiny_pack

RUN = "build/concurrent"
PROCS = 6
KEYS = 25
CTX = mp.get_context("fork")  # children inherit the test's imports; engines are per process (envgen.store)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url_(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.sqlite'}"
    return request.getfixturevalue("postgres_url")


def _count(store: Store, table, *where) -> int:
    with store.session() as s:
        return s.scalar(select(func.count()).select_from(table).where(*where))


def _spawn(target, args_of, n: int) -> list:
    """Run ``target(*args_of(i), barrier, queue)`` in ``n`` processes started together; their answers.
    A child's exception comes back as its traceback and fails the test."""
    barrier, queue = CTX.Barrier(n), CTX.Queue()
    procs = [CTX.Process(target=_guard, args=(target, args_of(i), barrier, queue)) for i in range(n)]
    for p in procs:
        p.start()
    answers = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    failed = [a for a in answers if isinstance(a, str)]
    assert not failed, failed[0]
    return answers


def _guard(target, args, barrier, queue) -> None:
    try:
        queue.put(target(*args, barrier))
    except BaseException:
        queue.put(traceback.format_exc())


# ----------------------------------------------------------------------------- many writers, exact counts


def _writer(url: str, wid: int, keys: int, barrier) -> dict:
    store = Store(url)
    ledger = RolloutLedger(url, pack_version="v1", policy="p", seed=0)
    cache = SearchCache(store)
    barrier.wait(60)
    won = {"llm": 0, "rollout": 0}
    order = list(range(keys))
    random.Random(wid).shuffle(order)  # the same keys in different orders: conflicts everywhere
    for i in order:
        store.open_run(RUN, "test", {"by": wid})
        key = f"s{i:03d}"
        store.start_stage(RUN, key)
        store.add_result(RUN, key, "check", True, details={"by": wid})
        store.finish_stage(RUN, key, {"by": wid},
                           candidates=[{"key": f"c{i:03d}", "status": "validated", "data": {"by": wid}},
                                       {"key": f"c{(i + 1) % keys:03d}", "status": "validated", "data": {"by": wid}}],
                           artifacts={f"a{i:03d}": bytes([wid]) * 10})
        won["llm"] += store.put_llm_call(f"sha256:{i}", config="c", model="m", request={"i": i},
                                         response={"by": wid}, usage={"prompt_tokens": 10}, cost=0.5, latency_s=0.1,
                                         run_id=RUN, agent=None)
        won["rollout"] += ledger.record(Outcome(f"t{i}", 0, 1.0, True))
        cache.put(SearchCache.key("web", "open", {"i": i}), "web", "open", {"i": i}, {"by": wid}, None)
    return won


def test_many_processes_writing_the_same_keys_lose_and_double_nothing(store_url_):
    Store(store_url_)  # tables created once here; the children's ensure_tables then finds them
    keys = KEYS if store_url_.startswith("postgresql") else 12  # SQLite: one writer at a time, slow under load
    answers = _spawn(_writer, lambda i: (store_url_, i, keys), PROCS)
    store = Store(store_url_)
    assert _count(store, Run) == 1 and store.stage(RUN, "s000") is not None
    stages = store.stages(RUN)
    assert len(stages) == keys and {s.status for s in stages} == {"done"}
    # every start counted: an attempt lost to a concurrent upsert would show here
    assert [s.attempts for s in stages] == [PROCS] * keys
    assert _count(store, CandidateRow) == keys and _count(store, Artifact) == keys
    assert _count(store, Result) == PROCS * keys  # appended rows: all kept
    assert _count(store, LLMCall) == keys and sum(a["llm"] for a in answers) == keys  # each stored by exactly one
    assert store.llm_spend(RUN) == {"calls": keys, "prompt_tokens": 10 * keys, "completion_tokens": 0,
                                    "reasoning_tokens": 0, "cost": 0.5 * keys}
    assert _count(store, Rollout) == keys and sum(a["rollout"] for a in answers) == keys
    assert _count(store, SearchCall) == keys


def _bumper(url: str, wid: int, barrier) -> int:
    store = Store(url)
    barrier.wait(60)
    for _ in range(40):
        store.start_stage(RUN, "hot")
    return 0


def test_concurrent_attempt_counts_on_one_row_are_not_lost(store_url_):
    """A read-modify-write of ``attempts`` would lose increments here; the upsert's ``attempts + 1`` does not."""
    Store(store_url_).open_run(RUN, "test", {})
    _spawn(_bumper, lambda i: (store_url_, i), PROCS)
    assert Store(store_url_).stage(RUN, "hot").attempts == PROCS * 40


def test_errored_rollout_is_replaced_once_and_a_clean_one_never(store_url_):
    ledger = RolloutLedger(store_url_, pack_version="v1", policy="p", seed=0)
    assert ledger.record(Outcome("t", 0, 0.0, False, error="endpoint down")) is True
    assert ledger.load() == []
    assert ledger.record(Outcome("t", 0, 1.0, True)) is True  # the retry replaces the errored one
    assert ledger.record(Outcome("t", 0, 0.0, False)) is False  # a clean rollout stands
    assert [(o.reward, o.error) for o in ledger.load()] == [(1.0, None)]


# ----------------------------------------------------------------------------- claims


def _claimer(url: str, wid: int, barrier) -> list[str]:
    store = Store(url)
    keys = [f"k{i:02d}" for i in range(KEYS)]
    random.Random(wid).shuffle(keys)
    barrier.wait(60)
    mine = []
    for key in keys:
        if store.claim(RUN, key, f"w{wid}", lease_s=60):
            store.add_result(RUN, key, "worked", True, details={"by": wid})  # the "work": must happen once
            assert store.done(RUN, key, f"w{wid}")
            mine.append(key)
    return mine


def test_claims_under_contention_have_exactly_one_winner_per_key(store_url_):
    Store(store_url_).open_run(RUN, "test", {})
    answers = _spawn(_claimer, lambda i: (store_url_, i), PROCS)
    won = sorted(k for a in answers for k in a)
    assert won == [f"k{i:02d}" for i in range(KEYS)]  # each key once, none missing
    store = Store(store_url_)
    assert sorted(r.stage for r in store.results(RUN)) == won
    assert {(c.status, c.attempts) for c in store.claims(RUN)} == {("done", 1)}
    assert not store.claim(RUN, "k00", "late")  # done stays done


def _taker(url: str, wid: int, barrier) -> bool:
    store = Store(url)
    barrier.wait(60)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if store.claim(RUN, "orphan", f"w{wid}", lease_s=60):
            return True
        if any(c.owner != "dead" for c in store.claims(RUN)):
            return False  # someone else took it over
        time.sleep(0.02)
    return False


def test_an_expired_lease_is_taken_over_by_exactly_one_worker(store_url_):
    store = Store(store_url_)
    assert store.claim(RUN, "orphan", "dead", lease_s=1.0)
    answers = _spawn(_taker, lambda i: (store_url_, i), PROCS)
    assert sum(answers) == 1
    [c] = store.claims(RUN)
    assert c.owner != "dead" and c.attempts == 2 and c.status == "claimed"
    assert not store.heartbeat(RUN, "orphan", "dead") and not store.done(RUN, "orphan", "dead")  # it lost the key


def test_claim_lifecycle(store_url_):
    store = Store(store_url_)
    assert store.claim(RUN, "k", "a", lease_s=30)
    assert not store.claim(RUN, "k", "b", lease_s=30)  # live lease
    assert store.claim(RUN, "k", "a", lease_s=30)  # the holder renews
    assert store.heartbeat(RUN, "k", "a", lease_s=30) and not store.heartbeat(RUN, "k", "b")
    assert not store.release(RUN, "k", "b") and store.release(RUN, "k", "a")
    assert store.claim(RUN, "k", "b", lease_s=30)  # released: free at once
    assert store.done(RUN, "k", "b") and not store.claim(RUN, "k", "a") and not store.heartbeat(RUN, "k", "b")
    # a stage marked done by finish_stage cannot be claimed either
    store.open_run(RUN, "test", {})
    store.finish_stage(RUN, "built", {"ok": True})
    assert not store.claim(RUN, "built", "a")
    assert [c.key for c in store.claims(RUN)] == ["k"]


# ----------------------------------------------------------------------------- two checks on one pack


def test_two_checks_of_one_pack_share_a_postgres_ledger(postgres_url, tmp_path):
    pack = make_tiny_pack(tmp_path / "pack", tasks=6)
    k = 5
    cmd = [sys.executable, "-m", "envgen", "check", str(pack.root), "--policy", "null", "--k", str(k),
           "--workers", "2", "--json", "--store", postgres_url.replace("postgresql+psycopg://", "postgresql://")]
    env = {**os.environ, "COLUMNS": "200"}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    reports = [json.loads(o[0]) for o in outs]
    assert [(r["kept"], r["rollouts"]) for r in reports] == [(0, 6 * k)] * 2
    assert sum(r["rollouts_this_run"] for r in reports) >= 6 * k
    store = Store(postgres_url)
    with store.session() as s:
        rows = s.execute(select(Rollout.task_id, Rollout.idx)).all()
    assert len(rows) == len(set(rows)) == 6 * k  # every rollout once, though both checks ran some
    again = check(str(pack.root), "null", k=k, workers=2, store_url=postgres_url)  # a third, in process
    assert again.rollouts_spent == 0 and again.resumed == 6 * k


# ----------------------------------------------------------------------------- URLs and errors


def test_plain_postgresql_urls_use_psycopg_and_passwords_are_never_shown():
    assert store_url("postgresql://u:pw@h:5/db") == "postgresql+psycopg://u:pw@h:5/db"
    assert store_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert store_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg2://u@h/db"
    assert shown_url(store_url("postgresql://u:s3cret@h:5/db")) == "postgresql+psycopg://u:***@h:5/db"


def test_an_unreachable_server_is_an_input_error_naming_the_url_without_its_password():
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(InputError) as e:
        Store(f"postgresql://envgen:s3cret@127.0.0.1:{port}/nope")
    msg = str(e.value)
    assert f"127.0.0.1:{port}/nope" in msg and "unreachable" in msg and "s3cret" not in msg
    assert time.monotonic() - started < 15


def test_a_missing_driver_is_an_input_error_naming_the_extra():
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from envgen.store import Store\n"
            "from envgen.errors import InputError\n"
            "try:\n    Store('postgresql://u:s3cret@127.0.0.1:1/db')\n"
            "except InputError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "driver is not installed" in out.stdout and "envgen[postgres]" in out.stdout, out.stderr[-2000:]
    assert "s3cret" not in out.stdout and "u:***@127.0.0.1:1/db" in out.stdout


def test_tables_are_created_once_by_concurrent_first_openers(postgres_url):
    """Eight processes opening one new PostgreSQL store at once: the advisory lock serialises CREATE TABLE."""
    answers = _spawn(_opener, lambda i: (postgres_url,), 8)
    assert answers == [True] * 8
    assert _count(Store(postgres_url), Claim) == 0


def _opener(url: str, barrier) -> bool:
    barrier.wait(60)
    Store(url)
    return True


def test_lease_context_renews_marks_done_and_releases_on_error(store_url_):
    store = Store(store_url_)
    with store.lease(RUN, "a", "w1", lease_s=0.6) as held:
        assert held is not None and held.owner == "w1"
        time.sleep(1.0)  # longer than the lease: only the renewals keep it
        assert not store.claim(RUN, "a", "w2", lease_s=0.6) and not held.lost.is_set()
    assert [(c.key, c.status) for c in store.claims(RUN)] == [("a", "done")]
    with store.lease(RUN, "a", "w2") as held:
        assert held is None  # done: nobody does it again
    with pytest.raises(RuntimeError):
        with store.lease(RUN, "b", "w1", lease_s=30):
            raise RuntimeError("the work failed")
    assert store.claim(RUN, "b", "w2", lease_s=30)  # released at once, not after 30 s


def test_other_databases_are_refused_up_front():
    with pytest.raises(InputError, match=r"mysql is not supported.*postgresql://"):
        Store("mysql://u:pw@127.0.0.1:1/db")


def _inherited(store: Store, barrier) -> int:
    barrier.wait(60)
    store.add_error(RUN, None, "child", "written through the parent's Store object")
    return len(store.errors(RUN))


def test_a_store_inherited_by_a_forked_child_leaves_the_parents_connections_alone(store_url_):
    store = Store(store_url_)
    store.open_run(RUN, "test", {})
    store.add_error(RUN, None, "parent", "before the fork")  # a pooled connection now exists in the parent
    assert _spawn(_inherited, lambda i: (store,), 3)
    store.add_error(RUN, None, "parent", "after the fork")  # would fail if a child had closed the shared socket
    assert sorted(e.kind for e in store.errors(RUN)) == ["child"] * 3 + ["parent"] * 2
