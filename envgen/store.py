"""The build state store: SQLAlchemy 2.x ORM, SQLite by default, any database URL (PostgreSQL) by choice.

What a killed build needs to continue without losing or repeating work:

- ``runs``: one build (or check) with its parameters, status and final report;
- ``stages``: the steps of a run (status, attempts, result); a stage marked done is never redone;
- ``candidates``: what a stage produced (a task proposal, validated or rejected with its reason);
- ``results``: every check a candidate went through (solution run, verifier, red-team, review);
- ``llm_calls``: request hash -> response, so a resumed build replays paid calls instead of repeating
  them (``envgen.llm.client.CallCache``);
- ``agent_runs``: per agent session: role, model, outcome, tokens, cost, transcript path;
- ``artifacts``: blobs a later stage starts from (e.g. a workspace snapshot);
- ``errors``: everything that went wrong, with the stage it happened in;
- ``claims``: which worker holds which stage (a lease), so workers sharing one store never run a stage twice
  and a dead worker's stage is taken over when its lease runs out (``Store.claim``).

Many processes may write at once (Ray workers, two checks of one pack, two builds resuming one run), on
SQLite or PostgreSQL: every write that can meet a concurrent write of the same key is one atomic statement
(``INSERT ... ON CONFLICT`` through the dialect's insert, or an ``UPDATE ... WHERE`` that re-checks its
condition on the locked row), never a read followed by a write, so nothing is lost or stored twice.
Transient conflicts (SQLite's write lock, a PostgreSQL deadlock or serialization failure) are retried.

``engine_for(url)`` is the one way to reach the database (None: ``ENVGEN_STORE``, else ``state.sqlite`` in
``envgen.paths.cache_dir()``, which ``ENVGEN_CACHE`` moves); ``postgresql://`` URLs use psycopg 3 (the
``postgres`` extra). Other subsystems add their own tables on the
same engine (the pass check's rollout ledger does), or subclass ``Base``, whose tables ``Store`` creates when it opens.
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from sqlalchemy import (
    Engine,
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    case,
    cast,
    create_engine,
    delete,
    event,
    func,
    literal,
    make_url,
    or_,
    select,
    update,
)
from sqlalchemy import text as sql_text
from sqlalchemy.exc import DBAPIError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from .errors import EnvgenError, InputError
from .paths import cache_dir

T = TypeVar("T")


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    """The declarative base of every envgen table."""


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(32), default="running")
    report: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, onupdate=_now)


class Stage(Base):
    __tablename__ = "stages"
    __table_args__ = (UniqueConstraint("run_id", "key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    key: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(32), default="pending")
    """pending | running | done | failed"""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    result: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class CandidateRow(Base):
    __tablename__ = "candidates"
    __table_args__ = (UniqueConstraint("run_id", "key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    key: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(64), default="task")
    status: Mapped[str] = mapped_column(String(32))
    """validated | rejected"""
    difficulty: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    data: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Result(Base):
    __tablename__ = "results"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    stage: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(64))
    passed: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    details: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class LLMCall(Base):
    __tablename__ = "llm_calls"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(80), unique=True)
    run_id: Mapped[str | None] = mapped_column(String(255), nullable=True, index=True)
    agent: Mapped[str | None] = mapped_column(String(255), nullable=True)
    config: Mapped[str] = mapped_column(String(255))
    model: Mapped[str] = mapped_column(String(255))
    request: Mapped[dict] = mapped_column(JSON)
    response: Mapped[dict] = mapped_column(JSON)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    reasoning_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float] = mapped_column(Float, default=0.0)
    latency_s: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class AgentRun(Base):
    __tablename__ = "agent_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    stage: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(64))
    config: Mapped[str] = mapped_column(String(255))
    model: Mapped[str] = mapped_column(String(255))
    outcome: Mapped[str] = mapped_column(String(32))
    turns: Mapped[int] = mapped_column(Integer, default=0)
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    tool_errors: Mapped[int] = mapped_column(Integer, default=0)
    malformed: Mapped[int] = mapped_column(Integer, default=0)
    usage: Mapped[dict] = mapped_column(JSON, default=dict)
    transcript: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Artifact(Base):
    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("run_id", "key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    key: Mapped[str] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(80))
    size: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Claim(Base):
    """A worker's lease on one unit of work of a run (a stage, a candidate, a category: any key)."""

    __tablename__ = "claims"
    run_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default="claimed")
    """claimed | done"""
    expires_at: Mapped[float] = mapped_column(Float)
    """Unix time the lease runs out (the claimant's clock: nodes sharing a store keep their clocks in sync)."""
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    """How many times the key was claimed: 1, plus one per takeover of an expired lease."""
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class ErrorRecord(Base):
    __tablename__ = "errors"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str | None] = mapped_column(String(255), nullable=True, index=True)
    stage: Mapped[str | None] = mapped_column(String(255), nullable=True)
    kind: Mapped[str] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(Text)
    details: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


