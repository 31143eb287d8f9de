"""Build and validate packs.

``build``: a category's generator proposes tasks -> the runtime derives the tool schemas -> a task whose
verifier compares the whole database gets its expected change set, recorded by replaying its reference
-> every task goes through the red-team gate in a sandbox (``workers`` sandboxes in parallel) -> tasks
that fail are dropped with their reason -> the pack is saved atomically, with a build summary in its
manifest.
``validate``: the same gate over an existing pack (oracle replay twice + the red-team probes); expectations
are never recorded there: a whole-database task without one fails.

Parallelism is one host thread per sandbox: the work happens in the sandboxes' runtime processes and
the threads only wait on pipes, so threads cost nothing that processes would save, and the pack
needs no pickling. Sandboxes are started from the calling thread, before the workers (forking with a
preexec_fn while other threads run is unsafe).

With ``executor="ray"`` each task's expectation and gate is a Ray task instead (``distributed``): the staged
pack travels to the workers once through Ray's object store, each unit opens its own sandbox, and every
task's outcome is a stage in the state store, so a killed worker's task is taken over and a rerun
of a killed build gates only what was not finished.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

from ..episodes.episode import replay
from ..errors import InputError
from ..store import Store
from ..passcheck.executors import connect_ray
from .distributed import LEASE_S, Units, check_executor, pack_bytes, publish, run_unit, unpack
from .sdk import Generated, default_tasks, get_category, load_generator
from ..pack.format import MANIFEST, Manifest, Pack, Provenance, Task, save
from .gate import GateResult, gate
from .report import BuildReport, count_reasons, reason_key
from ..pack.resolve import open_pack
from ..sandbox import Sandbox, open_sandbox
from ..sandbox.images import stderr_log
from ..sandbox.local import describe_tools

Progress = Callable[[int], Any]


def check_out(out: Path) -> None:
    """save() replaces the destination: refuse anything that is not an earlier pack or an empty dir."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file())):
        raise InputError(f"{out}: exists and is not a pack, refusing to replace it; choose another --out or remove it")


def _wants_expectation(kind: str, args: dict[str, Any]) -> bool:
    spec = args.get("changes")
    if isinstance(spec, dict) and spec.get("replay"):
        return False  # replay mode: the verifier replays the reference itself
    if kind == "state":
        return not isinstance((spec or {}).get("expected"), dict)
    return isinstance(spec, dict) and not spec.get("report") and not isinstance(spec.get("expected"), dict)


def needs_expectation(task: Task) -> bool:
    """Does the task's verifier compare the whole database (``changes``) without a recorded expectation yet?

    A ``state`` verifier always does (unless in replay mode); a ``program`` verifier when its args declare
    ``changes`` (not report-only); a ``composite`` when one of its top-level parts does.
    """
    v = task.verifier
    if v.kind == "composite":
        return any(_wants_expectation(p.get("kind", ""), p.get("args") or {}) for p in v.args.get("parts") or [])
    return _wants_expectation(v.kind, v.args)


def record_expectation(sandbox: Sandbox, task: Task) -> Task:
    """The task with its expected change set: the reference replayed in ``sandbox``, and the change set its
    verifier reported (``details["changes"]["actual"]``) stored in the verifier's args (for a composite, in
    each part that wants one, from that part's details).

    The agent never sees tasks.jsonl, so the expectation can live there. A reference whose calls fail, or a
    verifier that reports no change set, leaves the task as it was: the gate then rejects it, loudly.
    """
    ep = replay(sandbox, task, task.reference.calls, task.reference.answer, task.reference.messages)
    if any(not c["ok"] for c in ep.calls):
        return task
    out = task.model_copy(deep=True)
    if task.verifier.kind == "composite":
        parts = (ep.verdict.details or {}).get("parts") or []
        for spec, seen in zip(out.verifier.args.get("parts") or [], parts):
            args = spec.setdefault("args", {})
            changes = ((seen or {}).get("details") or {}).get("changes")
            if _wants_expectation(spec.get("kind", ""), args) and isinstance(changes, dict) \
                    and isinstance(changes.get("actual"), dict):
                args["changes"] = {**(args.get("changes") or {}), "expected": changes["actual"]}
        return out
    seen = (ep.verdict.details or {}).get("changes")
    if not isinstance(seen, dict) or not isinstance(seen.get("actual"), dict):
        return task
    out.verifier.args["changes"] = {**(out.verifier.args.get("changes") or {}), "expected": seen["actual"]}
    return out


