"""The pass check's and eval's settings: documented config objects (each field's description is also its
``envgen check`` / ``envgen eval`` flag help), validated once, usable from Python and the CLI alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import InputError
from ..sandbox import check_backend

PASS_THRESHOLD = 1.0
C = TypeVar("C", bound="RolloutConfig")


class RolloutConfig(BaseModel):
    """Where and how rollouts run; shared by ``check`` and ``evaluate``."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(8, ge=1, description="Rollouts in flight at once, one sandbox each.")
    executor: Literal["local", "ray"] = Field("local", description="local (thread pool, one sandbox per worker) or "
                                                                   "ray (Ray actors; --ray-address joins a cluster).")
    ray_address: str | None = Field(None, description="Ray cluster to join with --executor ray (default: start one).")
    sandbox: str = Field("local", description="Where tools run: local (subprocess), docker, auto (docker when an "
                                              "engine answers), or remote:http://HOST:PORT (an envgen serve).")
    seed: int = Field(0, description="Base seed of the rollouts (rollout i of a task always reuses its seed).")
    store_url: str | None = Field(None, description="State store URL (SQLAlchemy) or SQLite path where rollouts are "
                                                    "recorded and resumed; default state.sqlite in ENVGEN_CACHE.")
    pass_threshold: float = Field(PASS_THRESHOLD, ge=0.0, le=1.0, description="A rollout passes when its reward "
                                                                               "is at least this.")
    judge: str | None = Field(None, description="Grade rubric tasks with an LLM judge: MODEL[?base_url=URL&votes=K].")
    user: str | None = Field(None, description="Simulated user of tasks with a user spec: scripted or "
                                               "openai:MODEL[?base_url=URL&temperature=T] (default: the pack's "
                                               "user_model, else scripted).")
    allow_modified: bool = Field(False, description="Open a pack edited since it was saved: re-hash it (pack.json "
                                                    "gets the new version) instead of refusing it.")

    @field_validator("sandbox")
    @classmethod
    def _backend(cls, v: str) -> str:
        try:
            return check_backend(v)
        except InputError as e:
            raise ValueError(str(e)) from None

    @classmethod
    def of(cls: type[C], config: C | None, settings: dict[str, Any]) -> C:
        """``config`` with ``settings`` applied, validated; a bad value is an InputError naming the setting."""
        try:
            base = config.model_dump() if config is not None else {}
            return cls(**{**base, **settings})
        except ValidationError as e:
            err = e.errors()[0]
            raise InputError(f"{cls.__name__}: {'.'.join(map(str, err['loc'])) or 'settings'}: {err['msg']}") from None


class CheckConfig(RolloutConfig):
    """Settings of the pass check (``envgen check``)."""

    k: int = Field(100, ge=1, description="Rollouts per task at most; a task stops as soon as its decision is known.")
    keep: str = Field("at-least-once", description="Keep rule: at-least-once, or band:LO,HI on the pass rate.")
    out: Path | None = Field(None, description="Write the kept tasks, with their stats, as a new pack here.")
    write_stats: bool = Field(False, description="Also write the per-task stats into the pack itself "
                                                 "(stats.check.POLICY); by default it is left as it is.")
    plot: Path | None = Field(None, description="Pass-rate histogram PNG to write.")


class EvalConfig(RolloutConfig):
    """Settings of ``envgen eval``: pass@k on a seeded sample of tasks."""

    sample: int = Field(50, ge=1, description="Tasks in the seeded sample.")
    k: int = Field(4, ge=1, description="Rollouts per task; pass@1..k are reported.")
