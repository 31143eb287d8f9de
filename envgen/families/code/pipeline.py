"""The code family's build: source -> candidates -> environment -> validation -> pack -> red-team gate.

Each candidate is one resumable stage in the state store (``envgen.store``): a killed build continues
with the candidates it had not finished, and a rerun over the same source and output folder redoes
nothing that is done (GitHub is asked only for what is new, see ``sources``). The output folder holds
one pack per kept task and ``build.json``, the report.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, is_dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ...passcheck.executors import connect_ray
from ...build.distributed import (LEASE_S, Units, Unfinished, check_executor, pack_bytes, publish,
                                  run_unit, unpack)
from ...build.offline import gate_all
from ...build.report import BuildReport, count_reasons
from ...sandbox.engine import engine
from ...errors import EnvgenError, EnvironmentFailed, InputError, SandboxError
from ...sandbox.images import stderr_log
from ...sandbox.registry import registry_of
from ...pack.format import MANIFEST, Provenance, load
from ...paths import bundled
from ...store import Store
from .candidates import Filters, Rejection, make_candidate, reason_group, swebench_filters
from .repo_image import build_environment, build_task_image, layer_sharing
from .lang import Language, Recipe, RepoView
from .languages import detect_language, get_language, languages
from .packs import files_after, finalize, slug, stage_pack
from .python import python_suite
from .sources import GitHub, has_commit, open_source
from .execution import Validation, validate_instance
from .spec_judge import ROLE, SpecJudge, check_level, meets
from ...llm.client import LLMClient, LLMConfig, LLMPool
from .setup_agent import SetupAgent, SetupBudgets, info_for_report, tests_did_not_run

REPORT = "build.json"
STAGING = ".staging"


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / REPORT).is_file()
                                             and not (out / STAGING).is_dir())):
        raise InputError(f"{out}: exists and is not the output of a code build; choose another --out or remove it")


def _tick(stages: dict[str, float], name: str, t0: float) -> None:
    stages[name] = stages.get(name, 0.0) + time.perf_counter() - t0


def build_code(source: str, out: str | Path, *, repo_path: str | Path | dict | None = None,
               language: str | None = None, filters: Filters | None = None, runs: int = 3,
               backend: str = "docker", gate: bool = True, limit: int | None = None,
               cache_dir: str | Path | None = None, store: Store | str | None = None, github: GitHub | None = None,
               test_timeout_s: float = 300.0, limits: dict[str, Any] | None = None, python: str | None = None,
               log: Callable[[str], None] = stderr_log,
               progress: Callable[[str, str], Any] | None = None, issues: dict[int, Any] | None = None,
               judge_llm: LLMPool | LLMConfig | None = None, min_spec: str | None = None, llm: Any = None,
               setup_budgets: SetupBudgets | None = None, agents_dir: str | Path | None = None,
               executor: str = "local", ray_address: str | None = None, workers: int = 1,
               registry: str | None = None, lease_s: float = LEASE_S) -> BuildReport:
    """Build one code pack per task that survives filtering, validation and the red-team gate.

    source: ``github:OWNER/REPO``, ``git:PATH`` or ``swebench:FILE``; repo_path: a local clone (or
    {owner/name: path} for a multi-repository SWE-bench file); backend: ``docker`` (validation and gate
    in containers) or ``local`` (subprocesses with this machine's Python, for hosts without Docker);
    runs: repetitions of each side of the validation; limit: at most this many source instances;
    python: the interpreter version to set up with (overrides the one read from the metadata).
    ``progress(instance_id, outcome)`` is called once per candidate. A rerun over the same source and
    output folder resumes: a candidate whose key (``task_key``) is unchanged is not redone. ``issues``: issue
    texts for local history ({number: text or {title, body}}). ``judge_llm``: score each validated task's
    statement with the spec judge (``spec_judge``); ``min_spec``: reject tasks judged below this level.
    llm: model config(s) of the set-up agent (``setup_agent``), which takes over when the recipe cannot make a
    task's tests run (Docker only); recipes it recorded in ``store`` replay with or without it.
    executor: ``local`` (candidates one after another here) or ``ray`` (each candidate a Ray task on the
    cluster at ``ray_address``, else a local one with ``workers`` CPUs; ``distributed``): each node builds
    and validates in its own Docker engine and hands the pack back through ``store``, which every node must
    reach (a PostgreSQL URL across machines), as it must read the source's repository at the same path.
    registry: ``HOST:PORT`` of a Docker registry (default ``ENVGEN_REGISTRY``): task images are pulled from
    it by tag instead of being built when it has them, pushed to it otherwise, and each pack records the
    ``HOST:PORT/REPO@sha256:...`` digest a sandbox elsewhere pulls. lease_s: how long a Ray worker's claim
    on a candidate holds without a heartbeat (a dead worker's candidate is taken over after it).
    """
    check_executor(executor)
    registry = registry_of(registry)
    if backend not in ("docker", "local"):
        raise InputError(f"unknown backend {backend!r}; use docker or local")
    if llm is not None and backend != "docker":  # the set-up agent (setup_agent.py) works in containers
        raise InputError("the set-up agent (--llm-model) works in the Docker sandbox; use --sandbox docker")
    if python is not None:
        python_suite(python)  # a version no base image has: one clear error now, not a rejection per candidate
    started = time.perf_counter()
    out = Path(out).resolve()
    _check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    store = store if isinstance(store, Store) else Store(store)
    run_id = "code:" + hashlib.sha256(f"{source}|{out}".encode()).hexdigest()[:20]
    spec_judge = _spec_judge(judge_llm, min_spec, store, run_id)
    flt = filters or (swebench_filters() if source.startswith("swebench:") else Filters())
    settings = {"backend": backend, "python": python, "runs": runs, "test_timeout_s": test_timeout_s,
                "kit": kit_version(), "gate": gate, "limits": limits, "language": language,
                "filters": asdict(flt) if is_dataclass(flt) else repr(flt),
                "spec_judge": spec_judge.llm.config.model if spec_judge else None, "min_spec": min_spec,
                "setup_agent": llm is not None}
    store.open_run(run_id, "build-code", {"source": source, "out": str(out), "runs": runs, "backend": backend,
                                          "python": python})
    if not (out / REPORT).is_file():  # marks the folder as a code build's, so an interrupted one can resume
        (out / REPORT).write_text(json.dumps({"source": source, "status": "running"}) + "\n")
    report = BuildReport(family="code", out=out, category=source, sandbox=backend,
                         details={"source": source, "runs": runs, "resumed": 0, "tasks": {}, "environments": {},
                                  "source_stats": {}})
    details = report.details
    stages = report.stages
    lang_fixed: Language | None = get_language(language) if language else None

    t0 = time.perf_counter()
    src = open_source(source, language=lang_fixed, repo_path=repo_path, cache_dir=cache_dir, github=github,
                      max_items=limit, log=log, issues=issues)
    raws = list(src.instances())
    if limit is not None:
        raws = raws[:limit]
    details["source_stats"] = dict(getattr(src, "stats", {}))
    if getattr(src, "gh", None) is not None:
        details["source_stats"]["http"] = dict(src.gh.stats)
    _tick(stages, "source", t0)
    report.proposed = len(raws)

    client = None
    if backend == "docker":
        client = engine()
    # set-up agent (setup_agent.py): replays recorded recipes; with a model, takes over failed environments
    setup = SetupAgent(store, run_id=run_id, llm=llm, budgets=setup_budgets, log=log,
                       agents_dir=Path(agents_dir) if agents_dir else None,
                       work=out / ".setup-agent" if llm is not None else None) if backend == "docker" else None
    envs: dict[str, Any] = {}
    staging = out / STAGING
    remote = _RemoteContext(store.url, run_id, backend, runs, gate, test_timeout_s, limits, source, min_spec,
                            registry, llm, setup_budgets, str(agents_dir) if agents_dir else None, judge_llm,
                            str(out), lease_s) if executor == "ray" else None
    slots: list[tuple[str, Any]] = []  # ray: ("done", result) or ("job", key), recorded in source order at the end
    jobs: dict[str, tuple] = {}
    try:
        for raw in raws:
            if raw.meta.get("unavailable"):  # no clone of its repository: rejected, never stored (a rerun
                # given the clone builds it)
                log(f"code: {raw.instance_id}: rejected at source: {raw.meta['unavailable']}")
                _record(report, {"task": raw.instance_id, "status": "rejected", "stage": "source",
                                 "reason": raw.meta["unavailable"]})
                if progress:
                    progress(raw.instance_id, "rejected")
                continue
            plan_stages: dict[str, float] = {}
            try:
                plan = _plan(raw, lang_fixed, flt, plan_stages, python)
            except Exception as e:
                log(f"code: {raw.instance_id}: failed with {type(e).__name__}: {e}")
                _record(report, {"task": raw.instance_id, "status": "rejected", "stage": "error",
                                 "reason": f"{type(e).__name__}: {e}"})
                continue
            key = task_key(raw.instance_id, settings, plan[2])
            done = store.stage(run_id, key)
            if done is not None and done.status == "done" and _still_valid(done.result, out, store, run_id, key):
                details["resumed"] += 1
                if remote is not None:
                    slots.append(("done", done.result))
                else:
                    _record(report, done.result)
                if progress:
                    progress(raw.instance_id, done.result["status"])
                continue
            if remote is not None:
                if key not in jobs:
                    slots.append(("job", key))
                    jobs[key] = (raw, plan, plan_stages, key)
                continue
            store.start_stage(run_id, key)
            try:
                result = _one(raw, plan, plan_stages, envs, staging, out, client=client, backend=backend,
                              runs=runs, gate=gate, test_timeout_s=test_timeout_s, limits=limits, log=log,
                              source=source, spec_judge=spec_judge, min_spec=min_spec, setup=setup,
                              registry=registry)
            except KeyboardInterrupt:  # Ctrl-C / kill -INT: stop now, as the Ray path does (Units.interrupted)
                store.fail_stage(run_id, key, "interrupted")
                done_n = report.kept + len(report.rejections)
                log(f"code: interrupted at {raw.instance_id}: the build stopped; rerun the same command to resume "
                    f"({done_n} finished candidate(s) are kept in {store.url})")
                raise
            except Exception as e:
                store.fail_stage(run_id, key, f"{type(e).__name__}: {e}")
                store.add_error(run_id, key, type(e).__name__, str(e))
                if (down := engine_down(client)) is not None:  # the machine, not the candidate: stop here
                    raise SandboxError(_stopped(raw.instance_id, down, store)) from None
                if isinstance(e, SandboxError) or type(e).__module__.startswith("docker"):
                    raise  # the machine, not the candidate: stop, a rerun resumes here
                log(f"code: {raw.instance_id}: failed with {type(e).__name__}: {e}")
                _record(report, {"task": raw.instance_id, "status": "rejected", "stage": "error",
                                 "reason": f"{type(e).__name__}: {e}"})  # not stored as done: a rerun retries it
                continue
            if result["status"] != "kept" and (down := engine_down(client)) is not None:
                # a rejection made while the engine went away (an image build cut off) says nothing of the
                # candidate: not stored as done, so the rerun builds it again
                store.fail_stage(run_id, key, f"the Docker engine stopped answering: {down}")
                raise SandboxError(_stopped(raw.instance_id, down, store))
            store.finish_stage(run_id, key, result)
            _record(report, result)
            if progress:
                progress(raw.instance_id, result["status"])
        if remote is not None:
            finished = _run_on_ray(remote, list(jobs.values()), store, out, ray_address, workers, log, progress)
            for kind, value in slots:
                result = value if kind == "done" else finished.get(value)
                if result is not None:
                    _record(report, result)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    report.rejected_by_reason = count_reasons(f"{r['stage']}: {reason_kind(r['reason'])}" for r in report.rejections)
    if setup is not None and setup.enabled:
        details["llm"] = setup.usage()
    report.seconds = time.perf_counter() - started
    summary = report.summary()
    tmp = out / f".{REPORT}.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    tmp.replace(out / REPORT)
    store.finish_run(run_id, "done", summary)
    return report


_HASH = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,64}\b")
_FAILED_STEP = re.compile(r"^(repository environment|task image)\b[^:]*: step '([^']+)' exited with -?\d+")


def reason_kind(reason: str) -> str:
    """What a rejection is counted under in ``rejected_by_reason``: its kind, without what names one
    instance (an environment's hash, numbers, the details after the first ':'); the full reason stays in
    ``rejections``. A failed image build is counted by the step that failed (``repository environment: step
    'deps' failed``), not by the environment it was building."""
    m = _FAILED_STEP.match(reason)
    if m:
        return f"{m.group(1)}: step '{m.group(2)}' failed"
    return reason_group(_HASH.sub("", reason).replace("  ", " "))


def engine_down(client) -> str | None:
    """Why the Docker engine ``client`` talks to no longer answers (None while it does, or without one).

    Asked after a candidate failed or was rejected: an engine restart mid-build surfaces as a connection
    error, a cut-off image build or a container that vanished, none of which says anything about the
    candidate, so the build must stop instead of recording it."""
    if client is None:
        return None
    try:
        client.ping()
    except Exception as e:  # any failure to answer a ping: refused, reset, timed out, a 5xx while restarting
        return f"{type(e).__name__}: {e}"
    return None


def _stopped(instance_id: str, why: str, store: Store) -> str:
    return (f"code: {instance_id}: the Docker engine stopped answering ({why}); the build stopped. Start the "
            f"engine and rerun the same command: finished candidates are kept in {store.url} and the rest are "
            f"built then")


def _spec_judge(judge_llm: LLMPool | LLMConfig | None, min_spec: str | None, store: Store, run_id: str):
    """The spec judge on the pool's ``spec-judge`` model, its paid calls cached in the build store."""
    if min_spec is not None:
        check_level(min_spec)
        if judge_llm is None:
            raise InputError("--min-spec needs a model for the spec judge: pass --llm-model (and --llm-base-url) "
                             "or --llm-config")
    if judge_llm is None:
        return None
    config = LLMPool.of(judge_llm).pick(role=ROLE, preferred="default")
    return SpecJudge(LLMClient(config, cache=store, run_id=run_id))


def rejection_details(v: Validation) -> dict[str, Any]:
    """What build.json keeps of a rejected validation: the lists by name, the files that did not collect,
    every run's record and the last lines of the run that shows why."""
    return {"FAIL_TO_PASS": v.FAIL_TO_PASS, "PASS_TO_FAIL": v.PASS_TO_FAIL, "flaky": v.flaky,
            "fail_to_fail": v.fail_to_fail, "network": v.network, "not_run": v.not_run,
            "unchanged_FAIL_TO_PASS": v.unchanged_FAIL_TO_PASS, "runs": v.runs, "tail": v.log_tail}


def _still_valid(result: dict | None, out: Path, store: Store | None = None, run_id: str = "", key: str = "") -> bool:
    """Is a done stage's result still what ``out`` holds? A kept pack a Ray worker handed back through the
    store (``distributed.pack_bytes``) is written out again when ``out`` lost it (a driver killed before)."""
    if not result:
        return False
    if result["status"] != "kept" or (out / result["pack"] / MANIFEST).is_file():
        return True
    blob = store.artifact(run_id, _pack_artifact(key)) if store is not None else None
    if blob is None:
        return False
    unpack(blob, out / result["pack"])
    return (out / result["pack"] / MANIFEST).is_file()


def _pack_artifact(key: str) -> str:
    return f"pack:{key}"


@dataclass(frozen=True)
class _RemoteContext:
    """What every candidate's Ray task needs besides the candidate (pickled to the workers)."""

    store_url: str
    run_id: str
    backend: str
    runs: int
    gate: bool
    test_timeout_s: float
    limits: dict[str, Any] | None
    source: str
    min_spec: str | None
    registry: str | None
    llm: Any
    setup_budgets: SetupBudgets | None
    agents_dir: str | None
    judge_llm: Any
    out: str
    lease_s: float = LEASE_S


def _run_on_ray(ctx: _RemoteContext, jobs: list[tuple], store: Store, out: Path, address: str | None,
                workers: int, log: Callable[[str], None], progress: Callable[[str, str], Any] | None) -> dict:
    """Every job as a Ray task (``remote_candidate``); kept packs written into ``out`` as results come back.
    Key -> result of each candidate that finished (an errored one is reported but not stored as done).
    A machine failure on a node (Docker gone) stops the build, as it does locally: a rerun resumes."""
    if not jobs:
        return {}
    if ctx.store_url.startswith("sqlite") and address:
        log("code: warning: the state store is a SQLite file; workers on other machines cannot reach it "
            "(use a PostgreSQL URL in --store / ENVGEN_STORE)")
    units = Units(connect_ray(address, workers), remote_candidate, leases=(store, ctx.run_id), log=log)
    for raw, plan, plan_stages, key in jobs:
        units.submit(key, ctx, raw, plan, plan_stages, key)
    finished: dict[str, dict] = {}
    try:
        for key, result in units.completed():
            if result.pop("machine_error", None):
                raise SandboxError(f"code: {result['task']}: {result['reason']}. Rerun the same command to resume; "
                                   f"finished candidates are kept in {store.url}")
            if result["status"] == "kept":
                blob = store.artifact(ctx.run_id, _pack_artifact(key))
                if blob is None:  # a local build kept it, and its folder is gone: only a local build redoes it
                    raise InputError(f"{out / result['pack']}: the pack of a finished candidate is gone and the "
                                     f"store holds no copy of it (a local build made it); rerun with --executor local")
                unpack(blob, out / result["pack"])
            finished[key] = result
            if progress:
                progress(result["task"], result["status"])
    except KeyboardInterrupt:
        units.interrupted()
        raise
    return finished


def remote_candidate(ctx: _RemoteContext, raw, plan, plan_stages: dict[str, float], key: str) -> dict[str, Any]:
    """One candidate on a Ray worker, with this node's Docker engine: run under a lease in the store
    (``distributed.run_unit``: a done candidate is not redone, a dead worker's is taken over) and marked done
    together with its pack (an artifact) in one transaction."""
    store = Store(ctx.store_url)

    def body(lease) -> dict[str, Any]:
        store.start_stage(ctx.run_id, key)
        client = engine() if ctx.backend == "docker" else None
        setup = SetupAgent(store, run_id=ctx.run_id, llm=ctx.llm, budgets=ctx.setup_budgets, log=stderr_log,
                           agents_dir=Path(ctx.agents_dir) if ctx.agents_dir else None,
                           work=Path(ctx.out) / ".setup-agent" if ctx.llm is not None else None) \
            if ctx.backend == "docker" else None
        spec_judge = _spec_judge(ctx.judge_llm, ctx.min_spec, store, ctx.run_id)
        with tempfile.TemporaryDirectory(prefix="envgen-code-unit-") as tmp:
            out = Path(tmp) / "out"
            try:
                result = _one(raw, plan, plan_stages, {}, out / STAGING, out, client=client, backend=ctx.backend,
                              runs=ctx.runs, gate=ctx.gate, test_timeout_s=ctx.test_timeout_s, limits=ctx.limits,
                              log=stderr_log, source=ctx.source, spec_judge=spec_judge, min_spec=ctx.min_spec,
                              setup=setup, registry=ctx.registry)
            except Exception as e:
                store.fail_stage(ctx.run_id, key, f"{type(e).__name__}: {e}")
                store.add_error(ctx.run_id, key, type(e).__name__, str(e))
                down = engine_down(client)
                machine = down is not None or isinstance(e, SandboxError) or type(e).__module__.startswith("docker")
                raise Unfinished({"task": raw.instance_id, "status": "rejected", "stage": "error",
                                  "machine_error": machine, "reason": f"{type(e).__name__}: {e}"
                                  + (f" (the Docker engine stopped answering: {down})" if down else "")}) from None
            kept = result["status"] == "kept"
            if not kept and (down := engine_down(client)) is not None:  # see the local loop in build_code
                store.fail_stage(ctx.run_id, key, f"the Docker engine stopped answering: {down}")
                raise Unfinished({"task": raw.instance_id, "status": "rejected", "stage": "error",
                                  "machine_error": True, "reason": f"the Docker engine stopped answering: {down}"})
            artifacts = {_pack_artifact(key): pack_bytes(out / result["pack"])} if kept else {}
            publish(lease)
            store.finish_stage(ctx.run_id, key, result, artifacts=artifacts)
        return result

    return run_unit(store, ctx.run_id, key, body, lease_s=ctx.lease_s)


def _record(report: BuildReport, result: dict) -> None:
    offline = (result.get("summary") or result.get("details") or {}).get("network") or []
    if offline:  # tests that failed for want of the network: apart from the ones the code makes fail
        net = report.details.setdefault("network", {"tests": 0, "tasks": {}})
        net["tests"] += len(offline)
        net["tasks"][result["task"]] = list(offline)
    for k, v in (result.get("environment") or {}).items():
        env = report.details["environments"].setdefault(k, {**v, "tasks": []})
        if result["task"] not in env["tasks"]:
            env["tasks"].append(result["task"])
    for k, v in (result.get("stages") or {}).items():
        report.stages[k] = report.stages.get(k, 0.0) + v
    if result["status"] == "kept":
        report.kept += 1
        report.packs.append(result["pack"])
        report.details["tasks"][result["task"]] = result["summary"]
    else:
        report.rejections.append({"task": result["task"], "stage": result["stage"], "reason": result["reason"],
                                  "details": result.get("details", {})})


def _plan(raw, lang_fixed, flt, stages: dict[str, float], python: str | None = None) -> tuple:
    """(candidate or Rejection, language, recipe or Rejection): what a candidate is and how its repository
    is set up, worked out before anything runs (cheap: git reads), so the resume key can name the recipe."""
    t0 = time.perf_counter()
    lang = lang_fixed
    named = raw.meta.get("language") if lang is None else None  # a SWE-bench-style file's language field
    if named:
        if named not in languages():
            return Rejection(raw.instance_id, "candidates", f"language {named!r} is not supported (supported: "
                                                             f"{', '.join(languages())})"), None, None
        lang = get_language(named)
    if lang is None:
        lang = get_language("python")
        if raw.repo_path is not None:
            try:
                lang = detect_language(RepoView(raw.repo_path, raw.base_commit))
            except EnvgenError:
                pass
    cand = make_candidate(raw, lang, flt)
    _tick(stages, "candidates", t0)
    if isinstance(cand, Rejection):
        return cand, lang, None
    t0 = time.perf_counter()
    try:
        recipe = lang.recipe(RepoView(cand.repo_path, _setup_commit(cand)), python=python)
    except EnvgenError as e:
        recipe = Rejection(cand.instance_id, "environment", f"no setup recipe: {e}")
    _tick(stages, "environment", t0)
    return cand, lang, recipe


def _setup_commit(cand) -> str:
    """The commit the environment is set up from: SWE-bench installs a version from its setup commit, mined
    tasks from their own base."""
    setup_commit = (cand.meta.get("swebench") or {}).get("environment_setup_commit")
    return setup_commit if setup_commit and has_commit(cand.repo_path, setup_commit) else cand.base_commit


def kit_version() -> str:
    """Content hash of the verifier kit's test runner: a changed kit can change every validation."""
    return hashlib.sha256((bundled("verifiers") / "envgen_verifiers" / "tests.py").read_bytes()).hexdigest()[:16]


def task_key(instance_id: str, settings: dict[str, Any], recipe: Any) -> str:
    """The state-store key of one candidate: its id and a hash of everything that changes its result
    (backend, interpreter override, runs, test timeout, filters, gate, the kit's version, and the recipe:
    its environment key, task steps, interpreter and test runner). A changed key redoes the candidate."""
    doc = {**settings, "recipe": recipe.to_dict() if hasattr(recipe, "to_dict") else None}
    if isinstance(doc["recipe"], dict):
        doc["recipe"].pop("notes", None)  # why a choice was made does not change what runs
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"task/{instance_id}/{digest}"


def _one(raw, plan, plan_stages, envs, staging, out, *, client, backend, runs, gate, test_timeout_s, limits,
         log, source, spec_judge=None, min_spec=None, setup: SetupAgent | None = None,
         override: tuple | None = None, registry: str | None = None) -> dict[str, Any]:
    """One candidate through every stage; returns the JSON result the store keeps. ``override``: (recipe,
    report entry) the set-up agent made for this candidate, built and validated like any recipe."""
    stages: dict[str, float] = {}
    setup_info: dict[str, Any] = {"source": "recipe"}

    def rejected(rej: Rejection, env: dict | None = None) -> dict:
        log(f"code: {raw.instance_id}: rejected at {rej.stage}: {rej.reason}")
        details = rej.details if setup_info["source"] == "recipe" else {**rej.details, "setup": setup_info}
        return {"task": raw.instance_id, "status": "rejected", "stage": rej.stage, "reason": rej.reason,
                "details": details, "environment": env or {}, "stages": stages}

    def take_over(why: str, tail: str = "", failed: EnvironmentFailed | None = None, image: str | None = None,
                  start: Recipe | None = None):
        """The set-up agent's turn (``setup_agent``); None when it is not configured or already had it."""
        if setup is None or not setup.enabled or setup_info["source"] != "recipe":
            return None
        t1 = time.perf_counter()
        res = setup.rescue(cand, start or recipe, setup_commit, test_files, why=why, tail=tail, failed=failed,
                           task_image=image, client=client)
        _tick(stages, "setup_agent", t1)
        setup_info.update(info_for_report(res.info))
        if res.recipe is None:
            return rejected(Rejection(cand.instance_id, "environment", res.reason))
        result = _one(raw, (cand, lang, recipe), {}, envs, staging, out, client=client, backend=backend, runs=runs,
                      gate=gate, test_timeout_s=test_timeout_s, limits=limits, log=log, source=source,
                      spec_judge=spec_judge, min_spec=min_spec, setup=setup, override=(res.recipe, dict(setup_info)),
                      registry=registry)
        for k, v in stages.items():
            result.setdefault("stages", {})[k] = result["stages"].get(k, 0.0) + v
        return result

    cand, lang, recipe = plan
    stages.update(plan_stages)
    if isinstance(cand, Rejection):
        return rejected(cand)
    t0 = time.perf_counter()
    view = RepoView(cand.repo_path, cand.base_commit)
    if isinstance(recipe, Rejection):
        return rejected(recipe)
    setup_commit = _setup_commit(cand)
    if override is not None:  # the set-up agent's recipe for this candidate
        recipe, setup_info = override
    elif setup is not None and (found := setup.replay(cand.repo, setup_commit, recipe)) is not None:
        recipe, setup_info = found  # a recipe the set-up agent recorded for this repository version
    test_files = lang.runnable_tests(cand.test_files, files_after(view.files, cand.test_patch), view)
    env_info: dict[str, Any] = {"tag": None, "steps": [s.__dict__ | {"rc": None} for s in recipe.steps],
                                "notes": recipe.notes, "image_base": recipe.image_base}
    if backend == "docker":
        if recipe.key not in envs:
            try:
                envs[recipe.key] = build_environment(recipe, client=client, log=log)
            except EnvironmentFailed as e:
                envs[recipe.key] = e
        env = envs[recipe.key]
        if isinstance(env, EnvironmentFailed):
            steps = [asdict(s) for s in env.steps]
            if (res := take_over(str(env), env.tail, failed=env)) is not None:
                return res
            return rejected(Rejection(cand.instance_id, "environment", str(env), {"steps": steps, "tail": env.tail}),
                            {recipe.key: {"tag": None, "steps": steps, "failed": True}})
        env_info = {"tag": env.tag, "steps": [asdict(s) for s in env.steps], "notes": recipe.notes,
                    "image_base": recipe.image_base}
    _tick(stages, "environment", t0)

    t0 = time.perf_counter()
    name = slug(cand.instance_id)
    stage_dir = staging / name
    shutil.rmtree(stage_dir, ignore_errors=True)
    prov = Provenance(generator="envgen.families.code", sources=[source])
    pack = stage_pack(cand, recipe, test_files, stage_dir, limits=limits, provenance=prov)
    image = None
    sharing: dict[str, Any] = {}
    if backend == "docker":
        try:
            pack = build_task_image(pack, recipe, client=client, log=log, registry=registry)
        except EnvironmentFailed as e:  # the project's own install or its check (the task layer)
            if (res := take_over(f"the task layer failed: {e}"[:1000], e.tail, image=env.tag,
                                 start=replace(recipe, task_steps=[]))) is not None:
                return res  # the set-up agent starts from the environment image
            steps = [asdict(s) for s in e.steps]
            return rejected(Rejection(cand.instance_id, "environment", str(e), {"steps": steps, "tail": e.tail}),
                            {recipe.key: {**env_info, "task_steps": steps, "failed": True}})
        image = pack.manifest.image.tag
        sharing = layer_sharing(client, image, env.tag)
    _tick(stages, "task_image", t0)

    t0 = time.perf_counter()
    args = pack.tasks[0].verifier.args
    v = validate_instance(cand.instance_id, backend=backend, image=image, git_dir=pack.env_dir / "repo.git",
                 base=args["base"], framework=recipe.framework, files=test_files, python=recipe.python,
                 pythonpath=recipe.pythonpath, gold=cand.gold_patch, test=cand.test_patch, runs=runs,
                 timeout_s=test_timeout_s, memory_mb=pack.manifest.limits.memory_mb, client=client,
                 options=recipe.options)
    _tick(stages, "validate", t0)
    envs_out = {recipe.key: env_info}
    if not v.accepted:
        if tests_did_not_run(v) and (res := take_over(f"validation: {v.reason}", v.log_tail, image=image)) is not None:
            return res
        return rejected(Rejection(cand.instance_id, "validate", v.reason, rejection_details(v)), envs_out)
    spec = None
    if spec_judge is not None:  # the statement against the validated FAIL_TO_PASS tests (spec_judge.py)
        t0 = time.perf_counter()
        spec = spec_judge.judge(cand.instance_id, cand.problem_statement, v.FAIL_TO_PASS, cand.test_patch).to_dict()
        _tick(stages, "spec_judge", t0)
        if not meets(spec["label"], min_spec):
            return rejected(Rejection(cand.instance_id, "spec", f"problem statement {spec['label']} (--min-spec "
                                      f"{min_spec}): {spec['reason']}", {"spec": spec}), envs_out)
    pack = finalize(pack, v, {"tag": env_info["tag"], "step_rc": {s["name"]: s["rc"] for s in env_info["steps"]},
                              "image_sharing": sharing}, meta={"spec": spec} if spec else None)

    if gate:
        t0 = time.perf_counter()
        res = gate_all(pack, workers=1, sandbox=backend)[0]
        _tick(stages, "gate", t0)
        if not res.passed:
            return rejected(Rejection(cand.instance_id, "gate", f"red-team: {res.reason}", {"probes": res.probes}),
                            envs_out)
        probes = res.probes
    else:
        probes = {}
    t0 = time.perf_counter()
    dest = out / name
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(stage_dir, dest)
    load(dest)
    _tick(stages, "save", t0)
    log(f"code: {cand.instance_id}: kept ({len(v.FAIL_TO_PASS)} FAIL_TO_PASS, {len(v.PASS_TO_PASS)} PASS_TO_PASS, "
        f"{len(v.flaky)} flaky, {len(v.fail_to_fail)} failing in both, {len(v.network)} needing the network)")
    return {"task": cand.instance_id, "status": "kept", "pack": name, "environment": envs_out, "stages": stages,
            "summary": {"FAIL_TO_PASS": len(v.FAIL_TO_PASS), "PASS_TO_PASS": len(v.PASS_TO_PASS),
                        "flaky": v.flaky, "fail_to_fail": v.fail_to_fail, "network": v.network,
                        "not_run": v.not_run, "validation_wall_s": v.wall_seconds, "test_s": v.test_seconds,
                        "image": image, "unique_image_bytes": sharing.get("unique_bytes"), "gate": probes,
                        "created_at": cand.created_at, "environment": recipe.key,
                        "setup": setup_info, **({"spec": spec["label"]} if spec else {})}}
