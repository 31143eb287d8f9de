"""The pass check: k rollouts per task, stopped as soon as the keep/drop decision is known.

Decisions are exact, not statistical: a task stops when no outcome of its remaining rollouts could
change the decision a full k-rollout run would make, so early stopping never changes which tasks are
kept. Rollout ``i`` of a task always uses the same seed, so a rerun (or another executor) replays the
same trajectories and a resumed check continues where it stopped.

Scheduling matters as much as stopping: with 8 workers, running 8 rollouts of one task at once wastes
up to 7 after an early pass. The scheduler keeps every worker busy with *different* undecided tasks
and only puts several rollouts of one task in flight when fewer tasks than workers remain, and then
only as many as the task has already spent without a decision.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol


# ----------------------------------------------------------------------------- decision rules


@dataclass(frozen=True)
class AtLeastOnce:
    """Keep a task solved at least once in k rollouts (DeepSeek-V3.2's filter)."""

    k: int = 100

    def decide(self, passes: int, done: int) -> bool | None:
        """True keep / False drop / None not yet known, from `passes` out of `done` finished rollouts."""
        if passes > 0:
            return True
        return False if done >= self.k else None


@dataclass(frozen=True)
class Band:
    """Keep a task whose pass rate over k rollouts lies in [lo, hi] (too easy and too hard both go)."""

    lo: float
    hi: float
    k: int = 100

    def __post_init__(self):
        if not 0.0 <= self.lo <= self.hi <= 1.0:
            raise ValueError(f"band needs 0 <= lo <= hi <= 1, got {self.lo}, {self.hi}")

    def decide(self, passes: int, done: int) -> bool | None:
        left = self.k - done
        lo_count, hi_count = self.lo * self.k, self.hi * self.k
        if passes + left < lo_count - 1e-9 or passes > hi_count + 1e-9:
            return False  # cannot reach the band / already above it
        if passes >= lo_count - 1e-9 and passes + left <= hi_count + 1e-9:
            return True  # inside whatever the remaining rollouts do
        return None


Rule = AtLeastOnce | Band


def parse_rule(text: str, k: int) -> Rule:
    """`at-least-once` or `band:LO,HI`."""
    if text == "at-least-once":
        return AtLeastOnce(k)
    if text.startswith("band:"):
        try:
            lo, hi = (float(x) for x in text[5:].split(","))
        except ValueError:
            raise ValueError(f"--keep {text!r}: write band:LO,HI with two numbers, e.g. band:0.1,0.9") from None
        return Band(lo, hi, k)
    raise ValueError(f"--keep {text!r}: use at-least-once or band:LO,HI")


# ----------------------------------------------------------------------------- estimators


def wilson(passes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a pass rate (sane at 0 and n, unlike the normal approximation)."""
    if n == 0:
        return 0.0, 1.0
    p = passes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k from n samples with c correct (tau-bench's reliability metric): the chance that k
    rollouts drawn without replacement all succeed, C(c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass^{k} needs at least {k} samples, got {n}")
    if c < k:
        return 0.0
    prod = 1.0
    for i in range(k):
        prod *= (c - i) / (n - i)
    return prod


def rollout_seed(task_id: str, index: int, base: int = 0) -> int:
    """The seed of rollout `index` of a task: stable across runs, executors and processes."""
    digest = hashlib.sha256(f"{base}:{task_id}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


# ----------------------------------------------------------------------------- bookkeeping


@dataclass
class Outcome:
    """One finished rollout."""

    task_id: str
    index: int
    reward: float
    passed: bool
    turns: int = 0
    tokens: int = 0
    seconds: float = 0.0
    step_latencies: list[float] = field(default_factory=list)
    error: str | None = None


@dataclass
class TaskState:
    task_id: str
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    in_flight: set[int] = field(default_factory=set)
    decision: bool | None = None
    next_index: int = 0
    errors: int = 0
    """Rollouts that failed for infrastructure reasons (endpoint down, sandbox dead): retried, not counted."""

    @property
    def passes(self) -> int:
        return sum(o.passed for o in self.outcomes.values())

    def stats(self, rule: Rule) -> dict:
        n = len(self.outcomes)
        lat = sorted(x for o in self.outcomes.values() for x in o.step_latencies)
        lo, hi = wilson(self.passes, n)

        def q(p: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))], 6) if lat else None

        return {"rollouts": n, "passes": self.passes, "pass_rate": round(self.passes / n, 4) if n else None,
                "pass_rate_ci95": [round(lo, 4), round(hi, 4)], "kept": self.decision,
                "rule": rule_name(rule), "k": rule.k,
                "step_latency_p50_s": q(0.5), "step_latency_p95_s": q(0.95),
                "tokens": sum(o.tokens for o in self.outcomes.values()), "errors": self.errors}


def rule_name(rule: Rule) -> str:
    return "at-least-once" if isinstance(rule, AtLeastOnce) else f"band:{rule.lo:g},{rule.hi:g}"


class Scheduler:
    """Hands out (task_id, index) rollouts and folds outcomes back in until every task is decided."""

    def __init__(self, task_ids: Iterable[str], rule: Rule, workers: int, done: Iterable[Outcome] = (),
                 max_errors: int = 3):
        self.rule, self.workers, self.max_errors = rule, workers, max_errors
        self.tasks = {t: TaskState(t) for t in task_ids}
        for o in done:  # resume: outcomes recorded by an earlier, interrupted run
            st = self.tasks.get(o.task_id)
            if st is not None and o.index < rule.k and o.error is None:
                st.outcomes[o.index] = o
        for st in self.tasks.values():
            st.decision = rule.decide(st.passes, len(st.outcomes))
        self._order = list(self.tasks)
        self._cursor = 0

    @property
    def undecided(self) -> list[TaskState]:
        return [s for s in self.tasks.values() if s.decision is None]

    def finished(self) -> bool:
        return not any(s.decision is None or s.in_flight for s in self.tasks.values())

    def next(self, in_flight_total: int) -> tuple[str, int] | None:
        """The next rollout to start, or None if every worker's share is taken or nothing is left."""
        open_tasks = self.undecided
        if not open_tasks:
            return None
        per_task = max(1, math.ceil(self.workers / len(open_tasks)))
        n = len(self._order)
        for step in range(n):
            st = self.tasks[self._order[(self._cursor + step) % n]]
            # A task earns parallel rollouts only as it keeps failing to be decided: an easy task is decided
            # by its first rollout, and extra ones started beside it would be wasted.
            if st.decision is not None or len(st.in_flight) >= min(per_task, 1 + len(st.outcomes)):
                continue
            idx = self._next_free_index(st)
            if idx is None:
                continue
            self._cursor = (self._cursor + step + 1) % n
            st.in_flight.add(idx)
            return st.task_id, idx
        return None

    def _next_free_index(self, st: TaskState) -> int | None:
        while st.next_index < self.rule.k and (st.next_index in st.outcomes or st.next_index in st.in_flight):
            st.next_index += 1
        if st.next_index >= self.rule.k:
            return None
        idx = st.next_index
        st.next_index += 1
        return idx

    def record(self, o: Outcome) -> None:
        """Fold in a finished rollout; an errored one is retried (same index, same seed) up to max_errors."""
        st = self.tasks[o.task_id]
        st.in_flight.discard(o.index)
        if o.error is not None:
            st.errors += 1
            st.next_index = min(st.next_index, o.index)
            if st.errors >= self.max_errors and st.decision is None:
                st.decision = False
            return
        st.outcomes[o.index] = o
        if st.decision is None:
            st.decision = self.rule.decide(st.passes, len(st.outcomes))


class Executor(Protocol):
    """Runs rollouts concurrently; `submit` returns a handle, `wait` yields finished Outcomes."""

    def submit(self, task_id: str, index: int) -> None: ...

    def wait(self) -> list[Outcome]: ...

    def close(self) -> None: ...


def run_check(scheduler: Scheduler, executor: Executor, on_outcome: Callable[[Outcome], None] = lambda o: None,
              ) -> Scheduler:
    """Drive `executor` with `scheduler` until every task is decided and no rollout is in flight."""
    in_flight = 0
    while not scheduler.finished():
        while in_flight < scheduler.workers:
            nxt = scheduler.next(in_flight)
            if nxt is None:
                break
            executor.submit(*nxt)
            in_flight += 1
        if in_flight == 0:
            break
        for o in executor.wait():
            in_flight -= 1
            scheduler.record(o)
            on_outcome(o)
    return scheduler
