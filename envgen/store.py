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
- ``errors``: everything that went wrong, with the stage it happened in.

``engine_for(url)`` is the one way to reach the database (None: ``ENVGEN_STORE``, else ``state.sqlite`` in
``envgen.paths.cache_dir()``, which ``ENVGEN_CACHE`` moves). Other subsystems add their own tables on the
same engine (the pass check's rollout ledger does), or subclass ``Base``, whose tables ``Store`` creates when it opens.
"""

from __future__ import annotations

import hashlib
import os
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

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
    create_engine,
    delete,
    event,
    func,
    select,
)
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from .errors import InputError
from .paths import cache_dir


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
    ``state.sqlite`` in the cache dir (``ENVGEN_CACHE``, default ``~/.cache/envgen``)."""
    value = url_or_path if url_or_path is not None else (os.environ.get("ENVGEN_STORE") or None)
    if value is None:
        value = cache_dir() / "state.sqlite"
    text = os.fspath(value)
    if "://" in text:
        return text
    path = Path(text).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


_ENGINES: dict[tuple[int, str], Engine] = {}


def engine_for(url: str | os.PathLike | None = None) -> Engine:
    """One shared engine per database URL (see ``store_url`` for None and plain paths).

    SQLite gets WAL and a busy timeout, so a build, a check and a progress view can share one file.
    Engines are per process: a forked worker opens its own instead of sharing its parent's connections.
    """
    resolved = store_url(url)
    engine = _ENGINES.get((os.getpid(), resolved))
    if engine is None:
        try:
            if resolved.startswith("sqlite"):
                engine = create_engine(resolved, connect_args={"timeout": 30})
                event.listen(engine, "connect", _sqlite_pragmas)
            else:
                engine = create_engine(resolved, pool_pre_ping=True)
            with engine.connect():
                pass
        except Exception as e:
            shown = resolved.split("@")[-1]
            raise InputError(f"cannot open the state store {shown}: {type(e).__name__}: {e}") from None
        _ENGINES[(os.getpid(), resolved)] = engine
    return engine


class Store:
    """Sessions and the few operations the pipelines need, each in its own short transaction."""

    def __init__(self, url: str | os.PathLike | None = None):
        self.url = store_url(url)
        self.engine = engine_for(self.url)
        self.ensure_tables()
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def ensure_tables(self) -> None:
        """Create every table ``Base`` knows (including ones other modules added) that does not exist yet.

        Another process opening the same new store may create a table between the check and the CREATE;
        that, or its write lock, is retried a few times rather than reported.
        """
        for attempt in range(20):
            try:
                Base.metadata.create_all(self.engine)
                return
            except OperationalError as e:
                text = str(e.orig).lower()
                if attempt == 19 or not ("already exists" in text or "locked" in text or "busy" in text):
                    raise
                time.sleep(0.05 * (attempt + 1))

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as s, s.begin():
            yield s

    # -- runs

    def open_run(self, run_id: str, kind: str, params: dict[str, Any]) -> Run:
        """The run with this id, created if new; an existing run keeps its history (a resume)."""
        with self.session() as s:
            run = s.get(Run, run_id)
            if run is None:
                run = Run(id=run_id, kind=kind, params=params, status="running")
                s.add(run)
            else:
                run.params, run.status = params, "running"
            return run

    def finish_run(self, run_id: str, status: str, report: dict[str, Any] | None = None) -> None:
        with self.session() as s:
            run = s.get(Run, run_id)
            run.status, run.report = status, report

    # -- stages

    def stage(self, run_id: str, key: str) -> Stage | None:
        with self.session() as s:
            return s.scalar(select(Stage).where(Stage.run_id == run_id, Stage.key == key))

    def stages(self, run_id: str) -> list[Stage]:
        with self.session() as s:
            return list(s.scalars(select(Stage).where(Stage.run_id == run_id).order_by(Stage.id)))

    def start_stage(self, run_id: str, key: str) -> Stage:
        with self.session() as s:
            st = s.scalar(select(Stage).where(Stage.run_id == run_id, Stage.key == key))
            if st is None:
                st = Stage(run_id=run_id, key=key, attempts=0)
                s.add(st)
            st.status, st.attempts, st.started_at, st.error = "running", (st.attempts or 0) + 1, _now(), None
            return st

    def finish_stage(self, run_id: str, key: str, result: dict[str, Any], *,
                     candidates: list[dict[str, Any]] = (), artifacts: dict[str, bytes] | None = None) -> None:
        """Mark a stage done together with what it produced, in one transaction (all or nothing)."""
        with self.session() as s:
            for name, blob in (artifacts or {}).items():
                s.execute(delete(Artifact).where(Artifact.run_id == run_id, Artifact.key == name))
                s.add(Artifact(run_id=run_id, key=name, sha256=hashlib.sha256(blob).hexdigest(), size=len(blob),
                               data=blob))
            for c in candidates:
                old = s.scalar(select(CandidateRow).where(CandidateRow.run_id == run_id, CandidateRow.key == c["key"]))
                if old is not None:
                    s.delete(old)
                    s.flush()
                s.add(CandidateRow(run_id=run_id, **c))
            st = s.scalar(select(Stage).where(Stage.run_id == run_id, Stage.key == key))
            if st is None:
                st = Stage(run_id=run_id, key=key, attempts=1)
                s.add(st)
            st.status, st.result, st.finished_at, st.error = "done", result, _now(), None

    def fail_stage(self, run_id: str, key: str, error: str) -> None:
        with self.session() as s:
            st = s.scalar(select(Stage).where(Stage.run_id == run_id, Stage.key == key))
            if st is not None:
                st.status, st.error, st.finished_at = "failed", error, _now()

    # -- candidates, results, errors, agent runs

    def candidates(self, run_id: str, status: str | None = None) -> list[CandidateRow]:
        with self.session() as s:
            q = select(CandidateRow).where(CandidateRow.run_id == run_id)
            if status is not None:
                q = q.where(CandidateRow.status == status)
            return list(s.scalars(q.order_by(CandidateRow.id)))

    def add_result(self, run_id: str, stage: str, kind: str, passed: bool, reason: str | None = None,
                   details: dict[str, Any] | None = None) -> None:
        with self.session() as s:
            s.add(Result(run_id=run_id, stage=stage, kind=kind, passed=passed, reason=reason, details=details or {}))

    def clear_results(self, run_id: str, stage: str) -> None:
        """Forget a stage's recorded checks (its interrupted attempt is being run again)."""
        with self.session() as s:
            s.execute(delete(Result).where(Result.run_id == run_id, Result.stage == stage))

    def results(self, run_id: str) -> list[Result]:
        with self.session() as s:
            return list(s.scalars(select(Result).where(Result.run_id == run_id).order_by(Result.id)))

    def add_error(self, run_id: str | None, stage: str | None, kind: str, message: str,
                  details: dict[str, Any] | None = None) -> None:
        with self.session() as s:
            s.add(ErrorRecord(run_id=run_id, stage=stage, kind=kind, message=message, details=details or {}))

    def errors(self, run_id: str) -> list[ErrorRecord]:
        with self.session() as s:
            return list(s.scalars(select(ErrorRecord).where(ErrorRecord.run_id == run_id).order_by(ErrorRecord.id)))

    def add_agent_run(self, run_id: str, **fields: Any) -> None:
        with self.session() as s:
            s.add(AgentRun(run_id=run_id, **fields))

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
                     cost: float, latency_s: float, run_id: str | None, agent: str | None) -> None:
        try:
            with self.session() as s:
                s.add(LLMCall(key=key, run_id=run_id, agent=agent, config=config, model=model, request=request,
                              response=response, prompt_tokens=usage.get("prompt_tokens", 0),
                              completion_tokens=usage.get("completion_tokens", 0),
                              reasoning_tokens=usage.get("reasoning_tokens", 0), cost=cost, latency_s=latency_s))
        except IntegrityError:
            pass  # another worker stored the same request first; either copy serves

    def llm_spend(self, run_id: str) -> dict[str, Any]:
        """Paid calls of a run over all its sessions: calls, tokens, cost."""
        with self.session() as s:
            row = s.execute(select(func.count(LLMCall.id), func.coalesce(func.sum(LLMCall.prompt_tokens), 0),
                                   func.coalesce(func.sum(LLMCall.completion_tokens), 0),
                                   func.coalesce(func.sum(LLMCall.reasoning_tokens), 0),
                                   func.coalesce(func.sum(LLMCall.cost), 0.0)).where(LLMCall.run_id == run_id)).one()
        return {"calls": int(row[0]), "prompt_tokens": int(row[1]), "completion_tokens": int(row[2]),
                "reasoning_tokens": int(row[3]), "cost": round(float(row[4]), 6)}


def _sqlite_pragmas(dbapi_con, _record) -> None:
    """WAL lets readers (a progress view, a second worker) run beside the writer; foreign keys on."""
    cur = dbapi_con.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