def _pooled(pack: Pack, tasks: Sequence[Task], work: Callable[[Sandbox, Task], tuple[Task, GateResult]], *,
            workers: int, sandbox: str, progress: Progress | None) -> list[tuple[Task, GateResult]]:
    """``work(sandbox, task)`` for every task across ``workers`` sandboxes; results in task order."""
    if workers < 1:
        raise InputError(f"workers must be at least 1, got {workers}")
    results: list[tuple[Task, GateResult] | None] = [None] * len(tasks)
    if not tasks:
        return []
    sandboxes = []
    try:
        for _ in range(min(workers, len(tasks))):
            sandboxes.append(open_sandbox(pack, sandbox))
        lock, stop = threading.Lock(), threading.Event()
        cursor = iter(range(len(tasks)))
        errors: list[BaseException] = []

        def run(sbx) -> None:
            try:
                while not stop.is_set():
                    with lock:
                        i = next(cursor, None)
                    if i is None:
                        return
                    try:
                        res = work(sbx, tasks[i])
                    except Exception as e:  # a sandbox that cannot reset: the task fails, the build goes on
                        res = (tasks[i], GateResult(tasks[i].id, False, f"error: {type(e).__name__}: {e}"))
                    results[i] = res
                    if progress is not None:
                        progress(1)
            except BaseException as e:  # e.g. the progress callback failed: stop everyone, re-raise below
                errors.append(e)
                stop.set()

        threads = [threading.Thread(target=run, args=(s,), name=f"envgen-gate-{k}", daemon=True)
                   for k, s in enumerate(sandboxes)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        except BaseException:
            stop.set()  # workers finish their current task, then the sandboxes close below
            for t in threads:
                t.join()
            raise
        if errors:
            raise errors[0]
    finally:
        for s in sandboxes:
            s.close()
    return results  # type: ignore[return-value]  # every slot is filled when the workers finish cleanly


def gate_all(pack: Pack, tasks: Sequence[Task] | None = None, *, workers: int = 2, sandbox: str = "local",
             progress: Progress | None = None) -> list[GateResult]:
    """Red-team every task (default: all of the pack's) across ``workers`` sandboxes; results in task order."""
    tasks = list(pack.tasks if tasks is None else tasks)
    return [r for _, r in _pooled(pack, tasks, lambda sbx, t: (t, gate(sbx, pack, t)), workers=workers,
                                  sandbox=sandbox, progress=progress)]


def record_and_gate(pack: Pack, tasks: Sequence[Task] | None = None, *, workers: int = 2, sandbox: str = "local",
                    progress: Progress | None = None) -> list[tuple[Task, GateResult]]:
    """Record the expected change set of every task that needs one, then red-team it: [(task, result)].

    The returned tasks carry their expectations; save those, not the ones passed in.
    """
    tasks = list(pack.tasks if tasks is None else tasks)

    def work(sbx: Sandbox, task: Task) -> tuple[Task, GateResult]:
        if needs_expectation(task):
            task = record_expectation(sbx, task)
        return task, gate(sbx, pack, task)

    return _pooled(pack, tasks, work, workers=workers, sandbox=sandbox, progress=progress)


def not_applicable(results: Sequence[GateResult]) -> dict[str, int]:
    """Probe -> tasks it did not apply to (e.g. no call of another reference changes the task's database)."""
    return dict(sorted(Counter(p for r in results for p in r.not_applicable).items()))


def build_generated(gen: Generated, out: str | Path, *, seed: int = 0, workers: int = 2, sandbox: str = "local",
                    progress: Progress | None = None, stages: dict[str, float] | None = None,
                    started: float | None = None, executor: str = "local", ray_address: str | None = None,
                    store: str | None = None, lease_s: float = LEASE_S) -> BuildReport:
    """Gate a generator's proposals and save the pack of those that pass (the second half of ``build``).

    ``executor="ray"``: the gate's tasks are Ray tasks (``record_and_gate_on_ray``) with their outcomes in
    ``store``; the pack is the same as a local build's."""
    check_executor(executor)
    out = Path(out)
    check_out(out)
    started = time.perf_counter() if started is None else started
    stages = dict(stages or {})
    t = time.perf_counter()
    schemas = describe_tools(gen.env_dir)
    stages["describe"] = time.perf_counter() - t
    manifest = Manifest(name=gen.name, family=gen.family, category=gen.category, description=gen.description,
                        tools=schemas, submit_tool=gen.submit_tool, limits=gen.limits, instructions=gen.instructions,
                        provenance=Provenance(generator=gen.generator, seed=seed, sources=[f"{gen.family}/{gen.category}"]))
    with tempfile.TemporaryDirectory(prefix="envgen-stage-") as tmp:
        t = time.perf_counter()
        staged = save(Pack(manifest, gen.tasks), Path(tmp) / "pack", env_from=gen.env_dir, hidden_from=gen.hidden_dir)
        stages["stage"] = time.perf_counter() - t

        t = time.perf_counter()
        if executor == "ray":
            gated = record_and_gate_on_ray(staged, out, sandbox=sandbox, store=store, address=ray_address,
                                           workers=workers, seed=seed, progress=progress, lease_s=lease_s)
        else:
            gated = record_and_gate(staged, workers=workers, sandbox=sandbox, progress=progress)
        stages["gate"] = time.perf_counter() - t

        results = [r for _, r in gated]
        kept = [task for task, r in gated if r.passed]
        failed = [r for r in results if not r.passed]
        by_reason = count_reasons(reason_key(r.reason) for r in failed)
        hist = Counter(task.difficulty for task in kept)
        report = BuildReport(
            family=gen.family, out=out.resolve(), packs=["."], name=gen.name, category=gen.category, seed=seed,
            proposed=len(staged.tasks), kept=len(kept), rejected_by_reason=by_reason,
            rejections=[{"task": r.task_id, "reason": r.reason} for r in failed],
            difficulty={str(k): hist[k] for k in sorted(hist)}, seconds=0.0, stages=stages, workers=workers,
            sandbox=sandbox, not_applicable=not_applicable(results))

        t = time.perf_counter()
        final = staged.with_tasks(kept)
        final.manifest.stats["build"] = {"proposed": report.proposed, "kept": report.kept,
                                         "rejected_by_reason": by_reason, "not_applicable": report.not_applicable,
                                         "workers": workers, "sandbox": sandbox,
                                         "seconds": round(time.perf_counter() - started, 3)}
        save(final, out, env_from=staged.env_dir, hidden_from=staged.hidden_dir)
        stages["save"] = time.perf_counter() - t
    report.seconds = time.perf_counter() - started
    return report


def record_and_gate_on_ray(pack: Pack, out: Path, *, sandbox: str, store: str | None, address: str | None,
                           workers: int, seed: int, progress: Progress | None = None,
                           lease_s: float = LEASE_S) -> list[tuple[Task, GateResult]]:
    """``record_and_gate`` with one Ray task per pack task; [(task, result)] in task order.

    The run's key names the output folder, the seed and the staged pack's content hash: a rerun of the same
    build finds its finished tasks in ``store`` and gates only the others."""
    tasks = list(pack.tasks)
    if not tasks:
        return []
    st = Store(store)
    run_id = "build:" + hashlib.sha256(f"{Path(out).resolve()}|{seed}|{pack.manifest.version}".encode()).hexdigest()[:20]
    st.open_run(run_id, "build-offline", {"family": pack.manifest.family, "category": pack.manifest.category,
                                          "out": str(out), "seed": seed, "pack": pack.manifest.version})
    results: dict[str, dict] = {}
    todo = []
    for task in tasks:
        done = st.stage(run_id, _gate_key(task))
        if done is not None and done.status == "done":
            results[task.id] = done.result
            if progress is not None:
                progress(1)
        else:
            todo.append(task)
    if todo:
        ray = connect_ray(address, workers)
        blob = ray.put(pack_bytes(pack.root))  # sent to each node once, not once per task
        units = Units(ray, remote_gate, leases=(st, run_id), log=stderr_log)
        for task in todo:
            units.submit(task.id, st.url, run_id, pack.manifest.version, blob, task.model_dump(mode="json"),
                         sandbox, lease_s)
        try:
            for task_id, result in units.completed():
                results[task_id] = result
                if progress is not None:
                    progress(1)
        except KeyboardInterrupt:
            units.interrupted()
            raise
    st.finish_run(run_id, "done")
    return [(Task.model_validate(results[t.id]["task"]), GateResult(**results[t.id]["gate"])) for t in tasks]


def _gate_key(task: Task) -> str:
    return f"gate/{task.id}"


def remote_gate(store_url: str, run_id: str, version: str, blob: bytes, task_doc: dict, sandbox: str,
                lease_s: float = LEASE_S) -> dict[str, Any]:
    """One task's expectation and red-team gate on a Ray worker, under a lease in the store; its outcome
    (the task as recorded and the GateResult) is the stage's result.

    The pack is unpacked and its sandbox opened per unit and both removed after it: a Ray worker process
    outlives the build (``ray start`` clusters keep idle workers), and a sandbox kept across units would be
    a container left running."""
    store = Store(store_url)
    task = Task.model_validate(task_doc)

    def body(lease) -> dict[str, Any]:
        store.start_stage(run_id, _gate_key(task))
        with tempfile.TemporaryDirectory(prefix="envgen-gate-unit-") as tmp:
            pack = open_pack(unpack(blob, Path(tmp) / "pack"))
            if pack.manifest.version != version:
                raise InputError(f"the pack sent to the workers is {pack.manifest.version}, expected {version}")
            try:
                sbx = open_sandbox(pack, sandbox)
                try:
                    recorded = record_expectation(sbx, task) if needs_expectation(task) else task
                    res = gate(sbx, pack, recorded)
                finally:
                    sbx.close()
            except Exception as e:  # a sandbox that cannot start or reset: the task fails, as in a local build
                recorded, res = task, GateResult(task.id, False, f"error: {type(e).__name__}: {e}")
        result = {"task": recorded.model_dump(mode="json", exclude_none=True), "gate": asdict(res)}
        publish(lease)
        store.finish_stage(run_id, _gate_key(task), result)
        return result

    return run_unit(store, run_id, _gate_key(task), body, lease_s=lease_s)


def build(family: str, category: str, out: str | Path, *, tasks: int | None = None, seed: int = 0, workers: int = 2,
          sandbox: str = "local", progress: Progress | None = None, executor: str = "local",
          ray_address: str | None = None, store: str | None = None, lease_s: float = LEASE_S) -> BuildReport:
    """Generate ``tasks`` proposals (default: the category's DEFAULT_TASKS) for ``seed``, gate them, save the pack.

    ``progress(1)`` is called once per gated task (``tasks`` calls in all), to drive a progress bar.
    """
    started = time.perf_counter()
    cat = get_category(family, category)
    n = default_tasks(family, category) if tasks is None else tasks
    if n < 1:
        raise InputError(f"--tasks must be at least 1, got {n}")
    check_out(Path(out))
    generator = load_generator(cat)
    with tempfile.TemporaryDirectory(prefix="envgen-build-") as work:
        t = time.perf_counter()
        gen = generator.generate(Path(work), n, seed)
        stages = {f"generate_{k}": v for k, v in gen.timings.items()} or {"generate": time.perf_counter() - t}
        if len(gen.tasks) != n:
            raise InputError(f"{cat.path}/generator.py returned {len(gen.tasks)} tasks, asked for {n}")
        return build_generated(gen, out, seed=seed, workers=workers, sandbox=sandbox, progress=progress,
                               stages=stages, started=started, executor=executor, ray_address=ray_address,
                               store=store, lease_s=lease_s)


def validate_pack(pack: str | Path | Pack, *, workers: int = 2, sandbox: str = "local",
             progress: Progress | None = None) -> list[GateResult]:
    """Oracle replay (twice) and the red-team probes over every task of a pack; one GateResult per task."""
    return gate_all(open_pack(pack), workers=workers, sandbox=sandbox, progress=progress)
