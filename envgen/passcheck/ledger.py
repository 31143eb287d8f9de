"""The rollout ledger: every finished rollout of a check or eval, in the SQLAlchemy state store.

Keyed by everything an outcome depends on: the pack's content hash, the policy, the sandbox backend, the
image (Docker: the pack image's recipe digest; local: none), the seed, then task and index. Rollout
``index`` always uses the same seed, so a recorded outcome stands for a rerun under the same key: an
interrupted check resumes from here, a later check with another keep rule or a larger k reuses what was
already spent, and a changed pack or backend starts afresh.

Several processes may record into one store at once (two checks of one pack, Ray workers, on SQLite or
PostgreSQL): a unique constraint keeps each rollout once, written with ``INSERT ... ON CONFLICT DO NOTHING``
so the second writer of a key is told, not failed; replacing an errored rollout is one conditional UPDATE;
a write that meets a lock (SQLite's, a PostgreSQL deadlock) is retried instead of failing.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, DateTime, Float, Integer, String, UniqueConstraint, select, update
from sqlalchemy.orm import Mapped, mapped_column

from .rules import Outcome
from ..store import Base, Store, dialect_insert, retry_transient

LOCK_WAIT_S = 120.0
"""How long a ledger write keeps retrying a locked store before giving up with a message."""


class Rollout(Base):
    __tablename__ = "check_rollouts"
    __table_args__ = (UniqueConstraint("pack_version", "policy", "sandbox", "image", "seed", "task_id", "idx"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pack_version: Mapped[str] = mapped_column(String(80), index=True)
    policy: Mapped[str] = mapped_column(String(500))
    sandbox: Mapped[str] = mapped_column(String(32))
    """The sandbox backend the rollout ran in: local or docker (auto is resolved before)."""
    image: Mapped[str] = mapped_column(String(200), default="")
    """Docker: the pack image as ``TAG@IMAGE_ID`` (recipe tag and the engine's id); empty for the local backend."""
    seed: Mapped[int] = mapped_column(Integer)
    task_id: Mapped[str] = mapped_column(String(200))
    idx: Mapped[int] = mapped_column(Integer)
    reward: Mapped[float] = mapped_column(Float)
    passed: Mapped[bool]
    turns: Mapped[int] = mapped_column(Integer, default=0)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    step_latencies: Mapped[list] = mapped_column(JSON, default=list)
    error: Mapped[str | None] = mapped_column(String(2000), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 default=lambda: datetime.now(timezone.utc))


class RolloutLedger:
    """The recorded rollouts of one (pack version, policy, sandbox backend, image, seed)."""

    def __init__(self, url: str | None, *, pack_version: str, policy: str, seed: int, sandbox: str = "local",
                 image: str = ""):
        self.store = retry_transient(lambda: Store(url), "opening the state store", wait_s=LOCK_WAIT_S)
        self.key = {"pack_version": pack_version, "policy": policy, "sandbox": sandbox, "image": image or "",
                    "seed": seed}

    def load(self) -> list[Outcome]:
        def read() -> list[Outcome]:
            with self.store.session() as s:
                rows = s.scalars(select(Rollout).filter_by(**self.key).where(Rollout.error.is_(None))).all()
                return [Outcome(r.task_id, r.idx, r.reward, r.passed, r.turns, r.tokens, r.seconds,
                                list(r.step_latencies or []), r.error) for r in rows]

        return retry_transient(read, "reading recorded rollouts", wait_s=LOCK_WAIT_S)

    def record(self, o: Outcome) -> bool:
        """Store a finished rollout once; an errored one is kept for the record but replaced by its retry.
        Whether this call stored it (False: recorded already, by an earlier attempt or a concurrent check)."""
        row = dict(self.key, task_id=o.task_id, idx=o.index, reward=o.reward, passed=o.passed, turns=o.turns,
                   tokens=o.tokens, seconds=o.seconds, step_latencies=o.step_latencies, error=o.error,
                   created_at=datetime.now(timezone.utc))
        ins = dialect_insert(self.store.engine, Rollout).values(**row).on_conflict_do_nothing(
            index_elements=["pack_version", "policy", "sandbox", "image", "seed", "task_id", "idx"]
        ).returning(Rollout.id)

        def insert() -> bool:
            with self.store.session() as s:
                return s.execute(ins).first() is not None

        def replace_errored() -> bool:
            # one statement: of two checks replacing the same errored rollout, the second finds it clean
            with self.store.session() as s:
                return s.execute(update(Rollout).filter_by(**self.key, task_id=o.task_id, idx=o.index)
                                 .where(Rollout.error.is_not(None)).values(**row)).rowcount == 1

        if retry_transient(insert, "recording a rollout", wait_s=LOCK_WAIT_S):
            return True
        return o.error is None and retry_transient(replace_errored, "recording a rollout", wait_s=LOCK_WAIT_S)
