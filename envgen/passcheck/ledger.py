"""The rollout ledger: every finished rollout of a check or eval, in the SQLAlchemy state store.

Keyed by everything an outcome depends on: the pack's content hash, the policy, the sandbox backend, the
image (Docker: the pack image's recipe digest; local: none), the seed, then task and index. Rollout
``index`` always uses the same seed, so a recorded outcome stands for a rerun under the same key: an
interrupted check resumes from here, a later check with another keep rule or a larger k reuses what was
already spent, and a changed pack or backend starts afresh.

Several processes may record into one store at once (two checks of one pack): a unique constraint keeps
each rollout once, and a write that meets SQLite's lock is retried instead of failing.
"""

from __future__ import annotations

import random
import time
from datetime import datetime, timezone
from typing import Callable, TypeVar

from sqlalchemy import JSON, DateTime, Float, Integer, String, UniqueConstraint, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Mapped, mapped_column

from ..errors import EnvgenError
from .rules import Outcome
from ..store import Base, Store

T = TypeVar("T")
LOCK_WAIT_S = 120.0
"""How long a ledger write keeps retrying a locked SQLite database before giving up with a message."""


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


def _locked(e: OperationalError) -> bool:
    return "locked" in str(e.orig).lower() or "busy" in str(e.orig).lower()


def retry_locked(op: Callable[[], T], what: str, *, wait_s: float = LOCK_WAIT_S) -> T:
    """Run a store operation, retrying while another process holds SQLite's write lock."""
    deadline = time.monotonic() + wait_s
    delay = 0.05
    while True:
        try:
            return op()
        except OperationalError as e:
            if not _locked(e):
                raise
            if time.monotonic() > deadline:
                raise EnvgenError(f"{what}: the state store stayed locked for {wait_s:.0f} s by another "
                                  "process; wait for it or give this run its own --store") from None
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)


class RolloutLedger:
    """The recorded rollouts of one (pack version, policy, sandbox backend, image, seed)."""

    def __init__(self, url: str | None, *, pack_version: str, policy: str, seed: int, sandbox: str = "local",
                 image: str = ""):
        self.store = retry_locked(lambda: Store(url), "opening the state store")
        self.key = {"pack_version": pack_version, "policy": policy, "sandbox": sandbox, "image": image or "",
                    "seed": seed}

    def load(self) -> list[Outcome]:
        def read() -> list[Outcome]:
            with self.store.session() as s:
                rows = s.scalars(select(Rollout).filter_by(**self.key).where(Rollout.error.is_(None))).all()
                return [Outcome(r.task_id, r.idx, r.reward, r.passed, r.turns, r.tokens, r.seconds,
                                list(r.step_latencies or []), r.error) for r in rows]

        return retry_locked(read, "reading recorded rollouts")

    def record(self, o: Outcome) -> None:
        """Store a finished rollout once; an errored one is kept for the record but replaced by its retry."""
        row = dict(self.key, task_id=o.task_id, idx=o.index, reward=o.reward, passed=o.passed, turns=o.turns,
                   tokens=o.tokens, seconds=o.seconds, step_latencies=o.step_latencies, error=o.error)

        def insert() -> bool:
            try:
                with self.store.session() as s:
                    s.add(Rollout(**row))
                return True
            except IntegrityError:
                return False  # recorded already (by an earlier attempt, or by a concurrent check)

        def replace_errored() -> None:
            with self.store.session() as s:
                old = s.scalars(select(Rollout).filter_by(**self.key, task_id=o.task_id, idx=o.index)).first()
                if old is not None and old.error is not None and o.error is None:
                    for name, value in row.items():
                        setattr(old, name, value)

        if not retry_locked(insert, "recording a rollout"):
            retry_locked(replace_errored, "recording a rollout")