def store_url(url_or_path: str | os.PathLike | None = None) -> str:
    """A SQLAlchemy URL from a URL, a file path (SQLite), or None: ``ENVGEN_STORE``, else
    ``state.sqlite`` in the cache dir (``ENVGEN_CACHE``, default ``~/.cache/envgen``).

    ``postgresql://`` and ``postgres://`` (libpq's spellings) name psycopg 3, the driver of the ``postgres``
    extra; an explicit ``postgresql+DRIVER://`` is kept as given."""
    value = url_or_path if url_or_path is not None else (os.environ.get("ENVGEN_STORE") or None)
    if value is None:
        value = cache_dir() / "state.sqlite"
    text = os.fspath(value)
    if "://" in text:
        for plain in ("postgresql://", "postgres://"):
            if text.startswith(plain):
                return "postgresql+psycopg://" + text[len(plain):]
        return text
    path = Path(text).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def shown_url(url: str) -> str:
    """The URL as messages may show it: the password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]


_ENGINES: dict[tuple[int, str], Engine] = {}
_ENSURED: dict[tuple[int, str], frozenset[str]] = {}
CONNECT_TIMEOUT_S = 10
"""How long opening a connection to a database server may take before the store reports it unreachable."""


def engine_for(url: str | os.PathLike | None = None) -> Engine:
    """One shared engine per database URL (see ``store_url`` for None and plain paths).

    SQLite gets WAL and a busy timeout, so a build, a check and a progress view can share one file.
    A server (PostgreSQL) gets a connect timeout and a liveness check before a pooled connection is reused.
    Engines are per process: a forked worker opens its own instead of sharing its parent's connections
    (``_forget_parent_engines``). A missing driver or an unreachable server is an ``InputError`` naming the URL (without its password).
    """
    resolved = store_url(url)
    engine = _ENGINES.get((os.getpid(), resolved))
    if engine is None:
        shown = shown_url(resolved)
        try:
            backend = make_url(resolved).get_backend_name()
        except Exception as e:
            raise InputError(f"the state store {shown}: not a database URL ({type(e).__name__}); use a SQLite path "
                             "or postgresql://USER:PASSWORD@HOST:PORT/DATABASE") from None
        if backend not in ("sqlite", "postgresql"):
            raise InputError(f"the state store {shown}: {backend} is not supported (concurrent writers need "
                             "INSERT ... ON CONFLICT); use a SQLite path or a postgresql:// URL")
        try:
            if resolved.startswith("sqlite"):
                engine = create_engine(resolved, connect_args={"timeout": 30})
                event.listen(engine, "connect", _sqlite_pragmas)
            else:
                args = {"connect_timeout": CONNECT_TIMEOUT_S} if resolved.startswith("postgresql") else {}
                engine = create_engine(resolved, pool_pre_ping=True, connect_args=args)
        except (ImportError, NoSuchModuleError) as e:
            hint = " (pip install 'envgen[postgres]')" if resolved.startswith("postgresql") else ""
            raise InputError(f"cannot open the state store {shown}: its database driver is not installed{hint}: "
                             f"{type(e).__name__}: {e}") from None
        except Exception as e:
            raise InputError(f"cannot open the state store {shown}: {type(e).__name__}: {_scrub(e, resolved)}") \
                from None
        try:
            with engine.connect():
                pass
        except Exception as e:
            engine.dispose()
            what = "the database server is unreachable or refused the login" if not resolved.startswith("sqlite") \
                else "the database cannot be opened"
            raise InputError(f"cannot open the state store {shown}: {what}: {type(e).__name__}: "
                             f"{_scrub(e, resolved)}") from None
        _ENGINES[(os.getpid(), resolved)] = engine
    return engine


def _forget_parent_engines() -> None:
    """In a forked child: drop the parent's pooled connections without closing them (closing would end the
    parent's sessions on the shared sockets); the child opens its own. SQLAlchemy's documented fork recipe."""
    for engine in _ENGINES.values():
        engine.dispose(close=False)
    _ENGINES.clear()
    _ENSURED.clear()


os.register_at_fork(after_in_child=_forget_parent_engines)


def _scrub(e: BaseException, url: str) -> str:
    """An exception's text, first line only, without the URL's password should a driver echo it."""
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    text = text[0] if text else ""
    try:
        password = make_url(url).password
    except Exception:
        password = None
    return text.replace(str(password), "***") if password else text


def transient(e: BaseException) -> bool:
    """Whether a failed write may succeed when tried again: SQLite's write lock, a PostgreSQL deadlock or
    serialization failure (SQLSTATE 40P01 / 40001). Not a lost connection: its write may have committed."""
    if not isinstance(e, DBAPIError):
        return False
    orig = getattr(e, "orig", None)
    if getattr(orig, "sqlstate", None) in ("40P01", "40001"):
        return True
    text = str(orig or e).lower()
    return isinstance(e, OperationalError) and ("locked" in text or "busy" in text)


WRITE_WAIT_S = 120.0
"""How long a write keeps retrying transient conflicts before the store reports them."""


def retry_transient(op: Callable[[], T], what: str, *, wait_s: float = WRITE_WAIT_S) -> T:
    """Run a store operation (its own transaction), again while it fails with a ``transient`` conflict."""
    deadline = time.monotonic() + wait_s
    delay = 0.02
    while True:
        try:
            return op()
        except DBAPIError as e:
            if not transient(e):
                raise
            if time.monotonic() > deadline:
                raise EnvgenError(f"{what}: the state store kept refusing the write for {wait_s:.0f} s "
                                  f"({type(e.orig or e).__name__}); another process holds it: wait for it or "
                                  "give this run its own --store") from None
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)


def dialect_insert(engine_or_session: Engine | Session, table: Any):
    """``INSERT`` of the engine's dialect, with ``on_conflict_do_nothing`` / ``on_conflict_do_update``
    (SQLite and PostgreSQL both have them; other databases are not supported for concurrent writers)."""
    bind = engine_or_session.get_bind() if isinstance(engine_or_session, Session) else engine_or_session
    name = bind.dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise InputError(f"the state store {shown_url(str(bind.url))}: {name} is not supported; use SQLite or "
                         "PostgreSQL")
    return insert(table)


def worker_id() -> str:
    """An owner name for claims unique to this process: host, pid and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Lease:
    """A claim held inside ``Store.lease``; ``lost`` is set once another worker has taken the key over."""

    run_id: str
    key: str
    owner: str
    lost: threading.Event = field(default_factory=threading.Event)


