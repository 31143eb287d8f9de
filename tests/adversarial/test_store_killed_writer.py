"""Issue 19: a worker killed in the middle of a store write, on SQLite and on a real PostgreSQL server.

The worker is SIGKILLed while its ``finish_stage`` transaction holds row locks (PostgreSQL) or the write
lock (SQLite), after the candidates were written and before the stage row is: the half-written attempt must
be invisible, the other writers must not wait on the dead one's locks, and a worker that takes the stage
over finishes it with exactly one copy of every row. The pause point is a SQLAlchemy cursor hook in the
child (the one place the test reaches inside); the store, the server and the kill are real.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest
from sqlalchemy import event

from envgen.store import Store

RUN = "build/killed"
CTX = mp.get_context("fork")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.sqlite'}"
    return request.getfixturevalue("postgres_url")


def _dies_inside_finish(url: str, flag: str) -> None:
    store = Store(url)
    assert store.claim(RUN, "s1", "doomed", lease_s=1.0)

    def pause(conn, cursor, statement, params, context, executemany):
        if statement.lstrip().upper().startswith("INSERT INTO STAGES"):
            Path(flag).write_text("in the transaction")
            time.sleep(600)  # killed here, candidates written, nothing committed

    event.listen(store.engine, "before_cursor_execute", pause)
    store.finish_stage(RUN, "s1", {"by": "doomed"},
                       candidates=[{"key": f"c{i}", "status": "validated", "data": {"by": "doomed"}} for i in range(5)],
                       artifacts={"ws": b"doomed"})


def test_a_writer_killed_mid_transaction_leaves_nothing_and_blocks_no_one(url, tmp_path):
    store = Store(url)
    store.open_run(RUN, "test", {})
    flag = tmp_path / "flag"
    child = CTX.Process(target=_dies_inside_finish, args=(url, str(flag)))
    child.start()
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert child.is_alive() and time.monotonic() < deadline, "the child never reached the pause point"
            time.sleep(0.02)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    # nothing of the killed attempt is visible
    assert store.candidates(RUN) == [] and store.artifact(RUN, "ws") is None and store.stage(RUN, "s1") is None
    # its claim lapses and another worker takes the stage over, writing the same keys without waiting on locks
    assert not store.claim(RUN, "s1", "heir", lease_s=30)
    time.sleep(1.1)
    started = time.monotonic()
    assert store.claim(RUN, "s1", "heir", lease_s=30)
    store.finish_stage(RUN, "s1", {"by": "heir"},
                       candidates=[{"key": f"c{i}", "status": "validated", "data": {"by": "heir"}} for i in range(5)],
                       artifacts={"ws": b"heir"})
    assert store.done(RUN, "s1", "heir")
    assert time.monotonic() - started < 10
    cands = store.candidates(RUN)
    assert sorted(c.key for c in cands) == [f"c{i}" for i in range(5)] and {c.data["by"] for c in cands} == {"heir"}
    assert store.artifact(RUN, "ws") == b"heir" and store.stage(RUN, "s1").result == {"by": "heir"}
    [claim] = store.claims(RUN)
    assert (claim.owner, claim.status, claim.attempts) == ("heir", "done", 2)
