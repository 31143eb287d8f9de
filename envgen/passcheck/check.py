"""`envgen check` and `envgen eval`: rollouts of a policy over a pack, run by an executor.

Rollouts run on an executor (``envgen.passcheck.executors``: a local thread pool or Ray actors). Every
finished rollout is recorded in the state store at once, keyed by the pack's
content hash, the policy, the sandbox backend and image, and the seed, so an interrupted check resumes
from what it already spent and a changed pack or backend never reuses another's results.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..pack import format as packmod
from ..sandbox.engine import docker_available
from ..errors import InputError
from ..sandbox.images import ensure_pack_image, stderr_log
from ..sandbox.remote import PREFIX as REMOTE_PREFIX, display_url
from .ledger import RolloutLedger
from .config import CheckConfig, EvalConfig
from .executors import make_executor
from .rules import (Outcome, Rule, Scheduler, parse_rule, pass_at_k, pass_hat_k, rule_name, run_check)
from ..pack.resolve import open_pack

# ----------------------------------------------------------------------------- check


@dataclass
class CheckReport:
    pack: packmod.Pack
    """The checked pack, its tasks carrying this check's stats (on disk only with write_stats)."""
    rule: Rule
    policy: str
    stats: dict[str, dict]
    rollouts_spent: int
    resumed: int
    seconds: float
    kept_pack: packmod.Pack | None = None
    plot: Path | None = None
    sandbox: str = "local"
    image: str = ""
    stats_written: bool = False

    @property
    def kept(self) -> list[str]:
        return [t for t, s in self.stats.items() if s["kept"]]

    def summary(self) -> dict[str, Any]:
        n = len(self.stats)
        return {"pack": str(self.pack.root), "version": self.pack.manifest.version, "policy": self.policy,
                "sandbox": self.sandbox, "image": self.image or None, "rule": rule_name(self.rule), "k": self.rule.k,
                "tasks": n, "kept": len(self.kept), "dropped": n - len(self.kept),
                "rollouts": sum(s["rollouts"] for s in self.stats.values()), "rollouts_this_run": self.rollouts_spent,
                "resumed_rollouts": self.resumed, "naive_rollouts": n * self.rule.k, "seconds": round(self.seconds, 2),
                "kept_pack": str(self.kept_pack.root) if self.kept_pack else None,
                "stats_written": self.stats_written, "plot": str(self.plot) if self.plot else None}


def _ledger_policy(policy: str, user: str | None) -> str:
    """The ledger's policy key: a run with its own simulated user (``--user``) does not reuse other runs' rollouts."""
    return policy if user is None else f"{policy} user={user}"


def rollout_backend(pack: packmod.Pack, sandbox: str) -> tuple[str, str]:
    """The backend rollouts really run in (``auto`` resolved) and, for Docker, the image they run in.

    For Docker the image is built if needed and named by its recipe tag (from env/, the runtime, the kit
    and the base recipe) plus the engine's image id, so a rebuilt or changed image never shares recorded
    rollouts with another.
    """
    if sandbox.startswith(REMOTE_PREFIX):  # an envgen serve: keyed by its address (never its token)
        return "remote", display_url(sandbox)
    backend = sandbox
    if sandbox == "auto":
        backend = "docker" if docker_available() else "local"
    if backend != "docker":
        return backend, ""
    tag, image_id = ensure_pack_image(pack, log=stderr_log)
    return backend, f"{tag}@{image_id}"


def _runs_on(sandbox: str, backend: str) -> str:
    """The backend spec workers open: the resolved one, or ``remote:URL`` as given (with its token)."""
    return sandbox if backend == "remote" else backend


def with_check_stats(task: packmod.Task, policy: str, stats: dict[str, Any]) -> packmod.Task:
    """The task with ``stats["check"][policy]`` set (other policies' results kept)."""
    prior = task.stats.get("check")
    by_policy = dict(prior) if isinstance(prior, dict) and "rollouts" not in prior else {}
    return task.model_copy(update={"stats": {**task.stats, "check": {**by_policy, policy: stats}}})