class Store:
    """Sessions and the few operations the pipelines need, each in its own short transaction."""

    def __init__(self, url: str | os.PathLike | None = None):
        self.url = store_url(url)
        self.engine = engine_for(self.url)
        self.ensure_tables()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def ensure_tables(self) -> None:
        """Create every table ``Base`` knows (including ones other modules added) that does not exist yet.

        On PostgreSQL an advisory lock makes concurrent creators take turns (CREATE TABLE of one name by two
        sessions at once fails on the catalog's unique index otherwise). On SQLite another process may create
        a table between the check and the CREATE; that, or its write lock, is retried a few times.
        On a server, each process does this once per store and set of tables (a SQLite file is checked
        every time: it is local, and may have been deleted and made again).
        """
        names = frozenset(Base.metadata.tables)
        ensured = (os.getpid(), self.url)
        if self.engine.dialect.name == "postgresql":
            if _ENSURED.get(ensured) == names:
                return

            def create() -> None:
                with self.engine.begin() as con:
                    con.execute(sql_text("SELECT pg_advisory_xact_lock(:k)"), {"k": _DDL_LOCK})
                    Base.metadata.create_all(con)

            retry_transient(create, "creating the state store's tables")
            _ENSURED[ensured] = names
        else:
            for attempt in range(20):
                try:
                    Base.metadata.create_all(self.engine)
                    break
                except OperationalError as e:
                    msg = str(e.orig).lower()
                    if attempt == 19 or not ("already exists" in msg or "locked" in msg or "busy" in msg):
                        raise
                    time.sleep(0.05 * (attempt + 1))

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as s, s.begin():
            yield s

    def write(self, op: Callable[[Session], T], what: str = "writing to the state store") -> T:
        """``op(session)`` in one transaction, retried as a whole on a transient conflict (so ``op`` must
        only touch the database: it may run more than once)."""
        def once() -> T:
            with self.session() as s:
                return op(s)

        return retry_transient(once, what)

    def _insert(self, table: Any):
        return dialect_insert(self.engine, table)

    # -- runs

    def open_run(self, run_id: str, kind: str, params: dict[str, Any]) -> Run:
        """The run with this id, created if new; an existing run keeps its history (a resume)."""
        def op(s: Session) -> Run:
            ins = self._insert(Run).values(id=run_id, kind=kind, params=params, status="running", created_at=_now(),
                                           updated_at=_now())
            s.execute(ins.on_conflict_do_update(index_elements=[Run.id],
                                                set_={"params": ins.excluded.params, "status": "running",
                                                      "updated_at": ins.excluded.updated_at}))
            return s.get(Run, run_id, populate_existing=True)

        return self.write(op, "opening a run")

    def finish_run(self, run_id: str, status: str, report: dict[str, Any] | None = None) -> None:
        self.write(lambda s: s.execute(update(Run).where(Run.id == run_id)
                                       .values(status=status, report=report, updated_at=_now())), "finishing a run")

    # -- stages

    def stage(self, run_id: str, key: str) -> Stage | None:
        with self.session() as s:
            return s.scalar(select(Stage).where(Stage.run_id == run_id, Stage.key == key))

    def stages(self, run_id: str) -> list[Stage]:
        with self.session() as s:
            return list(s.scalars(select(Stage).where(Stage.run_id == run_id).order_by(Stage.id)))

    def start_stage(self, run_id: str, key: str) -> Stage:
        """Mark the stage running and count the attempt (one atomic upsert: concurrent starts count twice)."""
        def op(s: Session) -> Stage:
            now = _now()
            ins = self._insert(Stage).values(run_id=run_id, key=key, status="running", attempts=1, started_at=now)
            s.execute(ins.on_conflict_do_update(
                index_elements=[Stage.run_id, Stage.key],
                set_={"status": "running", "attempts": func.coalesce(Stage.attempts, 0) + 1, "started_at": now,
                      "error": None}))
            return s.scalar(select(Stage).where(Stage.run_id == run_id, Stage.key == key)
                            .execution_options(populate_existing=True))

        return self.write(op, "starting a stage")

    def finish_stage(self, run_id: str, key: str, result: dict[str, Any], *,
                     candidates: list[dict[str, Any]] = (), artifacts: dict[str, bytes] | None = None) -> None:
        """Mark a stage done together with what it produced, in one transaction (all or nothing).

        A candidate or artifact key stored before (an earlier attempt, a concurrent worker) is replaced,
        never doubled. Rows are written in key order, so two transactions lock them in the same order."""
        def op(s: Session) -> None:
            now = _now()
            for name, blob in sorted((artifacts or {}).items()):
                ins = self._insert(Artifact).values(run_id=run_id, key=name, sha256=hashlib.sha256(blob).hexdigest(),
                                                    size=len(blob), data=blob, created_at=now)
                s.execute(ins.on_conflict_do_update(
                    index_elements=[Artifact.run_id, Artifact.key],
                    set_={c: ins.excluded[c] for c in ("sha256", "size", "data", "created_at")}))
            for c in sorted(candidates, key=lambda c: c["key"]):
                row = {"kind": "task", "difficulty": None, "reason": None, "data": {}, **c, "created_at": now}
                ins = self._insert(CandidateRow).values(run_id=run_id, **row)
                s.execute(ins.on_conflict_do_update(
                    index_elements=[CandidateRow.run_id, CandidateRow.key],
                    set_={name: ins.excluded[name] for name in row if name != "key"}))
            ins = self._insert(Stage).values(run_id=run_id, key=key, status="done", attempts=1, result=result,
                                             finished_at=now)
            s.execute(ins.on_conflict_do_update(
                index_elements=[Stage.run_id, Stage.key],
                set_={"status": "done", "result": ins.excluded.result, "finished_at": now, "error": None}))
            # the stage's claim is done in the same transaction: a worker killed before its lease's own
            # ``done`` leaves no claim held on a finished stage
            s.execute(update(Claim).where(Claim.run_id == run_id, Claim.key == key, Claim.status == "claimed")
                      .values(status="done", updated_at=now))

        self.write(op, "finishing a stage")

    def fail_stage(self, run_id: str, key: str, error: str) -> None:
        self.write(lambda s: s.execute(update(Stage).where(Stage.run_id == run_id, Stage.key == key)
                                       .values(status="failed", error=error, finished_at=_now())), "failing a stage")

    # -- claims: which worker runs which stage

    def claim(self, run_id: str, key: str, owner: str, lease_s: float = 300.0) -> bool:
        """Try to take ``key`` of ``run_id`` for ``owner`` for ``lease_s`` seconds; whether ``owner`` holds it now.

        True: the key was free, or its holder's lease had run out (a dead worker: taken over, ``attempts``
        counts it), or ``owner`` held it already (the lease is renewed). False: another owner's lease is
        live, or the key is finished (``done``, or a stage of that key marked done by ``finish_stage``).
        Atomic across processes and machines sharing the store: of concurrent claimants exactly one wins.
        A holder calls ``heartbeat`` well within ``lease_s`` while it works, then ``done`` (or ``release``).
        """
        def op(s: Session) -> bool:
            st = s.scalar(select(Stage.status).where(Stage.run_id == run_id, Stage.key == key))
            if st == "done":
                return False
            now = time.time()
            got = s.execute(self._insert(Claim).values(run_id=run_id, key=key, owner=owner, status="claimed",
                                                       expires_at=now + lease_s, attempts=1, updated_at=_now())
                            .on_conflict_do_nothing(index_elements=[Claim.run_id, Claim.key]).returning(Claim.key))
            if got.first() is not None:
                return True
            # a row exists: take it when it is ours or its lease ran out. The WHERE is evaluated again on
            # the locked row (PostgreSQL's READ COMMITTED re-check), so of two takers only one matches.
            took = s.execute(update(Claim).where(
                Claim.run_id == run_id, Claim.key == key, Claim.status == "claimed",
                or_(Claim.owner == owner, Claim.expires_at < now),
            ).values(attempts=case((Claim.owner == owner, Claim.attempts), else_=Claim.attempts + 1),
                     owner=owner, expires_at=now + lease_s, updated_at=_now()))
            return took.rowcount == 1

        return self.write(op, "claiming work")

    def heartbeat(self, run_id: str, key: str, owner: str, lease_s: float = 300.0) -> bool:
        """Extend ``owner``'s lease by ``lease_s`` from now; False when it is no longer ``owner``'s (taken
        over after it expired, or done): the worker should then stop, its work belongs to another."""
        return self.write(lambda s: s.execute(update(Claim).where(
            Claim.run_id == run_id, Claim.key == key, Claim.owner == owner, Claim.status == "claimed",
        ).values(expires_at=time.time() + lease_s, updated_at=_now())).rowcount == 1, "renewing a claim")

    def release(self, run_id: str, key: str, owner: str) -> bool:
        """Give the key up unfinished (the work failed or the worker shuts down): anyone may claim it at once.
        False when ``owner`` did not hold it."""
        return self.write(lambda s: s.execute(delete(Claim).where(
            Claim.run_id == run_id, Claim.key == key, Claim.owner == owner, Claim.status == "claimed",
        )).rowcount == 1, "releasing a claim")

    def done(self, run_id: str, key: str, owner: str) -> bool:
        """Mark the key finished: no later ``claim`` succeeds. False when ``owner`` no longer held it (another
        worker took it over; the caller's result is then a duplicate it should not publish). True again for an
        owner whose key is done already (``finish_stage`` marks its stage's claim done)."""
        return self.write(lambda s: s.execute(update(Claim).where(
            Claim.run_id == run_id, Claim.key == key, Claim.owner == owner, Claim.status.in_(("claimed", "done")),
        ).values(status="done", updated_at=_now())).rowcount == 1, "finishing a claim")

    def holder(self, run_id: str, key: str) -> str | None:
        """The owner holding ``key`` now (its lease live or not); None when the key is free or done."""
        with self.session() as s:
            return s.scalar(select(Claim.owner).where(Claim.run_id == run_id, Claim.key == key,
                                                      Claim.status == "claimed"))

    def take_over(self, run_id: str, key: str, holder: str, owner: str, lease_s: float = 300.0) -> bool:
        """Take ``key`` from ``holder`` before its lease runs out, for ``owner``: only for a holder the caller
        knows is gone (a Ray worker of a driver that died: Ray killed it). A compare-and-swap on the holder:
        False when the key is no longer ``holder``'s (done, released, or another taker was first).
        ``attempts`` counts it, as a takeover of an expired lease."""
        return self.write(lambda s: s.execute(update(Claim).where(
            Claim.run_id == run_id, Claim.key == key, Claim.owner == holder, Claim.status == "claimed",
        ).values(attempts=Claim.attempts + 1, owner=owner, expires_at=time.time() + lease_s,
                 updated_at=_now())).rowcount == 1, "taking over a claim")

    def release_owned(self, run_id: str, prefix: str) -> int:
        """Release every unfinished claim of ``run_id`` whose owner starts with ``prefix`` (a driver giving
        back the units of its own workers after it stopped them); how many."""
        return self.write(lambda s: s.execute(delete(Claim).where(
            Claim.run_id == run_id, Claim.owner.startswith(prefix, autoescape=True), Claim.status == "claimed",
        )).rowcount, "releasing claims")

    @contextmanager
    def lease(self, run_id: str, key: str, owner: str | None = None, lease_s: float = 300.0,
              abandoned: Callable[[str], bool] | None = None) -> Iterator[Lease | None]:
        """``claim`` as a context: yields a ``Lease`` when won (None when not: skip the work). While the body
        runs, a daemon thread renews the lease every ``lease_s / 3`` seconds; a failed renewal sets
        ``lease.lost`` (another worker took the key over: stop and publish nothing). Leaving the body
        normally marks the key ``done``; leaving it by an exception ``release``s it for another worker.

        ``abandoned(holder)``: whether another holder is provably gone (its process cannot run any more);
        its key is then taken over at once (``take_over``) instead of when its lease runs out."""
        owner = owner or worker_id()
        if not self.claim(run_id, key, owner, lease_s):
            holder = self.holder(run_id, key) if abandoned is not None else None
            if holder is None or holder == owner or not abandoned(holder) \
                    or not self.take_over(run_id, key, holder, owner, lease_s):
                yield None
                return
        held = Lease(run_id, key, owner)
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(lease_s / 3):
                try:
                    ok = self.heartbeat(run_id, key, owner, lease_s)
                except Exception:
                    ok = True  # the store is briefly unreachable: the lease may still hold, try again
                if not ok:
                    held.lost.set()
                    return

        beat = threading.Thread(target=renew, name=f"lease:{key}", daemon=True)
        beat.start()
        try:
            yield held
        except BaseException:
            stop.set()
            beat.join()
            self.release(run_id, key, owner)
            raise
        stop.set()
        beat.join()
        if not self.done(run_id, key, owner):
            held.lost.set()

    def claims(self, run_id: str) -> list[Claim]:
        """Every claim of a run (held, expired or done), in key order."""
        with self.session() as s:
            return list(s.scalars(select(Claim).where(Claim.run_id == run_id).order_by(Claim.key)))

    # -- candidates, results, errors, agent runs

    def candidates(self, run_id: str, status: str | None = None) -> list[CandidateRow]:
        with self.session() as s:
            q = select(CandidateRow).where(CandidateRow.run_id == run_id)
            if status is not None:
                q = q.where(CandidateRow.status == status)
            return list(s.scalars(q.order_by(CandidateRow.id)))

    def add_result(self, run_id: str, stage: str, kind: str, passed: bool, reason: str | None = None,
                   details: dict[str, Any] | None = None) -> None:
        self.write(lambda s: s.add(Result(run_id=run_id, stage=stage, kind=kind, passed=passed, reason=reason,
                                          details=details or {})), "recording a check")

    def clear_results(self, run_id: str, stage: str) -> None:
        """Forget a stage's recorded checks (its interrupted attempt is being run again)."""
        self.write(lambda s: s.execute(delete(Result).where(Result.run_id == run_id, Result.stage == stage)),
                   "clearing a stage's checks")

    def results(self, run_id: str) -> list[Result]:
        with self.session() as s:
            return list(s.scalars(select(Result).where(Result.run_id == run_id).order_by(Result.id)))

    def add_error(self, run_id: str | None, stage: str | None, kind: str, message: str,
                  details: dict[str, Any] | None = None) -> None:
        self.write(lambda s: s.add(ErrorRecord(run_id=run_id, stage=stage, kind=kind, message=message,
                                               details=details or {})), "recording an error")

    def errors(self, run_id: str) -> list[ErrorRecord]:
        with self.session() as s:
            return list(s.scalars(select(ErrorRecord).where(ErrorRecord.run_id == run_id).order_by(ErrorRecord.id)))

    def add_agent_run(self, run_id: str, **fields: Any) -> None:
        self.write(lambda s: s.add(AgentRun(run_id=run_id, **fields)), "recording an agent session")

    def agent_runs(self, run_id: str) -> list[AgentRun]:
        with self.session() as s:
            return list(s.scalars(select(AgentRun).where(AgentRun.run_id == run_id).order_by(AgentRun.id)))

    # -- artifacts

    def artifact(self, run_id: str, key: str) -> bytes | None:
        with self.session() as s:
            return s.scalar(select(Artifact.data).where(Artifact.run_id == run_id, Artifact.key == key))

    # -- the LLM call cache (envgen.llm.client.CallCache)

    def get_llm_call(self, key: str) -> dict[str, Any] | None:
        with self.session() as s:
            return s.scalar(select(LLMCall.response).where(LLMCall.key == key))

    def put_llm_call(self, key: str, *, config: str, model: str, request: dict, response: dict, usage: dict,
                     cost: float, latency_s: float, run_id: str | None, agent: str | None) -> bool:
        """Keep a paid response under its request hash; False when another worker stored the same request
        first (either copy serves; the first is kept and counted once in ``llm_spend``)."""
        ins = self._insert(LLMCall).values(
            key=key, run_id=run_id, agent=agent, config=config, model=model, request=request, response=response,
            prompt_tokens=usage.get("prompt_tokens", 0), completion_tokens=usage.get("completion_tokens", 0),
            reasoning_tokens=usage.get("reasoning_tokens", 0), cost=cost, latency_s=latency_s, created_at=_now(),
        ).on_conflict_do_nothing(index_elements=[LLMCall.key]).returning(LLMCall.id)
        # RETURNING, not rowcount: with an implicit RETURNING of the new id, rowcount is not reliable
        return self.write(lambda s: s.execute(ins).first() is not None, "recording an LLM call")

    def forget_llm_calls(self, run_id: str, agent_prefix: str) -> int:
        """Stop replaying the cached calls of the run's agents whose name starts with ``agent_prefix`` (a stage's
        ``"STAGE/"``), so the same requests go to the model again; how many. The rows stay (their spend still
        counts in ``llm_spend``) under a key no request hashes to."""
        stmt = (update(LLMCall).where(LLMCall.run_id == run_id, LLMCall.agent.startswith(agent_prefix, autoescape=True),
                                      LLMCall.key.startswith("sha256:"))
                .values(key=literal("forgotten:") + cast(LLMCall.id, String)))
        return self.write(lambda s: s.execute(stmt).rowcount or 0, "forgetting cached LLM calls")

    def llm_spend(self, run_id: str) -> dict[str, Any]:
        """Paid calls of a run over all its sessions: calls, tokens, cost."""
        with self.session() as s:
            row = s.execute(select(func.count(LLMCall.id), func.coalesce(func.sum(LLMCall.prompt_tokens), 0),
                                   func.coalesce(func.sum(LLMCall.completion_tokens), 0),
                                   func.coalesce(func.sum(LLMCall.reasoning_tokens), 0),
                                   func.coalesce(func.sum(LLMCall.cost), 0.0)).where(LLMCall.run_id == run_id)).one()
        return {"calls": int(row[0]), "prompt_tokens": int(row[1]), "completion_tokens": int(row[2]),
                "reasoning_tokens": int(row[3]), "cost": round(float(row[4]), 6)}


_DDL_LOCK = 0x656E7667  # "envg": the advisory lock key table creation takes on PostgreSQL


def _sqlite_pragmas(dbapi_con, _record) -> None:
    """WAL lets readers (a progress view, a second worker) run beside the writer; foreign keys on."""
    cur = dbapi_con.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
