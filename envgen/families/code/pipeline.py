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
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from ...build.offline import gate_all
from ...build.report import BuildReport, count_reasons
from ...sandbox.engine import engine
from ...errors import EnvgenError, EnvironmentFailed, InputError, SandboxError
from ...sandbox.images import stderr_log
from ...pack.format import MANIFEST, Provenance, load
from ...store import Store
from .candidates import Filters, Rejection, make_candidate, reason_group, swebench_filters
from .repo_image import build_environment, build_task_image, layer_sharing
from .lang import Language, RepoView
from .languages import detect_language, get_language
from .packs import files_after, finalize, slug, stage_pack
from .python import python_suite
from .sources import GitHub, has_commit, open_source
from .execution import validate_instance

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
               test_timeout_s: float = 300.0, limits: dict[str, Any] | None = None,
               log: Callable[[str], None] = stderr_log, python: str | None = None,
               progress: Callable[[str, str], Any] | None = None) -> BuildReport:
    """Build one code pack per task that survives filtering, validation and the red-team gate.

    source: ``github:OWNER/REPO``, ``git:PATH`` or ``swebench:FILE``; repo_path: a local clone (or
    {owner/name: path} for a multi-repository SWE-bench file); backend: ``docker`` (validation and gate
    in containers) or ``local`` (subprocesses with this machine's Python, for hosts without Docker);
    runs: repetitions of each side of the validation; limit: at most this many source instances.
    ``progress(instance_id, outcome)`` is called once per candidate. python: the interpreter version
    (``X.Y``) every task uses instead of the one its metadata picks.
    """
    if backend not in ("docker", "local"):
        raise InputError(f"unknown backend {backend!r}; use docker or local")
    if python is not None:
        python_suite(python)  # a version no base image has: one clear error now, not a rejection per candidate
    started = time.perf_counter()
    out = Path(out).resolve()
    _check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    store = store if isinstance(store, Store) else Store(store)
    run_id = "code:" + hashlib.sha256(f"{source}|{out}".encode()).hexdigest()[:20]
    store.open_run(run_id, "build-code", {"source": source, "out": str(out), "runs": runs, "backend": backend})
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
                      max_items=limit, log=log)
    raws = list(src.instances())
    if limit is not None:
        raws = raws[:limit]
    details["source_stats"] = dict(getattr(src, "stats", {}))
    if getattr(src, "gh", None) is not None:
        details["source_stats"]["http"] = dict(src.gh.stats)
    _tick(stages, "source", t0)
    report.proposed = len(raws)
    flt = filters or (swebench_filters() if source.startswith("swebench:") else Filters())

    client = None
    if backend == "docker":
        client = engine()
    envs: dict[str, Any] = {}
    staging = out / STAGING
    try:
        for raw in raws:
            key = f"task/{raw.instance_id}"
            done = store.stage(run_id, key)
            if done is not None and done.status == "done" and _still_valid(done.result, out):
                _record(report, done.result)
                details["resumed"] += 1
                if progress:
                    progress(raw.instance_id, done.result["status"])
                continue
            store.start_stage(run_id, key)
            try:
                result = _one(raw, lang_fixed, flt, envs, staging, out, client=client, backend=backend,
                              runs=runs, gate=gate, test_timeout_s=test_timeout_s, limits=limits, log=log,
                              source=source, python=python)
            except Exception as e:
                store.fail_stage(run_id, key, f"{type(e).__name__}: {e}")
                store.add_error(run_id, key, type(e).__name__, str(e))
                if isinstance(e, SandboxError) or type(e).__module__.startswith("docker"):
                    raise  # the machine, not the candidate: stop, a rerun resumes here
                log(f"code: {raw.instance_id}: failed with {type(e).__name__}: {e}")
                _record(report, {"task": raw.instance_id, "status": "rejected", "stage": "error",
                                 "reason": f"{type(e).__name__}: {e}"})  # not stored as done: a rerun retries it
                continue
            store.finish_stage(run_id, key, result)
            _record(report, result)
            if progress:
                progress(raw.instance_id, result["status"])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    report.rejected_by_reason = count_reasons(f"{r['stage']}: {reason_group(r['reason'])}" for r in report.rejections)
    report.seconds = time.perf_counter() - started
    summary = report.summary()
    tmp = out / f".{REPORT}.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    tmp.replace(out / REPORT)
    store.finish_run(run_id, "done", summary)
    return report


def _still_valid(result: dict | None, out: Path) -> bool:
    if not result:
        return False
    return result["status"] != "kept" or (out / result["pack"] / MANIFEST).is_file()


def _record(report: BuildReport, result: dict) -> None:
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


def _one(raw, lang_fixed, flt, envs, staging, out, *, client, backend, runs, gate, test_timeout_s, limits,
         log, source, python=None) -> dict[str, Any]:
    """One candidate through every stage; returns the JSON result the store keeps."""
    stages: dict[str, float] = {}

    def rejected(rej: Rejection, env: dict | None = None) -> dict:
        log(f"code: {raw.instance_id}: rejected at {rej.stage}: {rej.reason}")
        return {"task": raw.instance_id, "status": "rejected", "stage": rej.stage, "reason": rej.reason,
                "details": rej.details, "environment": env or {}, "stages": stages}

    t0 = time.perf_counter()
    lang = lang_fixed
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
        return rejected(cand)

    t0 = time.perf_counter()
    view = RepoView(cand.repo_path, cand.base_commit)
    setup_commit = (cand.meta.get("swebench") or {}).get("environment_setup_commit")
    if not setup_commit or not has_commit(cand.repo_path, setup_commit):
        setup_commit = cand.base_commit  # SWE-bench installs a version from its setup commit; mined tasks from their own
    try:
        recipe = lang.recipe(RepoView(cand.repo_path, setup_commit), python=python)
    except EnvgenError as e:
        return rejected(Rejection(cand.instance_id, "environment", f"no setup recipe: {e}"))
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
            pack = build_task_image(pack, recipe, client=client, log=log)
        except EnvironmentFailed as e:  # the project's own install or its check (the task layer)
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
                 timeout_s=test_timeout_s, memory_mb=pack.manifest.limits.memory_mb, client=client)
    _tick(stages, "validate", t0)
    envs_out = {recipe.key: env_info}
    if not v.accepted:
        return rejected(Rejection(cand.instance_id, "validate", v.reason,
                                  {"flaky": v.flaky, "PASS_TO_FAIL": v.PASS_TO_FAIL, "runs": v.runs}), envs_out)
    pack = finalize(pack, v, {"tag": env_info["tag"], "step_rc": {s["name"]: s["rc"] for s in env_info["steps"]},
                              "image_sharing": sharing})

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
        f"{len(v.flaky)} flaky)")
    return {"task": cand.instance_id, "status": "kept", "pack": name, "environment": envs_out, "stages": stages,
            "summary": {"FAIL_TO_PASS": len(v.FAIL_TO_PASS), "PASS_TO_PASS": len(v.PASS_TO_PASS),
                        "flaky": v.flaky, "validation_wall_s": v.wall_seconds, "test_s": v.test_seconds,
                        "image": image, "unique_image_bytes": sharing.get("unique_bytes"), "gate": probes,
                        "created_at": cand.created_at, "environment": recipe.key}}
