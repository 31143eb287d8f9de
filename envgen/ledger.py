"""The rollout ledger: every finished rollout of a check or eval, in the SQLAlchemy state store.

Keyed by (pack version, policy, seed, task, index). Rollout ``index`` always uses the same seed, so a
recorded outcome stands for a rerun: an interrupted check resumes from here, and a later check with
another keep rule or a larger k reuses what was already spent.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, DateTime, Float, Integer, String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, mapped_column

from .passcheck import Outcome
from .store import Base, Store

class Rollout(Base):
    __tablename__ = "rollouts"
    __table_args__ = (UniqueConstraint("pack_version", "policy", "seed", "task_id", "idx"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    pack_version: Mapped[str] = mapped_column(String(80), index=True)
    policy: Mapped[str] = mapped_column(String(500))
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
    """The recorded rollouts of one (pack version, policy, seed)."""

    def __init__(self, url: str | None, *, pack_version: str, policy: str, seed: int):
        self.store = Store(url)
        self.key = {"pack_version": pack_version, "policy": policy, "seed": seed}

    def load(self) -> list[Outcome]:
        with self.store.session() as s:
            rows = s.scalars(select(Rollout).filter_by(**self.key).where(Rollout.error.is_(None))).all()
            return [Outcome(r.task_id, r.idx, r.reward, r.passed, r.turns, r.tokens, r.seconds,
                            list(r.step_latencies or []), r.error) for r in rows]

    def record(self, o: Outcome) -> None:
        """Store a finished rollout; an errored one is kept for the record but replaced by its retry."""
        with self.store.session() as s:
            old = s.scalars(select(Rollout).filter_by(**self.key, task_id=o.task_id, idx=o.index)).first()
            if old is not None:
                if old.error is None:
                    return
                s.delete(old)
                s.flush()
            s.add(Rollout(**self.key, task_id=o.task_id, idx=o.index, reward=o.reward, passed=o.passed,
                          turns=o.turns, tokens=o.tokens, seconds=o.seconds, step_latencies=o.step_latencies,
                          error=o.error))
