"""The one report every family's build returns (offline generators, LLM pipelines, the code family)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable


def reason_key(reason: str) -> str:
    """The part of a rejection reason that groups it (text before the first ';')."""
    return reason.split(";", 1)[0].strip() or "unknown"


def count_reasons(reasons: Iterable[str]) -> dict[str, int]:
    """Reason -> how many, most frequent first."""
    return dict(Counter(reasons).most_common())


@dataclass
class BuildReport:
    """What one ``envgen build`` did: counts, why tasks were dropped, the kept tasks' difficulties, timings.

    The fields are the same for every family; what only one family has (LLM spend, agent counts, the code
    family's environments and per-task validation figures) is in ``details``.
    """

    family: str
    out: Path
    """Where the build wrote: the pack, or (code) the folder holding one pack per kept task."""
    packs: list[str] = field(default_factory=list)
    """Every pack written, relative to ``out`` ("." when ``out`` is the pack)."""
    name: str = ""
    """Pack name, for families that write one pack."""
    category: str = ""
    seed: int = 0
    proposed: int = 0
    """Tasks (or source instances) considered."""
    kept: int = 0
    """Tasks that passed every check and are in a pack."""
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    """Reason (e.g. "mutated scored 1, expected 0") -> tasks dropped for it."""
    rejections: list[dict[str, Any]] = field(default_factory=list)
    """``{task, reason}`` for every dropped task, reasons in full (code adds ``stage`` and ``details``)."""
    difficulty: dict[str, int] = field(default_factory=dict)
    """Difficulty (reference tool calls) -> kept tasks."""
    seconds: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
    """Seconds per stage (e.g. generate, describe, gate, save)."""
    workers: int = 1
    sandbox: str = "local"
    not_applicable: dict[str, int] = field(default_factory=dict)
    """Probe -> tasks it could not apply to (kept or not), e.g. collateral where no other reference writes."""
    details: dict[str, Any] = field(default_factory=dict)
    """Family-specific figures: ``llm`` (session and spent usage), ``levels``, ``validated``, ``entities``,
    ``tasks`` and ``environments`` (code), ``resumed`` (candidates taken from an earlier run), ..."""

    @property
    def rejected(self) -> int:
        return self.proposed - self.kept

    def summary(self) -> dict[str, Any]:
        """JSON-ready: every field, plus ``rejected`` (a count) and tasks per second."""
        out = asdict(self)
        out["out"] = str(self.out)
        out["rejected"] = self.rejected
        out["tasks_per_s"] = round(self.proposed / self.seconds, 2) if self.seconds else None
        out["seconds"] = round(self.seconds, 3)
        out["stages"] = {k: round(v, 3) for k, v in self.stages.items()}
        return out