def check(pack_ref: str, policy: str, config: CheckConfig | None = None, *, log: Callable[[str], None] | None = None,
          progress: Callable[[int], None] | None = None, **settings: Any) -> CheckReport:
    """Run the pass check with ``config`` (a CheckConfig; keyword ``settings`` override its fields). Per-task
    stats (``stats["check"][policy]``) go into the kept pack at ``out``, and into the pack itself only with
    ``write_stats``; a histogram goes to ``plot``.

    Rollouts are recorded under the pack's content hash, the policy, the sandbox backend, the image and the
    seed: a rerun with the same key resumes, anything else starts afresh. A pack modified since it was saved
    is refused unless ``allow_modified`` (it is then re-hashed, see ``envgen.pack.resolve.open_pack``).
    """
    c = CheckConfig.of(config, settings)
    k, seed, out, plot = c.k, c.seed, c.out, c.plot
    try:
        rule = parse_rule(c.keep, k)
    except ValueError as e:
        raise InputError(str(e)) from None
    p = open_pack(pack_ref, allow_modified=c.allow_modified, log=log)
    backend, image = rollout_backend(p, c.sandbox)
    ledger = RolloutLedger(c.store_url, pack_version=p.manifest.version, policy=_ledger_policy(policy, c.user),
                           seed=seed, sandbox=backend, image=image)
    done = [o for o in ledger.load() if o.error is None]
    sched = Scheduler([t.id for t in p.tasks], rule, c.workers, done=done)
    spent = 0
    t0 = time.perf_counter()
    ex = make_executor(c.executor, str(p.root), policy, sandbox=_runs_on(c.sandbox, backend), seed=seed, workers=c.workers,
                       pass_threshold=c.pass_threshold, ray_address=c.ray_address, judge=c.judge, user=c.user)

    def on_outcome(o: Outcome) -> None:
        nonlocal spent
        spent += 1
        ledger.record(o)
        if progress:
            progress(1)

    try:
        run_check(sched, ex, on_outcome)
    finally:
        ex.close()
    stats = {tid: {**st.stats(rule), "sandbox": backend, **({"image": image} if image else {})}
             for tid, st in sched.tasks.items()}
    checked = p.with_tasks(with_check_stats(t, policy, stats[t.id]) for t in p.tasks)
    if c.write_stats:
        checked = packmod.save(checked, p.root)
    kept_pack = packmod.save(checked.with_tasks([t for t in checked.tasks if stats[t.id]["kept"]]), out) if out else None
    report = CheckReport(checked, rule, policy, stats, spent, len(done), time.perf_counter() - t0, kept_pack,
                         sandbox=backend, image=image, stats_written=c.write_stats)
    if plot is not None:
        report.plot = histogram(stats, plot, f"{p.manifest.name}: pass rates of {policy} (k={k})")
    return report


def histogram(stats: dict[str, dict], path: Path, title: str) -> Path:
    """Save a pass-rate histogram PNG (matplotlib, headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [s["pass_rate"] for s in stats.values() if s["pass_rate"] is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.hist(rates, bins=[i / 20 for i in range(21)], color="#4c72b0", edgecolor="white")
    ax.set_xlabel("pass rate (rollouts until decided)")
    ax.set_ylabel("tasks")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- eval (pass@k)


@dataclass(frozen=True)
class Fixed:
    """Exactly k rollouts per task (no early stop): what pass@k needs."""

    k: int

    def decide(self, passes: int, done: int) -> bool | None:
        return True if done >= self.k else None


@dataclass
class EvalReport:
    sample: list[str]
    k: int
    results: dict[str, dict[str, float]] = field(default_factory=dict)
    """policy -> {"pass@1": ..., "pass@2": ..., ..., "pass^1": ..., "pass^2": ...}: pass@k (some of k rollouts
    pass) beside pass^k (all k pass; tau-bench's reliability metric), both unbiased over the k rollouts."""

    def summary(self) -> dict[str, Any]:
        return {"tasks": len(self.sample), "k": self.k, "sample": self.sample, "policies": self.results}


def evaluate(pack_ref: str, policies: list[str], config: EvalConfig | None = None, *,
             log: Callable[[str], None] | None = None, progress: Callable[[int], None] | None = None,
             **settings: Any) -> EvalReport:
    """pass@1..k and pass^1..k of each policy on a seeded sample of tasks (the DeepSeek-V3.2 Table-5 check), with ``config``
    (an EvalConfig; keyword ``settings`` override its fields)."""
    c = EvalConfig.of(config, settings)
    k, seed = c.k, c.seed
    p = open_pack(pack_ref, allow_modified=c.allow_modified, log=log)
    backend, image = rollout_backend(p, c.sandbox)
    ids = sorted(t.id for t in p.tasks)
    chosen = sorted(random.Random(seed).sample(ids, min(c.sample, len(ids))))
    report = EvalReport(chosen, k)
    for spec in policies:
        ledger = RolloutLedger(c.store_url, pack_version=p.manifest.version, policy=_ledger_policy(spec, c.user),
                               seed=seed, sandbox=backend, image=image)
        sched = Scheduler(chosen, Fixed(k), c.workers, done=ledger.load())
        ex = make_executor(c.executor, str(p.root), spec, sandbox=_runs_on(c.sandbox, backend), seed=seed, workers=c.workers,
                           pass_threshold=c.pass_threshold, ray_address=c.ray_address, judge=c.judge, user=c.user)

        def on_outcome(o: Outcome) -> None:
            ledger.record(o)
            if o.error is None and progress:
                progress(1)

        try:
            run_check(sched, ex, on_outcome)
        finally:
            ex.close()
        shown = [j for j in range(1, k + 1) if j in (1, 2, 4, 8, 16, 32, 64, 100, k)]
        report.results[spec] = {
            f"pass{mark}{j}": round(sum(fn(len(st.outcomes), st.passes, j) for st in sched.tasks.values())
                                    / len(chosen), 4)
            for mark, fn in (("@", pass_at_k), ("^", pass_hat_k)) for j in shown}
    return report
